"""Real multi-process runs on gloo through the real CLI and torchrun (tiny recipe, a few steps each).

Parallel layouts are checked against a single process on the same global batch.
"""
from __future__ import annotations

import json

import pytest

from ..conftest import FAST, REPO, loop_reduction_bytes, run_cli


# Dropout masks are drawn per rank, so a bit-for-bit layout comparison turns dropout off.
NO_DROPOUT = [*FAST, "lora.dropout=0.0"]


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    res = run_cli(tmp_path_factory.mktemp("single"), *NO_DROPOUT)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_two_rank_lora_matches_single_process_and_stays_in_sync(mode, single, tmp_path):
    res = run_cli(tmp_path / mode, *NO_DROPOUT, f"parallel.data_parallel={mode}", "train.eval_every_samples=48",
                  nproc=2)
    assert res.returncode == 0, res.stderr[-3000:]
    losses = res.losses()
    assert [r["step"] for r in res.metrics()] == [1, 2, 3, 4, 5, 6]
    # every field written is declared by the run directory's owner (telemetry/rundir.py)
    from telemetry.rundir import RUN_FIELDS, STEP_FIELDS, field_names
    assert {k for r in res.metrics() for k in r} <= field_names(STEP_FIELDS)
    assert set(res.run_json()) <= field_names(RUN_FIELDS)
    # same global batch, same seed: the first step's loss equals the single-process run's
    assert losses[0] == pytest.approx(single.losses()[0], rel=1e-6, abs=1e-6)
    # and the whole curve stays close (summation order differs across ranks)
    assert losses == pytest.approx(single.losses(), rel=1e-5)
    assert losses[-1] < losses[0] - 0.1, losses  # it learns
    # LoRA weights identical on every rank after training
    ranks = res.rank_files()
    assert len(ranks) == 2 and ranks[0]["trainable"]["sha256"] == ranks[1]["trainable"]["sha256"]
    assert ranks[0]["trainable"]["numel"] > 0
    info = res.run_json()
    assert info["status"] == "completed" and info["exit_code"] == 0 and info["error"] is None
    assert info["layout"]["dp"] == 2 and info["layout"]["data_parallel"] == mode
    assert info["backend"] == "gloo" and len(info["hosts"]) == 2
    assert {"torch", "transformers", "peft"} <= set(info["software"])
    evals = [r for r in res.metrics() if "eval_loss" in r]
    assert [r["step"] for r in evals] == [3, 6] and all(r["eval_loss"] > 0 for r in evals)
    for record in res.metrics():
        for key in ("step", "loss", "lr", "step_time_s", "samples_per_s", "tokens_per_s"):
            assert isinstance(record[key], (int, float)), key
    assert "step 6/6 | loss" in res.stdout and "eta" in res.stdout
    check_telemetry(res, mode)


@pytest.mark.integration
def test_padding_to_the_longest_example_takes_the_same_steps_on_fewer_positions(single, tmp_path):
    """data.padding=longest cuts only padding columns: with right padding and causal attention the losses
    and gradients are the full-width run's, on fewer computed positions; MFU's work is the computed ones."""
    res = run_cli(tmp_path / "longest", *NO_DROPOUT, "data.padding=longest")
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.losses() == pytest.approx(single.losses(), rel=1e-5)
    assert [r["grad_norm"] for r in res.metrics()] == pytest.approx([r["grad_norm"] for r in single.metrics()],
                                                                    rel=1e-4)
    seq, gbs = 128, 16  # FAST's data.seq_len, the tiny recipe's global batch
    for full, cut in zip(single.metrics(), res.metrics()):
        assert full["tokens"] == cut["tokens"] and full["padded_tokens"] == gbs * seq  # real tokens unchanged
        assert cut["tokens"] <= cut["padded_tokens"] <= full["padded_tokens"] and cut["padded_tokens"] % 16 == 0
        assert cut["tokens_per_s"] == pytest.approx(cut["tokens"] / cut["step_time_s"])
    assert sum(r["padded_tokens"] for r in res.metrics()) < sum(r["padded_tokens"] for r in single.metrics())
    info = res.run_json()
    assert "padded_tokens" in info["throughput"]["formula"] and "padded per micro-batch" in res.stdout
    # the harness's own per-step work is recorded beside the step time, never folded into it
    assert all(r["harness_s"] > 0 for r in res.metrics())




