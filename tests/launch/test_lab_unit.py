"""launch.lab's pure helpers and argument checks in-process (no namespaces are created)."""
from __future__ import annotations

import json
import os
import signal

import pytest

from launch import lab, lab_leftovers
from launch.lab import Lab, LabError, burst_bytes, parse_qdisc_counters, parse_rate, queue_bytes


def test_rates_in_tc_units():
    assert parse_rate("1gbit") == 1e9 and parse_rate("100mbit") == 1e8
    assert parse_rate("125mbps") == 1e9  # tc's bps is bytes per second
    assert parse_rate("none") is None
    with pytest.raises(LabError, match=r"^--rate: got 'fast'; expected a tc rate such as 10gbit"):
        parse_rate("fast")


def test_burst_and_queue_sizes_follow_the_rate_with_floors():
    assert burst_bytes(1e9) == 250_000  # 2 ms at 1 Gbit/s
    assert burst_bytes(1e6) == 16 * 1024  # the floor
    assert burst_bytes(1e5, mtu=20000) == 20014  # at least one frame with its Ethernet header
    assert queue_bytes(1e9) == 2_500_000  # 20 ms
    assert queue_bytes(1e6) == 256 * 1024


def test_sizes_stay_within_tcs_32_bits_at_terabit_rates():
    # `--rate 400gbps` (3.2 Tbit/s): the 20 ms queue was 8,000,000,000 bytes and tc refused it after the
    # namespaces were made (`illegal value for "limit"`); both sizes are 32-bit in tc
    assert queue_bytes(3.2e12) == 2 ** 32 - 1 and queue_bytes(1e12) == 2_500_000_000
    assert burst_bytes(20e12) == 2 ** 32 - 1 and burst_bytes(3.2e12) == 800_000_000
    info = Lab(2, "400gbps").describe()
    assert (info["burst_bytes"], info["queue_bytes"]) == (800_000_000, 2 ** 32 - 1)


@pytest.mark.parametrize("kwargs,message", [
    ({"nodes": 1, "rate": "1gbit"}, "--nodes: got 1; a fabric needs at least 2 nodes"),
    ({"nodes": 201, "rate": "1gbit"}, "--nodes: got 201; at most 200"),
    ({"nodes": 2, "rate": "1gbit", "mtu": 100}, "--mtu: got 100; expected 576 to 65535 bytes"),
    ({"nodes": 2, "rate": "1gbit", "slow_node": 1}, "--slow-node and --slow-rate go together"),
    ({"nodes": 2, "rate": "1gbit", "slow_node": 2, "slow_rate": "10mbit"}, "--slow-node: got 2; allowed: a node from 0 to 1"),
    ({"nodes": 2, "rate": "1gbit", "slow_node": 0, "slow_rate": "slow"}, "--slow-rate: got 'slow'"),
    ({"nodes": 2, "rate": "1gbit", "slow_node": 0, "slow_rate": "none"}, "--slow-rate: got 'none'"),
])
def test_bad_lab_arguments_are_refused_before_anything_is_created(kwargs, message):
    with pytest.raises(LabError) as info:
        Lab(**kwargs)
    assert str(info.value).startswith(message)


def test_describe_a_three_node_bridge():
    lb = Lab(3, "100mbit", lab_id="fhtest", slow_node=2, slow_rate="10mbit", mtu=9000)
    d = lb.describe()
    assert d["topology"] == "bridge" and lb.switch == "fhtestsw"
    assert d["namespaces"] == ["fhtestn0", "fhtestn1", "fhtestn2"] and lb.created == []
    assert d["rate_bps"] == 1e8 and d["burst_bytes"] == burst_bytes(1e8, 9000) and d["mtu"] == 9000
    assert d["slow_rate_bps"] == 1e7 and d["addresses"][1] == lb.address(1) == f"{lb.subnet}.2"
    assert Lab(2, "none").describe()["burst_bytes"] is None  # unshaped: no tbf


