"""trainer.progress in-process: the rank-0 progress line and its ETA."""
from __future__ import annotations

from trainer.progress import Progress


def _rec(step, **extra):
    return {"step": step, "loss": 2.5, "lr": 1e-4, "step_time_s": 2.0 if step == 1 else 1.0,
            "samples_per_s": 8.0, "tokens_per_s": None, **extra}


def test_one_line_per_interval_and_at_the_last_step(capsys):
    p = Progress(max_steps=5, every=2, enabled=True)
    for step in range(1, 6):
        p.step(_rec(step))
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" | ")[0] for line in lines] == ["[trainer] step 2/5", "[trainer] step 4/5",
                                                        "[trainer] step 5/5"]
    # the first (warm-up) step is left out of the ETA: 1 s/step x 1 step left
    assert lines[1].endswith("eta 0:00:01") and "8.0 samples/s" in lines[1] and "loss 2.5000" in lines[1]


def test_tokens_and_eval_figures_when_known(capsys):
    p = Progress(max_steps=1, every=1, enabled=True)
    p.step(_rec(1, tokens_per_s=12345.6, eval_loss=1.25, eval_accuracy=0.5))
    line = capsys.readouterr().out.strip()
    assert "12,346 tok/s" in line and "samples/s" not in line
    assert "eval_loss 1.2500" in line and "eval_acc 0.5000" in line and line.endswith("eta 0:00:00")


def test_disabled_ranks_print_only_warnings(capsys):
    p = Progress(max_steps=2, every=1, enabled=False)
    p.info("hello")
    p.step(_rec(1))
    p.warn("disk nearly full")
    out = capsys.readouterr()
    assert out.out == "" and out.err == "[trainer] warning: disk nearly full\n"
