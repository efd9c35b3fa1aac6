"""The position ids the harness hands its Llama forwards, and the device read transformers would spend on them.

Every batch the harness builds has positions 0..L-1 in every row: right-padded rows, and packed rows too
(trainer/data/sft.py packs end to end without an attention barrier, plain causal attention). transformers'
`create_causal_mask` (masking_utils) cannot know that: with no padding mask and no cache it runs
`find_packed_sequence_indices` on the position ids every forward (and in every pipeline stage), which ends
in a Python `if (...).all()` over a device tensor - one host sync per forward, waiting for the GPU queue to
drain. For these positions the answer is known: no packed sequences (the function returns None).

`plain_positions` returns the (1, L) arange for a device, built once and kept; `install` wraps transformers'
check so that position ids sharing the storage of one of these tensors (as they are, or as transformers
expands them per batch row) skip it. Any other position ids - another caller's, or packed ones - go through
transformers' own check unchanged.
"""
from __future__ import annotations

import torch

_OURS: dict[tuple[int, str], torch.Tensor] = {}  # (length, device) -> arange, kept for the process
_STORAGES: set[int] = set()  # data pointers of those tensors' storages
_installed = False


def plain_positions(length: int, device: torch.device) -> torch.Tensor:
    """0..length-1 as a (1, length) int64 tensor on `device`, the same tensor on every call."""
    key = (length, str(device))
    t = _OURS.get(key)
    if t is None:
        install()
        t = torch.arange(length, device=device).unsqueeze(0)
        _OURS[key] = t
        _STORAGES.add(t.untyped_storage().data_ptr())
    return t


def is_plain(position_ids: torch.Tensor) -> bool:
    """Whether these are (a view of) one of plain_positions' tensors."""
    try:
        return position_ids.untyped_storage().data_ptr() in _STORAGES
    except (RuntimeError, NotImplementedError):  # a tensor without storage (fake, functional): not ours
        return False


def install() -> None:
    """Wrap transformers.masking_utils.find_packed_sequence_indices once (a no-op if already wrapped)."""
    global _installed
    if _installed:
        return
    from transformers import masking_utils

    original = masking_utils.find_packed_sequence_indices

    def find_packed_sequence_indices(position_ids: torch.Tensor):
        if is_plain(position_ids):
            return None  # 0..L-1 per row: one sequence per row, what transformers would find by reading it
        return original(position_ids)

    find_packed_sequence_indices.__wrapped__ = original
    masking_utils.find_packed_sequence_indices = find_packed_sequence_indices
    _installed = True
