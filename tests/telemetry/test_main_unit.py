"""python -m telemetry in-process: every subcommand refuses bad input with one `error:` line and exit 2,
and the ones that read a recorded run directory or an nccl-tests table answer on good input."""
from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

from telemetry.__main__ import main
from tests.telemetry.recorded import write_run
from bench.support.recorded_runs import write_run as write_recorded_run

TABLES = Path(__file__).parent / "nccl_tests_tables"


def one_error(capsys, argv) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def run_dir(tmp_path):
    return write_run(tmp_path / "run", rate_bps=1e9, times=True)


def test_report_of_a_missing_directory(capsys, tmp_path):
    assert one_error(capsys, ["report", str(tmp_path / "nope")]) == (
        f"error: {tmp_path / 'nope'}: not a directory; allowed: a run directory (a run's output_dir, holding "
        "run.json and metrics.jsonl)")


def test_report_of_a_directory_without_run_json(capsys, tmp_path):
    assert one_error(capsys, ["report", str(tmp_path)]) == (
        f"error: {tmp_path}: no run.json (is this a run directory?); allowed: a run directory (a run's output_dir, "
        "holding run.json and metrics.jsonl)")


def test_run_json_that_is_no_regular_file_is_one_line_not_a_read_without_end(capsys, tmp_path):
    run = write_run(tmp_path / "run")
    (run / "run.json").unlink()
    (run / "run.json").symlink_to("/dev/zero")  # read to its end: memory runs out (watch: MemoryError)
    line = f"error: {run / 'run.json'}: not a regular file; allowed: the JSON object a run writes"
    assert one_error(capsys, ["report", str(run)]) == line
    assert one_error(capsys, ["watch", str(run), "--once"]) == line.replace("error: ", "error: watch: ")


def test_report_and_mllog_of_a_file_say_a_run_directory_is_wanted(capsys, tmp_path):
    (tmp_path / "mlperf.log").write_text(":::MLLOG {}\n")
    for command in ("report", "mllog"):
        assert one_error(capsys, [command, str(tmp_path / "mlperf.log")]) == (
            f"error: {tmp_path / 'mlperf.log'}: is a file; allowed: a run directory (a run's output_dir, holding "
            "run.json and metrics.jsonl)")


