"""A stand-in for megatron-core's import-time binding (tests only): megatron/core/tensor_parallel and
its distributed optimizer keep `torch.distributed.all_gather_into_tensor` in a module global when
imported, so a wrapper installed later never sees their calls."""
import torch.distributed

dist_all_gather_func = torch.distributed.all_gather_into_tensor
