"""`python -m telemetry nccl-log`: every real log of the corpus read as a user would give it, the transport held
against a claim, and the inputs it refuses."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from telemetry.__main__ import main
from telemetry.analysis import nccl_log_view

CORPUS = Path(__file__).resolve().parents[1] / "nccl_logs"
LOGS = sorted(CORPUS.glob("*.log"))


def _truth(log: Path) -> dict:
    return json.loads(log.with_suffix(".json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("log", LOGS, ids=[p.stem for p in LOGS])
def test_every_real_log_reads_with_its_hand_read_transport(log, tmp_path, capsys):
    truth = _truth(log)["truth"]
    out = tmp_path / "reading.json"
    if not any(word in log.read_text(encoding="utf-8", errors="replace") for word in ("NCCL", "RCCL")):
        # NCCL's topology dump pasted alone (nccl#1197): not a log nccl-log can name a job's fabric from
        assert main(["nccl-log", str(log), "--json", str(out)]) == 2
        assert "no line names NCCL or RCCL" in capsys.readouterr().err and not any(truth.values())
        return
    assert main(["nccl-log", str(log), "--json", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    reading = json.loads(out.read_text())
    assert reading["transport"] == truth.get("transport", reading["transport"])
    assert reading["nccl_version"] == truth.get("nccl_version", reading["nccl_version"])
    line = next(p for p in printed if p.startswith("transport: "))
    if reading["transport"] is None:  # an unknown is said with its reason, never a guess
        assert line.startswith("transport: unknown (") and reading["unknown"]["transport"] in line
    else:
        assert line.startswith(f"transport: {reading['transport']} (from ")
    assert printed[0].startswith("read 1 file(s), ") and reading["nccl_lines"] > 0


def _known(transport: str) -> Path:
    return next(p for p in LOGS if _truth(p)["truth"].get("transport") == transport)


def test_expect_passes_on_the_transport_used_and_fails_with_exit_3_otherwise(capsys):
    roce = _known("roce")
    assert main(["nccl-log", str(roce), "--expect", "roce"]) == 0
    assert "transport: roce, as expected" in capsys.readouterr().out
    assert main(["nccl-log", str(roce), "--expect", "infiniband"]) == 3
    assert "FABRIC MISMATCH: expected infiniband, the run used roce" in capsys.readouterr().err
    # an HCA claim, by the rule compare --expect-transport uses: the devices NCCL listed
    one = next(p for p in LOGS if _truth(p)["truth"].get("transport") in ("roce", "infiniband")
               and len(json.loads(_reading(p))["devices"] or []) == 1)
    hca = json.loads(_reading(one))["devices"][0]["device"]
    assert main(["nccl-log", str(one), "--expect", hca]) == 0
    assert f"as expected ({hca})" in capsys.readouterr().out
    assert main(["nccl-log", str(one), "--expect", "mlx5_99"]) == 3
    assert f"expected interface mlx5_99, the run used {hca}" in capsys.readouterr().err
    assert main(["nccl-log", str(_known("tcp")), "--expect", "roce"]) == 3
    assert "NCCL fell back to TCP sockets" in capsys.readouterr().err
    unknown = next(p for p in LOGS if "transport" in _truth(p)["truth"] and _truth(p)["truth"]["transport"] is None)
    assert main(["nccl-log", str(unknown), "--expect", "infiniband"]) == 3  # unseen is not a pass
    assert "the log does not establish it" in capsys.readouterr().err


def test_a_run_directory_a_folder_of_rank_logs_and_stdin(tmp_path, monkeypatch, capsys):
    lines = _known("roce").read_text(encoding="utf-8")
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "nccl.node0.11.log").write_text(lines)
    (run / "logs" / "other.txt").write_text("not read")
    assert main(["nccl-log", str(run)]) == 0
    assert capsys.readouterr().out.startswith("read 1 file(s), ")
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / "rank0.log").write_text(lines)
    (ranks / "rank1.log").write_text(lines)
    assert main(["nccl-log", str(ranks), "--expect", "roce"]) == 0
    assert capsys.readouterr().out.startswith("read 2 file(s), ")
    read_end, write_end = os.pipe()
    os.write(write_end, lines.encode())
    os.close(write_end)
    monkeypatch.setattr("sys.stdin", os.fdopen(read_end))
    assert main(["nccl-log", "-", "--expect", "roce"]) == 0


def test_tuning_lines_become_the_algorithm_choices(tmp_path, capsys):
    tuning = Path(__file__).resolve().parents[1] / "nccl_tuning"
    log = next(p for p in sorted(tuning.glob("*.log")) if "Bytes ->" in p.read_text(encoding="utf-8", errors="replace"))
    out = tmp_path / "t.json"
    assert main(["nccl-log", str(log), "--json", str(out)]) == 0
    reading = json.loads(out.read_text())
    assert reading["tuning"] and all(sum(c.values()) > 0 for c in reading["tuning"].values())
    assert any(line.startswith("tuning ") for line in capsys.readouterr().out.splitlines())


@pytest.mark.parametrize("make, argv, expected", [
    (None, ["{tmp}/missing.log"], "missing.log: does not exist; allowed: a log file"),
    ("empty_dir", ["{tmp}/d"], "a directory without logs/nccl*.log, nccl*.log or *.log"),
    ("plain", ["{tmp}/plain.log"], "no line names NCCL or RCCL; allowed: a job's output"),
    ("plain", ["{tmp}/plain.log", "{tmp}/plain.log"], "plain.log: given twice"),
    ("plain", ["{tmp}/plain.log", "{tmp}/./plain.log"], "plain.log: given twice"),  # one file, spelt twice
    ("plain", ["{tmp}", "{tmp}/plain.log"], "plain.log: given twice"),  # a folder of logs and a log in it
    ("plain", ["{tmp}/plain.log", "--expect", "rcoe"], "--expect: got 'rcoe'; did you mean 'roce'? expected one of ib,"),
    ("binary", ["{tmp}/core.bin"], "no line names NCCL or RCCL"),
    (None, ["/dev/zero"], "/dev/zero: is a character device, not a log"),
    # a .log.gz was read as text: 'no line names NCCL or RCCL'
    ("gzip", ["{tmp}/nccl.log.gz"], "nccl.log.gz: is gzip-compressed, not text; allowed: the log itself, e.g. zcat "),
])
def test_bad_input_is_one_line_and_exit_2(make, argv, expected, tmp_path, capsys):
    if make == "empty_dir":
        (tmp_path / "d").mkdir()
    elif make == "plain":
        (tmp_path / "plain.log").write_text("epoch 1 loss 2.3\n")
    elif make == "binary":
        (tmp_path / "core.bin").write_bytes(bytes(range(256)) * 64)
    elif make == "gzip":
        import gzip
        (tmp_path / "nccl.log.gz").write_bytes(gzip.compress(b"host:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1\n"))
    assert main(["nccl-log", *[a.format(tmp=tmp_path) for a in argv]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and expected in err[0], err


def test_every_value_of_fabric_expect_is_a_claim_nccl_log_takes():
    from typing import get_args, get_type_hints

    from telemetry.analysis.transport_claims import claim_problem
    from trainer.config import FabricConfig
    for value in set(get_args(get_type_hints(FabricConfig)["expect"])) - {"any"}:
        assert claim_problem(value, "--expect") is None, value


def _reading(log: Path) -> str:
    from telemetry.capture.nccl_log import parse_lines
    return json.dumps(nccl_log_view.read([str(log)], parse_lines))


def test_json_never_writes_over_a_log_or_record_of_a_folder_given(tmp_path, capsys):
    """--json was checked against the inputs as given: a log found inside a folder given (its own input) and
    the run.json of a run directory given were written over with the reading."""
    lines = _known("roce").read_text(encoding="utf-8")
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "nccl.node0.11.log").write_text(lines)
    (run / "run.json").write_text('{"status": "finished"}')
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / "rank0.log").write_text(lines)
    for inputs, out in (([run], run / "run.json"), ([run], run / "logs" / "nccl.node0.11.log"),
                        ([ranks], ranks / "rank0.log")):
        before = out.read_text()
        assert main(["nccl-log", *map(str, inputs), "--json", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --json: ") and err.count("\n") == 1 and "allowed:" in err
        assert out.read_text() == before
    assert main(["nccl-log", str(run), "--json", str(run / "nccl.json")]) == 0  # a new file beside them is fine


def test_a_gloo_run_directory_is_told_it_used_no_nccl(tmp_path):
    """Lab round 7: `telemetry nccl-log` on a fabric lab run (gloo over TCP) said only that the directory had no
    logs/nccl*.log; now the line says the run used no NCCL. A run directory without run.json reads as before."""
    run = tmp_path / "lab-run"
    (run / "logs").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"backend": "gloo"}))
    with pytest.raises(nccl_log_view.NcclLogError, match=r"names backend gloo: the job used no NCCL, so it wrote no "
                                                         r"NCCL log\); allowed: a run directory"):
        nccl_log_view.log_paths([str(run)])
    (run / "run.json").write_text("{not json")
    with pytest.raises(nccl_log_view.NcclLogError, match=r"or \*\.log; allowed"):
        nccl_log_view.log_paths([str(run)])


def test_a_log_saved_as_utf16_reads_as_the_same_log(tmp_path, capsys):
    log = next(p for p in LOGS if p.name.startswith("aws_efa_eks"))
    (tmp_path / "u16.log").write_bytes(log.read_text(errors="replace").encode("utf-16"))
    assert main(["nccl-log", str(log)]) == 0
    plain = capsys.readouterr().out
    assert main(["nccl-log", str(tmp_path / "u16.log")]) == 0  # was "no line names NCCL or RCCL", exit 2
    assert capsys.readouterr().out == plain


def test_torchs_watchdog_timeout_and_nccl_error_lines_are_said(tmp_path, capsys):
    """A log of a hung job often holds torch's ProcessGroupNCCL lines and no NCCL WARN (BasicSR#737, the twelfth
    collection): the reading names the collective that timed out and the ranks that said so."""
    log = next(p for p in LOGS if p.stem.startswith("basicsr_737_"))
    assert main(["nccl-log", str(log), "--json", str(tmp_path / "r.json")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert "torch watchdog timeout: ALLREDUCE (SeqNum 808, timeout 600000 ms) on rank(s) 0, 1, 2" in printed
    assert "torch watchdog: work 808 failed on rank(s) 0, 1" in printed
    log = next(p for p in LOGS if p.stem.startswith("pytorch_transformer_distributed_1_"))
    assert main(["nccl-log", str(log)]) == 0
    assert "torch NCCL error x1: unhandled system error" in capsys.readouterr().out.splitlines()