def test_compare_names_every_input_it_cannot_read(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    main(["compare", str(tmp_path / "empty"), str(tmp_path / "gone"), "--out", str(tmp_path / "out")])
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {tmp_path / 'empty'}: no run.json (is this a run directory?); allowed: a run directory (a run's "
        "output_dir, holding run.json and metrics.jsonl)",
        f"error: {tmp_path / 'gone'}: does not exist; allowed: a run directory (a run's output_dir, holding "
        "run.json) or an nccl-tests output file"]


def test_compare_of_a_missing_run(capsys, tmp_path, run_dir):
    line = one_error(capsys, ["compare", str(run_dir), str(tmp_path / "gone"), "--out", str(tmp_path / "o")])
    assert str(tmp_path / "gone") in line


def test_compare_with_a_bad_axis(capsys, tmp_path, run_dir):
    other = write_run(tmp_path / "other", rate_bps=1e8)
    line = one_error(capsys, ["compare", f"a={run_dir}", f"b={other}", "--out", str(tmp_path / "o"),
                              "--busbw-axis", "cubic"])
    assert "cubic" in line and "log" in line


@pytest.mark.parametrize("extra,words", [
    ([], "project: give the target fabric: --rate RATE"),
    (["--rate", "1gbit", "--efficiency", "1.5"], "--efficiency: got 1.5; expected a fraction in (0, 1]"),
    (["--rate", "1gbit", "--latency-us", "-1"], "--latency-us: got -1.0; expected a finite number of microseconds >= 0"),
    (["--rate", "1gbit", "--latency-us", "nan"], "--latency-us: got nan; expected a finite number"),
    (["--rate", "1gbit", "--latency-us", "inf"], "--latency-us: got inf; expected a finite number"),
    (["--rate", "0mbit"], "--rate: got '0mbit'; expected a rate of at least 1bit"),
    (["--rate", "1gbit", "--nodes", "two"], "--nodes: got 'two'; expected a whole number of nodes >= 1"),
    (["--rate", "1gbit", "--ranks-per-node", "0"], "--ranks-per-node: got '0'; expected a whole number of ranks >= 1"),
    (["--rate", "1gbit", "--nodes", "2", "--ranks-per-node", "2"],
     "--ranks-per-node 2: the run was measured on 2 nodes of 1 rank(s); allowed: 1"),
    (["--rate", "none"], "--rate: got 'none'; give the target's rate"),
    (["--rate", "fast"], "got 'fast'"),
])
def test_project_bad_input(capsys, run_dir, extra, words):
    assert words in one_error(capsys, ["project", str(run_dir), *extra])


def one_exit(capsys, argv) -> str:
    """one_error for mistakes argparse finds (it exits rather than returns)."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err


def test_project_repeats_of_different_workloads(capsys, tmp_path, run_dir):
    bert = write_run(tmp_path / "bert", rate_bps=1e9, times=True, recipe_extra={"workload": "bert_pretraining"})
    line = one_error(capsys, ["project", str(run_dir), str(bert), "--rate", "1gbit"])
    assert "not repeats of one configuration: workload differs" in line and "bert_pretraining" in line


def test_project_repeats_of_different_recipes(capsys, tmp_path, run_dir):
    """review56: a run of seq_len 64 and one of 160 (tiny_llama_lora, same layout and batch) were projected from
    together as repeats; their steps compute different token counts."""
    longer = write_run(tmp_path / "long", rate_bps=1e9, times=True, recipe_extra={"data": {"seq_len": 160}})
    line = one_error(capsys, ["project", str(run_dir), str(longer), "--rate", "1gbit"])
    assert "not repeats of one configuration: their recipes differ" in line and "data.seq_len" in line, line
    assert "allowed: runs of one recipe" in line
    more = write_run(tmp_path / "more", rate_bps=1e9, times=True, recipe_extra={"max_steps": 60, "seed": 7})
    assert main(["project", str(run_dir), str(more), "--rate", "1gbit"]) == 0  # a longer run is still a repeat


def test_project_repeats_differing_outside_the_step(capsys, tmp_path, run_dir):
    """review58: settings the trainer applies outside a step's timing (checkpoints, evaluation, their targets,
    the eval set) do not make two runs other configurations: repeats that checkpoint or evaluate at another
    interval were refused as 'not repeats' since 65f8ce4. Anything else is still refused, and --allow-mismatch
    projects anyway (as compare's does)."""
    other = write_run(tmp_path / "other", rate_bps=1e9, times=True, recipe_extra={"data": {"eval_dataset": "/e"}},
                      train_extra={"save_every": 50, "save_final": False, "eval_every_samples": 384,
                                   "target_eval_loss": 0.9, "save_on_signal": False})
    assert main(["project", str(run_dir), str(other), "--rate", "1gbit"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    longer = write_run(tmp_path / "long", rate_bps=1e9, times=True, recipe_extra={"data": {"seq_len": 160}})
    line = one_error(capsys, ["project", str(run_dir), str(longer), "--rate", "1gbit"])
    assert "data.seq_len" in line and "--allow-mismatch" in line, line
    assert main(["project", str(run_dir), str(longer), "--rate", "1gbit", "--allow-mismatch"]) == 0
    assert "data.seq_len" in capsys.readouterr().err  # projected anyway, with what differs said


@pytest.mark.parametrize("argv,words", [
    ([], "the following arguments are required: command; see python -m telemetry --help"),
    (["compare", "a", "b"], "the following arguments are required: --out; see python -m telemetry compare --help"),
    (["project", "r", "--rate", "1gbit", "--efficiency", "abc"],
     "argument --efficiency: invalid float value: 'abc'; allowed: a number; see python -m telemetry project --help"),
])
def test_argument_mistakes_are_one_line(capsys, argv, words):
    assert one_exit(capsys, argv) == f"error: {words}"


@pytest.mark.parametrize("damage,words", [
    ("[1, 2]", "run.json: holds a JSON list; allowed: the JSON object a run writes"),
    ('{"name": "x", "sta', "run.json: not valid JSON (Unterminated string starting at: line 1 column 15 (char 14)); "
     "allowed: the JSON object a run writes"),
    (b"\xff\xfe\x00", "run.json: not UTF-8 text (byte 0xff at offset 0)"),
    ('{"recipe": "x"}', "run.json: 'recipe' is a JSON string; allowed: an object (or null), as a run writes it"),
    ('{"layout": [1]}', "run.json: 'layout' is a JSON list; allowed: an object (or null)"),
    ('{"hosts": {"a": 1}}', "run.json: 'hosts' is a JSON object; allowed: a list (or null)"),
    # inside the sections, what the readers walk into (each was an AttributeError or TypeError traceback)
    ('{"hosts": [1, null]}', "run.json: 'hosts[0]' is 1; allowed: an object per rank, as a run writes it"),
    ('{"fabric": {"expectation": "y"}}', "run.json: 'fabric.expectation' is a JSON string; allowed: an object"),
    ('{"telemetry": {"counters": "x"}}', "run.json: 'telemetry.counters' is a JSON string; allowed: an object"),
    ('{"layout": {"world_size": "two"}}', "run.json: 'layout.world_size' is \"two\"; allowed: an integer >= 1"),
    ('{"layout": {"world_size": NaN}}', "run.json: 'layout.world_size' is NaN; allowed: an integer >= 1"),
    ('{"layout": {"global_batch_size": -1}}',
     "run.json: 'layout.global_batch_size' is -1; allowed: an integer >= 0 (0: a collective sweep)"),
    ('{"a": ' + "[" * 100000 + "]" * 100000 + "}", "run.json: nested too deeply to read (thousands of levels)"),
    # the texts reports print and exports write as columns, and the device: a list as `name` failed the
    # Parquet export (exit 1), a number as `device` was an AttributeError traceback in mllog
    ('{"name": ["a"]}', "run.json: 'name' is a JSON list; allowed: a string (or null), as a run writes it"),
    ('{"status": 3}', "run.json: 'status' is a JSON number; allowed: a string (or null)"),
    ('{"device": 5}', "run.json: 'device' is a JSON number; allowed: an object (or null)"),
    ('{"command": "python -m trainer"}', "run.json: 'command' is a JSON string; allowed: a list (or null)"),
    # more digits than int() converts (sys.get_int_max_str_digits()): a ValueError traceback before
    pytest.param('{"layout": {"world_size": ' + "9" * 5000 + "}}",
                 "run.json: not readable as JSON (Exceeds the limit (4300", id="int-of-5000-digits"),
])
def test_damaged_run_json(capsys, run_dir, damage, words):
    (run_dir / "run.json").write_bytes(damage if isinstance(damage, bytes) else damage.encode())
    assert words in one_error(capsys, ["report", str(run_dir)])


def test_a_sweeps_layout_has_no_batch(capsys, run_dir):
    """A collective sweep records its batch counts as 0 (the stricter run.json check refused it: launch.evaluate
    then made no comparison of a training workload with its sweep)."""
    from telemetry.analysis.runs import shape_problem

    assert shape_problem({"layout": {"world_size": 2, "dp": 2, "tp": 1, "pp": 1, "global_batch_size": 0,
                                     "micro_batch_size": 0, "grad_accum_steps": 0}}) is None
    assert "'layout.dp' is 0; allowed: an integer >= 1" in shape_problem({"layout": {"dp": 0}})


def test_a_projection_of_a_run_without_steps_says_what_it_needs(capsys, run_dir):
    (run_dir / "metrics.jsonl").unlink()
    assert one_error(capsys, ["project", str(run_dir), "--rate", "1gbit"]).endswith(
        "no timed steps to project from; allowed: a run whose metrics.jsonl has steps with step_time_s")


@pytest.mark.parametrize("metrics", [b"\xff\xfe\x00\x81" * 8, b"not json\n[1]\n\"x\"\n"])
def test_metrics_without_one_step_object(capsys, run_dir, metrics):
    (run_dir / "metrics.jsonl").write_bytes(metrics)
    assert "metrics.jsonl: no line is a step record" in one_error(capsys, ["report", str(run_dir)])


@pytest.mark.parametrize("line", [
    '{"step": "three", "loss": "x", "step_time_s": "slow"}',  # strings where numbers go (a traceback before)
    '{"step": 7, "loss": NaN, "step_time_s": Infinity}',  # non-finite: samples/s was reported as 0
    '{"step": 7, "step_time_s": -1.0}',
    '{"step": 7, "step_time_s": true}',
    '{"step": 0, "step_time_s": 1.0}',
    '{"step": 7.5, "step_time_s": 1.0}',
    '{"step": 7, "comm_time_s": [0.1]}',
    # shapes the report walked into: each was a traceback (KeyError, AttributeError, TypeError, RecursionError)
    '{"loss": 2.0, "step_time_s": 1.0}',  # no step
    '{"step": 1000000000000000000000000000001, "step_time_s": 1.0}',  # beyond what numpy holds (the plots)
    '{"step": 7, "comm": [1, 2]}',
    '{"step": 7, "comm": {"all_reduce": "x"}}',
    '{"step": 7, "comm": {"all_reduce": {"count": "1", "bytes": "1MB", "time_s": "fast"}}}',
    '{"step": 7, "comm": {"all_reduce": {"count": 1, "bytes": -5, "time_s": 0.25}}}',
    '{"step": 7, "comm_groups": {"dp": {"by_op": {"all_reduce": {"bytes": "x"}}}}}',
    '{"step": 7, "ranks": "x"}',
    '{"step": 7, "ranks": {"step_time_s": [1, 2]}}',
    '{"step": 7, "ranks": {"comm_time_s_by_op": {"all_reduce": {"min": "x"}}}}',
    '{"step": 7, "exposed": 0.5}',
    '{"step": 7, "x": ' + "[" * 5000 + "]" * 5000 + "}",
    # more digits than int() converts: a ValueError traceback before
    pytest.param('{"step": 7, "loss": ' + "9" * 5000 + "}", id="int-of-5000-digits"),
])
def test_metrics_lines_with_wrong_values_are_damage(capsys, run_dir, line):
    """A line another program (or a hand) wrote with a string, NaN or a negative time where a number goes
    is left out and named, never computed with; every command reads the rest."""
    from telemetry.analysis.report import summarize
    from telemetry.analysis.runs import damage_warning, load_run
    text = (run_dir / "metrics.jsonl").read_text()
    (run_dir / "metrics.jsonl").write_text(line + "\n" + text)
    run = load_run(str(run_dir))
    assert [r["step"] for r in run.metrics][:1] == [1] and damage_warning(run).endswith("metrics.jsonl line 1")
    s = summarize(run)
    assert s["step_time_median_s"] > 0 and s["samples_per_s"] > 0
    (run_dir / "metrics.jsonl").write_text(line + "\n")  # nothing else: one line naming the file
    assert "metrics.jsonl: no line is a step record" in one_error(capsys, ["report", str(run_dir)])


def test_a_report_of_damaged_lines_between_steps_is_written(tmp_path, capsys, run_dir):
    """The damage the report's tables and plots walked into (no step, a list or strings in comm, a string in
    ranks, a step beyond int64): left out and named, the report written from the rest."""
    text = (run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)
    bad = ['{"loss": 2.0}\n', '{"step": 7, "comm": [1]}\n', '{"step": 8, "ranks": "x"}\n',
           '{"step": 100000000000000000000000, "step_time_s": 1.0}\n']
    (run_dir / "metrics.jsonl").write_text("".join([*text[:2], *bad, *text[2:]]))
    assert main(["report", str(run_dir), "--out", str(tmp_path / "out")]) == 0
    assert "metrics.jsonl lines 3, 4, 5, 6" in (tmp_path / "out" / "report.md").read_text()


def test_metrics_that_is_not_a_regular_file_is_one_line(capsys, run_dir):
    """A directory was an IsADirectoryError traceback; a FIFO blocked every reader forever (open waits for a
    writer), watch included."""
    import os
    metrics = run_dir / "metrics.jsonl"
    metrics.unlink()
    metrics.mkdir()
    for command in (["report", str(run_dir)], ["project", str(run_dir), "--rate", "1gbit"],
                    ["watch", str(run_dir), "--once"]):
        assert "metrics.jsonl: not a regular file; allowed: the JSON-lines file a run writes" in one_error(capsys, command)
    metrics.rmdir()
    os.mkfifo(metrics)
    for command in (["report", str(run_dir)], ["watch", str(run_dir), "--once"]):
        assert "metrics.jsonl: not a regular file" in one_error(capsys, command)


@pytest.mark.parametrize("argv", [["project", "{run}", "--rate", "1gbit", "--json", "{run}/run.json"],
                                  ["project", "{run}", "--rate", "1gbit", "--json", "{run}/metrics.jsonl"],
                                  ["mllog", "{run}", "--out", "{run}/run.json", "--no-check"]])
def test_an_output_file_over_the_runs_own_record_is_refused(capsys, run_dir, argv):
    """`project RUN --json RUN/run.json` replaced the run's run.json with the projection (the record lost)."""
    before = (run_dir / "run.json").read_bytes(), (run_dir / "metrics.jsonl").read_bytes()
    line = one_error(capsys, [a.format(run=run_dir) for a in argv])
    assert "is part of the input run's record (run.json, metrics.jsonl, ranks/, ...) and would be overwritten" in line
    assert ((run_dir / "run.json").read_bytes(), (run_dir / "metrics.jsonl").read_bytes()) == before
    assert main(["project", str(run_dir), "--rate", "1gbit", "--json", str(run_dir / "projection.json")]) == 0
    assert main(["project", str(run_dir), "--rate", "1gbit", "--json", str(run_dir / "projection.json")]) == 0


def test_metrics_lines_that_are_not_objects_are_skipped(run_dir):
    from telemetry.analysis.runs import load_run
    text = (run_dir / "metrics.jsonl").read_text()
    (run_dir / "metrics.jsonl").write_text('[1, 2]\n"x"\n' + text)
    assert [r["step"] for r in load_run(str(run_dir)).metrics] == [1, 2, 3, 4, 5, 6]


def test_a_file_in_ranks_that_is_not_a_ranks_is_left_out(run_dir):
    from telemetry.analysis.runs import load_run
    (run_dir / "ranks").mkdir(exist_ok=True)
    (run_dir / "ranks" / "rankXY.telemetry.jsonl").write_text('{"step": 1}\n')
    (run_dir / "ranks" / "rank00001.telemetry.jsonl").write_text('{"step": 1}\n')
    assert list(load_run(str(run_dir)).ranks) == [1]


def test_a_run_killed_in_its_first_step_still_reads(run_dir):
    from telemetry.analysis.runs import load_run
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "lo')
    assert load_run(str(run_dir)).metrics == []


@pytest.fixture
def read_only(tmp_path):
    """A directory this process cannot write in, even as root: a read-only bind of a temporary directory
    where the user may mount, else a directory without write permission (root writes there anyway)."""
    import os
    import subprocess
    path = tmp_path / "ro"
    path.mkdir()
    if os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "none", str(path)],
                                            capture_output=True).returncode == 0:
        yield path
        subprocess.run(["umount", str(path)], capture_output=True)
        return
    if os.geteuid() == 0:
        pytest.skip("root without mount: no directory it cannot write")
    path.chmod(0o555)
    yield path
    path.chmod(0o755)


@pytest.mark.parametrize("command", ["report", "compare", "export", "nccl-tests", "project"])
def test_output_that_cannot_be_written(capsys, tmp_path, run_dir, read_only, command):
    target = str(read_only / "out")
    argv = {"report": ["report", str(run_dir), "--out", target],
            "compare": ["compare", str(run_dir), str(run_dir), "--out", target],
            "export": ["export", str(run_dir), "--to", "parquet", "--out", target],
            "nccl-tests": ["nccl-tests", str(TABLES / "all_reduce_perf_h100_16ranks.txt"), "--json", target],
            "project": ["project", str(run_dir), "--rate", "1gbit", "--json", target]}[command]
    line = one_error(capsys, argv)
    assert target in line and "allowed: a" in line and "writable directory" in line
    assert not (read_only / "out").exists()


def test_output_directory_that_is_a_file(capsys, tmp_path, run_dir):
    line = one_error(capsys, ["compare", str(run_dir), str(run_dir), "--out", str(run_dir / "run.json")])
    assert line.endswith("is a file, not a directory; allowed: a new or existing directory")


def test_nccl_tests_of_a_directory_without_a_table(capsys, tmp_path):
    assert one_error(capsys, ["nccl-tests", str(tmp_path)]) == (
        f"error: {tmp_path}: a directory without collectives.txt; allowed: a sweep's run directory or an nccl-tests "
        "output file")
    import os
    os.mkfifo(tmp_path / "collectives.txt")  # was called 'a directory without collectives.txt'
    assert one_error(capsys, ["nccl-tests", str(tmp_path)]) == (
        f"error: {tmp_path}: its collectives.txt is a FIFO (named pipe), not a regular file; allowed: a sweep's run "
        "directory or an nccl-tests output file")


def test_nccl_tests_of_a_header_without_rows(capsys, tmp_path):
    # it printed "0 rows in 1 table(s)" and exited 0 (and --json wrote an empty table)
    cut = tmp_path / "cut.txt"
    cut.write_text("#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n"
                   "#   (B)  (elements)  (us)  (GB/s)  (GB/s)  (us)  (GB/s)  (GB/s)\n")
    out = tmp_path / "cut.json"
    assert one_error(capsys, ["nccl-tests", str(cut), "--json", str(out)]) == (
        f"error: {cut}: a table header and nothing else (no rows, no footer, no devices, no failure line); allowed: "
        "nccl-tests output with at least one of them")
    assert not out.exists()
    # real outputs without rows still convert: a failure before the first row, footers only, device lines only
    tables = Path(__file__).parent / "nccl_tests_tables"
    for name in ("all_reduce_perf_issue287_failed_before_first_row.txt",
                 "all_reduce_perf_issue27_footers_only_two_runs_in_backticks.txt",
                 "all_reduce_perf_issue249_hashless_blocking_line_no_rows.txt"):
        assert main(["nccl-tests", str(tables / name), "--json", str(out)]) == 0 and out.exists(), name


def test_busbw_table_that_does_not_exist(capsys, run_dir, tmp_path):
    line = one_error(capsys, ["project", str(run_dir), "--busbw-table", str(tmp_path / "gone.txt")])
    assert line.startswith(f"error: --busbw-table: {tmp_path / 'gone.txt'}: does not exist; allowed: an nccl-tests")


def test_json_output_that_is_a_directory(capsys, tmp_path):
    line = one_error(capsys, ["nccl-tests", str(TABLES / "all_reduce_perf_h100_16ranks.txt"), "--json", str(tmp_path)])
    assert line == f"error: --json: {str(tmp_path)!r} is a directory; allowed: a file path"


def test_json_or_csv_output_that_is_an_input_is_refused(capsys, tmp_path):
    """--json naming the table being read overwrote it with exit 0 (the nccl-tests output was lost)."""
    table = tmp_path / "all_reduce.txt"
    table.write_bytes((TABLES / "all_reduce_perf_h100_16ranks.txt").read_bytes())
    before = table.read_bytes()
    for option in ("--json", "--csv"):
        line = one_error(capsys, ["nccl-tests", str(table), option, str(tmp_path / "." / "all_reduce.txt")])
        assert line.startswith(f"error: {option}: ") and f"is the input {str(table)!r}" in line
    assert "is also --json" in one_error(capsys, ["nccl-tests", str(table), "--json", str(tmp_path / "o"),
                                                  "--csv", str(tmp_path / "o")])
    assert table.read_bytes() == before and not (tmp_path / "o").exists()


def test_project_a_recorded_run_onto_a_slower_link(capsys, run_dir, tmp_path):
    out = tmp_path / "p.json"
    assert main(["project", str(run_dir), "--rate", "100mbit", "--nodes", "4", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("measured ") and "100mbit, 4 node(s): predicted" in text
    data = json.loads(out.read_text())
    assert [p["target"] for p in data["projections"]] == ["100mbit"]
    assert data["projections"][0]["rate_bps"] == 1e8 and data["projections"][0]["nodes"] == 4
    assert data["projections"][0]["step_time_s"] > 0


def test_project_onto_a_rate_in_bytes_names_it_in_bits_on_every_line(capsys, run_dir):
    """Round 5 of the lab: `project RUN --rate 25mbps` warned once, then printed `25mbps, 2 node(s): predicted`,
    which reads as 25 Mbit/s among other targets in bits."""
    assert main(["project", str(run_dir), "--rate", "25mbps", "--rate", "50mbit"]) == 0
    captured = capsys.readouterr()
    assert "warning: --rate 25mbps: in tc units 'mbps' is bytes per second, so this is 200 Mbit/s" in captured.err
    assert "  25mbps (200 Mbit/s), " in captured.out and "  50mbit, " in captured.out
    # round 6: tc's 1024-based units, no warning (they are bits) but named in bits like the bytes units
    assert main(["project", str(run_dir), "--rate", "10Mibit"]) == 0
    captured = capsys.readouterr()
    assert "  10Mibit (10.49 Mbit/s), " in captured.out and "warning" not in captured.err


def test_project_onto_more_ranks_than_samples_is_refused(capsys, run_dir):
    """--nodes 1e20 projected 0.1 s/step with "each rank computes 0.00x the samples": a layout that cannot be."""
    assert main(["project", str(run_dir), "--rate", "1gbit", "--nodes", "8"]) == 0  # 8 ranks, 8 samples: one each
    capsys.readouterr()
    for nodes in ("9", "100000000000000000000"):
        line = one_error(capsys, ["project", str(run_dir), "--rate", "1gbit", "--nodes", nodes])
        assert line.startswith(f"error: --nodes {nodes}: ") and line.endswith(
            "more than the run's global batch of 8 samples; allowed: at most 8 node(s) (the projection keeps the "
            "global batch)")


def test_nccl_tests_of_a_missing_file(capsys, tmp_path):
    assert str(tmp_path / "none.txt") in one_error(capsys, ["nccl-tests", str(tmp_path / "none.txt")])


def test_nccl_tests_table_to_json_and_csv(capsys, tmp_path):
    table = TABLES / "all_reduce_perf_h100_16ranks.txt"
    js, csv = tmp_path / "t.json", tmp_path / "t.csv"
    assert main(["nccl-tests", str(table), "--json", str(js), "--csv", str(csv)]) == 0
    line = capsys.readouterr().out.strip()
    data = json.loads(js.read_text())
    assert line.startswith(f"{table}: {data['rows_read']} rows in 1 table(s) (all_reduce)") and data["rows_read"] > 0
    rows = csv.read_text().strip().splitlines()
    assert len(rows) == data["rows_read"] + 1  # one header line


def test_nccl_tests_json_never_replaces_a_sweeps_own_files(capsys, tmp_path):
    """`nccl-tests RUN --json RUN/collectives.json` wrote the table's reading over the sweep's own record (its
    hosts, fabric, memory, p2p matrix and latency): a sweep run directory given is a run's record."""
    run = tmp_path / "sweep"
    run.mkdir()
    (run / "collectives.txt").write_text((TABLES / "all_reduce_perf_h100_16ranks.txt").read_text())
    for name in ("collectives.json", "collectives.csv"):
        (run / name).write_text("the sweep's own")
        err = one_error(capsys, ["nccl-tests", str(run), f"--{name.split('.')[1]}", str(run / name)])
        assert err.startswith(f"error: --{name.split('.')[1]}: ") and "part of the input run's record" in err
        assert (run / name).read_text() == "the sweep's own"
    assert main(["nccl-tests", str(run), "--json", str(run / "table.json")]) == 0  # a new name beside them


def test_export_with_an_unknown_kind(capsys, run_dir):
    assert one_error(capsys, ["export", str(run_dir), "--to", "csv"]).startswith("error: --to: got ['csv']; allowed:")


def test_export_parquet(capsys, run_dir):
    assert main(["export", str(run_dir), "--to", "parquet"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("parquet: ") and Path(out.split(": ", 1)[1]).exists()


def test_unknown_subcommand_exits_2(capsys):
    assert "invalid choice: 'reprot'" in one_exit(capsys, ["reprot", "x"])


@pytest.mark.parametrize("command", ["compare", "project"])
def test_one_run_given_twice(capsys, tmp_path, run_dir, command):
    extra = ["--out", str(tmp_path / "o")] if command == "compare" else ["--rate", "1gbit"]
    line = one_error(capsys, [command, str(run_dir), f"{run_dir}/", *extra])
    assert line.startswith(f"error: {run_dir}/ is given twice; allowed: each run directory once")
    assert not (tmp_path / "o").exists()


def test_intra_rate_is_named(capsys, run_dir):
    assert one_error(capsys, ["project", str(run_dir), "--rate", "1gbit", "--intra-rate", "0gbit"]).startswith(
        "error: --intra-rate: got '0gbit'; expected a rate of at least 1bit")


def test_export_a_trace_the_run_did_not_record(capsys, run_dir, tmp_path):
    line = one_error(capsys, ["export", str(run_dir), "--to", "trace", "--out", str(tmp_path / "x")])
    assert line == (f"error: --to trace: {run_dir}/ranks: no rank*.events.jsonl; the trace needs a run with trace in "
                    "telemetry.export (per-call timestamps are kept only then)")


def test_export_of_no_kind(capsys, run_dir):
    assert one_error(capsys, ["export", str(run_dir), "--to", ","]) == \
        "error: --to: got no kind; allowed: one or more of tensorboard, wandb, parquet, trace"


def test_module_entry_point(capsys, monkeypatch, tmp_path):
    """`python -m telemetry` runs main and exits with its code."""
    monkeypatch.setattr(sys, "argv", ["telemetry", "report", str(tmp_path / "nope")])
    monkeypatch.delitem(sys.modules, "telemetry.__main__", raising=False)  # runpy runs it afresh
    with pytest.raises(SystemExit) as info:
        runpy.run_module("telemetry", run_name="__main__", alter_sys=False)
    assert info.value.code == 2 and capsys.readouterr().err.startswith("error: ")


def test_report_of_a_recorded_run(capsys, run_dir):
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"wrote {run_dir / 'report'}/report.html and report.md with ") and out.endswith(" figures")
    md = (run_dir / "report" / "report.md").read_text()
    assert "recorded" in md and (run_dir / "report" / "report.html").stat().st_size > 0


def test_compare_two_recorded_fabrics(capsys, tmp_path, run_dir):
    slow = write_run(tmp_path / "slow", rate_bps=1e8, step_time=2.0, comm_time=1.0, times=True)
    assert main(["compare", f"fast={run_dir}", f"slow={slow}", "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {tmp_path / 'cmp'}/compare.html and compare.md (") and "fast vs slow" in out
    assert (tmp_path / "cmp" / "compare.md").read_text().count("slow") > 0


def test_project_from_a_run_too_short_for_a_spread_says_so(capsys, tmp_path):
    """A 2-step run printed its 10-90% step spread as +0%/+0%: unknown, not none (the first step is not timed)."""
    run = write_run(tmp_path / "run", rate_bps=1e9, times=True)
    metrics = run / "metrics.jsonl"
    metrics.write_text("".join(metrics.read_text().splitlines(keepends=True)[:2]))
    assert main(["project", str(run), "--rate", "100mbit"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "1 step: its 10-90% spread is unknown (needs 3 timed steps)" in first and "+0%" not in first, first


@pytest.mark.parametrize("argv", [
    ["nccl-tests", str(TABLES / "all_reduce_perf_h100_16ranks.txt"), "--csv", "/dev/full"],
    ["nccl-tests", str(TABLES / "all_reduce_perf_h100_16ranks.txt"), "--json", "/dev/full"],
    ["nccl-log", str(Path(__file__).parent / "nccl_logs" / "nccl_tests_228_ib_two_hcas.log"), "--json", "/dev/full"],
])
def test_an_output_file_on_a_full_disk_is_one_line(capsys, argv):
    """/dev/full stands for a full disk: the checks before the read see a writable place; the write failed with
    an OSError traceback."""
    line = one_error(capsys, argv)
    assert "'/dev/full' could not be written (No space left on device); allowed: " in line


def test_project_and_mllog_on_a_full_disk_are_one_line(capsys, tmp_path):
    run = write_recorded_run(tmp_path / "r", name="b", workload="bert_pretraining", times=True)
    assert "--json: '/dev/full' could not be written" in one_error(
        capsys, ["project", str(run), "--rate", "1gbit", "--json", "/dev/full"])
    # logging's FileHandler printed a 'Logging error' traceback per line and the command exited 0
    assert "--out: '/dev/full' could not be written" in one_error(
        capsys, ["mllog", str(run), "--no-check", "--out", "/dev/full"])


def test_watch_refuses_a_sweep_table_that_is_not_a_regular_file(capsys, tmp_path):
    """A FIFO in place of collectives.txt: `watch --once` waited for a writer forever."""
    import os
    run = write_run(tmp_path / "sweep", rate_bps=1e9)
    os.mkfifo(run / "collectives.txt")
    assert one_error(capsys, ["watch", str(run), "--once"]) == (
        f"error: watch: {run / 'collectives.txt'}: not a regular file; allowed: the text table a sweep writes")


def test_an_out_on_a_filesystem_that_fills_up_is_one_line(capsys, tmp_path, monkeypatch):
    """--out passed the checks (a writable place) but the report's files did not fit: an OSError traceback."""
    import errno

    from telemetry.analysis import sweep_report

    def full(run, out):
        raise OSError(errno.ENOSPC, "No space left on device", f"{out}/report.md")
    monkeypatch.setattr(sweep_report, "write_run_report", full)
    run = write_run(tmp_path / "run", name="a")
    line = one_error(capsys, ["report", str(run), "--out", str(tmp_path / "r")])
    assert line == (f"error: --out: '{tmp_path}/r/report.md' could not be written (No space left on device); allowed: "
                    "a place on a filesystem with free space that this user can write")


def test_project_onto_one_node_of_one_rank_says_its_group_moves_nothing(capsys, run_dir):
    """Round 8 of the lab: a 3-node run projected with `--nodes 1` printed its dp group, now of one rank, as
    `0.0000 s (on the target link)`; a group of one moves no bytes, on no link."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    with_groups = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:  # the recorded run's last line is cut mid-line on purpose
            continue
        rec["comm_groups"] = {"dp": {"dim": "dp", "size": 2, "scope": "inter", "ranks": [0, 1], "by_op": {
            "all_reduce": {"count": 1, "bytes": 1_000_000, "time_s": 0.25}}}}
        with_groups.append(json.dumps(rec))
    (run_dir / "metrics.jsonl").write_text("\n".join(with_groups) + "\n")
    assert main(["project", str(run_dir), "--rate", "1gbit", "--nodes", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 projected): " in out and "(one rank: its calls move no bytes between ranks, on no link)" in out, out
    assert "on the target link" not in out
    # and the rate as a person writes it is named with what to write
    assert one_error(capsys, ["project", str(run_dir), "--rate", "100GbE"]).endswith("; for 100 Gbit/s write 100gbit")


# round 8 of the bad-input table: outputs and inputs of the wrong kind, as the commands meet them
def test_report_out_holding_report_md_as_a_directory_or_an_unread_fifo_is_one_line(capsys, tmp_path, run_dir):
    import os
    as_dir, as_fifo = tmp_path / "d", tmp_path / "f"
    (as_dir / "report.md").mkdir(parents=True)  # was an IsADirectoryError traceback
    as_fifo.mkdir()
    os.mkfifo(as_fifo / "report.md")  # was a hang: the write waited for a reader
    assert "report.md' could not be written (Is a directory); allowed: an output directory" in one_error(
        capsys, ["report", str(run_dir), "--out", str(as_dir)])
    assert "report.md' is a FIFO (named pipe) that no process reads" in one_error(
        capsys, ["report", str(run_dir), "--out", str(as_fifo)])


def test_json_and_csv_outputs_that_are_unread_fifos_are_refused(capsys, tmp_path, run_dir):
    import os
    os.mkfifo(tmp_path / "out.fifo")
    assert "--json: " in one_error(capsys, ["project", str(run_dir), "--rate", "1gbit", "--json",
                                            str(tmp_path / "out.fifo")])
    assert "--out: " in one_error(capsys, ["mllog", str(run_dir), "--no-check", "--out", str(tmp_path / "out.fifo")])


def test_an_export_whose_entry_is_in_the_way_is_bad_input(capsys, tmp_path, run_dir):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "tensorboard").write_text("a file where the export makes a folder")
    line = one_error(capsys, ["export", str(run_dir), "--to", "tensorboard", "--out", str(tmp_path / "x")])
    assert "tensorboard' is in the way (File exists); allowed: an output directory whose tensorboard entries" in line


def test_a_run_directory_this_user_cannot_list_is_not_called_one_without_run_json(capsys, tmp_path, monkeypatch):
    import os
    (tmp_path / "run").mkdir()
    listdir = os.listdir
    monkeypatch.setattr(os.path, "isfile", lambda p: False)  # as without read permission: run.json is not seen
    monkeypatch.setattr(os, "listdir", lambda p: (_ for _ in ()).throw(PermissionError(13, "Permission denied"))
                        if str(p).endswith("run") else listdir(p))
    assert one_error(capsys, ["report", str(tmp_path / "run"), "--out", str(tmp_path / "r")]) == (
        f"error: {tmp_path / 'run'}: not readable by this user (Permission denied); allowed: a run directory this "
        "user can list and read")


def test_a_compare_label_with_a_line_break_is_refused(capsys, tmp_path, run_dir):
    line = one_error(capsys, ["compare", f"a\nb={run_dir}", f"c={run_dir}", "--out", str(tmp_path / "c")])
    assert "the label 'a\\nb' holds a line break or control character" in line


def test_a_run_json_this_user_cannot_read_says_what_is_allowed(capsys, tmp_path, run_dir, monkeypatch):
    import builtins
    real_open = builtins.open

    def denied(path, *args, **kwargs):
        if str(path).endswith("run.json"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(builtins, "open", denied)
    assert one_error(capsys, ["report", str(run_dir), "--out", str(tmp_path / "r")]) == (
        f"error: {run_dir / 'run.json'}: cannot read: Permission denied; allowed: the run.json a run writes, readable "
        "by this user")


def test_p2p_of_a_missing_path_or_a_file_says_so(capsys, tmp_path):
    """A mistyped directory read "neither p2p_matrix in collectives.json nor p2p_bandwidth.json", as if it held a run."""
    line = one_error(capsys, ["p2p", str(tmp_path / "nope")])
    assert line.startswith(f"error: {tmp_path / 'nope'}: does not exist; allowed: a sweep run directory"), line
    (tmp_path / "file").write_text("x")
    assert ": is not a directory; allowed:" in one_error(capsys, ["p2p", str(tmp_path / "file")])
