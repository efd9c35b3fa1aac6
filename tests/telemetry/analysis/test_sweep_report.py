"""`telemetry report` of a collective sweep shows the sweep (found in the lab, 2026-11-29: the report of a
3-node sweep at 1mbit was the training report, every row n/a, the tracer 'not recorded (a run from before the
tracer health)', five empty figures, and none of the sizes, bandwidths or latencies the sweep measured)."""
from __future__ import annotations

from telemetry.analysis.report import write_report

from ..recorded import sweep_result, write_run


def test_a_sweep_report_shows_sizes_bandwidths_line_rate_and_latency(tmp_path):
    lab = {"rate": "10gbit", "rate_bps": 1e10, "burst_bytes": 16384, "mtu": 1500, "nodes": 2, "topology": "veth pair"}
    run = write_run(tmp_path / "sweep", sweep=sweep_result(), fabric_extra={"lab": lab})
    result = write_report(str(run))
    md = (run / "report" / "report.md").read_text()
    assert "| lab links | 10gbit; 2 nodes, veth pair, MTU 1500 |" in md
    assert "## all_reduce: time and bandwidth at every size" in md and "## sendrecv: time and bandwidth" in md
    # 1 MB in 1.0686 ms: 981 MB/s busbw, 78.5% of a 10 Gbit/s lab link
    assert "| 1 MB | in-place | 1.07 ms | 981 MB/s | 981 MB/s | 78.5% of line rate | 0 |" in md
    assert "all_reduce_4B | 40" in md and "line rate | 10 Gbit/s" in md
    assert "step time median" not in md and "a run from before" not in md
    assert result["figures"] == ["sweep_all_reduce.png", "sweep_sendrecv.png"]
    assert (run / "report" / "sweep_all_reduce.png").stat().st_size > 1000
