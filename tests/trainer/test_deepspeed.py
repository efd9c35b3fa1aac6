"""DeepSpeed ZeRO 1/2/3 as the data-parallel engine: real 2-rank gloo runs through the CLI and torchrun,
checked against DDP on the same global batch, against an uninterrupted run after resume, and against
DeepSpeed's own comms logger."""
from __future__ import annotations

import pytest

from ..conftest import FAST, REPO, loop_all_reduces, loop_reduction_bytes, run_cli

pytest.importorskip("deepspeed", reason="deepspeed is in the test extra: pip install -e .[test]")

BERT = str(REPO / "recipes" / "tiny_bert.yaml")
NO_DROPOUT = [*FAST, "lora.dropout=0.0"]
STEPS = ["max_steps=4", "train.save_every=2"]  # save_every: the straight runs double as resume references
ENV = {"DS_ACCELERATOR": "cpu"}


def zero(stage: int) -> list[str]:
    return ["parallel.data_parallel=deepspeed", f"parallel.zero_stage={stage}"]


def _run(out, *overrides, recipe=None, env=None):
    kwargs = {"recipe": recipe} if recipe else {}
    res = run_cli(out, *overrides, nproc=2, env={**ENV, **(env or {})}, timeout=300, **kwargs)
    return res


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    res = _run(tmp_path_factory.mktemp("ddp"), *NO_DROPOUT, *STEPS, "parallel.data_parallel=ddp")
    assert res.returncode == 0, res.stderr[-3000:]
    return res


@pytest.fixture(scope="module")
def straight(tmp_path_factory, ds_op_built):
    """Uninterrupted ZeRO runs, made once per stage and shared by the parity and resume tests."""
    runs = {}

    def get(stage: int):
        if stage not in runs:
            res = _run(tmp_path_factory.mktemp(f"zero{stage}"), *NO_DROPOUT, *STEPS, *zero(stage))
            assert res.returncode == 0, res.stderr[-3000:]
            runs[stage] = res
        return runs[stage]
    return get


def _crash_and_resume(out, *overrides):
    """Killed after step 3 with a checkpoint at step 2; the second attempt redoes 3 and does 4."""
    crashed = _run(out, *overrides, env={"FABRIC_HARNESS_CRASH_AFTER_STEP": "3"})
    assert crashed.returncode != 0
    assert [r["step"] for r in crashed.metrics()] == [1, 2, 3]
    resumed = _run(out, *overrides)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout and "at step 2" in resumed.stdout
    assert [r["step"] for r in resumed.metrics()] == [1, 2, 3, 4]
    # each rank's partitions are tensors of its own in the harness's checkpoint, its settings JSON;
    # nothing of DeepSpeed's own (pickled) checkpoint format
    from trainer.checkpoint import read_metadata

    step = out / "checkpoints" / "step-0000002"
    keys = read_metadata(str(step)).state_dict_metadata
    for rank in (0, 1):
        assert f"harness/deepspeed/rank{rank}" in keys
        assert any(k.startswith(f"deepspeed.deepspeed/rank{rank}/fp32/") for k in keys)
    assert not list(step.rglob("*.pt")) and not list((out / "checkpoints").glob("global_step*"))
    return resumed


def _check_against_ddp(res, ddp, stage: int, exact: bool) -> None:
    ours, ref = res.metrics(), ddp.metrics()
    assert [r["step"] for r in ours] == [1, 2, 3, 4]
    # fp32: losses and gradient norms (before clipping; the tiny recipe clips at 1.0) equal DDP's
    for a, b in zip(ours, ref):
        if exact:  # DeepSpeed computes the norm its own way (to ~1e-7): only the losses are bitwise
            assert a["loss"] == b["loss"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-6)
        assert a["lr"] == b["lr"]
    assert ours[-1]["loss"] < ours[0]["loss"]  # it learns
    ranks = res.rank_files()  # adapters identical on every rank (gathered whole under ZeRO-3)
    assert len(ranks) == 2 and ranks[0]["trainable"] == ranks[1]["trainable"]
    assert ranks[0]["trainable"]["numel"] == res.run_json()["model"]["trainable_parameters"]
    # and equal to DDP's adapters after the same steps (to the same 1e-6)
    assert ranks[0]["trainable"]["norm"] == pytest.approx(ddp.rank_files()[0]["trainable"]["norm"], rel=1e-6)
    info = res.run_json()
    assert info["status"] == "completed" and info["layout"]["data_parallel"] == "deepspeed"
    assert info["recipe"]["parallel"]["zero_stage"] == stage


