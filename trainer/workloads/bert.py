"""BERT pretraining (MLPerf BERT-Large): masked-LM + next-sentence prediction, every parameter trained.

The model is transformers' BertForPreTraining with one change of forward: the masked-LM head runs only on
the hidden states at `masked_lm_positions` (gathered first, as MLPerf's reference does), not on every
position, so its vocabulary projection costs P rows per sequence instead of L. Its modules and parameter
names are BertForPreTraining's own, so a Hugging Face BERT checkpoint loads into it unchanged.

Loss, as BERT and MLPerf report it: mean masked-LM cross-entropy over the real masked positions plus mean
NSP cross-entropy over the sequences. The loop gets them as two summed terms, each divided by its count
over the whole global batch (trainer/loop.py). Eval: masked-LM loss and accuracy over the masked positions.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from telemetry.rundir import StepKey

from ..compat import enable_activation_checkpointing, ensure_torchvision_importable
from ..data.mlm import build_mlm_datasets
from ..materialize import is_meta
from .hf import ModelError, check_checkpoint, config_fields
from .contract import TokenWorkload

ensure_torchvision_importable()  # before transformers (trainer/compat.py)

from transformers import BertConfig, BertForPreTraining  # noqa: E402

IGNORE = -100


class GatheredBertForPreTraining(BertForPreTraining):
    """BertForPreTraining whose forward gathers the masked positions before the masked-LM head.

    forward(...) -> (masked-LM logits [B, P, vocab], NSP logits [B, 2]). Padding slots (position 0) are
    computed too - a fixed shape, no host sync - and the loss leaves them out.
    """

    def forward(self, input_ids, attention_mask, token_type_ids, masked_lm_positions):
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        hidden = out.last_hidden_state
        index = masked_lm_positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])
        masked = torch.gather(hidden, 1, index)  # [B, P, d]
        return self.cls.predictions(masked), self.cls.seq_relationship(out.pooler_output)


class BertPretrainingWorkload(TokenWorkload):
    loss_terms = ((StepKey.MLM_LOSS, StepKey.MASKED_TOKENS), (StepKey.NSP_LOSS, StepKey.SEQUENCES))
    accuracy = "masked-LM"

    def __init__(self, recipe, device: torch.device, weight_dtype: torch.dtype):
        self.recipe, self.device = recipe, device
        self.load_stats: dict | None = None  # set when a safetensors checkpoint is loaded in slices
        # every weight trains: keep fp32 master weights (autocast gives bf16 compute on GPU); "auto" means
        # bf16 weights on GPU, which suits a frozen LoRA base, not LAMB updates
        self.weight_dtype = torch.float32 if recipe.model.dtype == "auto" else weight_dtype
        self.config = self._model_config()
        seq_len = recipe.data.seq_len
        if seq_len > self.config.max_position_embeddings:
            raise ModelError(f"data.seq_len: {seq_len} exceeds the model's max_position_embeddings "
                             f"({self.config.max_position_embeddings})")

    def _model_config(self) -> BertConfig:
        m = self.recipe.model
        if m.path is not None:
            check_checkpoint(m.path, "BERT checkpoint", "config.json and weights")
            try:
                return BertConfig.from_pretrained(m.path)
            except Exception as exc:
                raise ModelError(f"model.path: not a BERT config in {m.path!r}: {str(exc).splitlines()[0]}") from None
        fields = config_fields(m.config, BertConfig)  # its own one-line errors name the key
        try:
            config = BertConfig(**fields)
        except Exception as exc:
            raise ModelError(f"model.config: not a valid BERT config: {exc}") from None
        if config.hidden_size % config.num_attention_heads:
            raise ModelError(f"model.config: hidden_size {config.hidden_size} is not divisible by "
                             f"num_attention_heads {config.num_attention_heads}")
        return config

    # ------------------------------------------------------------ build

    def build_data(self, need_eval: bool):
        return build_mlm_datasets(self.recipe.data, self.config.vocab_size, self.config.type_vocab_size,
                                  self.recipe.seed, need_eval)

    def build_model(self) -> torch.nn.Module:
        """Every parameter trainable; identical on every rank for the same seed."""
        from ..materialize import SafetensorsSource, empty_model, name_modules, refuse_whole_load, tie

        m = self.recipe.model
        torch.manual_seed(self.recipe.seed)  # random init is the same on every rank
        if m.path is not None and SafetensorsSource.available(m.path):
            # built empty; parallelize fills each rank's pieces from the checkpoint's slices (FSDP2 shards)
            with empty_model():
                model = GatheredBertForPreTraining._from_config(self.config, dtype=self.weight_dtype,
                                                                attn_implementation=m.attn_implementation)
            name_modules(tie(model))
        elif m.path is not None:
            refuse_whole_load(m.path, "BertForPreTraining")  # several ranks: one line, the conversion
            model = GatheredBertForPreTraining.from_pretrained(m.path, config=self.config, dtype=self.weight_dtype,
                                                               attn_implementation=m.attn_implementation)
        else:
            model = GatheredBertForPreTraining._from_config(self.config, dtype=self.weight_dtype,
                                                            attn_implementation=m.attn_implementation)
        # FSDP2 shards each module named here (trainer/parallelize.py). BertModel also names BertEmbeddings,
        # but the word embeddings are tied to the masked-LM decoder, and a tied weight must stay in one
        # FSDP unit: the embeddings stay in the root unit with the heads.
        model._no_split_modules = {"BertLayer"}
        if m.activation_checkpointing:
            enable_activation_checkpointing(model)
        for p in model.parameters():
            p.requires_grad_(True)
        return model if is_meta(model) else model.to(self.device)

    def parallelize(self, model, dims, device: torch.device, compute_dtype: torch.dtype) -> torch.nn.Module:
        from ..parallelize import apply_data_parallel

        mode = self.recipe.parallel.data_parallel
        if not is_meta(model):
            return apply_data_parallel(model, dims, mode, device, compute_dtype)
        if mode == "fsdp":  # each rank reads only its shards
            return self._load(apply_data_parallel(model, dims, mode, device, compute_dtype))
        return apply_data_parallel(self._load(model), dims, mode, device, compute_dtype)

    def _load(self, model: torch.nn.Module) -> torch.nn.Module:
        from ..materialize import SafetensorsSource, materialize

        stats = materialize(model, self.device, self.recipe.seed, self.config.initializer_range,
                            SafetensorsSource(self.recipe.model.path))
        self.load_stats = {**stats, "source": "safetensors slices"}
        return model

    def flops(self, model: torch.nn.Module) -> tuple[float, str, str]:
        """Model FLOPs per input token, before sharding (trainer/throughput.py). The masked-LM head runs on the
        P gathered slots of a sequence, not its L positions: its Linears count P / L per token (counted on
        every token, BERT-Large's MFU at 76 of 512 read ~9% high)."""
        from ..throughput import flops_per_token, matmul_params

        n, _ = matmul_params(model)  # every Linear: encoder, pooler, masked-LM transform and decoder, NSP
        head, _ = matmul_params(model.cls.predictions)
        c, d = model.config, self.recipe.data
        share = min(d.max_predictions, d.seq_len) / d.seq_len
        per = flops_per_token(n - head, n - head, c.num_hidden_layers, c.hidden_size, d.seq_len) + 6.0 * head * share
        return per, "token", ("6N + 6 N_head P/L + 12 L d T per token (N: every Linear but the masked-LM head's, "
                              "which runs on the P = data.max_predictions gathered slots of L = data.seq_len; "
                              "trainer/throughput.py). MFU counts every position computed (padded_tokens, padding "
                              "included); tokens/s counts real tokens only")

    def describe(self, train_set) -> str:
        d = self.recipe.data
        kind = "synthetic sequences" if getattr(train_set, "synthetic", False) else "sequences"
        source = getattr(train_set, "source", "")
        where = f" from {source}" if source and not getattr(train_set, "synthetic", False) else ""
        return (f"BERT pretraining; {len(train_set):,} {kind} of {d.seq_len} tokens{where}, "
                f"up to {d.max_predictions} masked")

    # ------------------------------------------------------------ loss

    @staticmethod
    def _forward(model: torch.nn.Module, batch: dict):
        mlm_logits, nsp_logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                       token_type_ids=batch["token_type_ids"],
                                       masked_lm_positions=batch["masked_lm_positions"])
        labels = batch["masked_lm_ids"].masked_fill(~batch["masked_lm_valid"], IGNORE)
        mlm = F.cross_entropy(mlm_logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE,
                              reduction="sum")
        return mlm, mlm_logits, nsp_logits, labels

    def loss_sums(self, model: torch.nn.Module, batch: dict) -> dict:
        mlm, _, nsp_logits, _ = self._forward(model, batch)
        nsp = F.cross_entropy(nsp_logits.float(), batch["next_sentence_labels"], reduction="sum")
        return {StepKey.MLM_LOSS: mlm, StepKey.NSP_LOSS: nsp}

    def eval_sums(self, model: torch.nn.Module, batch: dict) -> dict:
        mlm, mlm_logits, _, labels = self._forward(model, batch)
        valid = batch["masked_lm_valid"]
        correct = ((mlm_logits.argmax(-1) == labels) & valid).sum()
        count = valid.sum()
        return {"loss": (mlm, count), "accuracy": (correct, count)}

    @staticmethod
    def loss_counts(batch: dict) -> dict:
        return {StepKey.MASKED_TOKENS: int(batch["masked_lm_valid"].sum()),
                StepKey.SEQUENCES: int(batch["input_ids"].shape[0])}
