"""NCCL's algorithm and protocol per collective and size, from its TUNING lines: the real lines of several
NCCL releases (tests/telemetry/nccl_tuning/README.md names each source), then the report and compare tables."""
from __future__ import annotations

import shutil
from pathlib import Path

from telemetry.analysis.compare import compare
from telemetry.analysis.nccl_algorithms import choices, parse_lines, read_run, run_section

from ..recorded import write_run

CORPUS = Path(__file__).parent.parent / "nccl_tuning"


def records(name: str, version=None) -> list[dict]:
    return parse_lines((CORPUS / name).read_text().splitlines(), version)


def test_before_2_19_numbers_and_no_collective():
    r = records("nccl_1453_h100_numeric.log")
    assert len(r) == 5  # the line glued after an nccl-tests row too
    assert {(x["bytes"], x["algorithm"], x["protocol"]) for x in r} == {(8, "TREE", "LL"), (262144, "TREE", "LL128")}
    assert r[0]["collective"] is None and r[0]["time_us"] == 25.200924 and not r[0]["named"]
    (only,) = {(x["algorithm"], x["protocol"]) for x in records("nccl_1595_numeric_ring_simple.log")}
    assert only == ("RING", "SIMPLE")


def test_named_with_numbers_and_coll_lines():
    r = records("ai_on_eks_slinky_fsdp_named_numeric.log")
    assert len(r) == 1 and r[0] == {"collective": "AllGather", "bytes": 37756928, "algorithm": "RING",
                                    "protocol": "SIMPLE", "time_us": 2860.208008, "channels": None, "comm": None,
                                    "named": True}


def test_a_numbered_line_takes_its_collective_from_the_processs_coll_line():
    r = parse_lines(["h:1:2 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 2 datatype 7 op 0",
                     "h:1:2 [0] NCCL INFO 8 Bytes -> Algo 2 proto 0 time 9.5"], version=(2, 12))
    assert r[0]["collective"] == "AllReduce" and r[0]["algorithm"] == "COLLNET"


def test_2_19_and_later_names():
    r = records("nccl_ebpf_2.29.7_broadcast_socket.log")
    assert [x["bytes"] for x in r] == [32768, 65536, 131072, 16777216, 134217728]
    assert {(x["collective"], x["algorithm"], x["protocol"]) for x in r} == {("Broadcast", "RING", "SIMPLE")}
    assert r[-1]["channels"] == [0, 3]
    mixed = records("blog_2.2x_mixed_case.log")
    assert [(x["collective"], x["algorithm"], x["protocol"]) for x in mixed] == [
        ("AllReduce", "TREE", "SIMPLE"), ("AllGather", "RING", "LL128")]
    (ptr,) = records("log_parser_2.2x_comm_pointer.log")
    assert ptr["comm"] == "0x55a7a339db50" and ptr["algorithm"] == "TREE" and ptr["protocol"] == "LL"


def test_choices_count_calls_per_size():
    c = choices(records("nccl_1453_h100_numeric.log"))
    assert c[("unknown collective", 8)] == {"TREE/LL": 3}


def _with_logs(path: Path, *names: str) -> Path:
    (path / "logs").mkdir()
    for n in names:
        shutil.copy(CORPUS / n, path / "logs" / f"nccl.{n}")
    return path


def test_report_and_compare_tables(tmp_path):
    a = _with_logs(write_run(tmp_path / "a", transport="ib"), "nccl_ebpf_2.29.7_broadcast_socket.log")
    b = write_run(tmp_path / "b", transport="tcp", step_time=2.0)
    (b / "logs").mkdir()
    (b / "logs" / "nccl.h.1.log").write_text(
        "NCCL INFO Broadcast:    32768 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..0}\n")
    assert len(read_run(str(a))) == 5
    title, header, rows = run_section(str(a))
    assert header == ["collective", "size", "algorithm/protocol", "calls"]
    assert rows[0] == ["Broadcast", "32 KB", "RING/SIMPLE", "1"]
    compare([f"ib={a}", f"tcp={b}"], str(tmp_path / "cmp"))
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| Broadcast | 32 KB | RING/SIMPLE | TREE/LL (differs) |" in md
    assert "| Broadcast | 128 MB | RING/SIMPLE | n/a (no TUNING line) |" in md
