"""NCCL's algorithm and protocol per collective and size, from its TUNING lines: the real lines of several
NCCL releases (tests/telemetry/nccl_tuning/README.md names each source), then the report and compare tables."""
from __future__ import annotations

import shutil
from pathlib import Path

from telemetry.analysis.compare import compare
from telemetry.analysis.nccl_algorithms import choices, enabled, label, parse_lines, read_run, run_section, tuning_table

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
                                    "named": True, "kernel": None, "nchannels": None, "nthreads": None,
                                    "nworks": None, "nvls_sync": None, "trace": False}


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


def test_2_26_nvls_lines_with_a_leading_blank():
    r = records("nccl_1906_2.26.2_nvls_and_ring_allgather.log")
    assert [(x["collective"], x["bytes"], label(x), x["channels"]) for x in r] == [
        ("AllGather", 579600, "NVLS/SIMPLE", [0, 15]), ("AllGather", 515200, "RING/LL", [0, 23])]


def test_symmetric_kernel_line_2_28():
    (r,) = records("pytorch_docs_2.28_symmetric_kernel.log")
    assert (r["collective"], r["bytes"], r["algorithm"], r["protocol"]) == ("AllReduce", 2097152, "SYMMETRIC", None)
    assert (r["kernel"], r["nchannels"], r["nthreads"], r["nworks"]) == ("AllReduce_RSxLDMC_AGxSTMC", 16, 512, 1)
    assert label(r) == "SYMMETRIC/AllReduce_RSxLDMC_AGxSTMC"
    assert choices([r]) == {("AllReduce", 2097152): {"SYMMETRIC/AllReduce_RSxLDMC_AGxSTMC": 1}}


def test_lines_written_from_nccls_format_strings():
    """No public log of these was found: each line is NCCL's format string (named in the module docstring) filled
    in, behind a launcher prefix: 2.27's symmetric line without nWorks, 2.29's copy-engine line with and without
    the NVLS note, 2.30's hierarchical copy-engine line, and ncclFuncToString's 2.28 names AlltoAll, Gather and
    Scatter."""
    p = "h:1:2 [0] NCCL INFO "
    r = parse_lines([p + "ReduceScatter [Symmetric]: 65536 Bytes -> Kernel ReduceScatter_LL nchannels 8 nthreads 256",
                     p + "AllGather [Copy Engine]: 1048576 Bytes -> cudaMemcpy",
                     p + "AlltoAll [Copy Engine]: 4096 Bytes -> cudaMemcpy; CE synchronization with NVLS",
                     p + "AlltoAll: 8192 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..1}",
                     p + "Gather: 8192 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..1}",
                     p + "Scatter: 8192 Bytes -> Algo PAT proto SIMPLE channel{Lo..Hi}={0..0}",
                     p + "AllGather: 262144 Bytes -> Algo 6 proto 2 time 12.5",
                     p + "AllGather [Hierarchical CE]: 2097152 Bytes -> RMA proxy + CE"])
    assert [(x["collective"], label(x)) for x in r] == [
        ("ReduceScatter", "SYMMETRIC/ReduceScatter_LL"), ("AllGather", "COPY_ENGINE/cudaMemcpy"),
        ("AlltoAll", "COPY_ENGINE/cudaMemcpy (NVLS sync)"), ("AlltoAll", "RING/SIMPLE"), ("Gather", "RING/SIMPLE"),
        ("Scatter", "PAT/SIMPLE"), ("AllGather", "PAT/SIMPLE"), ("AllGather", "HIERARCHICAL_CE/RMA proxy + CE")]
    assert r[0]["nworks"] is None and r[0]["nchannels"] == 8


def test_trace_lines_count_only_where_no_info_line_says_it():
    """TRACE(NCCL_COLL, "%ld Bytes -> Algo %d proto %d time %f") behind debug.cc's TRACE prefix, filled in."""
    trace = "h:1:2 [0] 15.25 topoGetAlgoInfo:1203 NCCL TRACE 8 Bytes -> Algo 1 proto 0 time 9.5"
    info = "h:1:2 [0] NCCL INFO 8 Bytes -> Algo 1 proto 0 time 9.5"
    assert [r["trace"] for r in parse_lines([trace, trace])] == [True, True]
    assert [r["trace"] for r in parse_lines([info, trace])] == [False]


def test_init_time_tuning_table_with_a_pat_block():
    lines = (CORPUS / "nccl_ebpf_2.29.7_tuning_table_pat_block.log").read_text().splitlines()
    t = tuning_table(lines)
    assert t["AllReduce"]["TREE/LL"] == {"latency_us": 16.8, "bandwidth_GBps": 0.5}
    assert t["AllGather"]["PAT/SIMPLE"] == {"latency_us": 17.6, "bandwidth_GBps": 3.6}
    assert t["AllReduce"]["COLLNET_CHAIN/SIMPLE"] == {"latency_us": 14.0, "bandwidth_GBps": 0.0}
    assert len(t["Broadcast"]) == 21  # 7 algorithms x 3 protocols; the PAT block prints 9 protocol names for 3 cells
    e = enabled(t)
    assert e["AllGather"] == ["PAT/SIMPLE", "RING/LL", "RING/SIMPLE"]
    assert e["AllReduce"] == ["RING/LL", "RING/SIMPLE", "TREE/LL", "TREE/SIMPLE"]
    assert len(records("nccl_ebpf_2.29.7_tuning_table_pat_block.log")) == 4