def check_telemetry(res, mode):
    """The per-step collective record matches what the layout must send."""
    info = res.run_json()
    trainable_bytes = info["model"]["trainable_parameters"] * 4  # fp32 LoRA weights on CPU
    all_bytes = info["model"]["parameters"] * 4
    steps = res.metrics()
    for rec in steps:
        comm = rec["comm"]
        if mode == "ddp":
            # one gradient all-reduce per optimizer step (no_sync on the other micro-batch)
            assert set(comm) == {"all_reduce"}
            assert comm["all_reduce"]["bytes"] == trainable_bytes + loop_reduction_bytes(rec["step"], len(steps))
        else:
            # FSDP2 gathers every parameter for forward and again for backward (the root stays gathered
            # after an evaluation's forward), reduce-scatters the grads
            assert comm["all_gather"]["bytes"] >= 2 * all_bytes
            assert comm["reduce_scatter"]["bytes"] >= trainable_bytes
        if "eval_loss" in rec:  # the evaluation's collectives are its own, never the step's
            assert rec["eval_comm_bytes"] == (2 * 8 if mode == "ddp" else rec["eval_comm_bytes"]) > 0
            assert rec["eval_time_s"] > 0 and rec["eval_comm_time_s"] is not None
        assert rec["comm_bytes"] == sum(v["bytes"] for v in comm.values())
        assert rec["comm_time_s"] is not None and rec["comm_time_s"] > 0
        # one record, consistent with itself: exposed <= communication <= step time (rank 0's own)
        assert rec["exposed_comm_s"] is not None and rec["exposed_comm_s"] <= rec["comm_time_s"] <= rec["step_time_s"]
        spread = rec["ranks"]["step_time_s"]
        assert spread["ranks"] == 2 and spread["min"] <= spread["median"] <= spread["max"]
        if info["device"]["type"] == "cpu":  # ranks on CPU read no GPU, whatever the machine has
            assert rec["job_gpu_energy_j"] is None and rec["gpu_energy_reason"]
        else:  # a GPU's energy is a number, or null with a reason
            assert rec["job_gpu_energy_j"] is not None or rec["gpu_energy_reason"]
    assert info["fabric"]["backend"] == "gloo" and info["fabric"]["transport"] == "loopback"
    assert info["telemetry"]["counters"]["verdict"] in ("clean", "loss")
    # outside the steps: with DDP the parameters' first broadcast; counted, never in a step's record (the
    # harness's own exchanges of hosts and inventory are not the job's: not counted)
    outside = info["telemetry"]["comm_outside_steps"]
    assert isinstance(outside, dict)
    if mode == "ddp":
        assert outside["broadcast"]["count"] >= 1 and outside["broadcast"]["bytes"] > 0
    for rank in (0, 1):
        lines = (res.out / "ranks" / f"rank{rank:05d}.telemetry.jsonl").read_text().splitlines()
        assert len(lines) == 6 and all(json.loads(line)["comm"] for line in lines)
        for line in map(json.loads, lines):  # each rank's own record: same rules, no job-wide sums
            assert line["exposed_comm_s"] <= line["comm_time_s"] <= line["step_time_s"]
            assert not [k for k in line if k.startswith("job_")]


