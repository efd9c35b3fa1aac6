"""torch's collectives under the names the installed torch has, for tests that call them by name.

torch 2.13 named the tensor forms *_single (its *_tensor / *_into_tensor names delegate to them and are
deprecated); torch 2.11 (and 2.8, both run on CPU) has only the older names, with the same arguments. Each
name is looked up when it is called, not when this module is imported: an installed tracer replaces the
module attributes.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

# torch 2.13's name -> the name before it, in torch.distributed._functional_collectives
FUNCOL_OLDER = {"all_gather_single": "all_gather_tensor", "reduce_scatter_single": "reduce_scatter_tensor",
                "all_gather_single_coalesced": "all_gather_into_tensor_coalesced",
                "reduce_scatter_single_coalesced": "reduce_scatter_tensor_coalesced"}
# and in torch.distributed (FSDP2 calls these for its all-gathers and gradient reduce-scatters)
DIST_OLDER = {"all_gather_single": "all_gather_into_tensor", "reduce_scatter_single": "reduce_scatter_tensor"}


def dist_name(name: str) -> str:
    """`name` where torch.distributed has it, else the older name of the same collective."""
    return name if hasattr(dist, name) else DIST_OLDER[name]


class Funcol:
    """torch.distributed._functional_collectives, answering torch 2.13's names on an older torch too."""

    def __getattr__(self, name: str):
        import torch.distributed._functional_collectives as module

        fn = getattr(module, name, None)
        if fn is None and name in FUNCOL_OLDER:
            fn = getattr(module, FUNCOL_OLDER[name])
        if fn is None:
            raise AttributeError(name)
        return fn


def backward_ones(outs) -> None:
    """sum(o.sum() for o in outs).backward() with contiguous gradients: o.sum()'s is an expanded one, which the
    *_autograd forms' backwards refuse before torch 2.13 ("Expected input.is_contiguous()", torch 2.8 and 2.11)."""
    outs = [o for o in outs if o.requires_grad]
    torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])


# the *_autograd form of each collective, differentiable on every torch the harness supports
AUTOGRAD_FORM = {"all_gather_single": "all_gather_tensor_autograd", "reduce_scatter_single": "reduce_scatter_tensor_autograd",
                 "all_to_all_single": "all_to_all_single_autograd"}


def plain_funcols_have_autograd() -> bool:
    """Whether the plain functional collectives (all_gather_tensor, all_reduce, ...) have a backward that issues
    the transposed collective: torch 2.11 registers one (torch.library.register_autograd); in torch 2.9 and
    2.8 only the *_autograd forms have one, and a plain form's output that needs a gradient fails at its wait."""
    import torch.distributed._functional_collectives as module

    return hasattr(module, "all_gather_into_tensor_backward")


def differentiable(name: str):
    """The functional collective `name` (torch 2.13's name) in a form whose backward issues a collective: the
    plain one where torch gives it a backward, else its *_autograd form. Looked up at each call."""
    funcol = Funcol()
    return getattr(funcol, name if plain_funcols_have_autograd() else AUTOGRAD_FORM[name])