def test_output_dir_from_the_override_then_the_recipe(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: x\noutput_dir: runs/from_recipe\n")
    assert lab._output_dir([str(recipe), "max_steps=1", "output_dir=/tmp/o"]) == "/tmp/o"
    assert lab._output_dir([str(recipe)]) == "runs/from_recipe"
    # given twice: the last, as the trainer's recipe check (which the lab runs first) reads it; the lab wrote the
    # first one's directory while the check judged the second's
    assert lab._output_dir([str(recipe), "output_dir=/tmp/a", "output_dir=/tmp/b"]) == "/tmp/b"
    assert lab._output_dir([str(tmp_path / "missing.yaml")]) == "runs/lab"


def test_main_refuses_bad_input_with_one_error_line(capsys):
    assert lab.main(["--nodes", "1", "--rate", "1gbit", "--", "recipes/tiny_llama_lora.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # round 8: and what is allowed, with what runs the ranks of one node
    assert err == ["error: --nodes: got 1; a fabric needs at least 2 nodes; allowed: 2 to 200 (ranks on one node talk "
                   "over loopback, which no link shapes: torchrun --standalone --nproc-per-node G -m trainer RECIPE "
                   "runs them)"]
    assert lab.main(["--nodes", "2", "--rate", "quick", "--", "recipes/tiny_llama_lora.yaml"]) == 2
    assert capsys.readouterr().err.startswith("error: --rate: got 'quick'")
    # a refused node count is one line: the recipe's batch is not judged again on 100000 nodes
    assert lab.main(["--nodes", "100000", "--rate", "1gbit", "--", "recipes/tiny_llama_lora.yaml"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["error: --nodes: got 100000; at most 200"]


def test_main_needs_the_recipe_after_the_separator(capsys):
    with pytest.raises(SystemExit) as info:
        lab.main(["--nodes", "2", "--rate", "1gbit"])
    assert info.value.code == 2 and "give the recipe after --" in capsys.readouterr().err


def test_a_recipe_without_the_separator_says_where_it_goes(capsys):
    assert lab.main(["--nodes", "2", "--rate", "1gbit", "recipes/tiny_llama_lora.yaml", "max_steps=3"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: unrecognized arguments: recipes/tiny_llama_lora.yaml max_steps=3; allowed: -- "
        "recipes/tiny_llama_lora.yaml [key=value ...] after the lab's options (the `--` starts the recipe's part)"]


@pytest.mark.parametrize("args,message", [
    (["--timeout", "0"], "--timeout: got 0; expected a number of seconds above 0; see python -m launch.lab --help"),
    (["--timeout", "nan"], "--timeout: got nan; expected a number of seconds above 0"),
    # round 9: a timeout written with its unit was `invalid float value: '30m'; allowed: a number`
    (["--timeout", "30m"], "argument --timeout: got '30m'; allowed: a number of seconds (for 30 minutes write 1800)"),
    (["--timeout", "1h"], "argument --timeout: got '1h'; allowed: a number of seconds (for 1 hour write 3600)"),
    (["--timeout", "abc"], "argument --timeout: got 'abc'; allowed: a number of seconds; see python -m launch.lab"),
    (["--port", "99999"], "--port: got 99999; expected a TCP port from 1 to 65535"),
    (["--nproc-per-node", "0"], "--nproc-per-node: got 0; expected an integer >= 1"),
    (["--port", "http"], "argument --port: invalid int value: 'http'; allowed: a whole number; see python -m launch.lab --help"),
])
def test_bad_arguments_are_one_line_before_anything_is_created(args, message, capsys):
    with pytest.raises(SystemExit) as info:
        lab.main(["--nodes", "2", "--rate", "1gbit", *args, "--", "recipes/tiny_llama_lora.yaml"])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1 and err[0].startswith(f"error: {message}"), err


@pytest.mark.parametrize("args,message", [
    # round 6: argparse kept the last of two, every link then at 100mbit; netem's options were "unrecognized"
    (["--rate=100mbit"], "--rate: given 2 times ('1gbit', '100mbit'); allowed: once (one rate for every link; one "
                         "slower node: --slow-node with --slow-rate)"),
    (["--nodes", "3"], "--nodes: given 2 times ('2', '3'); allowed: once"),
    (["--delay", "10ms"], "--delay: the lab shapes bandwidth only (tc tbf) and adds no delay, jitter, loss or "
                          "reordering (tc netem); allowed: --rate, --mtu, --burst, --limit, --slow-node with --slow-rate"),
    (["--loss=1%"], "--loss: the lab shapes bandwidth only"),
    (["--reorder", "25%"], "--reorder: the lab shapes bandwidth only"),
    # round 8: tbf's own latency is its queue as a time; the lab takes the queue in bytes
    (["--latency", "50ms"], "--latency: tc's latency is either netem's added delay, which the lab does not add, or "
                            "tbf's queue as a time; allowed: --limit BYTES"),
    (["--burst", "64k", "--burst", "1m"], "--burst: given 2 times ('64k', '1m'); allowed: once"),
])
def test_options_given_twice_and_netem_impairments_are_refused(args, message, capsys):
    assert lab.main(["--nodes", "2", "--rate", "1gbit", *args, "--", "recipes/tiny_llama_lora.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {message}"), err


def test_a_rate_per_node_is_refused_with_what_the_lab_offers():
    with pytest.raises(LabError, match=r"--rate: got '10mbit,100mbit'; one rate for every link, per-node rates are not "
                                       r"supported; allowed: one tc rate \(e.g. 100mbit\), and --slow-node with --slow-rate"):
        lab.Lab(2, "10mbit,100mbit")


@pytest.mark.parametrize("recipe_args,message", [
    (["recipes/nope.yaml"], "recipe: 'recipes/nope.yaml' is not a file"),
    (["recipes/tiny_llama_lora.yaml", "max_step=3"], "max_step: unknown key; did you mean 'max_steps'?"),
    (["recipes/tiny_llama_lora.yaml", "train.global_batch_size=10"],
     "train.global_batch_size: 10 is not divisible by micro_batch_size x dp = 4 x 3 = 12"),
    (["recipes/tiny_llama_lora.yaml", "--dry-run"],  # was "--dry-run: an override must look like key.path=value"
     "--dry-run after the recipe: the lab runs the job on its nodes and takes key=value overrides there; to check "
     "the recipe on the lab's world without running it: python -m trainer recipes/tiny_llama_lora.yaml --dry-run "
     "--world-size 3"),
])
def test_the_recipe_is_checked_on_the_labs_world_before_any_namespace(recipe_args, message, capsys, monkeypatch):
    monkeypatch.setattr(lab, "check_host", lambda: pytest.fail("the recipe is checked first"))
    assert lab.main(["--nodes", "3", "--rate", "1gbit", "--", *recipe_args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def test_an_output_dir_holding_another_recipes_run_is_refused_before_its_lab_json_is_written(tmp_path, capsys,
                                                                                             monkeypatch):
    """Round 5: `lab ... -- recipes/tiny_bert.yaml output_dir=SWEEP` made the namespaces, wrote lab.json over the
    sweep's own (its 3-node lab then read as 2 nodes), and the trainer's refusal came back as a torchrun
    traceback and exit 1. Now it is the trainer's line, exit 2, before anything is made or written."""
    run = tmp_path / "sweep"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"status": "completed",
                                              "recipe": {"name": "collectives", "workload": "collectives"}}))
    (run / "lab.json").write_text('{"nodes": 3}')
    monkeypatch.setattr(lab, "check_host", lambda: pytest.fail("the output_dir is checked first"))
    assert lab.main(["--nodes", "2", "--rate", "5mbit", "--", "recipes/tiny_bert.yaml", f"output_dir={run}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: output_dir: {str(run)!r} holds a run of another recipe ('collectives', workload "
                   "collectives; this one is 'tiny_bert', workload bert_pretraining); allowed: a new directory, or "
                   "this recipe's own to resume or rerun it"], err
    assert json.loads((run / "lab.json").read_text()) == {"nodes": 3}


def test_an_output_dir_of_a_live_run_is_refused_before_its_lab_json_is_written(tmp_path, capsys, monkeypatch):
    """Round 6: a second lab given the output_dir of a lab run still going made its namespaces, wrote its lab.json
    over the running one's, and its trainer's refusal came back as a torchrun traceback; the first run's lab.json
    then named the second lab (2 nodes at 5mbit for a 10mbit run). Now its run.lock is read first: one line, exit 2."""
    import os
    import socket

    run = tmp_path / "live"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"status": "running",
                                              "recipe": {"name": "tiny_llama_lora", "workload": "llm_lora"}}))
    (run / "lab.json").write_text('{"nodes": 2, "rate": "10mbit"}')
    monkeypatch.delenv("FABRIC_HARNESS_NODE", raising=False)
    (run / "run.lock").write_text(json.dumps({"owner": "torchrun fh1 at 10.213.9.1:41000", "pid": os.getpid(),
                                              "host": socket.gethostname(), "start_time": "2026-11-29T15:42:49+00:00"}))
    monkeypatch.setattr(lab, "check_host", lambda: pytest.fail("the output_dir is checked first"))
    assert lab.main(["--nodes", "2", "--rate", "5mbit", "--", "recipes/tiny_llama_lora.yaml", f"output_dir={run}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: output_dir: {str(run)!r} is in use by a live run (torchrun fh1 "
                                               "at 10.213.9.1:41000"), err
    assert json.loads((run / "lab.json").read_text()) == {"nodes": 2, "rate": "10mbit"}


def test_a_resumed_runs_kept_steps_are_not_its_first_step(tmp_path):
    """Round 6: a 3-node lab at 5mbit resumed from step 2 read its kept steps as its first: the queues' 125
    start-up drops were printed as `dropped 125 packets during the steps`. A step counts from the lab's start."""
    metrics = tmp_path / "metrics.jsonl"
    assert not lab._has_a_step_since(str(metrics), 1000.0)
    metrics.write_text('{"step": 1, "time": 900.0}\n{"step": 2, "time": 950.5}\n')
    assert not lab._has_a_step_since(str(metrics), 1000.0)
    metrics.write_text(metrics.read_text() + '{"step": 3, "time": 1000.2}\n{"step": 4, "ti')  # one being written
    assert lab._has_a_step_since(str(metrics), 1000.0)


def test_a_run_resumed_on_another_lab_is_warned_of_and_the_earlier_lab_kept(tmp_path):
    """Round 6: a 3-node run at 5mbit resumed at 20mbit from its step-3 checkpoint; its lab.json then named 20mbit
    alone while step 2 (0.47 s, at 5mbit) stayed among its timed steps (the projection's spread read +91%)."""
    five = {"nodes": 3, "nproc_per_node": 1, "rate": "5mbit", "rate_bps": 5e6, "mtu": 1500, "slow_node": None,
            "slow_rate": None, "slow_rate_bps": None, "tbf_drops": 3}
    (tmp_path / "lab.json").write_text(json.dumps(five))
    same = {**five, "tbf_drops": None}
    assert lab._earlier_labs(str(tmp_path), same) == ([], None)
    earlier, warning = lab._earlier_labs(str(tmp_path), {**five, "rate": "20mbit", "rate_bps": 2e7})
    assert isinstance(earlier[0].pop("replaced_at"), float)  # when: the steps before it are the other lab's
    assert earlier == [{k: v for k, v in five.items() if k != "tbf_drops"}]
    assert warning.startswith(f"[lab] warning: {tmp_path} holds a run made on another lab (3 x 1 at 5mbit, MTU 1500); "
                              "a resume keeps its steps measured there")
    (tmp_path / "lab.json").write_text(json.dumps({**five, "rate": "20mbit", "rate_bps": 2e7, "earlier_labs": earlier}))
    assert len(lab._earlier_labs(str(tmp_path), {**five, "nodes": 5})[0]) == 2  # every earlier lab, in order


def test_a_run_made_off_the_lab_and_resumed_in_it_is_warned_of_too(tmp_path):
    """A run begun by torchrun on the host (no lab.json) and resumed in the lab mixed its unshaped steps with the
    lab's, unwarned: with no lab.json its earlier attempt was taken for no attempt at all. Its steps (metrics.jsonl)
    now make an earlier, off-lab entry with `replaced_at`, which the run's reader times from."""
    from types import SimpleNamespace

    from telemetry.analysis.runs import Run

    now = {"nodes": 2, "nproc_per_node": 1, "rate": "5mbit", "rate_bps": 5e6, "mtu": 1500, "slow_node": None,
           "slow_rate": None, "slow_rate_bps": None}
    assert lab._earlier_labs(str(tmp_path), now) == ([], None)  # a new run: nothing earlier
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "time": 1000.0, "step_time_s": 0.1}\n')
    earlier, warning = lab._earlier_labs(str(tmp_path), now)
    assert len(earlier) == 1 and earlier[0]["off_lab"] is True and isinstance(earlier[0]["replaced_at"], float)
    assert warning.startswith(f"[lab] warning: {tmp_path} holds a run made off the lab (no lab.json); a resume keeps "
                              "its steps measured there"), warning
    (tmp_path / "lab.json").write_text(json.dumps({**now, "earlier_labs": earlier}))
    assert lab._earlier_labs(str(tmp_path), now) == (earlier, None)  # the next resume on this lab keeps it
    assert Run.lab_since(SimpleNamespace(path=str(tmp_path))) == earlier[0]["replaced_at"]


def test_the_run_lock_of_a_killed_lab_run_is_not_taken_for_a_live_one(tmp_path, monkeypatch):
    """A lab's trainer writes its run.lock as host lab-node0 (FABRIC_HARNESS_NODE), on this very host. The
    lab's pre-check took that for another host and trusted the lock's age: for 60 s after a killed lab run its
    resume was refused as 'in use by a live run', where the trainer itself (lab-node0 too) sees the pid gone."""
    import os
    import time

    from trainer.runlock import pid_alive

    dead = next(pid for pid in range(2 ** 22 + 1, 2 ** 22 + 100) if not pid_alive(pid))
    run = tmp_path / "killed"
    run.mkdir()
    (run / "run.lock").write_text(json.dumps({"owner": "torchrun fh1 at 10.213.0.1:29400", "pid": dead,
                                              "host": "lab-node0", "start_time": "2026-11-29T15:42:49+00:00"}))
    now = time.time()
    os.utime(run / "run.lock", (now, now))  # its last heartbeat a moment ago
    monkeypatch.delenv("FABRIC_HARNESS_NODE", raising=False)
    assert lab._recipe_problems(["recipes/tiny_llama_lora.yaml", f"output_dir={run}"], 2) == []
    # a live one (its pid alive) on lab-node0 is still refused
    (run / "run.lock").write_text(json.dumps({"owner": "torchrun fh1 at 10.213.0.1:29400", "pid": os.getpid(),
                                              "host": "lab-node0", "start_time": "2026-11-29T15:42:49+00:00"}))
    (problem,) = lab._recipe_problems(["recipes/tiny_llama_lora.yaml", f"output_dir={run}"], 2)
    assert f"output_dir: {str(run)!r} is in use by a live run (torchrun fh1" in str(problem)


def test_tbf_counters_from_tc_json():
    """iproute2's `tc -s -j qdisc show dev fab0` on a lab link (captured on the development VM, iproute2 6.x)."""
    real = ('[{"kind":"tbf","handle":"81c5:","root":true,"refcnt":3,"options":{"rate":1250000,"burst":16383,'
            '"lat":196608},"bytes":2210442,"packets":1621,"drops":3,"overlimits":418,"requeues":0,"backlog":0,"qlen":0}]')
    assert parse_qdisc_counters(real) == {"bytes": 2210442, "packets": 1621, "drops": 3, "overlimits": 418,
                                          "requeues": 0, "backlog": 0}
    assert parse_qdisc_counters('[{"kind":"noqueue","handle":"0:"}]') == {"counters": None,
                                                                          "reason": "no tbf qdisc on the device"}
    assert parse_qdisc_counters("qdisc tbf 81c5: root")["counters"] is None  # an iproute2 without -j


@pytest.mark.parametrize("kwargs,message", [
    ({"rate": "7bit"}, "--rate: got '7bit'; tc shapes in whole bytes per second: expected at least 8bit"),
    ({"rate": "1gbit", "slow_node": 1, "slow_rate": "1bit"}, "--slow-rate: got '1bit'; tc shapes in whole bytes"),
    # under one bit per second is told the same floor as under one byte (before: "at least 1bit", then 8bit)
    ({"rate": "0.1bit"}, "--rate: got '0.1bit'; tc shapes in whole bytes per second: expected at least 8bit"),
    ({"rate": "1gbit", "slow_node": 1, "slow_rate": "0.1bit"},
     "--slow-rate: got '0.1bit'; tc shapes in whole bytes per second: expected at least 8bit (e.g. 100mbit, 1gbit)"),
    # a slow link is shaped: 'none' is not offered for it, and it must be slower than the others
    ({"rate": "1gbit", "slow_node": 1, "slow_rate": "0"},
     "--slow-rate: got '0'; expected a tc rate such as 10gbit, 1gbit, 100mbit, 500kbit"),
    ({"rate": "10mbit", "slow_node": 1, "slow_rate": "1gbit"}, "--slow-rate: got '1gbit', not slower than --rate "
     "'10mbit'; expected a rate below --rate (one slow link among healthy ones)"),
    ({"rate": "10mbit", "slow_node": 0, "slow_rate": "10Mbit"}, "--slow-rate: got '10Mbit', not slower than"),
    # round 5: a rate in bytes per second is as fast as eight times the bits; the line says what each is
    ({"rate": "1mbps", "slow_node": 1, "slow_rate": "8mbit"}, "--slow-rate: got '8mbit', not slower than --rate "
     "'1mbps' ('1mbps' is 8 Mbit/s, '8mbit' 8 Mbit/s: tc's kbps, mbps and gbps are bytes per second); expected a "
     "rate below --rate"),
])
def test_rates_tc_cannot_shape_are_refused_before_anything_is_created(kwargs, message):
    """tc turns a rate under one byte per second into 0 and refuses it after the namespaces exist."""
    with pytest.raises(LabError) as info:
        Lab(2, **kwargs)
    assert str(info.value).startswith(message)
    assert "'none'" not in str(info.value) or "slow_rate" not in kwargs


def test_rates_at_the_edges_are_taken_as_tc_takes_them():
    # 8bit was taken here until round 8: tc wrapped its 16 KiB bucket (2048 s to fill) to less than a frame, and no
    # frame passed; the slowest rate at MTU 1500 is now 48bit (test_lab_buckets.py)
    assert Lab(2, "48bit").rate_bps == 48 and Lab(2, "1.5mbit").rate_bps == 1.5e6
    # tc's units ignore case; the lab writes them as tc does, so run.json (and a comparison's fabric label,
    # `1gbit lab`) is one for `1Gbit` and `1gbit`
    assert Lab(2, " 1Gbit ").rate == "1gbit" and Lab(2, "1Gbit").rate_bps == 1e9
    assert Lab(2, "10gbit").describe()["burst_bytes"] == 2_500_000
    assert Lab(2, "NONE").rate_bps is None


def test_main_names_the_labs_and_the_recipes_problems_in_one_pass(capsys):
    assert lab.main(["--nodes", "2", "--rate", "0", "--mtu", "68", "--", "recipes/tiny_llama_lora.yaml",
                     "max_step=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("error: --mtu: got 68; expected 576 to 65535 bytes"), err
    assert "max_step: unknown key" in err[1]


def test_a_bridge_names_its_switch_and_teardown_checks_exact_names(monkeypatch):
    lb = Lab(4, "1gbit", lab_id="fh12")
    assert lb.describe()["switch"] == "fh12sw" and lb.all_namespaces == [f"fh12n{i}" for i in range(4)] + ["fh12sw"]
    assert Lab(2, "1gbit", lab_id="fh12").describe()["switch"] is None
    # lab fh1 is not lab fh12's prefix owner: only its own names count as left behind
    monkeypatch.setattr(lab, "leftover_namespaces", lambda: ["fh12n0", "fh12sw", "fh1n1", "other"])
    assert Lab(2, "none", lab_id="fh1").left_behind() == ["fh1n1"]
    assert Lab(3, "none", lab_id="fh12").left_behind() == ["fh12n0", "fh12sw"]


def test_the_owner_mark_names_this_process():
    m = lab_leftovers.MARK.match(lab.owner_mark())
    assert m and int(m.group(1)) == os.getpid() and m.group(2) == lab_leftovers.start_time(os.getpid())
    assert lab_leftovers.start_time(4194304) is None  # above Linux's pid limit: no such process, ever


def test_stop_signals_wait_until_bring_up_or_teardown_is_done():
    came = []

    def handler(signum, _frame):
        came.append(signum)
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with lab.signals_deferred():
                signal.raise_signal(signal.SIGTERM)
                signal.raise_signal(signal.SIGHUP)
                assert came == []  # not yet: the block runs to its end
                came.append("block done")
        assert came == ["block done", signal.SIGTERM]  # then the first signal takes effect, once
        assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, old)


class FakeShapedLab:
    """Stands in for a Lab whose tc counters are read twice: at the run's first step and before tear-down
    (the counter values are those of a 3-node lab at 10mbit, lab.json of a run on the development VM)."""

    def __init__(self, at_first_step, at_end):
        self.counters_at_first_step, self.at_end = at_first_step, at_end

    def qdisc_counters(self):
        return self.at_end


def link(drops):
    return {"bytes": 5122870, "packets": 4270, "drops": drops, "overlimits": 7032, "requeues": 0, "backlog": 0}


@pytest.mark.parametrize("first,end,after,said", [
    ({"n0/fab0": link(503), "n1/fab0": link(0)}, {"n0/fab0": link(503), "n1/fab0": link(0)}, 0,
     "dropped 503 packets before the first step was recorded (start-up"),
    ({"n0/fab0": link(503), "n1/fab0": link(0)}, {"n0/fab0": link(520), "n1/fab0": link(3)}, 20,
     "dropped 20 packets during the steps (523 in all"),
    (None, {"n0/fab0": link(7)}, None, "dropped 7 packets (when is unknown: no step was recorded)"),
    (None, {}, None, None),
])
def test_queue_drops_before_and_during_the_steps(tmp_path, capsys, first, end, after, said):
    (tmp_path / "lab.json").write_text("{}")
    lab._record_qdiscs(FakeShapedLab(first, end), str(tmp_path))
    info = json.loads((tmp_path / "lab.json").read_text())
    assert info["tbf_drops_after_first_step"] == after and info["qdisc"] == end
    if not end:
        assert info["tbf_drops"] is None and info["tbf_drops_reason"].startswith("no link was shaped")
    elif first is None:
        assert info["tbf_drops_after_first_step_reason"].startswith("the run recorded no step")
    err = capsys.readouterr().err
    assert (said in err) if said else err == "", err


def test_a_signal_the_lab_was_started_ignoring_stays_ignored():
    """nohup ignores SIGHUP for its command: neither the deferral nor the lab's own handlers may undo that."""
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with lab.signals_deferred():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            signal.raise_signal(signal.SIGHUP)  # ignored: nothing to deliver afterwards
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, old)


def test_a_container_without_the_network_capabilities_is_told_what_to_add(monkeypatch):
    """root in a container without CAP_SYS_ADMIN/CAP_NET_ADMIN: `ip netns add` fails with EPERM."""
    import subprocess

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(
        a[0], 1, "", "mount --make-shared /run/netns failed: Operation not permitted\n"))
    with pytest.raises(LabError, match=r"Operation not permitted; allowed: root with CAP_SYS_ADMIN and CAP_NET_ADMIN "
                                       r"\(a container: --privileged, or --cap-add SYS_ADMIN --cap-add NET_ADMIN\)"):
        lab._run(["ip", "netns", "add", "x"], "creating namespace x")
