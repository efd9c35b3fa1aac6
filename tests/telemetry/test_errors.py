"""One error base: every exception class the project defines derives from telemetry.errors.HarnessError
(bad input from InputError, exit 2), so a caller can tell our one-line errors from bugs."""
from __future__ import annotations

import ast
import importlib

import pytest

from tests.conftest import REPO
from telemetry.errors import HarnessError, InputError

# control flow, not errors: a signal turned into an exception, and a YAML loader's internal refusal; and
# torch's own transport failure with what was waited for attached (its text is torch's, read as torch's is)
NOT_ERRORS = {"trainer.stop.Interrupted", "trainer.recipe_yaml.Refused",
              "telemetry.capture.group_timeout.GroupWaitFailed"}


def defined_exceptions():
    for package in ("telemetry", "trainer", "launch"):
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            for node in tree.body:
                if isinstance(node, ast.ClassDef) and any(
                        "Error" in ast.unparse(b) or "Exception" in ast.unparse(b) for b in node.bases):
                    yield module, node.name


def test_every_project_exception_has_the_one_base():
    found, wrong = 0, []
    for module, name in defined_exceptions():
        if f"{module}.{name}" in NOT_ERRORS:
            continue
        cls = getattr(importlib.import_module(module), name)
        found += 1
        if not issubclass(cls, HarnessError):
            wrong.append(f"{module}.{name}")
    assert found >= 10 and not wrong, wrong


def test_bad_input_errors_exit_2():
    from telemetry.analysis.rates import RateError
    from trainer.config import RecipeError
    from trainer.error_report import FaultError, InputError as TrainerInput
    assert RecipeError(["x"]).exit_code == RateError("x").exit_code == TrainerInput("x").exit_code == 2
    assert issubclass(TrainerInput, InputError) and FaultError("x").exit_code == 1


def test_output_directory_checks_create_nothing(tmp_path):
    from telemetry.errors import output_dir_problem
    assert output_dir_problem(str(tmp_path / "a" / "b"), "--out") is None
    assert not (tmp_path / "a").exists() and list(tmp_path.iterdir()) == []
    (tmp_path / "f").write_text("x")
    assert output_dir_problem(str(tmp_path / "f"), "--out") == (
        f"--out: {str(tmp_path / 'f')!r} is a file, not a directory; allowed: a new or existing directory")
    assert output_dir_problem(str(tmp_path / "f" / "sub"), "--out").endswith(
        "cannot be a directory; allowed: a writable directory")


def test_an_output_directory_the_filesystem_cannot_name_is_refused_before_anything_is_written(tmp_path):
    from telemetry.errors import output_dir_problem
    long = tmp_path / ("x" * 300) / "run"  # a probe in tmp_path (the deepest existing directory) succeeds
    assert output_dir_problem(str(long), "out") == (
        f"out: {str(long)!r} has a name of 300 bytes (xxxxxxxxxxxxxxxx...); allowed: names of at most 255 bytes "
        "each (this filesystem's limit)")
    deep = tmp_path.joinpath(*["y" * 200] * 25)
    assert output_dir_problem(str(deep), "--out").startswith("--out: the path is ")
    assert output_dir_problem(str(tmp_path / ("z" * 255)), "out") is None and list(tmp_path.iterdir()) == []


def test_output_file_checks_leave_no_file(tmp_path):
    from telemetry.errors import output_file_problem
    assert output_file_problem(str(tmp_path / "x.json"), "--json") is None and not (tmp_path / "x.json").exists()
    assert output_file_problem(str(tmp_path), "--json") == f"--json: {str(tmp_path)!r} is a directory; allowed: a file path"
    assert output_file_problem(str(tmp_path / "no" / "x.json"), "--json").startswith(
        f"--json: {str(tmp_path / 'no')!r} is not a directory")


def test_an_empty_output_path_is_refused_not_taken_for_the_current_directory(tmp_path, monkeypatch):
    # `--out ''` passed the checks (os.path.abspath('') is the current directory) and was then taken as unset
    from telemetry.errors import output_dir_problem, output_file_problem
    monkeypatch.chdir(tmp_path)
    assert output_dir_problem("", "--out") == "--out: got ''; allowed: a non-empty directory path"
    assert output_dir_problem("  ", "--out") == "--out: got '  '; allowed: a non-empty directory path"
    assert output_file_problem("", "--json") == "--json: got ''; allowed: a non-empty file path"
    assert not list(tmp_path.iterdir())