@pytest.mark.integration
def test_zero1_matches_ddp(ddp, straight):
    _check_against_ddp(straight(1), ddp, 1, exact=False)


@pytest.mark.integration
def test_zero2_killed_and_resumed_reproduces_the_uninterrupted_run(ddp, straight, tmp_path):
    # ZeRO-2 reduces each micro-batch's gradients as it goes (DDP sums them locally, then reduces once):
    # another summation order, so DDP's losses are matched to 1e-6 (bit for bit on one machine, not on
    # another); the uninterrupted ZeRO-2 run's are matched bit for bit
    resumed = _crash_and_resume(tmp_path / "z2", *NO_DROPOUT, *STEPS, *zero(2))
    _check_against_ddp(resumed, ddp, 2, exact=False)
    reference = straight(2)
    assert resumed.losses() == reference.losses()
    assert [r["grad_norm"] for r in resumed.metrics()] == [r["grad_norm"] for r in reference.metrics()]
    assert resumed.rank_files()[0]["trainable"] == reference.rank_files()[0]["trainable"]


@pytest.mark.integration
def test_zero3_matches_ddp(ddp, straight):
    res = straight(3)
    _check_against_ddp(res, ddp, 3, exact=False)
    for rec in res.metrics():  # parameters gathered for forward and backward, gradients reduce-scattered
        assert rec["comm"]["all_gather"]["count"] > 0 and rec["comm"]["reduce_scatter"]["count"] > 0


@pytest.mark.integration
def test_zero3_resume_reproduces_the_uninterrupted_run(straight, tmp_path):
    resumed = _crash_and_resume(tmp_path / "z3", *NO_DROPOUT, *STEPS, *zero(3))
    reference = straight(3)
    assert resumed.losses() == reference.losses()  # bit for bit
    assert [r["grad_norm"] for r in resumed.metrics()] == [r["grad_norm"] for r in reference.metrics()]
    assert resumed.rank_files()[0]["trainable"] == reference.rank_files()[0]["trainable"]


@pytest.mark.integration
def test_comms_logger_sees_what_the_tracer_sees_under_zero3(tmp_path, ds_op_built):
    res = _run(tmp_path / "z3log", *NO_DROPOUT, "max_steps=2", *zero(3),
               "deepspeed={comms_logger: {enabled: true, prof_all: true}}")
    assert res.returncode == 0, res.stderr[-3000:]
    steps = res.metrics()
    for rec in steps:
        ours, theirs, step = rec["comm"], rec["deepspeed_comm"], rec["step"]
        assert theirs["all_gather"]["count"] > 0 and theirs["reduce_scatter"]["count"] > 0
        for kind, logged in theirs.items():
            extra = loop_all_reduces(step) if kind == "all_reduce" else 0
            assert ours[kind]["count"] == logged["count"] + extra, (kind, ours[kind], logged)
            if kind == "all_gather":  # the logger records the input shard; nccl-tests S is the gathered output
                assert ours[kind]["bytes"] == 2 * logged["msg_bytes"]
            elif kind == "all_reduce":  # the loop's own: float64 item counts and loss sums
                assert ours[kind]["bytes"] == logged["msg_bytes"] + loop_reduction_bytes(step, len(steps))
            else:
                assert ours[kind]["bytes"] == logged["msg_bytes"], kind
        assert set(ours) == set(theirs) | {"all_reduce"}  # nothing DeepSpeed issued escaped either side


@pytest.mark.integration
def test_bert_full_training_under_zero3_matches_ddp(tmp_path, ds_op_built):
    common = ["max_steps=3", "train.eval_every_samples=null", "train.optimizer=adamw", "train.lr=1e-3",
              "model.config.hidden_dropout_prob=0.0", "model.config.attention_probs_dropout_prob=0.0",
              "distributed.timeout_s=60"]
    ref = _run(tmp_path / "ddp", *common, recipe=BERT)
    res = _run(tmp_path / "z3", *common, *zero(3), recipe=BERT)
    assert ref.returncode == 0 and res.returncode == 0, (ref.stderr[-2000:], res.stderr[-2000:])
    for a, b in zip(res.metrics(), ref.metrics(), strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-6)
    ranks = res.rank_files()
    assert ranks[0]["trainable"] == ranks[1]["trainable"]
    assert ranks[0]["trainable"]["numel"] == res.run_json()["model"]["parameters"]  # every weight trains
