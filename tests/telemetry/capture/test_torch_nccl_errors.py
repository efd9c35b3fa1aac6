"""torch's ProcessGroupNCCL error lines read from a log: the collective that timed out, the ranks that said so, and
the NCCL errors torch raised (telemetry/capture/torch_nccl_errors.py)."""
from __future__ import annotations

from telemetry.capture.nccl_log import parse_lines
from telemetry.capture.torch_nccl_errors import MAX_ITEMS, TorchErrors, relevant

# torch 2.4+ behind torchrun's rank prefix (BasicSR#737), torch < 2.2 without the Numel fields (pytorch#118369), the
# exception's what() that repeats rank 5's timeout (sglang#1693), 2.6's failure line (nccl#1730)
NEW = ("[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation "
       "timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran "
       "for 600020 milliseconds before timing out.")
OLD = ("[E ProcessGroupNCCL.cpp:458] [Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=64088, "
       "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 25625251 milliseconds before timing out.")
WHAT = ("  what():  [PG 3 Rank 5] Process group watchdog thread terminated with exception: [Rank 5] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=9141, OpType=_ALLGATHER_BASE, NumelIn=19008, NumelOut=152064, "
        "Timeout(ms)=600000) ran for 600020 milliseconds before timing out.")
FAILURE = ("[rank118]:[E603 17:48:01.005538748 ProcessGroupNCCL.cpp:2268] [PG ID 0 PG GUID 0(default_pg) Rank 118]  "
           "failure detected by watchdog at work sequence id: 2398459 PG status: last enqueued work: 2398578, last "
           "completed work: 2398458")
DIST = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1333, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.6")
OLD_DIST = "RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:518, unhandled system error, NCCL version 2.4.8"


def _read(*lines: str) -> dict | None:
    errors = TorchErrors()
    for line in lines:
        if relevant(line):
            errors.add(line)
    return errors.summary()


def test_timeouts_of_every_torch_wording_with_the_ranks_that_named_them():
    got = _read(NEW, NEW.replace("rank1", "rank0").replace("Rank 1", "Rank 0"), OLD, WHAT)
    assert got["lines"] == 4
    assert got["timeouts"] == [{"seq": 808, "op": "ALLREDUCE", "timeout_ms": 600000, "ranks": [0, 1]},
                               {"seq": 64088, "op": "ALLREDUCE", "timeout_ms": 1800000, "ranks": [7]},
                               {"seq": 9141, "op": "_ALLGATHER_BASE", "timeout_ms": 600000, "ranks": [5]}]
    assert got["watchdog_failures"] == [] and got["nccl_errors"] == []


def test_watchdog_failures_and_nccl_errors_of_old_and_new_torch():
    got = _read(FAILURE, DIST, DIST, OLD_DIST)
    assert got["watchdog_failures"] == [{"seq": 2398459, "ranks": [118]}]
    assert got["nccl_errors"] == [{"error": "unhandled system error", "count": 3}]
    # a line that names no rank adds none: the ranks are those the lines name
    assert _read(WHAT.replace("[Rank 5]", "").replace("Rank 5]", "]"))["timeouts"][0]["ranks"] == []


def test_no_torch_error_is_null_and_other_torch_lines_are_not_errors():
    assert _read() is None
    warning = ("[rank6]:[W319 12:03:46.604992123 ProcessGroupNCCL.cpp:4721] [PG ID 0 PG GUID 0 Rank 6]  using GPU 6 as "
               "device used by this process is currently unknown.")
    frame = "frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x10c (0x7f3b6e7236fc in libtorch_cuda.so)"
    assert _read(warning, frame) is None


def test_at_most_max_items_timeouts_and_numbers_too_long_are_not_read():
    lines = [NEW.replace("SeqNum=808", f"SeqNum={n}") for n in range(MAX_ITEMS + 5)]
    assert len(_read(*lines)["timeouts"]) == MAX_ITEMS
    assert _read(NEW.replace("SeqNum=808", "SeqNum=" + "9" * 40)) is None


def test_the_nccl_log_parser_reports_them_beside_nccls_own_warnings():
    out = parse_lines(["h1:1:2 [0] NCCL INFO NCCL version 2.21.5+cuda12.4", NEW, DIST])
    assert out["torch_errors"]["timeouts"][0]["seq"] == 808 and out["torch_errors"]["nccl_errors"][0]["count"] == 1
    assert out["warnings"] is None and parse_lines(["h1:1:2 [0] NCCL INFO NCCL version 2.21.5"])["torch_errors"] is None


def test_a_subgroups_timeout_names_the_global_rank_of_torchruns_prefix():
    """review65: torch's own prefix ('[Rank 0]', '[PG 2 Rank 0]') is the rank inside the timed-out collective's
    process group; torchrun's '[rankN]:' prefix is the job's rank. On a subgroup they differ (pytorch#134006,
    https://github.com/pytorch/pytorch/issues/134006: '[rank1]:[E820 11:47:24.169946254 ProcessGroupNCCL.cpp:607]
    [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, ...'), and the reader credited
    global rank 1's timeout to rank 0. The job's rank is read where torchrun's prefix gives it."""
    subgroup = NEW.replace("[Rank 1]", "[Rank 0]").replace("[rank1]", "[rank5]")  # group rank 0, job rank 5
    assert _read(subgroup)["timeouts"][0]["ranks"] == [5]
    failure = FAILURE.replace("[rank118]", "[rank3]").replace("Rank 118]", "Rank 1]")
    assert _read(failure)["watchdog_failures"] == [{"seq": 2398459, "ranks": [3]}]
    assert _read(OLD)["timeouts"][0]["ranks"] == [7]  # no torchrun prefix: torch's own rank
    # a log viewer's line number before torchrun's prefix (LlamaFactory#7396) changes nothing
    assert _read("[80747] " + subgroup)["timeouts"][0]["ranks"] == [5]