def test_one_line_parser_and_its_subcommands(capsys):
    import pytest

    from telemetry.errors import OneLineParser
    p = OneLineParser(prog="tool")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("go").add_argument("--n", type=int)
    for argv, line in ((["go", "--n", "x"], "error: argument --n: invalid int value: 'x'; allowed: a whole number; see tool go --help"),
                       (["go", "--n", "1.5"], "error: argument --n: invalid int value: '1.5'; allowed: a whole number; "
                        "see tool go --help"),
                       (["go", "--n", "-5x"], "error: argument --n: expected one argument; a value that starts with '-' "
                        "is written --n=-5x (here '-5x' was read as an option); see tool go --help"),
                       ([], "error: the following arguments are required: cmd; see tool --help")):
        with pytest.raises(SystemExit) as info:
            p.parse_args(argv)
        assert info.value.code == 2 and capsys.readouterr().err == line + "\n"


def test_the_problem_lists_share_one_class():
    from launch.evaluate.spec import SpecError
    from launch.stage import StageError
    from telemetry.errors import InputProblems
    from trainer.recipe_yaml import RecipeError

    for cls in (RecipeError, SpecError, StageError):
        exc = cls(["a: not allowed", "b: missing"])
        assert isinstance(exc, InputProblems) and exc.exit_code == 2
        assert exc.problems == ["a: not allowed", "b: missing"] and str(exc) == "a: not allowed\nb: missing"


@pytest.mark.parametrize("module", ["trainer.cli", "launch.stage", "launch.nemo.command", "telemetry.integrations.attach"])
def test_no_parser_takes_an_abbreviated_option(module, capsys):
    """`--dry-ru` is a typo, not `--dry-run`: every command's parser is a OneLineParser without abbreviations."""
    from telemetry.errors import OneLineParser

    parser = importlib.import_module(module)._Parser()
    assert isinstance(parser, OneLineParser) and parser.allow_abbrev is False


def test_an_abbreviated_option_is_one_error_line(capsys):
    from telemetry.errors import OneLineParser

    parser = OneLineParser(prog="python -m x")
    parser.add_argument("--dry-run", action="store_true")
    with pytest.raises(SystemExit) as done:
        parser.parse_args(["--dry-ru"])
    assert done.value.code == 2
    assert capsys.readouterr().err.strip() == "error: unrecognized arguments: --dry-ru; see python -m x --help"


def test_a_closed_pipe_ends_the_command_quietly(tmp_path, monkeypatch):
    """`python -m trainer RECIPE --dry-run | head -1` ended in a BrokenPipeError traceback."""
    from telemetry.errors import exit_quietly_on_closed_pipe

    def reader_went_away() -> int:
        raise BrokenPipeError(32, "Broken pipe")
    with open(tmp_path / "stdout", "w") as out:
        monkeypatch.setattr("sys.stdout", out)
        assert exit_quietly_on_closed_pipe(reader_went_away) == 141
        out.write("dropped")  # stdout now leads to /dev/null: the interpreter's last flush cannot fail
    assert (tmp_path / "stdout").read_text() == ""
    assert exit_quietly_on_closed_pipe(lambda code: code, 2) == 2


def test_output_dir_through_a_link_that_leads_nowhere_is_one_line(tmp_path):
    """A symlink loop or a dangling link does not exist to os.path.exists, yet makedirs fails there (EEXIST,
    ELOOP): it is named before anything is written, for every command that takes an output directory."""
    from telemetry.errors import output_dir_problem

    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    assert output_dir_problem(str(tmp_path / "loop1"), "--out") == (
        f"--out: {str(tmp_path / 'loop1')!r} is a symbolic link that leads nowhere (a loop or a missing target: "
        "'loop2'); allowed: a new or existing directory")
    assert output_dir_problem(str(tmp_path / "dangling" / "run"), "--out").startswith(
        f"--out: {str(tmp_path / 'dangling')!r} is a symbolic link that leads nowhere")
    (tmp_path / "real").mkdir()
    (tmp_path / "good").symlink_to(tmp_path / "real")
    assert output_dir_problem(str(tmp_path / "good" / "run"), "--out") is None


def test_an_output_that_is_a_fifo_nobody_reads_is_refused_not_waited_on(tmp_path):
    import os

    from telemetry.errors import output_file_problem
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    assert "is a FIFO (named pipe) that no process reads" in output_file_problem(str(fifo), "--csv")
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # `>(gzip > x)` or `cat FIFO &` started first: fine
    try:
        assert output_file_problem(str(fifo), "--csv") is None
    finally:
        os.close(reader)
