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
