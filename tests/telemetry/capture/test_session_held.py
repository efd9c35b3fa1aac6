"""Held steps on a rank that fails: whatever failed in the cross-rank part (the link probe, the tree), the
steps it holds are written when it closes alone, with the fields it has (NCCL's hold path, faked in one
process: the side group and the probe are stand-ins, named so)."""
from __future__ import annotations

import json

from telemetry.capture import session


def test_a_failed_probe_on_the_hold_path_still_writes_every_held_step(tmp_path, monkeypatch):
    calls = {"n": 0}

    def fake_probe(*args, **kwargs):  # the link probe between hosts: its second round loses the peer
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("Connection closed by peer")
        return 0.001

    monkeypatch.setattr(session, "link_probe", fake_probe)
    tel = session.Telemetry(session.TelemetrySettings(cross_rank_every=1, link_probe_every=1, nccl_debug=False,
                                                      power_sample_interval_s=60.0, sysfs="/nonexistent"),
                            run_dir=str(tmp_path))
    tel.start()
    tel._hold = True  # as on NCCL: each step is reduced at the next step's end
    tel._group = object()  # stand-in side group: only the faked probe uses it
    records = []
    failed = None
    for step in (1, 2, 3):
        tel.start_step(step)
        records.append({"step": step})
        try:
            tel.end_step(step, 0.01, into=records[-1])  # step 3's end reduces step 2: its probe fails
        except RuntimeError as exc:
            failed = step, str(exc)
            break
    tel.close()  # flush(collective=False): this rank stops alone
    assert failed == (3, "Connection closed by peer")
    assert [r.get("_held") for r in records] == [None, None, None]
    assert all("comm" in r for r in records)  # released with their own fields
    lines = (tmp_path / "ranks" / "rank00000.telemetry.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3]


def test_runs_sharing_the_process_tracer_each_count_their_own_calls_outside_the_steps(tmp_path, monkeypatch):
    """The tracer installed early (telemetry/capture/early.py) serves every Telemetry of the process. A run's
    comm_outside_steps holds its own setup calls: the second run showed the first run's and lost its own (the
    first run's close left the tracer inside a step, so the second run's setup calls were dropped at its
    first step)."""
    import torch

    from telemetry.capture import completion_hooks, early
    from telemetry.capture.collectives import DIST_SPECS
    from tests.telemetry.capture.test_collectives_nccl_fake import FakeProcessGroupNCCL, all_reduce

    monkeypatch.setattr(completion_hooks, "backend_name", lambda pg: getattr(pg, "backend", None))
    early.reset()
    try:
        tracer, g = early.install(), FakeProcessGroupNCCL("g")
        reduce = tracer._wrap_dist("all_reduce", all_reduce, DIST_SPECS["all_reduce"])  # on the pretend NCCL group
        seen = []
        for run, setup_elements in ((1, 1), (2, 10)):
            tel = session.Telemetry(session.TelemetrySettings(cross_rank_every=0, link_probe_every=0, nccl_debug=False,
                                                              power_sample_interval_s=60.0, sysfs="/nonexistent"),
                                    run_dir=str(tmp_path / f"run{run}"))
            tel.start()
            assert tel.tracer is tracer
            reduce(torch.ones(setup_elements), group=g)  # setup, before the first step
            tel.start_step(1)
            reduce(torch.ones(2), group=g)
            g.watchdog()
            tel.end_step(1, 0.01)
            seen.append(tel.summary()["comm_outside_steps"])
            tel.close()
        assert seen == [{"all_reduce": {"count": 1, "bytes": 4}}, {"all_reduce": {"count": 1, "bytes": 40}}]
    finally:
        early.reset()


def test_the_barrier_before_rank_0_exports_is_the_harnesss_own(tmp_path, monkeypatch):
    """close() waits for every rank (a monitored_barrier on the side group) before rank 0 exports; with the
    process tracer that barrier is traced and was counted as the next run's collective outside the steps."""
    import types

    from telemetry.capture import early
    from telemetry.capture.collectives import DIST_SPECS

    early.reset()
    try:
        tracer = early.install()
        waited = []
        barrier = tracer._wrap_dist("monitored_barrier", lambda group=None, timeout=None, wait_all_ranks=False:
                                    waited.append(group), DIST_SPECS["monitored_barrier"])
        monkeypatch.setattr(session, "dist", types.SimpleNamespace(**{**vars(session.dist),
                                                                      "monitored_barrier": barrier}))
        tel = session.Telemetry(session.TelemetrySettings(cross_rank_every=0, link_probe_every=0, nccl_debug=False,
                                                          power_sample_interval_s=60.0, sysfs="/nonexistent",
                                                          export=["parquet"]), run_dir=str(tmp_path))
        tel.start()
        tel._group = side = object()  # stand-in side group
        tel.close()
        assert waited == [side] and tracer.outside_steps() == {}
    finally:
        early.reset()


def test_the_job_counts_one_host_per_torchrun_agent_when_nodes_run_different_numbers_of_ranks(monkeypatch):
    """Host-wide sources are read by each agent's local rank 0, so a job-wide host sum needs that many. Nodes of
    4 and 8 GPUs (each node's task counts its own GPUs: launch/slurm/train.sbatch inside salloc --gpus 12) gave
    rank 0 of the 4-GPU node 12 // 4 = 3 hosts, and every step's job host sums were null, "1 of 3 hosts
    unknown". torchrun says the agents: GROUP_WORLD_SIZE."""
    from types import SimpleNamespace

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    assert session.Telemetry._host_count(SimpleNamespace(world=12)) == 2
    monkeypatch.delenv("GROUP_WORLD_SIZE")  # another launcher: ranks per host as before
    assert session.Telemetry._host_count(SimpleNamespace(world=12)) == 3
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert session.Telemetry._host_count(SimpleNamespace(world=12)) is None
