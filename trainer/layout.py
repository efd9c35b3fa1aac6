"""The world layout a recipe asks for: parallel degrees, per-rank batch, gradient accumulation.

Pure arithmetic, no torch: `--dry-run --world-size 64` checks a 70B recipe on a laptop.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .config import Recipe


@dataclass(frozen=True)
class Layout:
    world_size: int
    dp: int
    tp: int
    pp: int
    data_parallel: str
    global_batch_size: int
    micro_batch_size: int
    grad_accum_steps: int  # micro-batches per optimizer step on each dp rank
    per_rank_batch: int  # samples per optimizer step on each dp rank
    pp_schedule: str = "1f1b"
    pp_stages_per_rank: int = 1

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        if not self.global_batch_size:  # a collective sweep
            return f"world {self.world_size}"
        text = (f"world {self.world_size} = dp {self.dp} x tp {self.tp} x pp {self.pp} "
                f"({self.data_parallel}); global batch {self.global_batch_size} = micro-batch "
                f"{self.micro_batch_size} x grad-accum {self.grad_accum_steps} x dp {self.dp}; "
                f"per-rank batch {self.per_rank_batch}")
        if self.pp > 1:
            text += (f"; pipeline {self.pp_schedule} over {self.pp * self.pp_stages_per_rank} stages, "
                     f"{self.grad_accum_steps} micro-batches per step")
        return text


def resolve_layout(recipe: Recipe, world_size: int) -> tuple[Layout | None, list[str]]:
    """Return the layout, or the problems (each naming the key) that prevent it."""
    par, train = recipe.parallel, recipe.train
    problems = []
    if world_size < 1:
        return None, [f"world size: got {world_size}; expected an integer >= 1"]
    delay_rank = recipe.debug.delay_rank
    if delay_rank is not None and delay_rank >= world_size:
        return None, [f"debug.delay_rank: got {delay_rank}; allowed: a rank below the world size {world_size}"]
    tp, pp = par.tp, par.pp
    if par.dp == -1:
        if world_size % (tp * pp):
            return None, [f"parallel: world size {world_size} is not divisible by tp x pp = {tp} x {pp}; "
                          "choose degrees whose product divides it"]
        dp = world_size // (tp * pp)
    else:
        dp = par.dp
        if dp * tp * pp != world_size:
            return None, [f"parallel: dp x tp x pp = {dp} x {tp} x {pp} = {dp * tp * pp} does not equal "
                          f"the world size {world_size}; set parallel.dp=-1 to derive it"]
    if tp > 1 and dp > 1 and par.data_parallel == "ddp":
        return None, [f"parallel.data_parallel: 'ddp' cannot be combined with tp {tp} at dp {dp} (DDP does not hold "
                      "tensor-parallel DTensor parameters); allowed: replicate, fsdp"]
    if pp > 1 and dp > 1 and par.data_parallel == "ddp":
        return None, [f"parallel.data_parallel: 'ddp' cannot be combined with pp {pp} at dp {dp} (DDP's reducer "
                      "breaks when a schedule runs several forwards before their backwards); allowed: replicate, fsdp"]
    gbs, mbs = train.global_batch_size, train.micro_batch_size
    if recipe.job == "sweep":  # a sweep has no batch: every rank takes part
        return Layout(world_size, dp, tp, pp, par.data_parallel, 0, 0, 0, 0), []
    if gbs % (mbs * dp):
        problems.append(f"train.global_batch_size: {gbs} is not divisible by micro_batch_size x dp = "
                        f"{mbs} x {dp} = {mbs * dp}; allowed: multiples of {mbs * dp}")
    if problems:
        return None, problems
    accum = gbs // (mbs * dp)
    if pp > 1:  # the grad-accum micro-batches are the pipeline's micro-batches
        if par.pp_schedule == "1f1b" and accum < pp:  # torch's Schedule1F1B refuses fewer
            problems.append(f"train.global_batch_size: 1f1b over {pp} stages needs at least {pp} micro-batches per "
                            f"step, got {accum} (= {gbs} / (micro-batch {mbs} x dp {dp})); allowed: "
                            f"global_batch_size >= {pp * mbs * dp}, a smaller micro_batch_size, or gpipe")
        rounds = max(1, accum // pp)
        if par.pp_schedule == "interleaved_1f1b" and accum % rounds:  # torch's ScheduleInterleaved1F1B rule
            problems.append(f"train.global_batch_size: interleaved_1f1b needs the micro-batch count ({accum}) to be "
                            f"a multiple of its rounds ({rounds} = max(1, {accum} // pp {pp})); allowed: "
                            f"global_batch_size a multiple of {pp * mbs * dp}, or at most {pp * mbs * dp}")
        if problems:
            return None, problems
    return Layout(world_size, dp, tp, pp, par.data_parallel, gbs, mbs, accum, gbs // dp,
                  par.pp_schedule, par.pp_stages_per_rank), []

