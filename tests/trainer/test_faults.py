"""Faults through the real CLI: SIGTERM (preemption), the torchrun agent killed, a rank lost, a second
run into a live run's directory, a disk that fills mid-run. Bounded subprocesses, gloo, --standalone."""
from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer.runlock import pid_alive

from ..conftest import REPO, TINY, run_cli

FAST = ["data.seq_len=64", "train.log_every=1", "train.eval_every_samples=null", "distributed.timeout_s=60"]


class Job:
    """A run in the background whose output is read line by line, so a test can act at a given step."""

    def __init__(self, out: Path, *overrides: str, nproc: int = 1, torchrun: bool = False, env: dict | None = None):
        args = [TINY, f"output_dir={out}", *FAST, *overrides]
        if nproc > 1 or torchrun:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                   "-m", "trainer", *args]
        else:
            cmd = [sys.executable, "-m", "trainer", *args]
        self.out = out
        self.lines: list[str] = []
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1",
                                                                  "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": "",
                                                                  **(env or {})})

    def wait_for(self, text: str, timeout: float = 240) -> str:
        deadline = time.monotonic() + timeout
        for line in self.proc.stdout:
            self.lines.append(line)
            if text in line:
                return line
            if time.monotonic() > deadline:
                break
        self.kill()
        pytest.fail(f"no {text!r} in time:\n{''.join(self.lines)[-3000:]}")

    def finish(self, timeout: float = 120) -> int:
        try:
            rest, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"did not finish:\n{''.join(self.lines)[-3000:]}")
        self.lines.append(rest)
        return self.proc.returncode

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.communicate()

    def run_json(self) -> dict:
        return json.loads((self.out / "run.json").read_text())

    def steps(self) -> list[int]:
        return [json.loads(line)["step"] for line in (self.out / "metrics.jsonl").read_text().splitlines() if line]


