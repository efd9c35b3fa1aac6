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
