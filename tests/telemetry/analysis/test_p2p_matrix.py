"""The GPU pair matrix beside p2pBandwidthLatencyTest: the sample's real output (tests/telemetry/analysis/p2p/README.md)
read as a reference, ours in its layout, and the ratios."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from telemetry.__main__ import main
from telemetry.analysis import p2p_matrix as pm

REF = Path(__file__).parent / "p2p" / "p2pBandwidthLatencyTest_rtx5090_pair.txt"


def test_reference_read_as_the_sample_prints_it():
    ref = pm.parse_reference(REF.read_text())
    assert ref["unidirectional"]["disabled"] == [[1516.99, 38.24], [38.92, 1537.94]]
    assert ref["unidirectional"]["enabled"][1] == [38.66, 1536.43]  # "(P2P Writes)" in the title
    assert ref["bidirectional"]["enabled"] == [[1525.06, 43.19], [42.78, 1539.36]]
    assert ref["latency_gpu"]["enabled"] == [[2.09, 12.76], [12.87, 2.08]]
    assert ref["latency_cpu"]["disabled"] == [[2.11, 5.91], [5.86, 2.04]]


def sweep(tmp_path, bw=20.0, lat=25.5):
    run = tmp_path / "sweep"
    run.mkdir()
    m = {"size": 67108864, "latency_bytes": 4, "bandwidth_GBps": [[None, bw], [bw, None]],
         "latency_us": [[None, lat], [lat, None]], "p2p_disabled": False}
    (run / "collectives.json").write_text(json.dumps({"p2p_matrix": m}))
    return run, m


def test_ours_in_the_samples_layout_and_the_ratios(tmp_path, capsys):
    run, m = sweep(tmp_path)
    text = pm.render(m)
    assert "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s) [NCCL send/recv, 67108864 B per direction]" in text
    assert "   D\\D      0      1\n     0      -  40.00\n     1  40.00      -" in text  # 20 GB/s each way
    rows = pm.ratios(m, pm.parse_reference(REF.read_text()))
    assert rows[0] == ["0-1", "40.00", "43.19", "0.926x", "25.50", "12.76", "2x"]
    assert rows[-1][0] == "mean over pairs" and rows[-1][3] == "0.926x"
    assert main(["p2p", str(run), "--reference", str(REF)]) == 0
    out = capsys.readouterr().out
    assert "P2P=Enabled Latency Matrix (us) [NCCL send/recv, 4 B]" in out and "0-1              40.00" in out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["p2p", str(empty)]) == 2
    assert "neither p2p_matrix in collectives.json nor p2p_bandwidth.json" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["", "nothing here\n"])
def test_a_file_without_matrices_is_refused(tmp_path, capsys, text):
    run, _ = sweep(tmp_path)
    bad = tmp_path / "bad.txt"
    bad.write_text(text)
    assert main(["p2p", str(run), "--reference", str(bad)]) == 2
    assert "no p2pBandwidthLatencyTest matrix" in capsys.readouterr().err


def test_one_table_normalised_to_the_reference_system(tmp_path):
    from telemetry.analysis.compare import compare

    from ..recorded import sweep_result, write_run
    runs = []
    for name, scale, bw in (("ref", 1.0, 20.0), ("other", 2.0, 10.0)):
        run = write_run(tmp_path / name, sweep=sweep_result(scale=scale))
        res = json.loads((run / "collectives.json").read_text())
        res["p2p_matrix"] = {"size": 1024, "latency_bytes": 4, "bandwidth_GBps": [[None, bw], [bw, None]],
                             "latency_us": [[None, 50.0 / bw], [50.0 / bw, None]], "p2p_disabled": False}
        (run / "collectives.json").write_text(json.dumps(res))
        runs.append(run)
    compare([f"ref={runs[0]}", f"other={runs[1]}"], str(tmp_path / "cmp"))
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "## Normalised to ref (the reference system)" in md
    assert "| p2p bidirectional bandwidth (GB/s, mean over pairs) | 40 (1x) | 20 (0.5x) |" in md
    assert "| p2p latency (us, mean over pairs) | 2.5 (1x) | 5 (0.5x) |" in md  # a time: ref / this
    assert "| all_reduce: average busbw (GB/s) | 1 (1x) | 0.5 (0.5x) |" in md


def test_every_matrix_of_the_sample_read_and_compared():
    """The connectivity matrix, P2P Reads apart from Writes (a real --p2p_read output), and ours / the
    reference's for every matrix both have, the diagonal out of the summary."""
    ref = pm.parse_reference(REF.read_text())
    assert ref["connectivity"] == [[1, 0], [0, 1]]
    reads = pm.parse_reference((REF.parent / "p2pBandwidthLatencyTest_6gpu_p2p_read_excerpt.txt").read_text())
    assert reads["unidirectional"]["enabled_reads"][3][2] == 10.45 and reads["unidirectional"]["enabled"][3][2] == 10.23
    ours = {"unidirectional": {"disabled": [[1516.99, 19.12], [None, 1537.94]]},
            "latency_gpu": {"enabled": [[2.09, 25.52], [12.87, 2.08]]}, "latency_cpu": {"enabled": [[1, 2], [3, 4]]}}
    r = {(x["family"], x["state"]): x for x in pm.ratio_matrices(ours, ref)}
    assert set(r) == {("unidirectional", "disabled"), ("latency_gpu", "enabled"), ("latency_cpu", "enabled")}
    uni = r[("unidirectional", "disabled")]
    assert uni["ratio"] == [[1.0, 0.5], [None, 1.0]] and uni["pairs"] == 1 and uni["mean"] == 0.5
    assert r[("latency_gpu", "enabled")]["mean"] == pytest.approx((2 + 1) / 2)
    rows = pm.ratio_rows(list(r.values()))
    assert rows[0] == ["Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)", "1", "0.5x", "0.5x", "0.5x"]
    assert "P2P=Enabled Latency (P2P Writes) Matrix (us) [GPU] (ours / reference)\n   D\\D" in pm.ratio_tables(
        list(r.values()))


