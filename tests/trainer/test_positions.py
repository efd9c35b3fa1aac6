"""The harness's own Llama forwards read nothing from the device for transformers' packed-sequence check:
their positions are 0..L-1 per row, whose answer (no packed sequences) is known. Counted with the bench's
host-read counter on a tiny model, whole and as pipeline stages; other position ids keep transformers' check."""
from __future__ import annotations

import torch

from bench.support.host_reads import HostReads
from trainer.compat import ensure_torchvision_importable
from trainer.positions import is_plain, plain_positions

ensure_torchvision_importable()


def tiny():
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, attn_implementation="sdpa",
                         use_cache=False)  # as the harness builds it: no cache in training
    return AutoModelForCausalLM.from_config(config).eval()


def reads(fn) -> int:
    with HostReads() as counter:
        fn()
    return counter.count


def test_plain_positions_are_one_tensor_and_transformers_own_check_finds_no_packing_in_them():
    from transformers import masking_utils

    p = plain_positions(16, torch.device("cpu"))
    assert p is plain_positions(16, torch.device("cpu")) and p.tolist() == [list(range(16))]
    assert is_plain(p) and is_plain(p.expand(4, -1)) and not is_plain(torch.arange(16).unsqueeze(0))
    original = masking_utils.find_packed_sequence_indices.__wrapped__
    assert original(p.expand(4, -1)) is None  # what skipping it returns: exact, not an approximation
    packed = torch.tensor([[0, 1, 2, 0, 1, 2]])
    assert masking_utils.find_packed_sequence_indices(packed).tolist() == [[0, 0, 0, 1, 1, 1]]  # others: checked


def test_a_forward_with_the_harness_positions_reads_nothing_and_computes_the_same():
    model = tiny()
    ids = torch.randint(0, 64, (4, 16))
    with torch.no_grad():
        assert reads(lambda: model(input_ids=ids, position_ids=torch.arange(16).unsqueeze(0))) == 1  # transformers
        assert reads(lambda: model(input_ids=ids, position_ids=plain_positions(16, ids.device))) == 0
        a = model(input_ids=ids, position_ids=torch.arange(16).unsqueeze(0)).logits
        b = model(input_ids=ids, position_ids=plain_positions(16, ids.device)).logits
    assert torch.equal(a, b)


def test_pipeline_stages_read_nothing():
    from trainer.pipeline import LlamaStage

    model = tiny()
    first, last = LlamaStage(model, [0], True, False), LlamaStage(model, [1], False, True)
    ids = torch.randint(0, 64, (2, 16))
    with torch.no_grad():
        h = first(ids)
        assert reads(lambda: first(ids)) == 0 and reads(lambda: last(h)) == 0
        whole = model(input_ids=ids).logits
        assert torch.allclose(last(h), whole, atol=1e-5)