@pytest.mark.integration
def test_pipelined_cross_rank_figures_reach_every_line_in_step_order(tmp_path):
    """telemetry.cross_rank_pipelined at 3 ranks: the tree goes up a level per step (rank 0's height 2), rank 0
    holds each step's metrics line until its figures are in and writes its own rank line at once; the last two
    steps' figures come from the drain when the loop ends."""
    res = run_cli(tmp_path / "run", *FAST, "max_steps=5", "train.global_batch_size=12",
                  "telemetry.cross_rank_pipelined=true", nproc=3, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.metrics()
    assert [r["step"] for r in lines] == [1, 2, 3, 4, 5]
    for rec in lines:
        spread = rec["ranks"]["step_time_s"]
        assert spread["ranks"] == 3 and spread["min"] <= spread["median"] <= spread["max"], rec["step"]
        assert rec["ranks"]["comm_time_s"]["ranks"] == 3 and "_held" not in rec
    info = res.run_json()["telemetry"]["cross_rank"]
    assert info["pipelined"] is True and info["lag_steps"] == 2
    for rank in range(3):
        own = [json.loads(x) for x in (res.out / "ranks" / f"rank{rank:05d}.telemetry.jsonl").read_text().splitlines()]
        assert [x["step"] for x in own] == [1, 2, 3, 4, 5] and not any("ranks" in x for x in own)


@pytest.mark.integration
def test_killed_run_keeps_its_steps_and_resume_equals_an_uninterrupted_run(tmp_path):
    # dropout stays on: equal losses after resume also prove the RNG streams were restored
    out = tmp_path / "resumed"
    crashed = run_cli(out, *FAST, "train.save_every=3", nproc=2,
                      env={"FABRIC_HARNESS_CRASH_AFTER_STEP": "4"})
    assert crashed.returncode != 0
    # the killed job left every completed step readable; the surviving rank records rank 0's loss (unless torchrun
    # tore it down first: then run.json says the attempt never closed)
    assert [r["step"] for r in crashed.metrics()] == [1, 2, 3, 4]
    killed = crashed.run_json()
    assert killed["status"] == "running" or (killed["status"] == "failed" and killed["error"].startswith("rank 0 (")), \
        killed
    first = "failed" if killed["status"] == "failed" else "died"
    resumed = run_cli(out, *FAST, "train.save_every=3", nproc=2)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout and "at step 3" in resumed.stdout
    assert [r["step"] for r in resumed.metrics()] == [1, 2, 3, 4, 5, 6]
    straight = run_cli(tmp_path / "straight", *FAST, nproc=2)
    assert resumed.losses() == straight.losses()  # bit-identical: data position and RNG restored
    info = resumed.run_json()
    assert [a["status"] for a in info["attempts"]] == [first, "completed"]
    assert (out / "logs" / "metrics.before-resume-1.jsonl").exists()  # nothing recorded is lost
    # the same command again has nothing left to do: the run's final loss and counter verdict stay
    again = run_cli(out, *FAST, "train.save_every=3", nproc=2)
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stderr[-3000:]
    after = again.run_json()
    assert after["final"]["step"] == 6 and after["final"]["loss"] == resumed.losses()[-1]
    assert after["telemetry"]["counters"] == info["telemetry"]["counters"]
    assert after["telemetry"]["counters"]["verdict"] in ("clean", "loss")


@pytest.mark.integration
@pytest.mark.parametrize("override,expected", [
    ("data.dataset=/no/such/data.jsonl", "data.dataset: path '/no/such/data.jsonl' does not exist"),
    ("data.dataset=no-such-org/no-such-dataset", "data.dataset: 'no-such-org/no-such-dataset' is neither a local"),
    ("train.resume=/no/such/checkpoint", "train.resume: '/no/such/checkpoint' is not a checkpoint directory"),
    ("model.tokenizer=/no/such/tokenizer", "model.tokenizer: '/no/such/tokenizer' is not a directory"),
])
def test_bad_paths_fail_with_one_line_and_are_recorded(override, expected, tmp_path):
    res = run_cli(tmp_path / "bad", *FAST, override)
    assert res.returncode == 2
    errors = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and expected in errors[0], res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    info = json.loads((tmp_path / "bad" / "run.json").read_text())
    assert info["status"] == "failed" and info["exit_code"] == 2 and expected in info["error"]


@pytest.mark.integration
def test_pretokenized_eval_stops_at_target_loss(tmp_path):
    """The MLPerf path: pre-tokenized train/eval parquet, eval every N samples, stop at the target."""
    import datasets

    rows = [{"input_ids": [1] + [5 + (i + j) % 50 for j in range(63)],
             "labels": [-100] * 32 + [5 + (i + j) % 50 for j in range(32, 64)]} for i in range(64)]
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "train.parquet"))
    datasets.Dataset.from_list(rows[:8]).to_parquet(str(tmp_path / "eval.parquet"))
    res = run_cli(tmp_path / "run", *FAST, "data.format=pretokenized", "data.seq_len=64",
                  f"data.dataset={tmp_path / 'train.parquet'}", f"data.eval_dataset={tmp_path / 'eval.parquet'}",
                  "train.eval_every_samples=32", "train.target_eval_loss=100.0")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = res.metrics()
    assert [r["step"] for r in rows] == [1, 2]  # GBS 16: the first eval is due after 32 samples
    assert "eval_loss" not in rows[0] and rows[1]["samples_seen"] == 32
    info = res.run_json()
    assert info["status"] == "target_reached" and info["final"]["target_reached_step"] == 2
    assert "<= target 100.0 at step 2: stopping" in res.stdout


@pytest.mark.integration
def test_real_checkpoint_directory_with_its_own_tokenizer(tmp_path):
    """The real-use path: model.path points at a saved Hugging Face checkpoint that brings its tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    ckpt = tmp_path / "ckpt"
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=260, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                 num_attention_heads=4, num_key_value_heads=2, eos_token_id=2, pad_token_id=0)
                     ).save_pretrained(ckpt)
    AutoTokenizer.from_pretrained(str(REPO / "recipes" / "assets" / "byte_tokenizer")).save_pretrained(ckpt)
    res = run_cli(tmp_path / "run", *FAST, "max_steps=2", f"model.path={ckpt}", "model.config=null",
                  "model.tokenizer=null")
    assert res.returncode == 0, res.stderr[-3000:]
    info = res.run_json()
    assert info["recipe"]["model"]["path"] == str(ckpt) and info["model"]["parameters"] > 0
    assert len(res.metrics()) == 2
    bad = run_cli(tmp_path / "bad", *FAST, f"model.path={tmp_path}", "model.config=null", "model.tokenizer=null")
    assert bad.returncode == 2
    assert f"error: model.path: '{tmp_path}' has no config.json; expected a Hugging Face checkpoint" in bad.stderr


def lora_weights(run_dir) -> dict:
    """The adapter tensors of a run's final DCP checkpoint, read without a process group."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    ckpt = sorted((run_dir / "checkpoints").glob("step-*"))[-1]
    dcp_to_torch_save(str(ckpt), str(run_dir / "flat.pt"))
    state = torch.load(run_dir / "flat.pt", weights_only=False)
    return {k: v for k, v in state["model"].items() if "lora_" in k}