def test_table_rows_without_their_header_are_not_read():
    log = Path(__file__).parent.parent / "nccl_logs"
    (path,) = log.glob("kserve_3791_*.log")
    assert tuning_table(path.read_text().splitlines()) == {}


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


def test_table_section_lists_what_nccl_could_pick_from_its_init_table(tmp_path):
    """A real 2.29.7 init table (eunomia-bpf/nccl-eBPF, sockets): LL128 has bandwidth 0 everywhere, PAT only for
    the gathers and scatters: the report's table says so per collective."""
    from telemetry.analysis.nccl_algorithms import table_section

    (tmp_path / "logs").mkdir()
    assert table_section(str(tmp_path)) is None  # no log: no table
    shutil.copy(CORPUS / "nccl_ebpf_2.29.7_tuning_table_pat_block.log", tmp_path / "logs" / "nccl.host.1.log")
    title, header, rows = table_section(str(tmp_path))
    assert header == ["collective", "algorithm/protocol pairs enabled", "pairs at 0"]
    assert rows == [["AllGather", "PAT/SIMPLE, RING/LL, RING/SIMPLE", "18"],
                    ["AllReduce", "RING/LL, RING/SIMPLE, TREE/LL, TREE/SIMPLE", "17"],
                    ["Broadcast", "RING/LL, RING/SIMPLE", "19"], ["Reduce", "RING/LL, RING/SIMPLE", "19"],
                    ["ReduceScatter", "PAT/SIMPLE, RING/LL, RING/SIMPLE", "18"]]


def test_report_sections_give_both_tables_from_one_reading_of_the_logs(tmp_path):
    from telemetry.analysis.nccl_algorithms import report_sections, table_section

    (tmp_path / "logs").mkdir()
    assert report_sections(str(tmp_path)) == []
    for i, name in enumerate(("nccl_ebpf_2.29.7_tuning_table_pat_block.log", "nccl_ebpf_2.29.7_broadcast_socket.log")):
        shutil.copy(CORPUS / name, tmp_path / "logs" / f"nccl.host.{i}.log")
    picked, could = report_sections(str(tmp_path))
    assert picked == run_section(str(tmp_path)) and could == table_section(str(tmp_path))
    assert picked[1] == ["collective", "size", "algorithm/protocol", "calls"]


def test_a_code_fence_glued_to_the_first_line_and_nvls_tree():
    """nccl#1752 quoted its TUNING lines with the markdown fence glued to the first host prefix ('```se2-r1-...'):
    both lines read, NVLS_TREE as its own algorithm; RCCL's collective-trace lines (rccl#429: 'AllReduce: opCount ...'
    and '## [...] KL hwid ...') are calls, not choices."""
    r = records("nccl_1752_fence_glued_tree_and_nvls_tree.log")
    assert [(x["collective"], x["bytes"], label(x), x["channels"]) for x in r] == [
        ("AllReduce", 16777216, "TREE/LL128", [0, 15]), ("AllReduce", 33554432, "NVLS_TREE/SIMPLE", [0, 15])]
    trace = (CORPUS.parent / "nccl_logs" / "rccl_429_coll_trace_opcount_kernel_lines.log").read_text()
    assert parse_lines(trace.splitlines()) == []


# ---- found by mutation fuzzing (inputs minimised): no exception, and no time quadratic in a long line

def test_many_records_glued_on_one_line_and_a_long_word_before_one():
    line = "[0] NCCL INFO 805306368 Bytes -> Algo 1 proto 2 time 3970.683594" * 20_000
    assert len(parse_lines([line])) == 20_000  # each record used to search the whole line again
    assert len(parse_lines(["a" * 100_000 + " 8 Bytes -> Algo 1 proto 2 time 1.0"])) == 1


def test_damaged_numbers_are_unknown_or_leave_their_line_unread():
    recs = parse_lines(["8 Bytes -> Algo 1 proto 2 time 1.2.3", "9" * 5000 + " Bytes -> Algo 1 proto 2 time 1.0"])
    assert [(r["bytes"], r["time_us"]) for r in recs] == [(8, None)]
    table = tuning_table(["Algorithm |  Tree", "Protocol |  LL  LL128  Simple",
                          "AllReduce |  1.2.3/ 4.0 |  5.0/ 6.0 |  7.0/ 8.0 |"])
    assert table == {"AllReduce": {"TREE/LL128": {"latency_us": 5.0, "bandwidth_GBps": 6.0},
                                   "TREE/SIMPLE": {"latency_us": 7.0, "bandwidth_GBps": 8.0}}}
