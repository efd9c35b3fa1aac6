"""Causal-LM LoRA fine-tuning with transformers + peft. Model code here is single-device."""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

from ..compat import enable_activation_checkpointing
from ..data.sft import IGNORE, build_datasets, check_token_ids
from ..positions import plain_positions
from .hf import ModelError, check_checkpoint, check_dir, config_fields
from .contract import TokenWorkload
from telemetry.rundir import StepKey


def keep_adapter_inputs(model: torch.nn.Module, compute_dtype: torch.dtype) -> int:
    """Under autocast (a compute dtype below fp32) turn off peft's cast of each LoRA input to the
    adapter's dtype; returns how many layers were changed.

    peft keeps the adapters in fp32 (the optimizer's master weights and fp32 AdamW state: the update is
    not lost to bf16 rounding) and casts every input to them: bf16 -> fp32, then autocast casts it
    straight back to bf16 for the matmul - two copies of each projection's input per forward and their
    casts in backward, for the same bf16 matmul on the same operands. Without the cast the adapters stay
    fp32 and autocast casts their weights once per forward. Without autocast (fp32 compute) the cast is
    what makes a bf16 input meet an fp32 adapter, so it stays."""
    if compute_dtype == torch.float32:
        return 0
    from peft.tuners.tuners_utils import BaseTunerLayer

    changed = 0
    for module in model.modules():
        if isinstance(module, BaseTunerLayer):
            module.cast_input_dtype_enabled = False
            changed += 1
    return changed


