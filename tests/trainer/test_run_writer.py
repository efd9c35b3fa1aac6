"""trainer.run_writer in-process: what a surviving rank records when rank 0 is gone."""
from __future__ import annotations

import json

from trainer.run_writer import record_for_lost_rank0


def test_a_survivor_records_the_end_only_of_a_run_still_running(tmp_path):
    run_json = tmp_path / "run.json"
    run_json.write_text(json.dumps({"status": "running", "hosts": [{"rank": 0}], "exit_code": None}))
    line = "rank 0 (host a, pid 7) was lost after step 2; token hf_abcdefghijklmnopqrstuvwx"
    assert record_for_lost_rank0(str(run_json), line)
    info = json.loads(run_json.read_text())
    assert (info["status"], info["exit_code"], info["hosts"]) == ("failed", 1, [{"rank": 0}])
    assert info["error"].startswith("rank 0 (host a, pid 7) was lost") and "hf_abc" not in info["error"]
    assert info["end_time"]
    assert not record_for_lost_rank0(str(run_json), "again")  # ended already: rank 0's own end, or another's
    assert json.loads(run_json.read_text())["error"] == info["error"]
    assert not record_for_lost_rank0(str(tmp_path / "missing.json"), line)


def test_a_survivor_records_the_lost_attempt_as_rank_0_would_have(tmp_path):
    """The attempt's record is added as rank 0's end adds it, so a resume lists the failed attempt (it listed none)."""
    run_json = tmp_path / "run.json"
    run_json.write_text(json.dumps({"status": "running", "attempt": 2, "start_time": "t2",
                                    "attempts": [{"attempt": 1, "status": "died"}]}))
    assert record_for_lost_rank0(str(run_json), "rank 0 (host a, pid 7) was lost after step 2")
    attempts = json.loads(run_json.read_text())["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2] and attempts[1]["status"] == "failed"
    assert attempts[1]["start_time"] == "t2" and attempts[1]["end_time"]

