"""telemetry.integrations.attach in-process: the environment a job gets, and bad input (nothing is started)."""
from __future__ import annotations

import os

import pytest

from telemetry.integrations import attach


def test_environment_carries_the_run_directory_and_the_site_first(tmp_path):
    base = {"PYTHONPATH": f"/opt/x{os.pathsep}{attach.PACKAGE_ROOT}", "HOME": "/root"}
    env = attach.attach_environment(str(tmp_path / "run"), "tcp", base)
    assert env[attach.RUN_DIR_ENV] == str(tmp_path / "run") and env[attach.EXPECT_ENV] == "tcp"
    # the tracer's sitecustomize first, our package once, the user's path kept after it
    assert env["PYTHONPATH"].split(os.pathsep) == [attach.SITE_DIR, attach.PACKAGE_ROOT, "/opt/x"]
    assert env["HOME"] == "/root" and base["PYTHONPATH"].startswith("/opt/x")  # the caller's dict is unchanged
    assert os.path.isfile(os.path.join(attach.SITE_DIR, "sitecustomize.py"))


def test_no_command_is_one_error_line(capsys, tmp_path):
    with pytest.raises(SystemExit) as info:
        attach.main(["--run-dir", str(tmp_path), "--"])
    assert info.value.code == 2
    assert capsys.readouterr().err.strip() == ("error: no command given after --; see python -m "
                                               "telemetry.integrations.attach --help")


def test_unknown_fabric_is_one_error_line(capsys, tmp_path):
    with pytest.raises(SystemExit) as info:
        attach.main(["--run-dir", str(tmp_path), "--expect", "carrier-pigeon", "--", "true"])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1 and "carrier-pigeon" in err[0] and err[0].startswith("error: ")


def test_a_missing_command_is_named(capsys, tmp_path):
    assert attach.main(["--run-dir", str(tmp_path), "--", "no-such-command-fh"]) == 2
    assert capsys.readouterr().err.strip() == ("error: command: 'no-such-command-fh' not found; allowed: a program "
                                               "on PATH or a path to an executable, after --")


def test_a_run_directory_that_cannot_be_written_stops_before_the_job(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert attach.main(["--run-dir", str(blocker / "run"), "--", "no-such-command-fh"]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --run-dir: {str(blocker)!r} is a file, so "
                                               f"{str(blocker / 'run')!r} cannot be a directory; allowed: a writable "
                                               "directory")


def test_a_command_that_is_not_executable_is_one_error_line(capsys, tmp_path):
    """review58: a script without its executable bit (`-- ./train.sh`) escaped as a PermissionError traceback
    (exit 1) from Popen; it is one error line, exit 2, as a command not found is."""
    script = tmp_path / "train.sh"
    script.write_text("echo hi\n")
    script.chmod(0o644)
    assert attach.main(["--run-dir", str(tmp_path / "run"), "--", str(script)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: command: {str(script)!r} cannot be run (") and "allowed:" in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
