"""Recipes and overrides: every problem reported at once, exit 2, the key named, no traceback."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from trainer.cli import main
from trainer.config import Recipe, RecipeError, load_recipe

from ..conftest import REPO, TINY

BAD_OVERRIDES = [
    (["trian.lr=1"], "trian: unknown key; did you mean 'train'?"),
    # a key of another place in the recipe is named where it belongs (train.max_steps read "did you mean warmup_steps")
    (["train.max_steps=20"], "train.max_steps: unknown key; 'max_steps' is a top-level key (write max_steps); allowed:"),
    (["train.seq_len=64"], "train.seq_len: unknown key; 'seq_len' is a key of data (write data.seq_len); allowed:"),
    # ... only where the value written would be accepted: `data=1` replaces a section with a number
    (["train.data=1"], "train.data: unknown key; allowed:"),
    (["parallel.seed=abc"], "parallel.seed: unknown key; allowed:"),
    (["train.micro_batch_size=two"], "train.micro_batch_size: got 'two' (str); expected an integer"),
    (["train.global_batch_size=15"], "train.global_batch_size: 15 is not divisible by micro_batch_size x dp"),
    (["parallel.dp=3"], "parallel: dp x tp x pp = 3 x 1 x 1 = 3 does not equal the world size 1"),
    (["parallel.tp=2", "parallel.dp=1"], "parallel: dp x tp x pp = 1 x 2 x 1 = 2 does not equal the world size 1"),
    (["parallel.pp=2", "parallel.dp=1"], "parallel: dp x tp x pp = 1 x 1 x 2 = 2 does not equal the world size 1"),
    (["parallel.data_parallel=zero3"], "parallel.data_parallel: got 'zero3' (str); expected one of 'ddp', 'fsdp'"),
    (["parallel.tp=0"], "parallel.tp: got 0; expected an integer >= 1"),
    (["train.schedule=cosin"], "train.schedule: got 'cosin'; did you mean 'cosine'? allowed: cosine, poly, linear, "
     "constant"),
    (["train.precision=BF16"], "train.precision: got 'BF16'; did you mean 'bf16'? allowed: auto, bf16, fp32"),
    (["model.dtype=fp16"], "model.dtype: got 'fp16'"),
    (["lora.dropout=1.5"], "lora.dropout: got 1.5; expected a number in [0, 1)"),
    (["lora.target_modules=q_proj"], "lora.target_modules: got 'q_proj' (str); expected a list of strings"),
    (["max_steps=0"], "max_steps: got 0; expected an integer >= 1"),
    (["train.lr=-1"], "train.lr: got -1.0; expected a number > 0"),
    (["train.betas=[0.9]"], "train.betas: got [0.9]; expected two numbers in [0, 1)"),
    (["data.split=[0.5,0.5]"], "data.split: got [0.5, 0.5]; expected three non-negative fractions"),
    (["data.format=csv"], "data.format: got 'csv'"),
    (["model.config=null"], "model: set exactly one of model.path"),
    (["model.path=/models/x"], "model: set exactly one of model.path"),
    (["distributed.backend=mpi"], "distributed.backend: got 'mpi'"),
    (["train.target_eval_loss=1.0", "train.eval_every_samples=null"], "train.target_eval_loss: needs train.eval_every_samples"),
    (["telemetry.enabled=maybe"], "telemetry.enabled: got 'maybe' (str); expected true or false"),
    (["model.family.x=1"], "model.family: is 'llama', not a mapping"),
    (["telemetry.bmc=bmc.local"], "telemetry.bmc: got 'bmc.local'; allowed: ipmitool, an http:// or https://"),
    (["telemetry.bmc=https://root:calvin@10.0.0.9"], "telemetry.bmc: credentials in the address would be recorded"),
    (["telemetry.bmc_sample_interval_s=0"], "telemetry.bmc_sample_interval_s: got 0.0; expected a number > 0"),
    (["telemetry.switch_metrics_url=switch1:9101"], "telemetry.switch_metrics_url: got 'switch1:9101'"),
    (["telemetry.prometheus=70000"], "telemetry.prometheus: got 70000; allowed: a TCP port 1-65535, auto"),
    (["telemetry.prometheus=any"], "telemetry.prometheus: got 'any'; allowed: a TCP port 1-65535, auto"),
    # a value of no allowed type reads the field's own words (was "expected an integer or a string or null")
    (["telemetry.prometheus=true"], "telemetry.prometheus: got True (bool); allowed: a TCP port 1-65535, auto"),
    (["telemetry.pushgateway=gw:9091"], "telemetry.pushgateway: got 'gw:9091'; expected an http://"),
    (["telemetry.push_interval_s=0"], "telemetry.push_interval_s: got 0.0; expected seconds >= 1"),
    (["nokey"], "nokey: an override must look like key.path=value"),
]


@pytest.mark.parametrize("overrides,expected", BAD_OVERRIDES, ids=[" ".join(o) for o, _ in BAD_OVERRIDES])
def test_bad_override_exits_2_naming_the_key(overrides, expected, capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert main([TINY, *overrides]) == 2
    err = capsys.readouterr().err
    assert expected in err
    assert all(line.startswith("error: ") for line in err.strip().splitlines())


def test_every_problem_is_reported_at_once(capsys):
    assert main([TINY, "trian.lr=1", "lora.r=0", "train.lr=zero", "data.seq_len=2"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 4, lines
    for key in ("trian", "lora.r", "train.lr", "data.seq_len"):
        assert any(line.startswith(f"error: {key}:") for line in lines), key


def test_pipeline_options_are_checked(capsys):
    assert main([TINY, "parallel.pp=2", "--dry-run"]) == 0
    assert "dp 1 x tp 1 x pp 2" in capsys.readouterr().out
    assert main([TINY, "parallel.pp_schedule=interleaved_1f1b", "--dry-run"]) == 2
    assert "interleaved_1f1b needs at least 2 stages per rank" in capsys.readouterr().err
    assert main([TINY, "parallel.pp_stages_per_rank=2", "--dry-run"]) == 2
    assert "need parallel.pp_schedule=interleaved_1f1b" in capsys.readouterr().err
    assert main([TINY, "parallel.pp_schedule=zero_bubble", "--dry-run"]) == 2
    assert "'gpipe', '1f1b', 'interleaved_1f1b'" in capsys.readouterr().err
    assert main([TINY, "parallel.pp=2", "data.padding=longest", "--dry-run"]) == 2
    assert "data.padding: longest gives each step its own sequence length" in capsys.readouterr().err
    assert main([TINY, "data.padding=shortest", "--dry-run"]) == 2
    assert "'longest', 'max_length'" in capsys.readouterr().err


def test_sequence_parallel_needs_tp_a_divisible_sequence_and_sdpa(capsys):
    assert main([TINY, "parallel.sequence_parallel=true", "--dry-run"]) == 2
    assert "parallel.sequence_parallel: needs parallel.tp > 1" in capsys.readouterr().err
    assert main([TINY, "parallel.sequence_parallel=true", "parallel.tp=2", "data.seq_len=161",
                 "model.attn_implementation=eager", "--dry-run", "--world-size", "2"]) == 2
    err = capsys.readouterr().err
    assert "data.seq_len 161 is not divisible by tp 2" in err and "needs model.attn_implementation sdpa" in err
    assert main([TINY, "parallel.sequence_parallel=true", "parallel.tp=2", "--dry-run", "--world-size", "2"]) == 0


def test_schedule_and_target_combinations_that_cannot_work(capsys):
    assert main([TINY, "train.schedule=poly", "train.min_lr=1e-2", "--dry-run"]) == 2
    assert "train.min_lr: got 0.01; the poly schedule decays to it, so it must be below train.lr" in capsys.readouterr().err
    assert main([TINY, "train.schedule=poly", "max_steps=3", "--dry-run"]) == 2  # the recipe warms up for 3 steps
    assert "train.warmup_steps: got 3 = max_steps; the poly schedule needs a decay phase" in capsys.readouterr().err
    assert main([TINY, "train.target_eval_accuracy=0.5", "--dry-run"]) == 2
    assert "the llm_lora workload reports no accuracy; use train.target_eval_loss" in capsys.readouterr().err


def test_data_parallel_only_workloads_refuse_tp_and_pp(capsys):
    bert = str(REPO / "recipes" / "tiny_bert.yaml")
    assert main([bert, "parallel.tp=2", "--dry-run"]) == 2
    assert "parallel.tp: got 2; the bert_pretraining workload runs data parallel only" in capsys.readouterr().err


def test_ddp_with_tensor_parallel_needs_fsdp(capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert main([TINY, "parallel.tp=2", "--dry-run"]) == 2
    assert "parallel.data_parallel: 'ddp' cannot be combined with tp 2 at dp 2" in capsys.readouterr().err
    assert main([TINY, "parallel.tp=2", "parallel.data_parallel=fsdp", "--dry-run"]) == 0


@pytest.mark.parametrize("text,expected", [
    ("name: [unclosed", "is not valid YAML at line 1"),
    ("- just\n- a list\n", "must hold a mapping at the top level"),
])
def test_broken_recipe_files(tmp_path, capsys, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main([str(path)]) == 2
    assert expected in capsys.readouterr().err


def test_missing_recipe_and_misplaced_world_size(capsys):
    assert main(["recipes/nope.yaml"]) == 2
    assert "recipe: 'recipes/nope.yaml' is not a file" in capsys.readouterr().err
    assert main([TINY, "--world-size", "4"]) == 2
    assert "--world-size: only with --dry-run" in capsys.readouterr().err


def test_yaml_safe_loading_only(tmp_path, capsys):
    path = tmp_path / "evil.yaml"
    path.write_text("name: !!python/object/apply:os.system ['echo hacked']\n")
    assert main([str(path)]) == 2
    assert "not valid YAML" in capsys.readouterr().err


def test_an_integer_of_more_digits_than_python_converts_is_one_line(tmp_path):
    """int() refuses more than sys.get_int_max_str_digits() digits (4300): a ValueError traceback from PyYAML's
    int constructor, in a recipe file, an override and an evaluation file alike (one loader)."""
    digits = "9" * 5000
    path = tmp_path / "big.yaml"
    path.write_text((REPO / TINY).read_text().replace("max_steps: 60", f"max_steps: {digits}"))
    with pytest.raises(RecipeError) as info:
        load_recipe(str(path))
    assert info.value.problems == [f"recipe: {path} is not valid YAML at line 7: an integer of 5000 digits; "
                                   "allowed: at most 4300 digits (a 64-bit value has 19)"]
    with pytest.raises(RecipeError) as info:
        load_recipe(TINY, [f"train.betas=[0.9, {digits}]"])
    assert info.value.problems == ["train.betas: the override's value is refused: an integer of 5000 digits; "
                                   "allowed: at most 4300 digits (a 64-bit value has 19)"]


def test_overrides_parse_yaml_values_and_paths_resolve_against_the_recipe():
    r = load_recipe(TINY, ["lora.target_modules=[q_proj,v_proj]", "train.lr=1e-2", "train.grad_clip=null",
                           "data.dataset=./local.jsonl"])
    assert isinstance(r, Recipe)
    assert r.lora.target_modules == ["q_proj", "v_proj"]
    assert r.train.lr == pytest.approx(1e-2) and r.train.grad_clip is None
    assert r.data.dataset == "./local.jsonl"  # an override is relative to the current directory
    assert r.model.tokenizer == str(REPO / "recipes" / "assets" / "byte_tokenizer")  # recipe-relative


# Every recipe in recipes/ must be listed here with the world size it is meant for.
INTENDED_WORLD = {"tiny_llama_lora": 2, "llama70b_lora": 64, "llama3_70b_lora": 64, "mlperf_llama2_70b_lora": 8,
                  "tiny_llama_full": 2, "llama3_70b_pretrain": 64,
                  "mlperf_llama2_70b_lora_deepspeed": 8,
                  "collectives": 16, "tiny_bert": 2, "bert_large": 8, "tiny_resnet": 2, "resnet50": 8}


def test_every_recipe_is_listed_with_its_world_size():
    names = {p.stem for p in (REPO / "recipes").glob("*.yaml")}
    assert names == set(INTENDED_WORLD)


@pytest.mark.parametrize("name,world", sorted(INTENDED_WORLD.items()))
def test_every_recipe_passes_dry_run_at_its_world_size(name, world, capsys):
    assert main([str(REPO / "recipes" / f"{name}.yaml"), "--dry-run", "--world-size", str(world)]) == 0
    out = capsys.readouterr().out
    assert f"# world {world}" in out and "grad_accum_steps" in out


def test_llama70b_recipe_matches_the_fabric_evaluation(capsys):
    main([str(REPO / "recipes" / "llama70b_lora.yaml"), "--dry-run", "--world-size", "64"])
    out = capsys.readouterr().out
    assert "dp 8 x tp 8 x pp 1" in out and "global batch 128 = micro-batch 1 x grad-accum 16 x dp 8" in out
    r = load_recipe(str(REPO / "recipes" / "llama70b_lora.yaml"))
    assert (r.max_steps, r.train.precision, r.data.format) == (1010, "bf16", "dolly")
    # NeMo pads each micro-batch to its longest example, not every Dolly example to 4,096 tokens
    assert (r.data.packing, r.data.padding) == (False, "longest")
    r3 = load_recipe(str(REPO / "recipes" / "llama3_70b_lora.yaml"))
    assert r3.data.packing is True  # NeMo 2's packed-sequence fine-tuning


@pytest.mark.integration
def test_cli_subprocess_has_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "trainer", TINY, "trian.lr=1", "parallel.dp=0"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: trian: unknown key; did you mean 'train'? allowed: name, workload, output_dir, max_steps, seed, "
        "model, lora, data, train, parallel, distributed, telemetry, fabric, sweep, debug, deepspeed",
        "error: parallel.dp: got 0; expected an integer >= 1, or -1 for what the world size leaves"]


@pytest.mark.integration
@pytest.mark.parametrize("needed", [False, True])
def test_torchvision_is_imported_only_for_image_workloads(needed):
    """A language-model run builds its model with transformers and peft without importing torchvision; an
    image run imports it (trainer/compat.py prepare_torchvision, called by the CLI before transformers)."""
    import subprocess
    import sys
    code = ("import sys\nfrom trainer.compat import prepare_torchvision\n"
            f"print(prepare_torchvision({needed}))\n"
            "import transformers, peft\nfrom transformers import LlamaConfig, LlamaForCausalLM\n"
            "m = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,"
            " num_attention_heads=2, num_key_value_heads=2, vocab_size=64))\n"
            "peft.get_peft_model(m, peft.LoraConfig(r=2, target_modules=['q_proj']))\n"
            "import trainer.run\n"
            "print(sys.modules.get('torchvision') is not None)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=str(REPO), env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [str(needed), str(needed)]


def test_srun_tasks_without_torchrun_are_one_line_each():
    """`srun -n 2 python -m trainer` (no torchrun): each task was a world of one, all in one output_dir."""
    from trainer.launcher_env import launcher_env_problems
    srun = {"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1", "SLURM_JOB_ID": "7"}
    problems = launcher_env_problems(srun)
    assert len(problems) == 1 and problems[0].startswith(
        "SLURM_STEP_NUM_TASKS: got 2, but RANK and WORLD_SIZE are unset: each of srun's 2 tasks would be a run of "
        "one process, all in one output_dir; allowed: one task per node starting the ranks with torchrun"), problems
    assert launcher_env_problems(srun, dry_run=True) == []  # a plan only
    assert launcher_env_problems({**srun, "SLURM_STEP_NUM_TASKS": "1"}) == []  # srun -n 1: one process
    # torchrun under srun (one task per node, as train.sbatch runs it) sets the ranks: fine
    assert launcher_env_problems({**srun, "RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1",
                                  "MASTER_PORT": "29500"}) == []


def test_launcher_environment_problems():
    from trainer.launcher_env import env_world_size, launcher_env_problems
    assert launcher_env_problems({}) == [] and env_world_size({}) == 1
    good = {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29500"}
    assert launcher_env_problems(good) == [] and env_world_size(good) == 4
    assert launcher_env_problems({"WORLD_SIZE": ""}) == [] and env_world_size({"WORLD_SIZE": "x"}) == 1
    assert launcher_env_problems({"WORLD_SIZE": "2", "RANK": "x", "MASTER_PORT": "65536"}) == [
        "RANK: got 'x'; expected an integer >= 0 (as torchrun or srun sets it)",
        "MASTER_PORT: got '65536'; expected an integer from 1 to 65535 (as torchrun or srun sets it)"]


def test_the_lab_variables_set_to_garbage_are_named():
    """launch.lab's FABRIC_HARNESS_NODE with a newline went into run.json and the live labels; a
    FABRIC_HARNESS_LAB that is not a JSON object was recorded as no lab, without a word."""
    from trainer.launcher_env import launcher_env_problems
    assert launcher_env_problems({"FABRIC_HARNESS_NODE": "a\nb", "FABRIC_HARNESS_LAB": "{rate: 1gbit"}) == [
        "FABRIC_HARNESS_NODE: got 'a\\nb'; allowed: a node name without spaces or control characters, up to 253 "
        "(launch.lab sets it), or unset for the host name",
        "FABRIC_HARNESS_LAB: got '{rate: 1gbit'; allowed: the JSON object launch.lab sets (the emulated links' "
        "description), or unset"]
    assert launcher_env_problems({"FABRIC_HARNESS_LAB": "5"}, dry_run=True)[0].startswith("FABRIC_HARNESS_LAB: got '5'")
    assert launcher_env_problems({"FABRIC_HARNESS_NODE": "lab-node1", "FABRIC_HARNESS_LAB": '{"rate": "1gbit"}'}) == []


def test_a_real_run_needs_rank_and_world_size_together():
    """WORLD_SIZE 2 alone built a group of one under a two-rank layout (a torch traceback); RANK 3 alone ran
    as rank 3 of one process and recorded nothing. A dry run plans for WORLD_SIZE alone, as before."""
    from trainer.launcher_env import launcher_env_problems
    assert launcher_env_problems({"WORLD_SIZE": "2"}) == [
        "WORLD_SIZE: got 2 but RANK is unset; allowed: both set, as torchrun sets them for each process "
        "(python -m launch.torchrun ...), or neither for one process"]
    assert launcher_env_problems({"WORLD_SIZE": "1", "RANK": "0", "MASTER_ADDR": " "}) == [  # a torch traceback
        "MASTER_ADDR and MASTER_PORT: unset, but RANK and WORLD_SIZE are set, so the run joins a launcher's group at "
        "MASTER_ADDR:MASTER_PORT; allowed: all four set, as torchrun sets them (python -m launch.torchrun ...), or "
        "RANK and WORLD_SIZE unset for one process"]
    assert launcher_env_problems({"WORLD_SIZE": "1", "RANK": "0"}, dry_run=True) == []
    assert launcher_env_problems({"RANK": "3"}) == [
        "RANK: got 3 but WORLD_SIZE is unset (one process, rank 0); allowed: both set, as torchrun sets them for "
        "each process, or RANK unset or 0 for one process"]
    for alone in ({"WORLD_SIZE": "2"}, {"RANK": "3"}):
        assert launcher_env_problems(alone, dry_run=True) == []
    for fine in ({"WORLD_SIZE": "1"}, {"RANK": "0"},
                 {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}):
        assert launcher_env_problems(fine) == []


def test_process_group_variables_that_cannot_work_are_named(monkeypatch):
    """A MASTER_ADDR no resolver knows (torch's store client retried it silently until the timeout), a
    flight-recorder buffer size that is not a number (the gloo group's constructor waited forever) and a
    GLOO_SOCKET_IFNAME naming no interface here (gloo's enforce-fail traceback)."""
    import socket

    from trainer.launcher_env import launcher_env_problems

    def no_such_name(host, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
    group = {"WORLD_SIZE": "1", "RANK": "0", "MASTER_ADDR": "no-such-host.invalid", "MASTER_PORT": "29500"}
    assert launcher_env_problems(group) == [
        "MASTER_ADDR: 'no-such-host.invalid' does not resolve on this host (Name or service not known); allowed: "
        "the host name or address of rank 0's node, as torchrun sets it"]
    assert launcher_env_problems(group, dry_run=True) == []  # a dry run may plan for another network
    monkeypatch.undo()
    assert launcher_env_problems({"TORCH_FR_BUFFER_SIZE": "lots"}, dry_run=True) == [
        "TORCH_FR_BUFFER_SIZE: got 'lots'; allowed: a whole number of flight-recorder entries (the run sets 2000 "
        "when it is unset)"]
    assert launcher_env_problems({"TORCH_FR_BUFFER_SIZE": "2000"}) == []
    names = [name for _, name in socket.if_nameindex()]
    (bad,) = launcher_env_problems({"GLOO_SOCKET_IFNAME": f"{names[0]},bogus0"})
    assert bad.startswith("GLOO_SOCKET_IFNAME: 'bogus0' is no network interface of ") and names[0] in bad
    assert launcher_env_problems({"GLOO_SOCKET_IFNAME": "bogus0"}, dry_run=True) == []
    assert launcher_env_problems({"GLOO_SOCKET_IFNAME": ",".join(names)}) == []


@pytest.mark.parametrize("value,size", [(4096, 4096), ("4K", 4096), ("64M", 64 << 20), ("1.5G", 3 << 29),
                                        ("16g", 16 << 30), ("64MB", 64 << 20), ("8", 8)])
def test_sizes_accepted(value, size):
    from trainer.config import parse_size
    problems = []
    assert parse_size(value, "k", problems) == size and problems == []


@pytest.mark.parametrize("value,hint", [("16 G", "; did you mean '16G'?"), ("16GiB", "; did you mean '16G' (K, M"),
                                       ("1e9", "; did you mean 1000000000 (1e9 bytes written out)?"),
                                       ("-1M", "; sizes are at least 1 byte"), (True, "(a whole or decimal"),
                                       (1.5, "(a whole or decimal"), ("lots", "no exponent)")])
def test_sizes_refused_with_the_spelling_meant(value, hint):
    from trainer.config import parse_size
    problems = []
    assert parse_size(value, "sweep.max_bytes", problems) is None
    assert len(problems) == 1 and problems[0].startswith(f"sweep.max_bytes: got {value!r}; expected bytes such as")
    assert problems[0].endswith(hint) or hint in problems[0], problems


@pytest.mark.parametrize("override, key", [("data.bogus=1", "data.bogus"), ("train.lrr=1", "train.lrr"),
                                           ("model.bogus=1", "model.bogus"), ("train.lr=zero", "train.lr")])
def test_one_bad_key_in_a_section_is_one_line(capsys, monkeypatch, override, key):
    """The section keeps its good keys: its defaults put in their place (data.seq_len 2048 against the tiny
    model's 512 positions, train.min_lr against the default lr) are not judged as if the user wrote them."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert main([TINY, override, "--dry-run"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {key}: "), lines


def test_a_home_path_reads_as_the_shell_reads_it(tmp_path, monkeypatch):
    """`data.dataset=~/d.jsonl`: the dry run checked the expanded path and said nothing; the run opened '~/d.jsonl'
    literally and stopped with 'does not exist'."""
    monkeypatch.setenv("HOME", str(tmp_path))
    r = load_recipe(str(TINY), ["data.dataset=~/d.jsonl", "model.tokenizer=~/tok", "output_dir=~/run"])
    assert (r.data.dataset, r.model.tokenizer, r.output_dir) == (
        str(tmp_path / "d.jsonl"), str(tmp_path / "tok"), str(tmp_path / "run"))
    assert load_recipe(str(TINY), ["data.dataset=$HOME/d.jsonl"]).data.dataset == "$HOME/d.jsonl"  # no variables


def test_a_binary_or_hex_integer_with_no_digits_is_not_called_too_long(tmp_path):
    """YAML 1.1 reads 0b_ and 0x_ as integers with no digits after the prefix: int() refuses them, and the
    line read "an integer of 1 digits; allowed: at most 4300 digits", which is not what is wrong."""
    path = tmp_path / "empty.yaml"
    path.write_text((REPO / TINY).read_text().replace("max_steps: 60", "max_steps: 0x_"))
    with pytest.raises(RecipeError) as info:
        load_recipe(str(path))
    (line,) = info.value.problems
    assert line.startswith(f"recipe: {path} is not valid YAML at line 7: ") and "4300" not in line
    assert "'0x_'" in line and "allowed:" in line


# round 8 of the bad-input table (bench/support/bad_inputs_round8.py): spellings of other tools, YAML's surprises
ROUND8_OVERRIDES = [
    (["parallel.tensor_parallel=2"], "parallel.tensor_parallel: unknown key; did you mean 'tp'?"),  # was 'data_parallel'
    (["train.max_steps=3"], "'max_steps' is a top-level key (write max_steps)"),  # was 'warmup_steps'
    (["train.learning_rate=1e-4"], "train.learning_rate: unknown key; did you mean 'lr'?"),
    (["MAX_STEPS=3"], "MAX_STEPS: unknown key; did you mean 'max_steps'? (keys are lower case)"),
    (["train.betas.0=0.8"], "train.betas.0: '0' reads as a list index, and an override sets a list whole; allowed: "
     "train.betas=[A,B,...]"),
    (["lora.target_modules.-1=q_proj"], "lora.target_modules.-1: '-1' reads as a list index"),
    (["train={lr: 0.1}"], "train: the override replaces the whole section, dropping the recipe's global_batch_size"),
    (["train.momentum=0.9"], "train.momentum: set, but only train.optimizer lars or sgd reads it (train.optimizer is "
     "adamw)"),
    (["data.image_size=224"], "data.image_size: set, but only the image_classification workload reads it"),
    (["train.lr=5%"], "expected a number (a percentage is not read: write the number itself)"),
    (["distributed.timeout_s=10m"], "(units are not read: write the number alone in seconds)"),
    (["train.lr=${oc.env:LR}"], "(no ${...} interpolation is resolved"),
    (["output_dir=${oc.env:SCRATCH,/tmp}/run"], "is not expanded (an OmegaConf/Hydra interpolation"),
    (["train.lr", "=", "0.1"], "train.lr: an override is one word, key.path=value, without spaces around '='"),
    (["train.lr=", "0.1"], "allowed: train.lr=0.1"),
]


@pytest.mark.parametrize("overrides,expected", ROUND8_OVERRIDES, ids=[" ".join(o) for o, _ in ROUND8_OVERRIDES])
def test_other_tools_spellings_are_one_line_with_what_was_meant(overrides, expected, capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert main([TINY, *overrides, "--dry-run"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0]


def test_a_whole_section_set_where_the_recipe_has_none_is_still_taken():
    recipe = load_recipe(TINY, ["parallel.data_parallel=deepspeed", "parallel.zero_stage=2",
                                "deepspeed={steps_per_print: 10}"])
    assert recipe.deepspeed == {"steps_per_print": 10}


@pytest.mark.parametrize("edit,expected", [
    (lambda t: t + "on: 3\n", "True: unknown key (YAML 1.1 reads an unquoted on, off, yes, no, y or n as a boolean"),
    (lambda t: t.replace("  micro_batch_size: 4\n", "\u00a0\u00a0micro_batch_size: 4\n"),
     "U+00A0 NO-BREAK SPACE (pasted from a web page?); allowed: indentation with ASCII spaces"),
    (lambda t: t + "\x1a", "the Ctrl-Z (0x1A) an old DOS/Windows editor appends"),
    (lambda t: t + "---\nmax_steps: 3\n", "allowed: one YAML document per recipe"),
    (lambda t: t.replace("  lr: 1.0e-2\n", "  lr: *nolr\n"), "found undefined alias 'nolr'; allowed: an alias (*name) after"),
    (lambda t: t.replace("lora:\n  r: 8\n", "lora: &l\n  r: 8\n  again: *l\n"), "nested too deeply; allowed: "),
])
def test_yaml_surprises_in_a_recipe_file_say_what_is_allowed(tmp_path, capsys, edit, expected):
    path = tmp_path / "r.yaml"
    path.write_text(edit((REPO / TINY).read_text().replace(" assets/", f" {REPO}/recipes/assets/")))
    assert main([str(path), "--dry-run"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0]


def test_a_utf16_recipe_is_named_as_such(tmp_path, capsys):
    path = tmp_path / "r.yaml"
    path.write_bytes((REPO / TINY).read_text().encode("utf-16"))
    assert main([str(path), "--dry-run"]) == 2
    assert "is UTF-16 text (as PowerShell's > and Out-File write it); allowed: a UTF-8 YAML file" in \
        capsys.readouterr().err


def test_empty_rank_variables_and_a_master_addr_with_a_port_are_named():
    from trainer.launcher_env import launcher_env_problems
    assert launcher_env_problems({"LOCAL_RANK": ""}) == [
        "LOCAL_RANK: set but empty; allowed: unset for one process, or an integer >= 0 as torchrun or srun sets it"]
    assert launcher_env_problems({"RANK": " "})[0].startswith("RANK: set but empty")
    run = {"WORLD_SIZE": "1", "RANK": "0", "MASTER_PORT": "29500"}
    assert "which holds a port; allowed: the host name or address of rank 0's node alone" in \
        launcher_env_problems({**run, "MASTER_ADDR": "127.0.0.1:29500"})[0]
    assert "which holds a URL" in launcher_env_problems({**run, "MASTER_ADDR": "tcp://127.0.0.1"})[0]
    assert launcher_env_problems({"FABRIC_HARNESS_JOB": "a\nb"})[0].startswith(
        "FABRIC_HARNESS_JOB: got 'a\\nb', with a line break or control character; allowed: a job name")


def test_output_dir_whose_record_files_are_of_another_kind_is_one_line(tmp_path):
    from trainer.cli import record_kind_problem
    os.mkfifo(tmp_path / "run.lock")
    assert "is a FIFO (named pipe), not a regular file; allowed: run.lock as a run writes it" in \
        record_kind_problem(str(tmp_path))
    os.remove(tmp_path / "run.lock")
    (tmp_path / "run.json").mkdir()
    assert "run.json' is a directory" in record_kind_problem(str(tmp_path))
    (tmp_path / "run.json").rmdir()
    (tmp_path / "logs").write_text("x")
    assert "logs' is a regular file, not a directory; allowed: the logs/ folder" in record_kind_problem(str(tmp_path))
    (tmp_path / "logs").unlink()
    assert record_kind_problem(str(tmp_path)) is None


def test_a_launcher_asks_the_recipe_problems_before_starting_workers():
    from trainer.cli import recipe_problems
    assert recipe_problems([TINY, "max_steps=2"]) == []
    assert recipe_problems([TINY, "max_step=3"])[0].startswith("max_step: unknown key; did you mean 'max_steps'?")


def test_a_recipe_files_key_left_unread_by_an_override_of_what_decides_is_not_refused():
    # bench/gpu/run.sh runs resnet50.yaml (lars_eta and poly_power in the file) with sgd and a constant schedule
    recipe = load_recipe("recipes/resnet50.yaml", ["train.optimizer=sgd", "train.schedule=constant"])
    assert recipe.train.optimizer == "sgd"
    with pytest.raises(RecipeError, match="train.lars_eta: set, but only train.optimizer lars reads it"):
        load_recipe("recipes/resnet50.yaml", ["train.optimizer=sgd", "train.lars_eta=0.002"])


def test_a_recipe_files_key_no_run_of_it_reads_is_said_once_not_refused(tmp_path, capsys):
    """A template carrying train.momentum beside AdamW (or label_smoothing on an LLM) still runs: the key is said
    at start as ignored; typed as an override for this run it is refused (test above)."""
    path = tmp_path / "template.yaml"
    path.write_text(open(TINY, encoding="utf-8").read().replace("train:\n", "train:\n  momentum: 0.9\n", 1))
    recipe = load_recipe(str(path), [])
    assert [x.split(":", 1)[0] for x in recipe.ignored_keys] == ["train.momentum"]
    assert main([str(path), "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "warning: train.momentum: set, but only train.optimizer lars or sgd reads it" in err, err
    assert "this run ignores it" in err