class LlmLoraWorkload(TokenWorkload):
    loss_terms = ((StepKey.LOSS, StepKey.LABEL_TOKENS),)
    accuracy = None

    def __init__(self, recipe, device: torch.device, weight_dtype: torch.dtype):
        self.recipe, self.device, self.weight_dtype = recipe, device, weight_dtype
        self.loss_parallel = False  # set by parallelize: lm_head split over tp
        self.load_stats: dict | None = None  # set by parallelize: how this rank's weights were filled
        self.zero3 = None  # set by parallelize under ZeRO-3: DeepSpeed's partitioner (None: build whole)
        self.kernels = None  # the run's use_kernels before build_model: trainer.kernels.KernelChoice
        self.compiled_blocks = 0  # set by parallelize under train.compile=blocks
        path = recipe.model.path
        if path is not None:  # say "not a checkpoint" before any tokenizer error could hide it
            check_checkpoint(path, "checkpoint", "config.json, weights, tokenizer files")
        self.tokenizer = self._build_tokenizer()

    def _build_tokenizer(self):
        from transformers import AutoTokenizer

        m = self.recipe.model
        path = m.tokenizer or m.path
        key = "model.tokenizer" if m.tokenizer else "model.path"
        check_dir(path, key, "tokenizer or checkpoint")
        try:
            tok = AutoTokenizer.from_pretrained(path)
        except Exception as exc:
            reason = " ".join(str(exc).split())[:200]
            raise ModelError(f"{key}: cannot load a tokenizer from {path!r} ({reason}); allowed: a directory with "
                             "the files a tokenizer's save_pretrained writes (tokenizer.json, "
                             "tokenizer_config.json)") from None
        if tok.pad_token_id is None:  # Llama tokenizers ship without one; padding is masked anyway
            tok.pad_token = tok.eos_token
        return tok

    def _model_config(self):
        from transformers import AutoConfig, LlamaConfig

        m = self.recipe.model
        if m.path is not None:
            return AutoConfig.from_pretrained(m.path)
        fields = config_fields(m.config, LlamaConfig)  # its own one-line errors name the key
        try:
            return LlamaConfig(**fields)
        except Exception as exc:
            raise ModelError(f"model.config: not a valid Llama config: {exc}") from None

    def model_type(self) -> str:
        """The checkpoint's (or config's) model_type: which fused kernels apply (trainer/kernels.py)."""
        return self._model_config().model_type

    def build_model(self) -> torch.nn.Module:
        """Base model (frozen) with LoRA adapters, on the meta device: no rank ever holds the whole
        model. `parallelize` shards it and then fills each rank's pieces (trainer/materialize.py): from
        the checkpoint's safetensors slices, or by a seeded init that is the same for every layout.
        A checkpoint without safetensors is loaded whole by a single process, refused across several ranks."""
        from transformers import AutoModelForCausalLM

        from ..materialize import SafetensorsSource, empty_model, name_modules, refuse_whole_load, tie

        m = self.recipe.model
        config = self._model_config()
        config.use_cache = False
        if self.tokenizer is not None and len(self.tokenizer) > config.vocab_size:
            raise ModelError(f"model.config: vocab_size {config.vocab_size} is smaller than the tokenizer's "
                             f"{len(self.tokenizer)} tokens")
        self.init_std = getattr(config, "initializer_range", 0.02)
        whole = m.path is not None and not SafetensorsSource.available(m.path)
        if whole:
            refuse_whole_load(m.path, "AutoModelForCausalLM")  # several ranks: one line, the conversion
        torch.manual_seed(self.recipe.seed)
        with contextlib.nullcontext() if whole else empty_model():
            if whole:
                model = AutoModelForCausalLM.from_pretrained(m.path, config=config, dtype=self.weight_dtype,
                                                             attn_implementation=m.attn_implementation)
            else:
                model = AutoModelForCausalLM.from_config(config, dtype=self.weight_dtype,
                                                         attn_implementation=m.attn_implementation)
            if m.activation_checkpointing:
                enable_activation_checkpointing(model)
            model = self._adapt(model)
        name_modules(tie(model))
        return model

    def _adapt(self, model: torch.nn.Module) -> torch.nn.Module:
        """Freeze the base and add the LoRA adapters (the full-parameter workload keeps the model as is)."""
        from peft import LoraConfig, get_peft_model

        lora = self.recipe.lora
        peft_cfg = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                              target_modules=list(lora.target_modules), task_type="CAUSAL_LM")
        try:
            return get_peft_model(model, peft_cfg)
        except ValueError as exc:
            raise ModelError(f"lora.target_modules: {list(lora.target_modules)} - {str(exc).splitlines()[0]}") from None

    def _materialize(self, model: torch.nn.Module) -> torch.nn.Module:
        """Allocate and fill this rank's pieces of a meta-device model (a no-op for a whole-loaded one)."""
        from ..materialize import SafetensorsSource, is_meta, materialize

        if not is_meta(model):
            return model.to(self.device)
        path = self.recipe.model.path
        source = SafetensorsSource(path) if path is not None else None
        if self.zero3 is not None:  # DeepSpeed ZeRO-3: only this rank's partitions
            from ..materialize import materialize_zero3

            stats = materialize_zero3(model, self.zero3, self.device, self.recipe.seed, self.init_std, source)
        else:
            stats = materialize(model, self.device, self.recipe.seed, self.init_std, source)
        for key in ("tensors", "bytes_read", "seconds"):  # over all of this rank's stages
            stats[key] += (self.load_stats or {}).get(key, 0)
        self.load_stats = {**stats, "source": "safetensors slices" if source is not None else "seeded init"}
        return model

    def build_data(self, need_eval: bool):
        par = self.recipe.parallel
        # sequence parallelism slices the sequence over tp: a cut batch must still divide by it
        multiple = math.lcm(16, par.tp) if par.sequence_parallel and par.tp > 1 else 16
        sets = build_datasets(self.recipe.data, self.tokenizer, need_eval, pad_multiple=multiple)
        vocab = self._model_config().vocab_size
        for key, data in zip(("data.dataset", "data.eval_dataset"), sets):
            if data is not None:
                check_token_ids(data, vocab, key)
        return sets

    def parallelize(self, model, dims, device: torch.device, compute_dtype: torch.dtype) -> torch.nn.Module:
        """Pipeline split (pp > 1), then tensor parallel, then data parallel - on each stage."""
        from ..parallelize import apply_data_parallel, apply_tensor_parallel
        from ..pipeline import Pipeline, StageList

        mode = self.recipe.parallel.data_parallel
        keep_adapter_inputs(model, compute_dtype)
        stages = [model] if dims.layout.pp == 1 else None
        if stages is None:
            pipe = Pipeline(model, dims, self.recipe, device)
            stages = pipe.stage_modules
        parts = []
        for m in stages:
            # the documented order (docs/compile.md): tensor parallel, activation checkpointing (set when
            # the model was built), compile, data parallel
            # a pipeline stage's lm_head hands the schedule its vocabulary slice of the logits as a local
            # tensor (trainer/pipeline.py rebuilds the split for loss_parallel); its final norm runs on a
            # sequence slice where the norm is frozen and the sequence divides by tp
            staged = dims.layout.pp > 1
            frozen_norm = self.recipe.workload == "llm_lora"
            head = apply_tensor_parallel(m, dims, self.recipe.parallel.sequence_parallel and not staged,
                                         stage_head=staged, norm_sequence_parallel=staged and frozen_norm
                                         and self.recipe.data.seq_len % dims.layout.tp == 0)
            self.loss_parallel = self.loss_parallel or head
            if self.recipe.train.compile == "blocks":
                from ..compile import compile_blocks

                self.compiled_blocks += compile_blocks(m)
            if mode == "fsdp":  # FSDP2 shards meta parameters; each rank then fills only its shards
                parts.append(self._materialize(apply_data_parallel(m, dims, mode, device, compute_dtype)))
            elif mode == "deepspeed" and self.recipe.parallel.zero_stage == 3:
                # ZeRO-3: each rank makes and fills only its partitions; deepspeed.initialize (in the
                # loop, with the optimizer) finds the parameters partitioned already
                from ..engines.deepspeed import zero3_partitioner

                self.zero3 = zero3_partitioner(self.recipe, dims.layout, device, compute_dtype)
                parts.append(self._materialize(m))
            else:  # DDP compares and broadcasts real parameters
                parts.append(apply_data_parallel(self._materialize(m), dims, mode, device, compute_dtype))
        if dims.layout.pp == 1:
            return parts[0]
        pipe.vocab_parallel = self.loss_parallel
        pipe.build_schedule(parts)
        return StageList(parts, pipe)

    def flops(self, model: torch.nn.Module) -> tuple[float, str, str]:
        """Model FLOPs per trained token (formula in trainer/throughput.py); call before sharding."""
        from ..throughput import attention_flops_per_pair, flops_per_token, matmul_params

        config = (model.get_base_model() if hasattr(model, "get_base_model") else model).config
        n, n_train = matmul_params(model)
        # attention's width is heads x head_dim (q's output), which a config with its own head_dim sets apart
        # from hidden_size
        heads = config.num_attention_heads
        width = heads * (getattr(config, "head_dim", None) or config.hidden_size // heads)
        self.attention_flops_per_pair = attention_flops_per_pair(config.num_hidden_layers, width)
        per = flops_per_token(n, n_train, config.num_hidden_layers, width, self.recipe.data.seq_len)
        return per, "token", ("4N + 2N_trainable + 12 L d T per computed token (T = data.seq_len here; a step's "
                              "MFU uses each micro-batch's own padded length; trainer/throughput.py). MFU counts "
                              "the positions the GPUs compute (padded_tokens, padding included); tokens/s counts "
                              "real tokens only")

    def loss_context(self):
        """With lm_head split over tp the logits are split over the vocabulary: cross-entropy (forward
        and backward) must run under loss_parallel, which never gathers the full-vocabulary logits."""
        if not self.loss_parallel:
            return contextlib.nullcontext()
        from torch.distributed.tensor.parallel import loss_parallel

        return loss_parallel()

    def describe(self, train_set) -> str:
        d = self.recipe.data
        width = ("packed" if d.packing else "padded per micro-batch to its longest" if d.padding == "longest"
                 else "padded")
        return f"LoRA r={self.recipe.lora.r}; {len(train_set):,} training sequences of {d.seq_len} tokens ({width})"

    def _summed_ce(self, model: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Summed next-token cross-entropy over answer tokens, and how many tokens it covers."""
        ids = batch["input_ids"]
        if self.kernels is not None and self.kernels.fused_ce:
            return self._fused_summed_ce(model, batch)
        # No padding mask: batches are right-padded and attention is causal, so real tokens never see
        # padding and padded positions carry no label - the loss is exact. Passing the mask would make
        # transformers test it on the host every forward (a device sync), and sequence parallelism needs
        # the whole sequence's positions anyway (the model sees a slice of it).
        positions = plain_positions(ids.shape[1], ids.device)  # no packed-sequence device read (positions.py)
        logits = model(input_ids=ids, position_ids=positions).logits
        labels = batch["labels"][:, 1:]
        logits = logits[:, :-1].float()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                               ignore_index=IGNORE, reduction="sum")
        if hasattr(loss, "to_local"):  # loss-parallel: a replicated DTensor scalar
            loss = loss.to_local()
        return loss, (labels != IGNORE).sum()

    def _fused_summed_ce(self, model: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """The same summed loss from liger's fused linear cross-entropy (trainer/kernels.py): through the
        model's own forward (so DDP and FSDP2 see it), labels shifted inside it as above, and
        num_items_in_batch=1, for which the causal-LM loss is the sum over labelled tokens (divided by 1).
        skip_logits: no logits in evaluation either."""
        ids = batch["input_ids"]
        positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        out = model(input_ids=ids, position_ids=positions, labels=batch["labels"], num_items_in_batch=1,
                    skip_logits=True)
        return out.loss.float(), (batch["labels"][:, 1:] != IGNORE).sum()

    def loss_sums(self, model: torch.nn.Module, batch: dict) -> dict:
        return {"loss": self._summed_ce(model, batch)[0]}

    def eval_sums(self, model: torch.nn.Module, batch: dict) -> dict:
        return {"loss": self._summed_ce(model, batch)}

    @staticmethod
    def loss_counts(batch: dict) -> dict:
        return {StepKey.LABEL_TOKENS: int((batch["labels"][:, 1:] != IGNORE).sum())}

    @staticmethod
    def position_pairs(batch: dict) -> int:
        """(query, key) position pairs attention computes: batch x padded length squared."""
        return int(batch["input_ids"].numel()) * int(batch["input_ids"].shape[-1])