@pytest.mark.integration
@pytest.mark.parametrize("nproc,overrides", [
    (2, ["parallel.tp=2"]),  # tensor parallel alone (dp 1)
    (4, ["parallel.tp=2", "parallel.data_parallel=fsdp"]),  # dp 2 x tp 2, FSDP2 over TP shards
    (2, ["parallel.tp=2", "parallel.sequence_parallel=true"]),  # norms and residuals split along the sequence
], ids=["tp2", "dp2xtp2-fsdp", "tp2-sp"])
def test_tensor_parallel_lora_matches_the_unsharded_model(nproc, overrides, single, tmp_path):
    res = run_cli(tmp_path / "tp", *NO_DROPOUT, *overrides, nproc=nproc, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.losses()[0] == pytest.approx(single.losses()[0], abs=1e-5)  # issue 3: within 1e-5
    assert res.losses() == pytest.approx(single.losses(), rel=1e-5)
    # grad norms too: clipping sees the same global norm with TP (and FSDP) shards
    assert [r["grad_norm"] for r in res.metrics()] == pytest.approx([r["grad_norm"] for r in single.metrics()],
                                                                     rel=1e-5)
    hashes = {r["trainable"]["sha256"] for r in res.rank_files()}
    assert len(res.rank_files()) == nproc and len(hashes) == 1  # every rank holds the same full adapters
    ref, got = lora_weights(single.out), lora_weights(res.out)
    assert ref.keys() == got.keys() and len(ref) > 0
    worst = max(float((ref[k] - got[k]).abs().max()) for k in ref)
    assert worst < 1e-5, f"LoRA weights differ from the unsharded run by {worst}"  # stated tolerance: 1e-5
    info = res.run_json()
    assert info["layout"]["tp"] == 2
    assert info["model"]["vocab_parallel_loss"] is True  # embedding and lm_head split over the vocabulary
    tp_comm = res.metrics()[0]["comm"]
    assert tp_comm["all_reduce"]["count"] > 10  # row-parallel outputs and column-parallel input grads
    if "parallel.sequence_parallel=true" in overrides:  # gathers before attention/MLP, scatters after
        assert tp_comm["all_gather"]["count"] > 0 and tp_comm["reduce_scatter"]["count"] > 0


@pytest.mark.integration
@pytest.mark.parametrize("nproc,overrides", [
    (2, []),  # dp 2: the same bytes DDP sends, without DDP
    (4, ["parallel.tp=2"]),  # dp 2 x tp 2: the frozen base stays put; only the LoRA shards cross dp
], ids=["dp2", "dp2xtp2"])
def test_replicated_lora_sends_only_trainable_gradients_across_dp(nproc, overrides, single, tmp_path):
    res = run_cli(tmp_path / "rep", *NO_DROPOUT, "parallel.data_parallel=replicate", *overrides, nproc=nproc,
                  timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.losses() == pytest.approx(single.losses(), rel=1e-5)
    assert [r["grad_norm"] for r in res.metrics()] == pytest.approx([r["grad_norm"] for r in single.metrics()],
                                                                     rel=1e-5)
    ranks = res.rank_files()
    assert len({r["trainable"]["sha256"] for r in ranks}) == 1
    local = {r["trainable_local_bytes"] for r in ranks}
    assert len(local) == 1
    local_bytes = local.pop()
    if overrides:  # tp shards lora_B (column-parallel) and lora_A (row-parallel): less than the whole
        assert local_bytes < res.run_json()["model"]["trainable_parameters"] * 4
    steps = res.metrics()
    for rec in steps:
        comm = rec["comm"]
        assert "all_gather" not in comm and "reduce_scatter" not in comm  # nothing of the base moves
        ar = comm["all_reduce"]
        # torch.distributed calls (timed on gloo) are the dp gradient all-reduce, the loop's counts and
        # loss sums, and with tp the clipping norm's square sum over the tp group (float32); DTensor's own
        # tp all-reduces are functional collectives (untimed on gloo) and separate from it
        clip_norm = 4 if overrides else 0
        timed_bytes = ar["bytes"] - ar.get("untimed_bytes", 0)
        assert timed_bytes == local_bytes + loop_reduction_bytes(rec["step"], len(steps)) + clip_norm, (timed_bytes, local_bytes)
