"""A repeat that did not complete is left out of its fabric's figures and named at the top (review56: a
failed run was averaged into its fabric's mean, n=2, with "completed / failed" deep in the Fabrics table
the only sign; launch.evaluate leaves such runs out, so the two reports disagreed)."""
from __future__ import annotations

import json

from telemetry.analysis.compare import compare

from ..recorded import write_run


def test_a_failed_repeat_is_left_out_and_named(tmp_path):
    a1 = write_run(tmp_path / "a1", step_time=1.0)
    a2 = write_run(tmp_path / "a2", step_time=3.0, info_extra={"status": "failed"})
    b1 = write_run(tmp_path / "b1", step_time=2.0)
    res = compare([f"a={a1}", f"a={a2}", f"b={b1}"], str(tmp_path / "cmp"))
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| iteration time, median | 1 s | 2 s (+100.0%) |" in md, md
    assert any("did not complete" in w and str(a2) in w and "failed" in w for w in res["warnings"]), res["warnings"]
    assert res["groups"]["a"] == [str(a1)] and res["left_out"] == {"a": [str(a2)]}
    assert json.loads((tmp_path / "cmp" / "compare.json").read_text())["left_out"] == {"a": [str(a2)]}


def test_a_fabric_whose_every_run_failed_keeps_them_with_a_warning(tmp_path):
    a1 = write_run(tmp_path / "a1", step_time=1.0, info_extra={"status": "failed"})
    b1 = write_run(tmp_path / "b1", step_time=2.0)
    res = compare([f"a={a1}", f"b={b1}"], str(tmp_path / "cmp"))
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| iteration time, median | 1 s | 2 s (+100.0%) |" in md
    assert any("no run of a completed" in w for w in res["warnings"]), res["warnings"]
    assert res["left_out"] == {}