def test_the_sample_measurement_in_the_normalised_table(tmp_path):
    """launch.p2p_bandwidth's copy-engine figures join the table when its --out was the run directory."""
    from telemetry.analysis.compare import compare

    from ..recorded import sweep_result, write_run
    runs = []
    for name, bw in (("ref", 40.0), ("other", 20.0)):
        run = write_run(tmp_path / name, sweep=sweep_result())
        m = {"unidirectional": {"enabled": [[900.0, bw], [bw, 900.0]]},
             "bidirectional": {"enabled": [[1800.0, 2 * bw], [2 * bw, 1800.0]]},
             "latency_gpu": {"enabled": [[2.0, 80 / bw], [80 / bw, 2.0]]}}
        (run / "p2p_bandwidth.json").write_text(json.dumps({"engines": {"ce": {"matrices": m}}}))
        runs.append(run)
    compare([f"ref={runs[0]}", f"other={runs[1]}"], str(tmp_path / "cmp"))
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| p2p copy engine bidirectional bandwidth, P2P enabled (GB/s, mean over pairs) | 80 (1x) | 40 (0.5x) |" in md
    assert "| p2p copy engine GPU latency, P2P enabled (us, mean over pairs) | 2 (1x) | 4 (0.5x) |" in md


def test_reference_cells_that_are_not_finite_are_unknown():
    # found by mutation fuzzing: int(nan) raised in the connectivity matrix
    ref = pm.parse_reference("P2P Connectivity Matrix\n     D\\D     0     1\n     0\t     1     nan\n     1\t   inf     1\n"
                             "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)\n   D\\D     0      1 \n"
                             "     0 1e999  -inf \n     1  38.92 1537.94 \n")
    assert ref["connectivity"] == [[1, None], [None, 1]]
    assert ref["unidirectional"]["disabled"] == [[None, None], [38.92, 1537.94]]
