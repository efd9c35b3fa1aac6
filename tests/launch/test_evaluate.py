"""launch.evaluate in-process: the file's validation, the interleaved plan, resume, the transport check and
the statistics. Runs are made by a stand-in launcher that writes run directories (no process starts);
the real launchers are tested in test_evaluate_lab.py and test_evaluate_slurm.py."""
from __future__ import annotations

import json
import os
import signal
import re

import pytest
import yaml

from launch.evaluate import main, run_evaluation
from launch.evaluate.runner import EvaluateError, plan, resume_state
from telemetry.analysis.transport_claims import check_transport
from launch.evaluate.spec import SpecError, load_evaluation
from telemetry.analysis.evaluation_stats import difference, mlperf_mean, paired_difference

from ..conftest import REPO
from ..telemetry.analysis.test_report_formats import assert_same_tables

SWEEP = str(REPO / "recipes" / "collectives.yaml")
TINY = str(REPO / "recipes" / "tiny_llama_lora.yaml")


def write(tmp_path, doc: dict, name: str = "eval.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def good(tmp_path, **extra) -> dict:
    doc = {"name": "two", "launcher": "local", "repeats": 2, "out": str(tmp_path / "out"),
           "variants": [{"name": "fast", "expect_transport": "tcp"},
                        {"name": "slow", "expect_transport": "tcp", "env": {"NCCL_IB_DISABLE": 1}}],
           "workloads": [{"name": "sweep", "recipe": SWEEP, "overrides": ["sweep.max_bytes=4K"]},
                         {"name": "train", "recipe": TINY, "overrides": ["max_steps=3"]}]}
    doc.update(extra)
    return doc


def problems(tmp_path, doc: dict) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_evaluation(write(tmp_path, doc))
    return info.value.problems


def test_a_training_recipe_given_as_the_evaluation_is_one_line():
    """A recipe passed by mistake gave 13 lines, one per recipe key and one per missing evaluation key."""
    with pytest.raises(SpecError) as info:
        load_evaluation(TINY)
    assert info.value.problems == [f"evaluation: {TINY} is a training recipe (it has 'workload'), not an evaluation; "
                                   "allowed: an evaluation file with name, launcher, variants and workloads, whose "
                                   "workloads name recipes (docs/evaluate.md)"]


def test_a_good_file_binds_with_defaults(tmp_path):
    ev = load_evaluation(write(tmp_path, good(tmp_path)))
    assert [v.name for v in ev.variants] == ["fast", "slow"] and ev.variants[1].env == {"NCCL_IB_DISABLE": "1"}
    assert [(w.name, w.sweep) for w in ev.workloads] == [("sweep", True), ("train", False)]
    assert ev.options == {"nproc_per_node": 2, "timeout": 1800}


def test_every_problem_is_one_line_naming_its_key(tmp_path):
    doc = good(tmp_path, launcher="slrum", repeats=0, variantz=[], lab={"nodes": 1})
    doc["variants"][0].update(expect_transport="rcoe", lab={"rate": "1gbit"}, hosts=["n1"])
    doc["variants"][1].update(name="fast", env={"1BAD": "x", "OK": True})
    doc["workloads"][1]["overrides"] = ["max_stepz=3", "output_dir=/tmp/x"]
    doc["workloads"][0]["recipe"] = "no/such.yaml"
    found = problems(tmp_path, doc)
    expected = [
        "variantz: unknown key; did you mean 'variants'? allowed: name, launcher, repeats, out, variants, workloads, "
        "local, lab, slurm",
        "launcher: got 'slrum'; did you mean 'slurm'? allowed: local, lab, slurm",
        "repeats: got 0; expected an integer from 1 to 1000",
        "variants[0].expect_transport: got 'rcoe'; did you mean 'roce'? expected one of ib, infiniband, roce, efa, "
        "socket, tcp, tcpx, intra-node, or an interface name such as eth0 or fab0",
        "variants[1].env: '1BAD' is not an environment variable name (letters, digits, '_')",
        "variants[1].env.OK: got True; expected a string or finite number (quote it: \"1\", \"yes\")",
        "workloads[0].recipe: 'no/such.yaml' is not a file (a path relative to the current directory or to the "
        "evaluation file)",
        "workloads[1].overrides: 'output_dir=/tmp/x': the runner sets output_dir (under `out`); leave it out",
        "variants[1].name: 'fast' is used twice (also variants[0]); names must be unique",
        "lab.nodes: got 1; expected an integer from 2 to 200",
    ]
    for line in expected:
        assert line in found, (line, found)
    # a misspelt launcher is one line: no checks made as if it were another launcher (local was never chosen)
    assert not any("got launcher" in p for p in found), found
    # the recipe's own checks, with the workload named
    assert any(p.startswith("workloads[1] (tiny_llama_lora.yaml with overrides): max_stepz: unknown key; did you mean "
                            "'max_steps'?") for p in found), found
    assert len(found) == len(expected) + 1, found


def test_lab_and_slurm_sections(tmp_path):
    doc = good(tmp_path, launcher="lab", lab={"nodes": 2, "nproc_per_node": 1, "timeout": 60, "nodez": 3})
    doc["variants"][0]["lab"] = {"rate": "1gbit", "mtu": 9000}
    doc["variants"][1]["lab"] = {"rate": "fast", "mtu": 100}
    found = problems(tmp_path, doc)
    assert "lab.nodez: unknown key; did you mean 'nodes'? allowed: nodes, nproc_per_node, timeout" in found
    assert any(p.startswith("variants[1].lab.rate: got 'fast'; expected a tc rate") for p in found), found
    assert "variants[1].lab.mtu: got 100; expected an integer from 576 to 65535" in found
    doc = good(tmp_path, launcher="slurm", slurm={"nodes": 2, "gpus_per_node": 8, "partition": "gpu",
                                                  "srun_args": ["--mpi=none"]})
    doc["variants"][1]["hosts"] = ["node01", "node02"]
    assert problems(tmp_path, doc) == [  # 2 nodes x 8 GPUs: the layout is checked on 16 ranks
        "workloads[1] (train) on variant(s) fast, slow (16 ranks): train.global_batch_size: 16 is not divisible by "
        "micro_batch_size x dp = 4 x 16 = 64; allowed: multiples of 64"]
    doc["workloads"][1]["overrides"].append("train.global_batch_size=64")
    ev = load_evaluation(write(tmp_path, doc))
    assert ev.options["srun_args"] == ["--mpi=none"] and ev.variants[1].hosts == ["node01", "node02"]


def test_absurd_node_and_per_node_counts_are_named_by_their_key(tmp_path):
    """slurm.gpus_per_node 100000 and lab.nodes 100000 were refused only as a workload's batch not dividing
    200000 ranks: the line named the batch, not the typo."""
    doc = good(tmp_path, launcher="slurm", slurm={"nodes": 2, "gpus_per_node": 100000, "nproc_per_node": 2000})
    for variant in doc["variants"]:
        variant.pop("lab", None)
    assert problems(tmp_path, doc) == ["slurm.nproc_per_node: got 2000; expected an integer from 1 to 1024",
                                       "slurm.gpus_per_node: got 100000; expected an integer from 0 to 1024"]
    doc = good(tmp_path, launcher="lab", lab={"nodes": 100000})
    doc["variants"][0]["lab"] = {"rate": "1gbit", "nproc_per_node": 5000}
    assert problems(tmp_path, doc) == ["variants[0].lab.nproc_per_node: got 5000; expected an integer from 1 to 1024",
                                       "lab.nodes: got 100000; expected an integer from 2 to 200"]


def test_a_lab_variant_sets_its_own_ranks_per_node(tmp_path):
    from launch.evaluate.runner import lab_command
    from launch.evaluate.spec import world_size
    doc = good(tmp_path, launcher="lab", lab={"nodes": 2, "nproc_per_node": 1})
    doc["variants"][0]["lab"] = {"rate": "1gbit", "nproc_per_node": 3}
    doc["variants"][1]["lab"] = {"rate": "10mbit", "nodes": 3, "nproc_per_node": 0}
    found = problems(tmp_path, doc)
    assert "variants[1].lab.nproc_per_node: got 0; expected an integer from 1 to 1024" in found, found
    doc["variants"][1]["lab"] = {"rate": "10mbit", "nodes": 3}
    assert problems(tmp_path, doc) == [  # 2 nodes x 3 ranks: the layout is checked on 6 ranks, 3 x 1 on 3
        "workloads[1] (train) on variant(s) fast (6 ranks): train.global_batch_size: 16 is not divisible by "
        "micro_batch_size x dp = 4 x 6 = 24; allowed: multiples of 24",
        "workloads[1] (train) on variant(s) slow (3 ranks): train.global_batch_size: 16 is not divisible by "
        "micro_batch_size x dp = 4 x 3 = 12; allowed: multiples of 12"]
    doc["workloads"][1]["overrides"].append("train.global_batch_size=24")
    ev = load_evaluation(write(tmp_path, doc))
    assert [world_size("lab", ev.options, v) for v in ev.variants] == [6, 3]
    runs = plan(ev)
    fast = next(r for r in runs if r.variant.name == "fast")
    slow = next(r for r in runs if r.variant.name == "slow")
    assert lab_command(ev, fast)[3:7] == ["--nodes", "2", "--nproc-per-node", "3"]
    assert lab_command(ev, slow)[3:7] == ["--nodes", "3", "--nproc-per-node", "1"]


def test_cli_prints_error_lines_and_exits_2(tmp_path, capsys):
    doc = good(tmp_path, repeats="two")
    doc["variants"] = doc["variants"][:1]
    assert main([write(tmp_path, doc)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["error: repeats: got 'two'; expected an integer from 1 to 1000",
                   "error: variants: got 1 item(s); expected a list of at least 2 fabric variants (a comparison "
                   "needs two)"]
    assert main([str(tmp_path / "missing.yaml")]) == 2
    assert capsys.readouterr().err.strip() == (f"error: evaluation: '{tmp_path / 'missing.yaml'}' is not a file (no such file or "
                                                  "directory); allowed: a YAML file")


def test_repeats_are_bounded(tmp_path):
    # repeats: 10**30 (a typo) passed the check and the dry run hung building a plan of that many rounds
    assert problems(tmp_path, good(tmp_path, repeats=10**30)) == [
        "repeats: got 1000000000000000000000000000000; expected an integer from 1 to 1000"]
    assert problems(tmp_path, good(tmp_path, repeats=1001)) == ["repeats: got 1001; expected an integer from 1 to 1000"]
    assert load_evaluation(write(tmp_path, good(tmp_path, repeats=1000))).repeats == 1000


def test_plan_interleaves_rounds_and_rotates_the_variants(tmp_path):
    doc = good(tmp_path, repeats=3)
    doc["variants"].append({"name": "third", "expect_transport": "eth0"})
    runs = plan(load_evaluation(write(tmp_path, doc)))
    order = [(r.round, r.workload.name, r.variant.name) for r in runs]
    assert order[:6] == [(1, "sweep", "fast"), (1, "sweep", "slow"), (1, "sweep", "third"),
                         (1, "train", "fast"), (1, "train", "slow"), (1, "train", "third")]
    assert [v for rnd, w, v in order if w == "sweep" and rnd == 2] == ["slow", "third", "fast"]
    assert [v for rnd, w, v in order if w == "sweep" and rnd == 3] == ["third", "fast", "slow"]
    # over the rounds every variant takes every slot once: drift within a round falls on each alike
    slots = {(v, [x for rnd2, w2, x in order if w2 == "sweep" and rnd2 == rnd].index(v))
             for rnd, w, v in order if w == "sweep"}
    assert len(slots) == 9
    assert [r.index for r in runs] == list(range(1, 19))
    assert runs[7].dir == str(tmp_path / "out" / "runs" / "sweep" / "third" / "r2")


def test_transport_check():
    gloo = {"backend": "gloo", "transport": "tcp", "gloo": {"interface": "fab0"}}
    assert check_transport("tcp", gloo)["verdict"] == "ok"
    assert check_transport("socket", gloo)["verdict"] == "ok"
    assert check_transport("fab0", gloo)["verdict"] == "ok"
    bad = check_transport("roce", gloo)
    assert bad["verdict"] == "mismatch" and bad["reason"] == "expected roce, the run used tcp over fab0"
    assert check_transport("eth0", gloo)["reason"] == "expected interface eth0, the run used fab0"
    assert check_transport("intra-node", {"transport": "loopback", "gloo": {"interface": "lo"}})["verdict"] == "ok"
    ib = {"backend": "nccl", "transport": "infiniband", "nccl": {"devices": [{"device": "mlx5_0"}]}}
    assert check_transport("ib", ib)["verdict"] == "ok" and check_transport("mlx5_0", ib)["verdict"] == "ok"
    assert check_transport("roce", ib)["verdict"] == "mismatch"
    unknown = check_transport("roce", {"backend": "nccl", "transport": None,
                                       "nccl": {"unknown": {"transport": "no connection line"}}})
    assert unknown["verdict"] == "unknown" and "no connection line" in unknown["reason"]


def test_statistics():
    assert mlperf_mean([1.0, 2.0]) is None and mlperf_mean([3.0, 1.0, 2.0]) == 2.0  # 3 runs: the middle one
    assert mlperf_mean([1.0, 2.0, 3.0, 4.0]) == 2.5
    assert mlperf_mean([10.0, 1.0, 2.0, 3.0, 100.0]) == pytest.approx(5.0)
    d = difference([1, 2, 3, 4, 5], [2, 3, 4, 5, 6])
    # equal variances 2.5, n 5: standard error 1, Welch df 8, t(0.975, 8) = 2.306004
    assert d["diff"] == pytest.approx(1.0) and d["pct"] == pytest.approx(1 / 3)
    assert d["interval"] == pytest.approx([1 - 2.306004, 1 + 2.306004], abs=1e-5)
    assert d["excludes_zero"] is False
    short = difference([1, 2], [3, 4])
    assert short["interval"] is None and short["reason"] == "fewer than 3 runs of each"
    # 3 runs each: usable, if wide (t(0.975, 2 * ...) from Welch's df 4 here: 2.776445, standard error 1)
    three = difference([1, 2, 3], [3, 4, 5])
    assert three["interval"] == pytest.approx([2 - 2.776445 * (2 / 3) ** 0.5, 2 + 2.776445 * (2 / 3) ** 0.5],
                                              abs=1e-5)



def test_differences_paired_by_round():
    """A drift shared by each round's runs (1..5 here) widens Welch's interval past 0; paired by round it
    cancels: mean difference 1, sd of the differences 0.0790569, t(0.975, 4) = 2.776445."""
    a = {r: float(r) for r in range(1, 6)}
    b = {r: a[r] + d for r, d in zip(range(1, 6), (1.0, 1.1, 0.9, 1.05, 0.95))}
    welch = difference(list(a.values()), list(b.values()))
    assert welch["excludes_zero"] is False
    paired = paired_difference(a, b)
    half = 2.776445 * 0.0790569 / 5 ** 0.5
    assert paired["rounds"] == 5 and paired["diff"] == pytest.approx(1.0)
    assert paired["interval"] == pytest.approx([1.0 - half, 1.0 + half], abs=1e-5) and paired["excludes_zero"]
    assert paired["pct"] == pytest.approx(1.0 / 3.0)
    # only rounds where both completed pair up; too few rounds give the difference with the reason
    short = paired_difference({1: 1.0, 2: 2.0, 3: 3.0}, {2: 2.5, 3: 3.5, 4: 9.0})
    assert short["rounds"] == 2 and short["diff"] == pytest.approx(0.5) and short["interval"] is None
    assert short["reason"] == "fewer than 3 rounds in which both completed"
    assert paired_difference({1: 1.0}, {2: 1.0})["reason"] == "no round in which both completed"


class FakeLauncher:
    """Writes the run directory a launcher would: run.json (status, fabric identity from FAKE_TRANSPORT),
    metrics.jsonl or collectives.json. Fails the runs listed in `fail` (by output directory)."""

    def __init__(self, fail=()):
        self.fail, self.calls = set(fail), []

    def __call__(self, cmd, env, log, timeout, verbose):
        out = next(a.split("=", 1)[1] for a in cmd if a.startswith("output_dir="))
        self.calls.append(out)
        status = "failed" if out in self.fail else "completed"
        transport = env.get("FAKE_TRANSPORT", "tcp")
        info = {"status": status, "fabric": {"backend": "gloo", "transport": transport,
                                             "gloo": {"interface": "lo" if transport == "loopback" else "fab0"}}}
        with open(os.path.join(out, "run.json"), "w") as f:
            json.dump(info, f)
        slow = 2.0 if "slow" in out else 1.0
        if "collectives" in " ".join(cmd):
            json.dump({"ops": {"all_reduce": {"avg_busbw_GBps": 1.0 / slow}}}, open(os.path.join(out, "collectives.json"), "w"))
        else:
            with open(os.path.join(out, "metrics.jsonl"), "w") as f:
                for step in (1, 2, 3):
                    f.write(json.dumps({"step": step, "step_time_s": 0.1 * slow * step}) + "\n")
        return (0 if status == "completed" else 1), False


def test_resume_keeps_complete_runs_and_reruns_the_rest(tmp_path, capsys):
    ev = load_evaluation(write(tmp_path, good(tmp_path)))
    first = FakeLauncher(fail={str(tmp_path / "out" / "runs" / "train" / "slow" / "r2")})
    assert run_evaluation(ev, launch=first, render=False) == 1
    out = capsys.readouterr().out
    assert "[evaluate] round 1/2: variant fast x workload sweep (run 1/8) ..." in out
    assert "[evaluate] round 2/2: variant slow x workload sweep (run 5/8) ..." in out  # rotated
    assert "FAILED (exit 1, run.json status failed)" in out
    record = json.loads((tmp_path / "out" / "evaluation.json").read_text())
    assert [r["index"] for r in record["failed"]] == [7]  # round 2 starts with slow
    # the same command again: 7 kept, the failed one set aside and run again
    second = FakeLauncher()
    assert run_evaluation(ev, launch=second, render=False) == 0
    out = capsys.readouterr().out
    assert second.calls == [str(tmp_path / "out" / "runs" / "train" / "slow" / "r2")]
    assert out.count("kept (completed earlier)") == 7
    assert (tmp_path / "out" / "runs" / "train" / "slow" / "r2.attempt-1" / "run.json").exists()
    record = json.loads((tmp_path / "out" / "evaluation.json").read_text())
    assert record["exit_code"] == 0 and record["failed"] == []
    assert all(v["verdict"] == "ok" for v in record["verdicts"].values())
    stats = record["statistics"]["train"]
    assert stats["variants"]["slow"]["mean"] == pytest.approx(0.5) and stats["variants"]["fast"]["n"] == 2
    assert stats["differences"][0]["pct"] == pytest.approx(1.0)
    assert re.search(r"train\s+slow\s+tcp\s+tcp\s+ok\s+2/2\s+iteration time \(s\)\s+0\.5\s+0\s+\+100\.0%", out), out
    assert "Transport check passed" in (tmp_path / "out" / "evaluation.html").read_text()


def test_a_wrong_claim_is_flagged_and_exits_3(tmp_path, capsys):
    doc = good(tmp_path, repeats=1)
    doc["variants"][1]["env"] = {"FAKE_TRANSPORT": "loopback"}
    ev = load_evaluation(write(tmp_path, doc))
    assert run_evaluation(ev, launch=FakeLauncher(), render=False) == 3
    out = capsys.readouterr().out
    assert "TRANSPORT MISMATCH: expected tcp, the run used loopback over lo" in out
    page = (tmp_path / "out" / "evaluation.html").read_text()
    assert "<div class='banner bad'>TRANSPORT MISMATCH: variant slow claims tcp" in page
    assert "<td class='bad'>MISMATCH" in page and ".banner.bad{background:#fdd;border:2px solid #c00;color:#c00}" in page
    assert "**[X] TRANSPORT MISMATCH: variant slow" in (tmp_path / "out" / "evaluation.md").read_text()
    record = json.loads((tmp_path / "out" / "evaluation.json").read_text())
    assert record["mismatched_variants"] == ["slow"] and record["exit_code"] == 3


def test_a_kept_run_from_another_setting_is_refused(tmp_path):
    doc = good(tmp_path, repeats=1)
    ev = load_evaluation(write(tmp_path, doc))
    assert run_evaluation(ev, launch=FakeLauncher(), render=False) == 0
    doc["variants"][1]["env"] = {"NCCL_IB_DISABLE": "0"}
    ev = load_evaluation(write(tmp_path, doc))
    with pytest.raises(EvaluateError, match=r"runs/sweep/slow/r1: a completed run that was measured with another "
                                            r"setting \(env: \{'NCCL_IB_DISABLE': '1'\} -> \{'NCCL_IB_DISABLE': '0'\}\)"):
        resume_state(ev, plan(ev))
    # the claim is not part of the setting: changing it re-checks the kept runs
    doc["variants"][1]["env"] = {"NCCL_IB_DISABLE": 1}
    doc["variants"][1]["expect_transport"] = "roce"
    ev = load_evaluation(write(tmp_path, doc))
    assert run_evaluation(ev, launch=FakeLauncher(), render=False) == 3


def test_a_run_still_held_by_a_live_job_is_not_moved_aside(tmp_path):
    """Round 9 of the lab: launch.evaluate killed with kill -9 left its lab running; rerun, it moved the live
    run's directory aside as "an incomplete earlier attempt" and started another lab on the same path."""
    ev = load_evaluation(write(tmp_path, good(tmp_path, repeats=1)))
    live = next(run for run in plan(ev) if run.variant.name == "slow")
    os.makedirs(live.dir)
    with open(os.path.join(live.dir, "run.json"), "w") as f:
        json.dump({"status": "running"}, f)
    with open(os.path.join(live.dir, "run.lock"), "w") as f:  # a live pid holds it, as the killed run's rank 0 did
        json.dump({"owner": "torchrun fh1 at 10.213.1.1:29400", "host": "lab-node0", "pid": os.getpid(),
                   "start_time": "2026-11-29T22:31:07+00:00"}, f)
    with pytest.raises(EvaluateError) as info:
        resume_state(ev, plan(ev))
    assert str(info.value).startswith(f"out: {live.dir!r} is in use by a live run (torchrun fh1 at 10.213.1.1:29400, "
                                      f"pid {os.getpid()} on host lab-node0, ")
    assert str(info.value).endswith("(an evaluation stopped with kill -9 leaves its lab running); allowed: wait for "
                                    "it to end, stop it, or another `out`")
    os.remove(os.path.join(live.dir, "run.lock"))
    assert resume_state(ev, plan(ev))[live.index] == "run"


def test_dry_run_prints_the_plan(tmp_path, capsys):
    ev = load_evaluation(write(tmp_path, good(tmp_path)))
    assert run_evaluation(ev, dry_run=True) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 9 and lines[2].startswith("[evaluate]   run  round 1/2: variant slow x workload sweep (run 2/8)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "recipes" / "evaluations").glob("*.yaml")))
def test_example_files_are_valid(name, monkeypatch):
    monkeypatch.chdir(REPO)  # their recipe paths are relative to the checkout
    ev = load_evaluation(str(REPO / "recipes" / "evaluations" / name))
    assert len(ev.variants) >= 2 and ev.workloads


def test_five_repeats_add_the_mlperf_mean_and_intervals(tmp_path, capsys):
    doc = good(tmp_path, repeats=5)
    doc["workloads"] = doc["workloads"][1:]
    ev = load_evaluation(write(tmp_path, doc))

    class Noisy(FakeLauncher):  # repeat N runs N% slower: a spread for the interval
        def __call__(self, cmd, env, log, timeout, verbose):
            code = super().__call__(cmd, env, log, timeout, verbose)
            out = next(a.split("=", 1)[1] for a in cmd if a.startswith("output_dir="))
            k = 1 + int(out.rsplit("/r", 1)[1]) / 100
            rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
            with open(os.path.join(out, "metrics.jsonl"), "w") as f:
                f.writelines(json.dumps({**r, "step_time_s": r["step_time_s"] * k}) + "\n" for r in rows)
            return code

    assert run_evaluation(ev, launch=Noisy(), render=False) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("workload"))
    assert "  mlperf mean  vs fast" in header and header.rstrip().endswith("95% interval")
    stats = json.loads((tmp_path / "out" / "evaluation.json").read_text())["statistics"]["train"]
    fast = stats["variants"]["fast"]
    assert fast["n"] == 5 and fast["mlperf_mean"] == pytest.approx(0.25 * 1.03)  # median of steps 2, 3; repeats 2..4 kept
    (pair,) = stats["differences"]
    assert pair["excludes_zero"] and pair["pct_interval"][0] < 1.0 < pair["pct_interval"][1]
    # every round is slower for both variants alike: paired by round, the interval is narrower
    paired = pair["paired"]
    assert paired["rounds"] == 5 and paired["excludes_zero"]
    assert paired["interval"][1] - paired["interval"][0] < pair["interval"][1] - pair["interval"][0]
    page = (tmp_path / "out" / "evaluation.md").read_text()
    assert "MLPerf mean (best, worst dropped)" in page and "| slow vs fast | +100.0% | \\[+" in page
    assert assert_same_tables(tmp_path / "out", "evaluation") >= 2  # the .md renders to the .html's cells


def test_file_read_with_the_recipe_readers_limits(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text(yaml.safe_dump(good(tmp_path), sort_keys=False) + "repeats: 3\n")
    with pytest.raises(SpecError) as info:
        load_evaluation(str(path))
    assert len(info.value.problems) == 1 and "duplicate key 'repeats' (first at line 3)" in info.value.problems[0]
    path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(SpecError) as info:
        load_evaluation(str(path))
    assert info.value.problems == [f"evaluation: {path} is not UTF-8 text (byte 0xe9 at line 1); allowed: a UTF-8 "
                                   "YAML file"]


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), 0])
def test_timeout_must_be_finite_seconds(tmp_path, timeout):
    assert problems(tmp_path, good(tmp_path, local={"timeout": timeout})) == [
        f"local.timeout: got {timeout!r}; expected seconds > 0 per run"]


def test_a_timeout_with_a_unit_says_what_to_write(tmp_path):
    assert problems(tmp_path, good(tmp_path, local={"timeout": "90min"})) == [
        "local.timeout: got '90min'; expected seconds > 0 per run (for 90 minutes write 5400)"]


def test_an_output_directory_that_cannot_be_made(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main([write(tmp_path, good(tmp_path, out=str(blocker))), "--dry-run"]) == 2
    assert capsys.readouterr().err == f"error: out: {str(blocker)!r} is a file, not a directory; allowed: a new or " \
                                      "existing directory\n"


def test_argument_mistakes_are_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2 and capsys.readouterr().err == (
        "error: the following arguments are required: evaluation; see python -m launch.evaluate --help\n")


def test_a_variants_fabric_config_reaches_its_runs_as_overrides(tmp_path):
    from launch.evaluate.runner import trainer_args
    doc = good(tmp_path, repeats=1)
    doc["variants"][0]["fabric_config"] = {"routing": "ecmp", "pfc_priority": 3, "dcqcn": True}
    ev = load_evaluation(write(tmp_path, doc))
    first = next(r for r in plan(ev) if r.variant.name == "fast")
    args = trainer_args(first)
    assert {"fabric.config.routing=ecmp", "fabric.config.pfc_priority=3", "fabric.config.dcqcn=true"} <= set(args)
    doc["variants"][1]["fabric_config"] = {"routeing": "ecmp", "switch_os": ["x"]}
    got = problems(tmp_path, doc)
    assert any(p.startswith("variants[1].fabric_config.routeing: unknown key; did you mean 'routing'?") for p in got), got
    assert any("fabric_config.switch_os: got ['x']" in p for p in got), got


def test_olympic_mean_interval_and_ranking_at_three_repeats(tmp_path):
    from telemetry.analysis import evaluation_stats as st
    # t(0.975, 2) = 4.302653; sd 1, n 3
    assert st.mean_interval([1.0, 2.0, 3.0]) == pytest.approx([2 - 4.302653 / 3 ** 0.5, 2 + 4.302653 / 3 ** 0.5],
                                                              abs=1e-5)
    assert st.mean_interval([1.0, 2.0]) is None
    runs = [{"variant": "roce", "round": r, "value": v} for r, v in ((1, 30.0), (2, 10.0), (3, 20.0))] + \
        [{"variant": "tcp", "round": r, "value": v} for r, v in ((1, 50.0), (2, 40.0))]
    ranked = st.rank_runs(runs)
    assert [(r["rank"], r["variant"], r["value"]) for r in ranked] == [
        (1, "roce", 10.0), (2, "roce", 20.0), (3, "roce", 30.0), (4, "tcp", 40.0), (5, "tcp", 50.0)]
    assert ranked[0]["dropped"].startswith("best") and ranked[2]["dropped"].startswith("worst")
    assert ranked[1]["dropped"] is None and ranked[3]["dropped"] is None  # tcp: 2 runs, nothing dropped
    s = st.summarize_runs(runs, ["roce", "tcp"])
    assert s["variants"]["roce"]["mlperf_mean"] == 20.0 and s["ranking"][0]["value"] == 10.0
    # a recipe with a target: the run's headline is its time to train, as MLPerf scores it
    from ..telemetry.recorded import write_run
    run = write_run(tmp_path / "ttt", train_extra={"target_eval_loss": 2.7}, info_extra={"final": {
        "target_reached_step": 4}}, times=True)
    m = st.run_metric(str(run), sweep=False)
    assert m["name"] == "time to train (eval_loss 2.7)" and m["value"] == pytest.approx(5.0)
    missed = write_run(tmp_path / "missed", train_extra={"target_eval_loss": 2.7}, times=True)
    assert st.run_metric(str(missed), sweep=False)["value"] is None


def test_each_workload_must_fit_each_variants_world_before_any_run(tmp_path):
    """A lab variant with its own node count gets the layout check the trainer makes on every rank: here,
    not after the other variants' runs (the 3-node run failed with exit 2 after two runs had taken minutes)."""
    doc = good(tmp_path, launcher="lab", lab={"nodes": 2, "nproc_per_node": 1})
    doc["variants"] = [{"name": "none", "expect_transport": "fab0", "lab": {"rate": "none"}},
                       {"name": "10mbit-3", "expect_transport": "tcp", "lab": {"rate": "10mbit", "nodes": 3}},
                       {"name": "1gbit-5", "expect_transport": "tcp", "lab": {"rate": "1gbit", "nodes": 5}},
                       {"name": "1gbit-4", "expect_transport": "tcp", "lab": {"rate": "1gbit", "nodes": 4}}]
    found = problems(tmp_path, doc)
    assert found == [
        "workloads[1] (train) on variant(s) 10mbit-3 (3 ranks): train.global_batch_size: 16 is not divisible by "
        "micro_batch_size x dp = 4 x 3 = 12; allowed: multiples of 12",
        "workloads[1] (train) on variant(s) 1gbit-5 (5 ranks): train.global_batch_size: 16 is not divisible by "
        "micro_batch_size x dp = 4 x 5 = 20; allowed: multiples of 20"], found  # the sweep fits any world
    doc["workloads"][1]["overrides"].append("train.global_batch_size=240")
    ev = load_evaluation(write(tmp_path, doc))
    assert [v.lab for v in ev.variants] == [{"rate": "none"}, {"rate": "10mbit", "nodes": 3},
                                            {"rate": "1gbit", "nodes": 5}, {"rate": "1gbit", "nodes": 4}]


def test_variant_names_and_rates_the_lab_would_refuse(tmp_path):
    doc = good(tmp_path, launcher="lab")
    doc["variants"] = [{"name": "fast link", "expect_transport": "tcp", "lab": {"rate": "7bit"}},
                       {"name": "schnell-ü", "expect_transport": "tcp", "lab": {"rate": "1Gbit"}},
                       {"name": "a", "expect_transport": "tcp"}, {"name": "a", "expect_transport": "tcp"}]
    found = problems(tmp_path, doc)
    assert found == [
        "variants[0].name: got 'fast link'; expected a name of letters, digits, '_', '.' or '-' (up to 64, starting "
        "with a letter or digit): it names run directories and report labels",
        "variants[0].lab.rate: got '7bit'; tc shapes in whole bytes per second: expected at least 8bit (e.g. "
        "100mbit, 1gbit), or 'none' for unshaped links",
        "variants[1].name: got 'schnell-ü'; expected a name of letters, digits, '_', '.' or '-' (up to 64, starting "
        "with a letter or digit): it names run directories and report labels",
        "variants[3].name: 'a' is used twice (also variants[2]); names must be unique"], found


class FakeTimedOutLab(FakeLauncher):
    """The lab past its --timeout: every node stopped, the job recorded as interrupted, exit 124."""

    def __call__(self, cmd, env, log, timeout, verbose):
        super().__call__(cmd, env, log, timeout, verbose)
        out = next(a.split("=", 1)[1] for a in cmd if a.startswith("output_dir="))
        with open(os.path.join(out, "run.json"), "w") as f:
            json.dump({"status": "interrupted"}, f)
        return 124, False


def test_a_lab_stopped_by_its_own_timeout_is_reported_as_timed_out(tmp_path, capsys):
    doc = good(tmp_path, launcher="lab", repeats=1)
    doc["workloads"] = doc["workloads"][1:]
    ev = load_evaluation(write(tmp_path, doc))
    assert run_evaluation(ev, launch=FakeTimedOutLab(), render=False) == 1
    assert "FAILED (timed out, run.json status interrupted)" in capsys.readouterr().out


def test_a_lab_variant_without_a_rate_is_named_unshaped_beside_shaped_ones(tmp_path):
    """Round 6 of the lab: variants `plain` (no `lab:`) and `slow` (`lab: {rate: 2Mibit}`); the report's setting
    column read `-` for plain, which ran a lab with unshaped links."""
    doc = good(tmp_path, launcher="lab", repeats=1)
    doc["variants"] = [{"name": "plain", "expect_transport": "tcp"},
                       {"name": "slow", "expect_transport": "tcp", "lab": {"rate": "2Mibit"}}]
    doc["workloads"] = doc["workloads"][1:]
    ev = load_evaluation(write(tmp_path, doc))
    assert run_evaluation(ev, launch=FakeLauncher(), render=False) == 0
    text = (tmp_path / "out" / "evaluation.md").read_text()
    assert "| plain | lab rate none (unshaped, the default) | tcp |" in text
    assert "| slow | lab rate 2Mibit (2.097 Mbit/s) | tcp |" in text


def test_a_variant_on_the_files_layout_says_so_beside_one_with_its_own(tmp_path):
    """Round 9: `fast` ran on the file's 3 nodes and its setting read `lab rate 1.5Gbit` next to `two-by-two`'s
    `lab nodes 2, lab nproc_per_node 2`, as if it ran on the lab's default 2."""
    doc = good(tmp_path, launcher="lab", repeats=1)
    doc["lab"] = {"nodes": 3}
    doc["variants"] = [{"name": "fast", "expect_transport": "tcp", "lab": {"rate": "1.5Gbit"}},
                       {"name": "pairs", "expect_transport": "tcp", "lab": {"rate": "25mbit", "nodes": 2,
                                                                            "nproc_per_node": 2}}]
    doc["workloads"] = [{**doc["workloads"][1], "overrides": ["max_steps=3", "train.global_batch_size=48"]}]
    ev = load_evaluation(write(tmp_path, doc))
    assert run_evaluation(ev, launch=FakeLauncher(), render=False) == 0
    text = (tmp_path / "out" / "evaluation.md").read_text()
    assert ("| fast | lab nodes 3 (the evaluation's), lab nproc_per_node 1 (the evaluation's), lab rate "
            "1.5Gbit | tcp |") in text, text
    assert "| pairs | lab rate 25mbit, lab nodes 2, lab nproc_per_node 2 | tcp |" in text


def test_a_slow_links_busbw_is_shown_in_a_unit_it_reads_in():
    """Rounds 5 and 6 of the lab: a 5mbit sweep's busbw read `0.0005685 ± 3.1e-06` GB/s in the console and
    evaluation.md; evaluation.json keeps GB/s, the tables show MB/s or kB/s when every value is below 0.01."""
    from launch.evaluate.summary import readable
    from telemetry.analysis import evaluation_stats as st
    runs = [{"variant": v, "round": i, "value": x, "index": i}
            for i, (v, x) in enumerate([("small", 0.0005663), ("small", 0.0005707), ("wide", 0.002329),
                                        ("wide", 0.002205)])]
    stats = {"metric": {"name": "all_reduce avg busbw", "unit": "GB/s", "higher_is_better": True},
             **st.summarize_runs(runs, ["small", "wide"], True)}
    shown = readable(stats)
    assert shown["metric"]["unit"] == "MB/s" and shown["variants"]["small"]["mean"] == pytest.approx(0.5685)
    assert [r["value"] for r in shown["ranking"]] == pytest.approx([2.329, 2.205, 0.5707, 0.5663])
    assert stats["metric"]["unit"] == "GB/s" and stats["variants"]["small"]["mean"] == pytest.approx(0.0005685)
    slow = {**stats, "variants": {k: {**d, "values": [x / 10 for x in d["values"]]} for k, d in stats["variants"].items()}}
    assert readable(slow)["metric"]["unit"] == "kB/s"
    fast = {**stats, "variants": {"a": {**stats["variants"]["wide"], "values": [1.5]}}}
    assert readable(fast) is fast  # a busbw that reads well in GB/s stays as it is
    # round 8: 1gbit, 20mbit and 5mbit variants in one evaluation read 0.1979, 0.002302 and 0.0005788 GB/s
    mixed = {**stats, "variants": {"gig": {**stats["variants"]["wide"], "values": [0.1979], "mean": 0.1979},
                                   "small": {**stats["variants"]["small"], "values": [0.0005788], "mean": 0.0005788}}}
    shown = readable(mixed)
    assert shown["metric"]["unit"] == "MB/s" and shown["variants"]["gig"]["mean"] == pytest.approx(197.9)
    assert shown["variants"]["small"]["mean"] == pytest.approx(0.5788)


def test_a_second_evaluation_into_a_live_ones_out_is_refused(tmp_path, capsys, monkeypatch):
    """Round 6 of the lab: two `launch.evaluate FILE --out D` at once each moved the other's live run aside as
    "an incomplete earlier attempt" and wrote evaluation.json over the other's (one completed, one failed)."""
    import socket

    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.delenv("FABRIC_HARNESS_NODE", raising=False)
    (out / "run.lock").write_text(json.dumps({"owner": "pid 1 on elsewhere", "pid": os.getpid(),
                                              "host": socket.gethostname(), "start_time": "2026-11-29T16:06:00+00:00"}))
    path = write(tmp_path, good(tmp_path, out=str(out)))
    assert main([path, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --out: {str(out)!r} is in use by a live evaluation (pid 1 on "
                                               "elsewhere"), err
    assert err[0].endswith("allowed: wait for it to end, stop it, or another --out")
    assert main([path, "--dry-run"]) == 0  # a dry run only reads: it may look while the other runs


class FakeSignalledLauncher(FakeLauncher):
    """The evaluation itself receives a signal while its first run is under way (scancel, kill, Ctrl-C)."""

    def __init__(self, signum):
        super().__init__()
        self.signum = signum

    def __call__(self, cmd, env, log, timeout, verbose):
        code = super().__call__(cmd, env, log, timeout, verbose)
        os.kill(os.getpid(), self.signum)
        return code


@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signalled_evaluation_exits_as_a_shell_reports_the_signal(tmp_path, capsys, signum, code):
    doc = good(tmp_path, repeats=2)
    ev = load_evaluation(write(tmp_path, doc))
    assert run_evaluation(ev, launch=FakeSignalledLauncher(signum), render=False) == code
    assert "interrupted; the runs so far are kept" in capsys.readouterr().out
    record = json.loads((tmp_path / "out" / "evaluation.json").read_text())
    assert record["exit_code"] == code and len(record["runs"]) == 1  # the run under way when the signal came


def test_a_workload_override_the_runner_would_repeat_is_refused(tmp_path):
    """The runner appends each variant's fabric_config as fabric.config.KEY=...: a workload setting one too would
    put the key twice on the trainer's command line (the last silently winning); a key given twice is refused."""
    doc = good(tmp_path)
    doc["workloads"][1]["overrides"] = ["fabric.config.routing=ecmp", "max_steps=3", "max_steps=5"]
    found = problems(tmp_path, doc)
    assert ("workloads[1].overrides: 'fabric.config.routing=ecmp': a fabric's configuration belongs to the variants "
            "(variants[].fabric_config), which the runner gives every run; leave it out") in found, found
    assert "workloads[1].overrides: max_steps is given twice ('max_steps=3' and 'max_steps=5'); allowed: each key " \
           "once" in found, found


def test_a_lab_variant_with_one_slow_node_checked_by_the_labs_rules(tmp_path):
    """The lab has --slow-node/--slow-rate; a variant could not ask for them (`unknown key`). A 2-node variant at
    100mbit with node 1 at 2mbit ran at 0.646 s against 0.082 s healthy, the projection from the healthy run
    within 2.7%."""
    from launch.evaluate.runner import lab_command
    doc = good(tmp_path, launcher="lab", lab={"nodes": 2})
    doc["variants"][0]["lab"] = {"rate": "10mbit", "slow_node": 2, "slow_rate": "2mbit"}
    doc["variants"][1]["lab"] = {"rate": "10mbit", "slow_node": 1, "slow_rate": "1gbit"}
    assert problems(tmp_path, doc) == [
        "variants[0].lab.slow_node: got 2; allowed: a node from 0 to 1",
        "variants[1].lab.slow_rate: got '1gbit', not slower than lab.rate '10mbit'; expected a rate below lab.rate "
        "(one slow link among healthy ones)"]
    doc["variants"][0]["lab"] = {"rate": "10mbit", "slow_node": 1}
    doc["variants"][1]["lab"] = {"rate": "10mbit", "nodes": 3, "slow_node": 2, "slow_rate": "2mbit"}
    assert problems(tmp_path, doc) == ["variants[0].lab: slow_node and slow_rate go together: the node whose link "
                                       "is slow and its rate"]
    doc["variants"][0]["lab"] = {"rate": "10mbit"}
    doc["workloads"][1]["overrides"].append("train.global_batch_size=24")
    ev = load_evaluation(write(tmp_path, doc))
    slow = next(r for r in plan(ev) if r.variant.name == "slow")
    cmd = lab_command(ev, slow)
    assert cmd[cmd.index("--slow-node") + 1:cmd.index("--slow-node") + 4] == ["2", "--slow-rate", "2mbit"]


def test_a_slow_link_problem_names_its_own_variant_after_one_that_is_no_mapping(tmp_path):
    """A variant that is no mapping is left out of the list: the slow-link check counted the rest from 0 and named
    variants[0] for the problem of variants[1]."""
    doc = good(tmp_path, launcher="lab", lab={"nodes": 2})
    doc["variants"] = ["not a mapping", {"name": "fast", "lab": {"rate": "10mbit", "slow_node": 2, "slow_rate": "2mbit"}},
                       {"name": "slow", "lab": {"rate": "10mbit"}}]
    found = problems(tmp_path, doc)
    assert "variants[1].lab.slow_node: got 2; allowed: a node from 0 to 1" in found, found


def test_an_out_reused_by_another_evaluation_or_blocked_is_refused(tmp_path, capsys, monkeypatch):
    """Each a dry run with exit 0 before: `out` holding another evaluation's evaluation.json (its summary was
    replaced at the end), a file where out/runs goes (the real run stopped at makedirs)."""
    doc = good(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "evaluation.json").write_text(json.dumps({"name": "another"}))
    assert main([write(tmp_path, doc), "--dry-run"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: out: {str(tmp_path / 'out')!r} holds the evaluation 'another' (its evaluation.json); this one is "
        "'two'; allowed: another `out`, or the name of the evaluation recorded there")
    (tmp_path / "out" / "evaluation.json").write_text('{"name": "tw')  # half-written: rewritten from the runs
    assert main([write(tmp_path, doc), "--dry-run"]) == 0
    (tmp_path / "out" / "runs").write_text("x")
    assert main([write(tmp_path, doc), "--dry-run"]) == 2
    assert "out/runs' is a file, so " in capsys.readouterr().err
    # `~` in out reads as the shell reads it (it was a directory named '~' under the working directory)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert load_evaluation(write(tmp_path, {**doc, "out": "~/e"})).out == str(tmp_path / "home" / "e")


def test_a_name_used_twice_is_named_at_its_index_in_the_file(tmp_path):
    """An entry the checks dropped (not a mapping) shifted the index the 'used twice' line gave."""
    doc = good(tmp_path)
    doc["variants"] = ["not-a-mapping", {"name": "a"}, {"name": "a"}]
    found = problems(tmp_path, doc)
    assert "variants[2].name: 'a' is used twice (also variants[1]); names must be unique" in found, found


@pytest.mark.parametrize("env,line", [
    ({"WORLD_SIZE": "4"}, "variants[1].env.WORLD_SIZE: set by the launcher for each rank (torchrun, srun, the lab); "
     "allowed: variables the runs read as they are (NCCL_*, GLOO_*, UCX_*, ...)"),
    ({"MASTER_PORT": 29501}, "variants[1].env.MASTER_PORT: set by the launcher for each rank"),
    ({"NCCL_ALGO": "Ring\nTree"}, "variants[1].env.NCCL_ALGO: got 'Ring\\nTree', with a control character (a newline "
     "or NUL); allowed: one line of printable text"),
    ({"NCCL_ALGO": "Ring\x00"}, "variants[1].env.NCCL_ALGO: got 'Ring\\x00', with a control character"),
    ({"NCCL_BUFFSIZE": float("nan")}, "variants[1].env.NCCL_BUFFSIZE: got nan; expected a string or finite number"),
])
def test_a_variant_env_the_launcher_owns_or_no_process_takes_is_refused(tmp_path, env, line):
    """A variant's WORLD_SIZE was overwritten by torchrun without a word; a NUL in a value was a ValueError
    traceback when the run's process started, a newline or NaN reached NCCL as is."""
    doc = good(tmp_path)
    doc["variants"][1]["env"] = env
    found = problems(tmp_path, doc)
    assert len(found) == 1 and found[0].startswith(line), found


def test_a_slurm_host_named_twice_and_an_out_with_a_newline_are_refused(tmp_path):
    doc = good(tmp_path, launcher="slurm", slurm={"nodes": 2}, out=str(tmp_path / "a\nb"))
    doc["variants"][0]["hosts"] = ["n1", "n1"]
    found = problems(tmp_path, doc)
    assert "variants[0].hosts: n1 named twice; allowed: each node once (a node runs its ranks once, with " \
           "slurm.nproc_per_node of them)" in found, found
    assert any(p.startswith("out: got ") and "with a control character" in p for p in found), found
    assert problems(tmp_path, good(tmp_path, launcher="LAB")) == [
        "launcher: got 'LAB'; did you mean 'lab'? allowed: local, lab, slurm"]


def test_slurm_launcher_without_the_slurm_commands_is_one_line(tmp_path, capsys, monkeypatch):
    """A host without Slurm's client commands (a laptop, a pod): one line naming them and what to do instead."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert main([write(tmp_path, good(tmp_path, launcher="slurm"))]) == 2
    err = capsys.readouterr().err
    assert err == ("error: launcher slurm: srun, scontrol, scancel, salloc not found on PATH (the Slurm client "
                   "commands); allowed: run it where they are (a Slurm login node, or inside salloc/sbatch), or "
                   "launcher local or lab\n"), err


def test_a_difference_interval_below_minus_100_percent_is_named():
    """Lab round 7 (lab_two_rates at 3 repeats): the sweep's all_reduce avg busbw, 3.4-6.7 MB/s on 1gbit against
    0.58-0.99 MB/s on 10mbit, read `[-173.8%, +9.0%] (includes 0)`: a busbw under zero; the line now says why."""
    from telemetry.analysis import evaluation_stats as st
    from launch.evaluate.summary import fmt_diff
    runs = [{"variant": "1gbit", "round": r, "value": v} for r, v in ((1, 3.417), (2, 3.897), (3, 6.656))] + \
        [{"variant": "10mbit", "round": r, "value": v} for r, v in ((1, 0.8895), (2, 0.5811), (3, 0.9875))]
    s = st.summarize_runs(runs, ["1gbit", "10mbit"])
    pct, ci = fmt_diff(s["differences"][0])
    assert pct == "-82.4%" and ci.startswith("[-17") and "(includes 0)" in ci
    # round 8: the same runs as a ratio (Welch on their logs) bound the fall, which the difference could not
    assert ci.endswith("(below -100%, a value under zero only as a difference of the means; as a ratio of the runs "
                       "(Welch on their logs): [-91.4%, -62.5%])"), ci
    no_ratio = {**s["differences"][0], "ratio_pct_interval": None}
    assert fmt_diff(no_ratio)[1].endswith("(below -100%, a value under zero: the runs spread too widely to bound a "
                                          "fall; more repeats narrow it)")
    assert "below -100%" not in fmt_diff({"pct": -0.5, "pct_interval": [-0.9, -0.1], "excludes_zero": True})[1]


def test_five_repeats_of_a_large_fall_are_bounded_as_a_ratio():
    """Lab round 8: 1Gbit (2 nodes) against 100mbit (3 nodes), an all_reduce sweep x 5 repeats: the Welch interval
    of the difference over the first mean read [-101.2%, -80.3%] for a ratio of 0.083-0.099 in every round."""
    from telemetry.analysis import evaluation_stats as st
    g1 = [0.13683, 0.13257, 0.11980, 0.11449, 0.11454]
    m100 = [0.011301, 0.011392, 0.011707, 0.011301, 0.011348]
    d = st.difference(g1, m100)
    assert [round(x, 3) for x in d["pct_interval"]] == [-1.012, -0.803]
    assert [round(x, 3) for x in d["ratio_pct_interval"]] == [-0.917, -0.897]
    assert st.difference([1.0, 2.0, 3.0], [0.0, 1.0, 2.0])["ratio_pct_interval"] is None  # a zero: no logs


def test_a_paired_interval_below_minus_100_pct_has_its_ratio_too():
    """review58: c2f24bf gave Welch's interval below -100% the interval of the ratio; the paired column beside it
    (the same fmt_diff) kept 'the runs spread too widely' where the rounds' ratios agree closely: a fast variant
    whose rounds spread (0.2, 0.1, 0.12 GB/s) against a slow one (0.011-0.0117) read [-186%, -3%] paired."""
    from launch.evaluate.summary import fmt_diff
    paired = paired_difference({1: 0.2, 2: 0.1, 3: 0.12}, {1: 0.011, 2: 0.0114, 3: 0.0117})
    assert paired["pct_interval"][0] < -1
    lo, hi = paired["ratio_pct_interval"]
    assert -1 < lo < hi < 0, paired["ratio_pct_interval"]
    assert "as a ratio of the runs" in fmt_diff(paired)[1]
    assert paired_difference({1: 1.0, 2: 2.0, 3: 3.0}, {1: 0.0, 2: 1.0, 3: 2.0})["ratio_pct_interval"] is None


def test_a_lab_variants_burst_limit_netem_and_rates_as_people_write_them(tmp_path):
    """Round 8 of the lab: `delay`/`loss` were `unknown key` (the lab's own CLI names netem); `rate: 10G` and the
    YAML number 1000000000 got no hint; a variant could not set the tbf bucket and queue the lab now takes, and one
    at 8bit passed the check to a lab whose bucket tc wraps to less than a frame."""
    from launch.evaluate.runner import lab_command
    doc = good(tmp_path, launcher="lab", lab={"nodes": 2, "nproc_per_node": 1})
    doc["workloads"] = doc["workloads"][:1]
    doc["variants"] = [{"name": "g", "expect_transport": "tcp", "lab": {"rate": "10G"}},
                       {"name": "d", "expect_transport": "tcp", "lab": {"rate": "1gbit", "delay": "10ms"}},
                       {"name": "n", "expect_transport": "tcp", "lab": {"rate": 1000000000}},
                       {"name": "b", "expect_transport": "tcp", "lab": {"rate": "1mbit", "burst": "1g"}},
                       {"name": "s", "expect_transport": "tcp", "lab": {"rate": "8bit"}}]
    found = problems(tmp_path, doc)
    assert found[0].endswith("'none' for unshaped links; for 10 Gbit/s write 10gbit") and found[0].startswith(
        "variants[0].lab.rate: got '10G'"), found
    assert found[1] == ("variants[1].lab.delay: the lab shapes bandwidth only (tc tbf) and adds no delay, jitter, loss "
                        "or reordering (tc netem); allowed: rate, mtu, nodes, nproc_per_node, slow_node, slow_rate, "
                        "burst, limit")
    assert found[2] == ("variants[2].lab.rate: got 1000000000; expected a tc rate such as 1gbit; a number without a "
                        "unit is bits per second to tc: for 1 Gbit/s write 1gbit")
    assert found[3].startswith("variants[3].lab.burst: got '1g' (1073741824 bytes), which takes 8590 s to fill")
    assert found[4].startswith("variants[4].lab.rate: got '8bit'; one frame at MTU 1500 (1514 bytes) takes 1514 s")
    assert len(found) == 5, found
    doc["variants"] = [{"name": "deep", "expect_transport": "tcp", "lab": {"rate": "1gbit", "burst": "64k", "limit": 2 ** 20}},
                       {"name": "plain", "expect_transport": "tcp", "lab": {"rate": "1gbit"}}]
    ev = load_evaluation(write(tmp_path, doc))
    cmd = lab_command(ev, next(r for r in plan(ev) if r.variant.name == "deep"))
    assert cmd[cmd.index("--burst") + 1] == "64k" and cmd[cmd.index("--limit") + 1] == "1048576"
    assert "--burst" not in lab_command(ev, next(r for r in plan(ev) if r.variant.name == "plain"))


def test_a_lab_variants_latency_is_named_as_the_labs_cli_names_it(tmp_path):
    """review58: the lab's CLI answers --latency with what tc's latency may mean and --limit BYTES instead (tbf's
    queue as a time); a variant's `lab.latency` was refused as netem's delay alone, with no word of `limit`."""
    from launch.lab_options import option_problems
    doc = good(tmp_path, launcher="lab", lab={"nodes": 2, "nproc_per_node": 1})
    doc["workloads"] = doc["workloads"][:1]
    doc["variants"] = [{"name": "q", "expect_transport": "tcp", "lab": {"rate": "1gbit", "latency": "50ms"}},
                       {"name": "plain", "expect_transport": "tcp", "lab": {"rate": "1gbit"}}]
    found = problems(tmp_path, doc)
    cli = option_problems(["--latency", "50ms"])
    assert len(found) == 1 and len(cli) == 1, (found, cli)
    assert "tbf's queue as a time" in found[0] and "allowed: limit" in found[0], found
    assert found[0].startswith("variants[0].lab.latency: ") and "tbf's queue as a time" in cli[0]


def test_an_empty_out_flag_is_refused_not_taken_for_the_files_out(tmp_path, capsys):
    """`--out "$OUT"` with OUT unset ran into the file's own `out`."""
    path = write(tmp_path, good(tmp_path))
    assert main([path, "--out", "", "--dry-run"]) == 2
    assert capsys.readouterr().err == ("error: --out: got ''; allowed: a non-empty directory path, or no --out for "
                                       "the file's `out`\n")


def test_an_out_whose_lock_is_a_fifo_is_one_line_not_a_hang(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "run.lock")
    path = write(tmp_path, good(tmp_path, out=str(out)))
    assert main([path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run.lock' is a FIFO (named pipe), not a regular file" in err[0], err


def test_a_lab_variants_rate_in_tcs_byte_units_is_warned_of_at_load(tmp_path, capsys):
    # 100Gbps is 100 gigabytes per second to tc (800 Gbit/s): the lab warned in each run's log, the plan never
    doc = good(tmp_path, launcher="lab", lab={"nodes": 2, "nproc_per_node": 1})
    doc["variants"] = [{"name": "a", "expect_transport": "tcp", "lab": {"rate": "100Gbps"}},
                       {"name": "b", "expect_transport": "tcp", "lab": {"rate": "1gbit"}}]
    load_evaluation(write(tmp_path, doc))
    assert capsys.readouterr().err.strip().splitlines() == [
        "warning: variants[0].lab.rate 100Gbps: in tc units 'gbps' is bytes per second, so this is 800 Gbit/s; for "
        "100 Gbit/s write 100gbit"]
