"""On 2 gloo ranks (backward_worker.py): the collective each functional collective's backward issues, counted
with the bytes nccl-tests' formulas give (S, telemetry/formulas.py) on a group of 2, and P2POps that cross an
install or uninstall of the tracer, exchanged and counted as what they are."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ...conftest import REPO

N = 2  # ranks
F32 = 4  # bytes


@pytest.fixture(scope="module")
def seen(tmp_path_factory):
    out = tmp_path_factory.mktemp("backward")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={N}",
           str(REPO / "tests" / "telemetry" / "capture" / "backward_worker.py"), str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(N)]


@pytest.mark.integration
def test_each_backward_collective_is_counted_with_the_formulas_bytes_and_timed(seen):
    for rank, res in enumerate(seen):
        b = res["backwards"]
        received = (1 + 1) if rank == 0 else (3 + 3)  # all_to_all elements this rank received
        coalesced = (4 + 2) * F32
        assert b["forward"] == [["all_gather", 8 * F32 * N], ["reduce_scatter", 8 * F32], ["all_to_all", 4 * F32],
                                ["all_reduce", 5 * F32], ["all_gather", coalesced * N],
                                ["reduce_scatter", coalesced]]
        # autograd runs them in reverse. Each backward is the forward's transpose on the same group:
        # reduce_scatter's -> all_gather of its gradient (S = output, its N x (8 / N) elements gathered);
        # all_gather's -> reduce_scatter of the gathered gradient (S = input, N x 8 elements);
        # all_to_all's -> all_to_all sending back what this rank received (S = input, uneven per rank)
        assert [[c["op"], c["bytes"]] for c in b["backward"]] == [
            ["all_gather", (4 + 2) // N * F32 * N], ["reduce_scatter", coalesced * N], ["all_reduce", 5 * F32],
            ["all_to_all", received * F32], ["all_gather", 8 // N * F32 * N], ["reduce_scatter", 8 * F32 * N]]
        # gloo: the backward's node waits for its work, so it is timed (the forwards are untimed, with why)
        assert all(c["timed"] and c["reason"] is None and c["group"] == "world" for c in b["backward"])
        # each backward delivered its gradient to x[0] (all ranks' x are ones): all_gather's sums N ranks' ones,
        # reduce_scatter's and all_to_all's hand back 1, all_reduce's sums N, the coalesced forms' x[:4] and x[:2]
        assert b["grad"][0] == N + 1 + 1 + N + 2 * N + 2 * 1


@pytest.mark.integration
def test_p2pops_cross_install_and_uninstall_without_a_crash_or_a_miscount(seen):
    for rank, res in enumerate(seen):
        p = res["p2p"]
        peer = float(1 - rank)
        assert p["under_first"] == [peer] * 4 and p["first_counted"] == ["send", "recv"]
        # built under a tracer, used after its uninstall: torch's own batch (TypeError before), nothing counted
        assert p["after_uninstall"] == [peer] * 8 and p["uninstalled_counted"] == []
        # built under an earlier tracer or none, used under a later one: a send and a recv each (a send built
        # under the earlier tracer was counted as a recv, then raised)
        assert p["under_later"] == [peer] * 8 and p["later_counted"] == [["send", 16], ["recv", 16]] * 2
