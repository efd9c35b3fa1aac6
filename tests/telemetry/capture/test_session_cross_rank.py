"""Cross-rank figures at scale: a fixed-size tree reduction to rank 0 gives the same min, max, max_rank,
rank counts and sums as the old full gather, keeps unknowns unknown, and sends one message per rank."""
from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys

import pytest

from telemetry.capture.cross_rank import REDUCED, combine_payloads, cross_rank_figures, reduction_payload
from telemetry.capture.session import Telemetry, TelemetrySettings
from tests.conftest import REPO

WORKER = str(REPO / "tests" / "telemetry" / "capture" / "cross_rank_worker.py")
PAYLOAD_BYTES = 5 * len(REDUCED) * 8
VECTOR_BYTES = len(REDUCED) * 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(out, nnodes: int, nproc: int, env: dict | None = None, timeout: int = 120) -> list[dict]:
    """torchrun the worker; nnodes > 1 starts one agent per emulated host (static rendezvous here)."""
    port = _free_port()
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    procs = []
    for node in range(nnodes):
        where = (["--standalone"] if nnodes == 1 else
                 ["--nnodes", str(nnodes), "--node-rank", str(node), "--master-addr", "127.0.0.1",
                  "--master-port", str(port)])
        cmd = [sys.executable, "-m", "torch.distributed.run", *where, f"--nproc-per-node={nproc}", WORKER, str(out)]
        procs.append(subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, start_new_session=True))
    for proc in procs:
        try:
            _, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                os.killpg(p.pid, signal.SIGKILL)
            pytest.fail("cross-rank worker timed out")
        assert proc.returncode == 0, stderr[-3000:]
    world = nnodes * nproc
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def _check_against_old_gather(results: list[dict], nodes: int = 1) -> None:
    world = len(results)
    rounds = math.ceil(math.log2(world))
    for s, step in enumerate(results[0]["steps"]):
        median_step = step["step"] % 2 == 0  # the worker's cross_rank_median_every
        record, ref = step["record"], step["reference"]
        figures = {"step_time_s": record["ranks"]["step_time_s"], "comm_time_s": record["ranks"]["comm_time_s"],
                   **{f"time_{op}": v for op, v in record["ranks"]["comm_time_s_by_op"].items()}}
        for name, old in ref.items():
            if name in figures or name.startswith(("step_time", "comm_time", "time_")):
                new = figures.get(name)
                if old is None:
                    assert new is None, name  # unknown on every rank: no figure at all, never 0
                    continue
                assert (new["min"], new["max"], new["max_rank"], new["ranks"]) == \
                       (old["min"], old["max"], old["max_rank"], old["ranks"]), name
                assert new["mean"] == pytest.approx(old["sum"] / old["ranks"], rel=1e-12)
                assert new["median"] == (old["median"] if median_step else None), name
        # job-wide sums are named job_*: every unprefixed field is the rank's own
        sums = {"gpu_energy_j": "job_gpu_energy_j", "gpu_power_w": "job_gpu_power_w",
                "host_cpu_energy_j": "job_cpu_energy_j", "host_net_tx_bytes": "job_net_tx_bytes",
                "host_net_rx_bytes": "job_net_rx_bytes", "host_rdma_tx_bytes": "job_rdma_tx_bytes",
                "host_rdma_rx_bytes": "job_rdma_rx_bytes", "host_loss_events": "job_loss_events"}
        for field, key in sums.items():
            # a job sum some ranks (GPU: judged by the energy's ranks, for power too) or hosts (host-wide
            # sources) did not know is null, never their sum
            judged = ref["gpu_energy_j"] if field.startswith("gpu_") else ref[field]
            known = judged["ranks"] if judged else 0
            partial = 0 < known < (world if field.startswith("gpu_") else nodes)
            assert record[key] == (ref[field]["sum"] if ref[field] and not partial else None), key
        # what went over the wire: one message up the tree per rank, fixed-size except on median steps
        # (then it carries its subtree's values), nothing else
        for r, res in enumerate(results):
            calls = res["steps"][s]["calls"]
            names = sorted(c["name"] for c in calls)
            if r == 0:
                assert names == ["irecv"] * rounds
            else:
                assert names.count("isend") == 1 and set(names) <= {"isend", "irecv"}
                lowest_bit = r & -r
                subtree = min(lowest_bit, world - r)
                sent = next(c["bytes"] for c in calls if c["name"] == "isend")
                assert sent == PAYLOAD_BYTES + (subtree * VECTOR_BYTES if median_step else 0)
                assert res["steps"][s]["record"] == {}
    # the pipelined tree: the same figures, rank 0's complete ceil(log2 world) steps later (or at the drain)
    piped = results[0]["piped"]
    assert sorted(piped) == [str(s["step"]) for s in results[0]["steps"]]
    for step in results[0]["steps"]:
        got = piped[str(step["step"])]
        assert got["figures"] == step["record"]
        assert got["at"] == (step["step"] + rounds if step["step"] + rounds <= len(piped) else None)
    for r, res in enumerate(results):  # a post sends at most one message and receives from its children
        for calls in res["posts"]:
            names = [c["name"] for c in calls]
            assert names.count("isend") <= (0 if r == 0 else 1) and set(names) <= {"isend", "irecv"}
        assert all(not res["piped"] for res in results[1:])


