"""The job's collective timeout, for the process groups made after the default one.

torch gives a group made without a timeout its own default (30 minutes for gloo, 10 for NCCL), not the
default group's: DeviceMesh's dimension groups, DeepSpeed's data-parallel group, a sweep's fresh groups and
the job-wide gloo side groups all did, so a rank waiting there on a peer behind a cut link outlived the job's
timeout (the trainer's distributed.timeout_s) by that much, where the same wait in the default group failed
in time. Setting it after the group is made holds for the next collective (gloo: a silent peer failed an
all_reduce in 4.0 s of a 4 s job timeout).
"""
from __future__ import annotations

import datetime

import torch
import torch.distributed as dist


def job_timeout() -> datetime.timedelta | None:
    """The default process group's timeout, or None where there is none or torch does not say."""
    try:
        pg = dist.distributed_c10d._get_default_group()
    except (RuntimeError, ValueError, AttributeError):
        return None
    timeout = group_timeout(pg)
    return timeout if isinstance(timeout, datetime.timedelta) else None


def group_timeout(group) -> datetime.timedelta | None:
    """The timeout a group's collectives run under (its CPU backend's, else its CUDA one's)."""
    for device in ("cpu", "cuda"):
        try:
            return group._get_backend(torch.device(device)).options._timeout
        except (RuntimeError, AttributeError):
            continue
    return None


def carry_job_timeout(group) -> None:
    """Give `group` (made by a library that took no timeout, e.g. DeviceMesh) the job's timeout."""
    timeout = job_timeout()
    if timeout is None or group is None or group == dist.GroupMember.NON_GROUP_MEMBER:
        return
    if group is not dist.distributed_c10d._get_default_group() and group_timeout(group) != timeout:
        dist.distributed_c10d._set_pg_timeout(timeout, group)


def carry_job_timeout_to_all() -> None:
    """Every group this rank is in takes the job's timeout: after a library made its own without one
    (DeepSpeed's data-parallel group is `new_group(ranks=range(world))`, a clone of the world)."""
    for group in list(dist.distributed_c10d._world.pg_map):
        carry_job_timeout(group)


class GroupWaitFailed(RuntimeError):
    """A wait on one of the harness's own groups (telemetry's exchange, the stop vote) that failed (a timeout,
    a peer gone): str() keeps the transport's words, so it is read as any such failure is; `what` and `peer`
    say what was waited for and on whom, which the flight recorder cannot (those messages bypass it, so its
    last entry is the job's)."""

    def __init__(self, exc: BaseException, what: str, peer: int | None):
        super().__init__(str(exc))
        self.what, self.peer = what, peer


def wait_naming(work, what: str, peer: int) -> None:
    """`work.wait()`; a failure is raised as GroupWaitFailed naming `what` was waited for and on `peer`."""
    try:
        work.wait()
    except RuntimeError as exc:
        raise GroupWaitFailed(exc, what, peer) from exc
