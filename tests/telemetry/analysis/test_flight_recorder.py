"""Flight-recorder dumps: the recorded ones (torch's own pickle dump, gloo, 2 ranks, rank 1 never entered the
4th all_reduce: flight_recorder/make_fixture.py) are read without unpickling anything but plain data, and
`telemetry report` names the rank that never entered the collective."""
from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from telemetry.analysis.flight_recorder import DumpError, analyze, read_dir, read_dump

from ...conftest import REPO, Payload
from ..recorded import write_run

FIXTURE = Path(__file__).parent / "flight_recorder"


def _dumps():
    return {r: read_dump(str(FIXTURE / f"nccl_trace_rank{r}")) for r in (0, 1)}


def test_recorded_dumps_name_the_rank_that_never_entered():
    dumps = _dumps()
    assert dumps[0]["version"] == "2.10" and len(dumps[0]["entries"]) == 4 and len(dumps[1]["entries"]) == 3
    assert analyze(dumps) == ["rank 1 never entered all_reduce #4 (process group 0, sizes [[1024]]); "
                              "its last was all_reduce #3"]


def test_a_collective_every_rank_entered_but_one_did_not_finish():
    dumps = _dumps()
    extra = dict(dumps[0]["entries"][-1], retired=True, state="completed")
    dumps[1]["entries"].append(extra)
    assert analyze(dumps) == ["all_reduce #4 (process group 0, sizes [[1024]]) did not finish on rank 0; "
                              "every rank with a dump entered it"]


def test_a_crafted_dump_runs_nothing(tmp_path):
    marker = tmp_path / f"pwned-{uuid.uuid4().hex}"
    bad = tmp_path / "nccl_trace_rank0"
    bad.write_bytes(pickle.dumps({"entries": [Payload(marker)]}))
    with pytest.raises(DumpError) as info:
        read_dump(str(bad))
    assert "refused global posix.system" in str(info.value) and not marker.exists()
    pickle.loads(bad.read_bytes())  # plain pickle would have run it
    assert marker.exists()


@pytest.mark.integration
def test_report_shows_the_hang_analysis(tmp_path):
    run = write_run(tmp_path / "run")
    dumps = run / "logs" / "flight_recorder"
    dumps.mkdir(parents=True)
    for r in (0, 1):
        shutil.copy(FIXTURE / f"nccl_trace_rank{r}", dumps / f"nccl_trace_rank{r}")
    assert sorted(read_dir(str(run))) == [0, 1]
    proc = subprocess.run([sys.executable, "-m", "telemetry", "report", str(run)], cwd=REPO, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (run / "report" / "report.md").read_text()
    assert "## Flight recorder (hang analysis; dumps from ranks 0, 1)" in md
    assert "| rank 1 never entered all_reduce #4 (process group 0, sizes \\[\\[1024\\]\\]); its last was all_reduce #3 |" in md


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_a_dump_that_is_no_regular_file_is_named_not_read(tmp_path, kind):
    """A FIFO where a dump goes waited forever in the report (no writer), /dev/zero was read until memory ran
    out: each is now the report's one finding that the dump is unreadable, naming what is there."""
    from telemetry.analysis.flight_recorder import section

    dumps = tmp_path / "logs" / "flight_recorder"
    dumps.mkdir(parents=True)
    path = dumps / "rank0.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    with pytest.raises(DumpError) as info:
        read_dump(str(path))
    what = {"fifo": "a FIFO (named pipe)", "dev-zero": "a character device", "directory": "a directory"}[kind]
    assert f"rank0.json: is {what}, not a regular file; allowed: a flight-recorder dump" in str(info.value)
    title, _, rows = section(str(tmp_path))
    assert rows == [[f"unreadable: {info.value}"]]