def _workers(agent_pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(agent_pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _listening(pid: int) -> list[str]:
    """Local addresses (host:port) of the TCP sockets process `pid` listens on (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                addr, port = fields[1].split(":")
                raw = bytes.fromhex(addr)  # 32-bit words in host (little-endian) order
                host = ipaddress.ip_address(b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)))
                found.append(f"[{host}]:{int(port, 16)}" if host.version == 6 else f"{host}:{int(port, 16)}")
    return found


def _loopback(addr: str) -> bool:
    host = ipaddress.ip_address(addr.rsplit(":", 1)[0].strip("[]"))
    return host.is_loopback or bool(getattr(host, "ipv4_mapped", None) and host.ipv4_mapped.is_loopback)


def _who_listens(pids: list[int]) -> str:
    """For a failure: what `ss` says of the workers' listeners, and the settings in their environment that
    decide who opens one (an earlier test that leaks a variable into os.environ reaches these runs)."""
    ss = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True).stdout.splitlines()
    lines = [line for line in ss if any(f"pid={p}," in line for p in pids)]
    keys = ("TORCH", "GLOO", "NCCL", "MASTER", "TORCHELASTIC", "PROMETHEUS", "WANDB")
    for p in pids:
        env = dict(item.split("=", 1) for item in Path(f"/proc/{p}/environ").read_text().split("\0") if "=" in item)
        lines.append(f"pid {p}: " + " ".join(f"{k}={v}" for k, v in sorted(env.items()) if k.startswith(keys)))
    return "\n".join(lines)


def _latest_step(out: Path) -> int:
    return json.loads((out / "checkpoints" / "latest.json").read_text())["step"]


def _saved_on_signal_and_resumed(job: Job, signame: str, *overrides: str) -> dict:
    """After `signame` reached a 2-rank job: it stopped with the current step saved and named the signal
    in run.json, and a rerun (with the job's `overrides`) resumes from that step and recomputes none before
    it. Returns run.json."""
    job.finish()
    info = job.run_json()
    saved = _latest_step(job.out)
    assert info["status"] == "interrupted" and info["exit_code"] == 130, info
    assert f"interrupted by {signame}: stopped after step {saved}, checkpoint saved" == info["error"]
    assert job.steps() == list(range(1, saved + 1))  # every completed step is in the checkpoint
    # every rank stopped after the same step (the vote agreed): what the cross-rank exchange still had in
    # flight (with telemetry.cross_rank_pipelined, the last steps on their way up) was completed, so the last
    # lines have their figures too
    lines = [json.loads(x) for x in (job.out / "metrics.jsonl").read_text().splitlines()]
    assert all(line["ranks"]["step_time_s"]["ranks"] == 2 for line in lines), lines[-1]
    again = run_cli(job.out, *FAST, f"max_steps={saved + 1}", *overrides, nproc=2, timeout=240)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resumed from {job.out / 'checkpoints' / f'step-{saved:07d}'} at step {saved}" in again.stdout
    assert [r["step"] for r in again.metrics()] == list(range(1, saved + 2))
    return info


@pytest.mark.integration
def test_sigterm_saves_the_current_step_and_resume_recomputes_nothing(tmp_path):
    out = tmp_path / "run"
    job = Job(out, "max_steps=40", "train.save_every=0", nproc=2)
    job.wait_for("step 3/40")
    workers = _workers(job.proc.pid)
    listening = {w: _listening(w) for w in workers}
    assert len(workers) == 2 and all(listening.values()), listening
    # a standalone run: the workers' sockets (gloo, and NCCL's bootstrap on GPUs) listen on loopback only
    assert all(_loopback(a) for addrs in listening.values() for a in addrs), f"{listening}\n{_who_listens(workers)}"
    os.kill(job.proc.pid, signal.SIGTERM)  # torchrun's agent passes it to every worker, as a scheduler would
    info = _saved_on_signal_and_resumed(job, "SIGTERM")
    assert info["environment"]["GLOO_SOCKET_IFNAME"] == info["environment"]["NCCL_SOCKET_IFNAME"] == "lo"


@pytest.mark.integration
@pytest.mark.parametrize("signame, send", [("SIGTERM", os.kill),  # a scheduler, to the process
                                           ("SIGINT", os.killpg)])  # Ctrl-C: a terminal, to the group
def test_without_save_on_signal_it_stops_at_once_naming_the_signal(tmp_path, signame, send):
    out = tmp_path / "run"
    job = Job(out, "max_steps=40", "train.save_on_signal=false")
    job.wait_for("step 2/40")
    send(job.proc.pid, getattr(signal, signame))
    assert job.finish() == 130
    info = job.run_json()
    assert info["status"] == "interrupted" and info["error"] == f"interrupted by {signame}", info
    assert not (out / "checkpoints" / "latest.json").exists()


@pytest.mark.integration
def test_killed_agent_stops_its_workers_and_the_run_directory_is_locked_meanwhile(tmp_path):
    out = tmp_path / "run"
    job = Job(out, "max_steps=100000", "train.save_every=0", torchrun=True)  # killed long before its end
    job.wait_for("step 2/100000")
    workers = _workers(job.proc.pid)
    assert workers
    # a second run into the live directory is refused, naming the live one
    second = run_cli(out, *FAST, "max_steps=2", timeout=120)
    assert second.returncode == 2
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: output_dir: {str(out)!r} is in use by a live run (torchrun ")
    assert f"pid {workers[0]} on host" in lines[0] and "run.lock" in lines[0]
    os.kill(job.proc.pid, signal.SIGKILL)  # the agent only: today its workers would train on as orphans
    deadline = time.monotonic() + 60
    while any(pid_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.5)
    alive = [w for w in workers if pid_alive(w)]
    for w in alive:
        os.kill(w, signal.SIGKILL)
    job.proc.communicate()
    assert not alive, "workers outlived their agent"
    info = job.run_json()
    saved = _latest_step(out)
    assert info["status"] == "interrupted", info
    assert info["error"].startswith("interrupted by the torchrun agent (pid ") and \
        info["error"].endswith(f"is gone: stopped after step {saved}, checkpoint saved")
    assert not (out / "run.lock").exists()


@pytest.mark.integration
def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    from telemetry.capture.environment import host_info
    (out / "run.lock").write_text(json.dumps({"owner": "pid x", "host": host_info()["hostname"], "pid": dead.pid,
                                              "start_time": "2026-11-23T00:00:00+00:00"}))
    res = run_cli(out, *FAST, "max_steps=1", timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    assert not (out / "run.lock").exists()


@pytest.mark.integration
def test_lost_rank_is_named_with_its_host(tmp_path):
    out = tmp_path / "run"
    res = run_cli(out, *FAST, "max_steps=30", nproc=2, timeout=240,
                  env={"FABRIC_HARNESS_CRASH_AFTER_STEP": "2", "FABRIC_HARNESS_CRASH_RANK": "1"})
    assert res.returncode != 0
    info = json.loads((out / "run.json").read_text())
    host = info["hosts"][1]
    assert info["status"] == "failed", (info, res.stderr[-3000:])
    assert info["error"].startswith(f"rank 1 (host {host['hostname']}, pid {host['pid']}) was lost after step "), \
        info["error"]


@pytest.mark.integration
def test_lost_rank_0_is_named_by_a_survivor_in_one_line_and_in_run_json(tmp_path):
    """Rank 0 says the run's line and writes run.json: killed, nobody did. Rank 1 only noted `[trainer] rank 1:
    rank 0 ... was lost` in its own log, and run.json stayed `running` with no error, as if the run were live."""
    out = tmp_path / "run"
    res = run_cli(out, *FAST, "max_steps=30", nproc=2, timeout=240,
                  env={"FABRIC_HARNESS_CRASH_AFTER_STEP": "2", "FABRIC_HARNESS_CRASH_RANK": "0"})
    assert res.returncode != 0
    info = json.loads((out / "run.json").read_text())
    host = info["hosts"][0]
    lost = f"rank 0 (host {host['hostname']}, pid {host['pid']}) was lost after step "
    assert (info["status"], info["exit_code"]) == ("failed", 1), (info["status"], res.stderr[-3000:])
    assert info["error"].startswith(lost) and info["end_time"], info["error"]
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {lost}"), res.stderr[-3000:]


@pytest.mark.integration
def test_disk_full_mid_run_fails_in_one_line_and_the_last_checkpoint_resumes(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    try:  # checkpoints of this run are ~0.7 MB, plus 1 MiB set aside for run.json: 3 MiB hold two
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {exc}")
    try:
        out = disk / "run"
        res = run_cli(out, *FAST, "max_steps=6", "train.save_every=1", timeout=240)
        assert res.returncode == 1
        errors = res.stderr.strip().splitlines()
        assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
        saved = _latest_step(out)
        assert errors[0].startswith(f"error: checkpoint at step {saved + 1} not written (rank 0: ")
        assert "No space left on device" in errors[0] and f"latest.json still points at step {saved}" in errors[0]
        info = res.run_json()
        assert info["status"] == "failed" and info["exit_code"] == 1 and errors[0][7:] == info["error"]
        assert sorted(os.listdir(out / "checkpoints")) == ["latest.json"] + [f"step-{s:07d}" for s in
                                                                               range(1, saved + 1)]
        subprocess.run(["mount", "-o", "remount,size=16m", str(disk)], check=True)
        again = run_cli(out, *FAST, "max_steps=6", "train.save_every=0", timeout=240)
        assert again.returncode == 0, again.stderr[-3000:]
        assert f"at step {saved}" in again.stdout
        # a damaged checkpoint is one line naming it and its step, recorded in run.json
        data = next((out / "checkpoints" / "step-0000006").glob("*.distcp"))
        data.write_bytes(data.read_bytes()[:64])
        bad = run_cli(out, *FAST, "max_steps=7", timeout=240)
        assert bad.returncode == 2
        lines = bad.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: train.resume: step 6 (") and "cannot be read" in lines[0]
        assert bad.run_json()["error"] == lines[0][7:]
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.integration
def test_peer_that_stops_answering_is_named_within_the_timeout(tmp_path):
    """A rank that stops answering (as behind a cut link): within distributed.timeout_s rank 0 names the
    collective, the step, the peer and the interface, and the report names what the peer never entered."""
    out = tmp_path / "run"
    res = run_cli(out, *FAST, "max_steps=30", "distributed.timeout_s=10", nproc=2, timeout=240,
                  env={"FABRIC_HARNESS_CRASH_AFTER_STEP": "2", "FABRIC_HARNESS_CRASH_RANK": "1",
                       "FABRIC_HARNESS_CRASH_MODE": "hang"})
    assert res.returncode != 0
    info = json.loads((out / "run.json").read_text())
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {info['error']}"], res.stderr[-3000:]
    # torchrun's agent prints its own ChildFailedError traceback; the workers print none
    assert info["status"] == "failed" and "trainer/" not in res.stderr and "RuntimeError" not in res.stderr
    assert info["error"].startswith("distributed: all_reduce #") and " at step 3 timed out after 10 s waiting for " \
        f"rank 1 (host {info['hosts'][1]['hostname']}) over interface lo (GLOO_SOCKET_IFNAME); the time is " \
        "distributed.timeout_s" in info["error"], info["error"]
    assert "was lost" not in res.stderr  # rank 0 ended by itself, after recording why: rank 1 does not blame it
    assert sorted(os.listdir(out / "logs" / "flight_recorder")) == ["rank0.json", "rank1.json"]
    report = subprocess.run([sys.executable, "-m", "telemetry", "report", str(out)], cwd=REPO, capture_output=True,
                            text=True, timeout=180)
    assert report.returncode == 0, report.stderr[-2000:]
    assert "| rank 1 never entered all_reduce #" in (out / "report" / "report.md").read_text()


def _silent_at_step_end(tmp_path, *overrides: str) -> str:
    """Rank 1 silent after step 2's collectives, before its end-of-step telemetry: the run fails after
    distributed.timeout_s (10 s) with one error line naming rank 1; returns that line."""
    out = tmp_path / "run"
    began = time.monotonic()
    res = run_cli(out, *FAST, "distributed.timeout_s=10", *overrides, nproc=2, timeout=300,
                  env={"FABRIC_HARNESS_CRASH_AFTER_STEP": "2", "FABRIC_HARNESS_CRASH_RANK": "1",
                       "FABRIC_HARNESS_CRASH_MODE": "hang_at_step_end"})
    took = time.monotonic() - began
    assert res.returncode != 0
    info = json.loads((out / "run.json").read_text())
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {info['error']}"], res.stderr[-3000:]
    assert info["status"] == "failed" and " timed out after 10 s waiting for rank 1 (host " \
        f"{info['hosts'][1]['hostname']}) over interface lo (GLOO_SOCKET_IFNAME); the time is distributed.timeout_s" \
        in info["error"], info["error"]
    print(f"start to failure: {took:.0f} s; {info['error']}")
    return info["error"]


@pytest.mark.integration
def test_peer_silent_during_telemetrys_exchange_fails_at_the_jobs_timeout(tmp_path):
    """Rank 0 waits in the cross-rank exchange, on telemetry's own gloo group. That group once had torch's
    30-minute timeout; now the run fails after distributed.timeout_s like any other wait, with the same one
    line. Telemetry's messages bypass the flight recorder (its last entry is the job's all_reduce): the wait
    names itself."""
    error = _silent_at_step_end(tmp_path, "max_steps=30")
    assert error.startswith("distributed: telemetry's cross-rank exchange (process group telemetry_cross_rank) "
                            "at step 2 timed out"), error


@pytest.mark.integration
def test_pipelined_exchange_waits_for_a_silent_peer_where_it_drains(tmp_path):
    """telemetry.cross_rank_pipelined: the tree goes up a level per step, so a peer silent mid-run fails the
    next step's collectives, not telemetry's. Silent at the last step's end: rank 0 ends its steps and waits
    where the exchange drains, named "after step 2" (no step 3 was ever begun)."""
    error = _silent_at_step_end(tmp_path, "max_steps=2", "train.save_final=false", "telemetry.cross_rank_pipelined=true")
    assert error.startswith("distributed: telemetry's cross-rank exchange (process group telemetry_cross_rank) "
                            "after step 2 timed out"), error


@pytest.mark.integration
def test_ctrl_c_to_torchrun_saves_the_current_step_and_the_rerun_resumes(tmp_path):
    """Ctrl-C in a terminal: SIGINT to torchrun's whole process group (the agent and both workers; the agent
    then forwards its own SIGINT). Saved like SIGTERM, named in run.json; a rerun resumes from it."""
    out = tmp_path / "run"
    # with the cross-rank tree a level per step: the agreed stop drains it (the SIGTERM test runs the default)
    job = Job(out, "max_steps=40", "train.save_every=0", "telemetry.cross_rank_pipelined=true", nproc=2)
    job.wait_for("step 3/40")
    os.killpg(job.proc.pid, signal.SIGINT)  # as a terminal does: the session's group is torchrun's
    _saved_on_signal_and_resumed(job, "SIGINT", "telemetry.cross_rank_pipelined=true")
    assert "rank 0: interrupted by SIGINT: stopped after step" in job.output, job.output[-3000:]


@pytest.mark.integration
def test_input_error_on_one_rank_while_the_other_trains_is_one_error_line(tmp_path):
    """Rank 1 alone finds bad input after step 2 while rank 0 is busy in step 3's collectives: torchrun
    stops rank 0, so rank 1 must print the `error:` line itself, and only one line is printed."""
    out = tmp_path / "run"
    res = run_cli(out, *FAST, "max_steps=30", nproc=2, timeout=240,
                  env={"FABRIC_HARNESS_CRASH_AFTER_STEP": "2", "FABRIC_HARNESS_CRASH_RANK": "1",
                       "FABRIC_HARNESS_CRASH_MODE": "input"})
    assert res.returncode != 0
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: fault injection: rank 1 refuses its input after step 2 "
                      "(FABRIC_HARNESS_CRASH_MODE=input)"], res.stderr[-3000:]
    # torchrun's summary names the worker that failed first and its exit code 2 (bad input)
    assert re.search(r"rank\s*:\s*1 \(local_rank: 1\)\s*\n\s*exitcode\s*:\s*2", res.stderr), res.stderr[-3000:]
    # rank 0 records rank 1's line, naming it (it recorded only that rank 1 was lost, with gloo's words)
    info = res.run_json()
    assert (info["status"], info["exit_code"]) == ("failed", 2), info["error"]
    assert re.fullmatch(r"rank 1 \(host \S+\) stopped on bad input after step 2: fault injection: rank 1 refuses "
                        r"its input after step 2 \(FABRIC_HARNESS_CRASH_MODE=input\)", info["error"]), info["error"]


@pytest.mark.integration
def test_a_crash_of_one_rank_is_named_in_run_json_with_its_own_words(tmp_path):
    """Rank 1 alone crashes (as out of device memory): run.json said only `rank 1 (host h, pid N) was lost after
    step 2; RuntimeError: ... Connection closed by peer ...`, and why was in rank 1's traceback alone."""
    out = tmp_path / "run"
    res = run_cli(out, *FAST, "max_steps=30", nproc=2, timeout=240,
                  env={"FABRIC_HARNESS_CRASH_AFTER_STEP": "2", "FABRIC_HARNESS_CRASH_RANK": "1",
                       "FABRIC_HARNESS_CRASH_MODE": "raise"})
    assert res.returncode != 0
    info = res.run_json()
    assert (info["status"], info["exit_code"]) == ("failed", 1), info["error"]
    assert re.fullmatch(r"rank 1 \(host \S+\) failed after step 2: RuntimeError: fault injection: rank 1 crashes after "
                        r"step 2 \(FABRIC_HARNESS_CRASH_MODE=raise\)", info["error"]), info["error"]
    assert "Traceback" in res.stderr  # rank 1's own: a crash keeps its traceback


@pytest.mark.integration
def test_refused_override_under_torchrun_is_one_error_line_whichever_rank_fails_first(tmp_path):
    res = run_cli(tmp_path / "run", *FAST, "train.lr=nan", nproc=2, timeout=240)
    assert res.returncode != 0
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: train.lr: got 'nan'; expected a finite number (NaN and infinity are refused)"], \
        res.stderr[-3000:]