@pytest.mark.integration
@pytest.mark.parametrize("nproc", [3, 4])
def test_tree_reduction_equals_the_old_full_gather(tmp_path, nproc):
    results = _launch(tmp_path, 1, nproc)
    step = results[0]["steps"]
    assert any(v is None for v in step[2]["reference"].values())  # the worker really has all-unknown fields
    _check_against_old_gather(results)
    # a real step: only the job's own all_reduce is counted; the reduction covers every rank
    end = results[0]["end_step"]
    assert set(end["comm"]) == {"all_reduce"} and end["comm"]["all_reduce"]["count"] == 1
    assert end["ranks"]["step_time_s"] == {"min": 0.5, "median": None, "mean": 0.5, "max": 0.5,
                                           "max_rank": nproc - 1, "ranks": nproc}
    info = results[0]["summary"]["cross_rank"]
    assert f"{PAYLOAD_BYTES}-byte message" in info["method"] and "every 2 steps" in info["median"]


@pytest.mark.integration
def test_two_hosts_pin_gloo_to_the_interface_nccl_names(tmp_path):
    # two torchrun agents = two emulated hosts (LOCAL_WORLD_SIZE < WORLD_SIZE). '=lo' is NCCL's exact-name
    # form: gloo itself would reject it, so the group only comes up if telemetry translated it first
    results = _launch(tmp_path, 2, 1, env={"NCCL_SOCKET_IFNAME": "=lo", "GLOO_SOCKET_IFNAME": ""})
    for res in results:
        assert res["GLOO_SOCKET_IFNAME"] == "lo"
        pin = res["cross_rank_info"]["gloo_interface"]
        assert pin["pinned"] is True and pin["interface"] == "lo" and "NCCL_SOCKET_IFNAME==lo" in pin["how"]
    _check_against_old_gather(results, nodes=2)


@pytest.mark.integration
def test_a_silent_peer_fails_the_tree_at_the_jobs_timeout(tmp_path):
    # the side group once took torch's default timeout (30 minutes): rank 0 waiting there for a peer behind a
    # cut link outlived the job's distributed.timeout_s by half an hour (the lab's cut-link test hung in CI)
    # 15 s: the job's timeout also bounds start-up (two ranks importing torch on two cores)
    got = _launch(tmp_path, 1, 2, env={"SILENT_PEER_TIMEOUT_S": "15"}, timeout=300)[0]
    assert got["cross_rank_info"]["timeout_s"] == 15.0
    assert got["error"] and "imed out" in got["error"], got
    assert got["waited_s"] < 120, got  # the job's 15 s (and gloo's slack), never torch's 30 minutes


def test_one_process_figures_without_a_process_group():
    tel = Telemetry(TelemetrySettings(nccl_debug=False))
    values = [float("nan")] * len(REDUCED)
    values[0] = 2.0
    out = tel.cross_rank(values, 1)
    assert out["ranks"]["step_time_s"] == {"min": 2.0, "median": 2.0, "mean": 2.0, "max": 2.0, "max_rank": 0,
                                           "ranks": 1}
    assert out["ranks"]["comm_time_s"] is None and out["job_gpu_energy_j"] is None


def test_combining_is_order_free_and_ties_go_to_the_higher_rank():
    rows = {0: [1.0, float("nan")], 1: [3.0, float("nan")], 2: [3.0, 5.0], 3: [0.5, float("nan")]}
    pad = [float("nan")] * (len(REDUCED) - 2)
    payloads = {r: reduction_payload(v + pad, r) for r, v in rows.items()}
    forward = [row[:] for row in payloads[0]]
    for r in (1, 2, 3):
        combine_payloads(forward, payloads[r])
    backward = [row[:] for row in payloads[3]]
    for r in (2, 1, 0):
        combine_payloads(backward, payloads[r])
    assert forward == backward
    out = cross_rank_figures(forward, None)["ranks"]["step_time_s"]
    assert out == {"min": 0.5, "median": None, "mean": 7.5 / 4, "max": 3.0, "max_rank": 2, "ranks": 4}
    comm = cross_rank_figures(forward, None)["ranks"]["comm_time_s"]
    assert comm == {"min": 5.0, "median": None, "mean": 5.0, "max": 5.0, "max_rank": 2, "ranks": 1}
