"""Which rank a Telemetry writes as when it starts before any process group exists (review65)."""
from __future__ import annotations

import json

import pytest

from telemetry.capture import session
from telemetry.rundir import RANK_TELEMETRY, RANKS, rank_file


def _settings():
    return session.TelemetrySettings(interfaces=[], cross_rank_every=0, nccl_debug=False, sysfs="/nonexistent",
                                     power_sample_interval_s=60.0)


def test_a_session_started_before_the_process_group_writes_as_the_launchers_rank(tmp_path, monkeypatch):
    """Started before init_process_group (or in a job that never makes one) under torchrun, every rank took
    rank 0: all appended to ranks/rank00000.telemetry.jsonl and every one counted as rank 0 (metrics files,
    exports). The launcher's RANK and WORLD_SIZE keep the ranks apart until a group says otherwise."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    tel = session.Telemetry(_settings(), run_dir=str(tmp_path))
    tel.start()
    try:
        assert (tel.rank, tel.world) == (1, 2)
        tel.start_step(1)
        tel.end_step(1, step_time_s=0.01)
    finally:
        tel.close()
    assert sorted(p.name for p in (tmp_path / RANKS).iterdir()) == [rank_file(1, RANK_TELEMETRY).split("/")[-1]]
    lines = (tmp_path / rank_file(1, RANK_TELEMETRY)).read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1]


@pytest.mark.parametrize("env", [{}, {"RANK": "x1", "WORLD_SIZE": "2"}, {"RANK": "3", "WORLD_SIZE": "2"}])
def test_no_or_unusable_launcher_variables_leave_rank_0_of_1(monkeypatch, env):
    for k in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    tel = session.Telemetry(_settings(), run_dir=None)
    tel.start(trace=False)
    try:
        assert (tel.rank, tel.world) == (0, 1)
    finally:
        tel.close()
