"""Whether this torch's gloo connects lazily (TORCH_GLOO_LAZY_INIT, pytorch/pytorch#150801, torch 2.8).

The telemetry side group and the trainer's stop vote are job-wide gloo groups that talk to a few peers each;
connected lazily each rank opens about two connections. A torch that ignores the variable connects every
pair when the group is made (2 x 1,023 sockets per rank at 1,024 ranks, ~2 million store look-ups). The
version string cannot tell (NGC builds carry the version of the release they precede), so the behaviour is
probed: rank 0 of a 2-rank group on an in-process store with no rank 1. Lazy returns at once; eager waits for
rank 1's address and times out after PROBE_TIMEOUT_S.
"""
from __future__ import annotations

import datetime
import os

PROBE_TIMEOUT_S = 1.0
_known: bool | None = None


def gloo_connects_lazily(timeout_s: float | None = None) -> bool:
    """The probe's answer (cached after the first real probe; `timeout_s` overrides it, uncached)."""
    global _known
    if _known is not None and timeout_s is None:
        return _known
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=PROBE_TIMEOUT_S if timeout_s is None else timeout_s)
    store = dist.HashStore()
    store.set_timeout(timeout)
    before = os.environ.get("TORCH_GLOO_LAZY_INIT")
    os.environ["TORCH_GLOO_LAZY_INIT"] = "1"
    try:
        # its own device on loopback: the default device listens on every interface (seen as '::' beside a
        # standalone run's loopback-only sockets), and nothing outside this process is ever meant to connect
        options = dist.ProcessGroupGloo._Options()
        options._timeout = timeout
        options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        dist.ProcessGroupGloo(store, 0, 2, options)
        lazy = True
    except RuntimeError:  # DistStoreError: it waited for rank 1's address, i.e. connected eagerly
        lazy = False
    finally:
        if before is None:
            del os.environ["TORCH_GLOO_LAZY_INIT"]
        else:
            os.environ["TORCH_GLOO_LAZY_INIT"] = before
    if timeout_s is None:
        _known = lazy
    return lazy


def lazy_gloo_group(**kwargs):
    """A world-wide gloo group that opens a connection only when a pair first talks (gloo's lazy init,
    requested for this group alone): made with no connection, only a listening socket. Its timeout is the
    job's (telemetry/capture/group_timeout.py) unless `timeout` is given."""
    import torch.distributed as dist

    from telemetry.capture.group_timeout import job_timeout

    if kwargs.get("timeout") is None:
        kwargs["timeout"] = job_timeout()
    lazy = "TORCH_GLOO_LAZY_INIT" not in os.environ
    if lazy:
        os.environ["TORCH_GLOO_LAZY_INIT"] = "1"  # read when the group is created
    try:
        return dist.new_group(backend="gloo", **kwargs)
    finally:
        if lazy:
            del os.environ["TORCH_GLOO_LAZY_INIT"]
