"""`python -m telemetry compare` on recorded runs: training and sweep tables, parity, the refusal."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from telemetry.analysis.compare import CompareError, compare, loss_parity
from telemetry.analysis.runs import load_run

from ...conftest import REPO
from ..recorded import sweep_result, write_run


def cli(*args):
    return subprocess.run([sys.executable, "-m", "telemetry", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.integration
def test_training_comparison_tables_parity_and_projection(tmp_path):
    a = write_run(tmp_path / "fast", rate_bps=1e9, step_time=1.0, comm_time=0.25)
    b = write_run(tmp_path / "slow", rate_bps=1e8, step_time=2.0, comm_time=1.25)
    proc = cli("compare", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| iteration time, median | 1 s | 2 s (+100.0%) |" in md
    assert "| samples/s | 8 | 4 (-50.0%) |" in md
    assert "| verdict | identical |" in md
    assert "Projection from 1000mbit lab" in md and "100mbit lab" in md
    result = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert result["kind"] == "training" and result["parity"]["verdict"] == "identical"
    proj = result["projection"][0]  # with its interval, and whether the measured time fell in it
    assert proj["interval_s"][0] <= proj["predicted_s"] <= proj["interval_s"][1]
    assert proj["inside"] == (proj["interval_s"][0] <= proj["measured_s"] <= proj["interval_s"][1])
    assert "| fabric | predicted iteration | interval | measured iteration | error | in interval |" in md
    for name in ("loss.png", "step_time.png", "comm.png", "projection.png"):
        assert (tmp_path / "cmp" / name).stat().st_size > 1000


def test_loss_parity_finds_divergence(tmp_path):
    a = write_run(tmp_path / "a")
    b = write_run(tmp_path / "b", losses=[3.0, 2.9, 2.8, 2.75, 2.6, 2.5])
    parity = loss_parity([load_run(str(a)), load_run(str(b))])
    assert parity["verdict"].startswith("DIFFERENT") and parity["at_step"] == 4


@pytest.mark.integration
def test_refuses_different_recipes_and_says_why(tmp_path):
    a = write_run(tmp_path / "a", lr=0.01)
    b = write_run(tmp_path / "b", lr=0.001)
    proc = cli("compare", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 2
    assert "refusing to compare runs of different recipes" in proc.stderr
    assert "train.lr (0.01 vs 0.001)" in proc.stderr and "--allow-mismatch" in proc.stderr
    proc = cli("compare", str(a), str(b), "--out", str(tmp_path / "cmp"), "--allow-mismatch")
    assert proc.returncode == 0
    assert "compared despite different recipes" in (tmp_path / "cmp" / "compare.md").read_text()


def test_runs_differing_only_in_where_they_start_or_what_they_print_are_one_recipe(tmp_path):
    from telemetry.analysis.compare_inputs import recipe_differences
    from telemetry.analysis.runs import load_run

    a = load_run(str(write_run(tmp_path / "a", train_extra={"resume": "auto", "log_every": 10})))
    b = load_run(str(write_run(tmp_path / "b", train_extra={"resume": "never", "log_every": 1})))
    assert recipe_differences(a, b) == []
    c = load_run(str(write_run(tmp_path / "c", train_extra={"resume": "never", "grad_clip": 0.5})))
    assert recipe_differences(b, c) == ["train.grad_clip (None vs 0.5)"]


@pytest.mark.integration
def test_sweep_comparison_with_latency_reduction(tmp_path):
    tcp = write_run(tmp_path / "tcp", sweep=sweep_result(scale=3.0))
    roce = write_run(tmp_path / "roce", transport="roce", sweep=sweep_result(scale=1.0))
    proc = cli("compare", str(tcp), str(roce), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| all_reduce_4B | 120 | 40 (-67%) |" in md  # 120 us -> 40 us: -67%, as in the RoCE report
    assert "Average bus bandwidth" in md
    assert (tmp_path / "cmp" / "sweep_all_reduce.png").exists()
    training = write_run(tmp_path / "train")
    for extra in ((), ("--allow-mismatch",)):  # one line saying what to do, not the recipes' differences
        proc = cli("compare", str(tcp), str(training), "--out", str(tmp_path / "x"), *extra)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.startswith("error: cannot compare a collective sweep with a training run: ")
        assert f"--sweep LABEL={tcp}" in proc.stderr and "differs" not in proc.stderr


@pytest.mark.integration
def test_partial_communication_is_marked_in_the_comparison(tmp_path):
    untimed = {"all_gather": {"count": 2, "bytes": 4096, "time_s": None, "untimed": 2, "untimed_bytes": 4096,
                              "busbw_GBps": None, "untimed_reason": "functional collectives are timed on NCCL only"}}
    a = write_run(tmp_path / "fast", rate_bps=1e9, extra_comm=untimed)
    b = write_run(tmp_path / "slow", rate_bps=1e8, step_time=2.0, comm_time=1.25)
    proc = cli("compare", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert ("| communication share | 25.0% (partial: 4.1 kB per step untimed: functional collectives are timed "
            "on NCCL only) | 62.5% |") in md
    assert "| all_gather | n/a / n/a (partial) | n/a / n/a |" in md
    assert "; partial: the baseline has 4.1 kB per step untimed" in md
    assert json.loads((tmp_path / "cmp" / "compare.json").read_text())["projection"][0]["partial"] is True


@pytest.mark.integration
def test_repeats_give_mean_spread_and_bars_with_the_difference(tmp_path):
    # two runs per fabric: fast 1.0 and 1.2 s (mean 1.1, sd 0.1414), slow 2.0 and 2.4 s (mean 2.2: +100%)
    runs = [write_run(tmp_path / f"{n}{i}", rate_bps=r, step_time=t, comm_time=0.25)
            for n, r, ts in (("fast", 1e9, (1.0, 1.2)), ("slow", 1e8, (2.0, 2.4))) for i, t in enumerate(ts)]
    proc = cli("compare", *map(str, runs), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| iteration time, median | 1.1 s ± 0.141 s (n=2) | 2.2 s ± 0.283 s (n=2) (+100.0%) |" in md
    # samples/s: 8/1.0 and 8/1.2 -> 7.33 ± 0.943; 8/2.0 and 8/2.4 -> 3.67 ± 0.471 (-50.0%)
    assert "| samples/s | 7.33 ± 0.943 (n=2) | 3.67 ± 0.471 (n=2) (-50.0%) |" in md
    assert "| runs | 2: fast0, fast1 | 2: slow0, slow1 |" in md
    result = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert result["labels"] == ["1000mbit lab", "100mbit lab"]
    assert result["groups"]["100mbit lab"] == [str(runs[2]), str(runs[3])]
    fast = result["stats"][0]["step_time_median_s"]
    assert fast["n"] == 2 and fast["mean"] == pytest.approx(1.1) and fast["sd"] == pytest.approx(0.02 ** 0.5)
    assert result["projection"][0]["measured_s"] == pytest.approx(2.2)  # measured: the mean of the repeats
    # projected from both baseline runs together (their medians), not from the first alone
    from telemetry.analysis.projection import combine_profiles, measured_profile, project
    from telemetry.analysis.runs import load_run
    profiles = [measured_profile(load_run(str(r))) for r in runs[:2]]
    both = project(combine_profiles(profiles), 1e8)["step_time_s"]
    assert result["projection"][0]["predicted_s"] == pytest.approx(both)
    assert both != pytest.approx(project(profiles[0], 1e8)["step_time_s"])
    for name in ("iteration_time.png", "samples_per_s.png", "loss.png"):
        assert name in result["figures"] and (tmp_path / "cmp" / name).stat().st_size > 1000


@pytest.mark.integration
def test_labels_given_on_the_command_line_group_runs(tmp_path):
    a1, a2 = write_run(tmp_path / "a1"), write_run(tmp_path / "a2", step_time=3.0)
    b = write_run(tmp_path / "b", step_time=2.0)
    proc = cli("compare", f"tcp={a1}", f"tcp={a2}", f"roce={b}", "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| iteration time, median | 2 s ± 1.41 s (n=2) | 2 s (+0.0%) |" in md
    # unlabelled runs on one fabric: each its own column, and the report says so
    proc = cli("compare", str(a1), str(a2), "--out", str(tmp_path / "one"))
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "one" / "compare.md").read_text()
    assert "every run is on one fabric (tcp): each run is its own column" in md and "tcp #2" in md
    proc = cli("compare", f"x={a1}", f"x={a2}", "--out", str(tmp_path / "bad"))
    assert proc.returncode == 2 and "every run is labelled 'x'" in proc.stderr


@pytest.mark.integration
def test_fabric_header_rows(tmp_path):
    nccl = {"nccl_version": "2.21.5", "network": "IB", "gpudirect_rdma": True, "transport": "roce",
            "devices": [{"device": "mlx5_0", "port": 1, "link_layer": "Ethernet"}], "unknown": {}}
    roce = write_run(tmp_path / "roce", transport="roce", info_extra={"duration_s": 7581.2}, fabric_extra={
        "nccl_version": "2.21.5", "nccl": nccl,
        "hcas": [{"device": "mlx5_0", "port": 1, "link_layer": "Ethernet", "rate": "400 Gb/sec (4X NDR)"}],
        "interfaces": [{"name": "eth0", "mtu": 9000, "speed_mbps": 400000}]})
    tcp = write_run(tmp_path / "tcp", transport="tcp", info_extra={"duration_s": 12.5}, fabric_extra={
        "backend": "gloo", "gloo": {"interface": "eth0", "speed_mbps": 10000},
        "interfaces": [{"name": "eth0", "mtu": 1500, "speed_mbps": 10000}]})
    proc = cli("compare", str(roce), str(tcp), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert md.index("## Fabrics") < md.index("## Training")
    for row in ("|  | roce 400G | tcp 10G |", "| link rate | 400 Gb/sec (4X NDR) | 10 Gbit/s |",
                "| interfaces (MTU) | mlx5_0:1 (MTU unknown: not in the interface list) | eth0 (MTU 1500) |",
                "| NCCL version | 2.21.5 | not used (gloo) |",
                "| transport; GPUDirect RDMA | roce; GDR on | tcp; GDR n/a (gloo) |",
                "| hosts | 2: a, b | 2: a, b |", "| duration | 7,581 s | 12.5 s |"):
        assert row in md, row


@pytest.mark.integration
def test_time_to_train_and_energy_per_sample(tmp_path):
    target = {"target_eval_loss": 2.7}
    final = {"final": {"target_reached_step": 4}}
    # step 1 takes twice the step time: 2+1+1+1 = 5 s to the target at 1 s/step, 10 s at 2 s/step
    a = write_run(tmp_path / "a", rate_bps=1e9, train_extra=target, info_extra=final, times=True)
    b = write_run(tmp_path / "b", rate_bps=1e8, step_time=2.0, train_extra=target, info_extra=final, times=True,
                  energy=False)
    c = write_run(tmp_path / "c", rate_bps=1e7, train_extra=target, info_extra={"status": "completed"}, times=True)
    proc = cli("compare", str(a), str(b), str(c), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert ("| time to train | 5 s to eval_loss 2.7 | 10 s to eval_loss 2.7 (+100.0%) | n/a: target not reached "
            "(completed) |") in md
    # 500 J per step over a global batch of 8
    assert "| energy per sample | 62.5 J | not measured: NVML not available | 62.5 J (+0.0%) |" in md


@pytest.mark.integration
def test_sweeps_that_belong_to_training_runs(tmp_path):
    fast = write_run(tmp_path / "fast", rate_bps=1e9)
    slow = write_run(tmp_path / "slow", rate_bps=1e8, step_time=2.0)
    (fast / "collectives.json").write_text(json.dumps(sweep_result(scale=1.0)))  # a sweep in the run directory
    slow_sweep = write_run(tmp_path / "slow-sweep", sweep=sweep_result(scale=3.0))
    proc = cli("compare", str(fast), str(slow), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "collective sweeps left out: 100mbit lab has none (give one with --sweep LABEL=DIR)" in md
    proc = cli("compare", str(fast), str(slow), "--sweep", f"100mbit lab={slow_sweep}", "--out", str(tmp_path / "c2"))
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "c2" / "compare.md").read_text()
    assert "| iteration time, median | 1 s | 2 s (+100.0%) |" in md  # still the training comparison
    assert "## Sweeps of these fabrics - Small-message latency" in md and "| all_reduce_4B | 40 | 120 (+200%) |" in md
    result = json.loads((tmp_path / "c2" / "compare.json").read_text())
    assert "sweep_all_reduce.png" in result["figures"] and result["kind"] == "training"
    assert result["sweeps"] == {"1000mbit lab": [str(fast / "collectives.json")], "100mbit lab": [str(slow_sweep)]}
    # a sweep run directory inside the run directory, written before the units were renamed (busbw_gbps)
    old = json.loads(json.dumps(sweep_result(scale=3.0)).replace("GBps", "gbps"))
    write_run(slow / "sweep", sweep=old)
    proc = cli("compare", str(fast), str(slow), "--out", str(tmp_path / "c4"))
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "c4" / "compare.md").read_text()
    assert "| all_reduce_4B | 40 | 120 (+200%) |" in md
    # nccl-tests' average (mean busbw of the measured blocks) over 8 B, 1 KB and 1 MB: 0.343 and 0.114 GB/s
    assert ("| all_reduce | 8 B - 1 MB (3 sizes) | 343 MB/s; 274.8% of line rate (ABOVE the line rate: check the "
            "rate) | 114 MB/s (-66.7%, 0.333x); ") in md
    proc = cli("compare", str(fast), str(slow), "--sweep", f"nope={slow_sweep}", "--out", str(tmp_path / "c3"))
    assert proc.returncode == 2 and "--sweep nope=" in proc.stderr and "'100mbit lab'" in proc.stderr


@pytest.mark.integration
def test_sweep_repeats_are_averaged_with_their_spread(tmp_path):
    tcp = [write_run(tmp_path / f"tcp{i}", sweep=sweep_result(scale=sc)) for i, sc in enumerate((2.0, 4.0))]
    roce = write_run(tmp_path / "roce", transport="roce", sweep=sweep_result(scale=1.0))
    proc = cli("compare", *map(str, tcp), str(roce), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "cmp" / "compare.md").read_text()
    # 80 and 160 us -> mean 120 ± 56.6 (n=2); RoCE 40 us: -67%
    assert "| all_reduce_4B | 120 ± 56.6 (n=2) | 40 (-67%) |" in md


def test_identical_loss_curves_both_stay_visible(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.image
    import matplotlib.pyplot as plt
    import numpy as np

    from telemetry.analysis.compare_figures import loss_curves

    curve = [(s, 3.0 - 0.01 * s) for s in range(1, 61)]
    loss_curves(plt, str(tmp_path), ["fast", "slow"], [curve, list(curve)], "identical", name="loss.png")
    rgb = matplotlib.image.imread(tmp_path / "loss.png")[..., :3]

    def pixels(color):  # pixels drawn in (close to) that color
        return int((np.abs(rgb - np.array(matplotlib.colors.to_rgb(color))).max(axis=-1) < 0.08).sum())

    # the second curve lies exactly on the first: the first must still show (wider line, its own markers)
    # (drawn as before, one solid style at alpha 0.8, neither color showed: 0 pixels each)
    assert pixels("C0") > 200 and pixels("C1") > 200, (pixels("C0"), pixels("C1"))


def test_label_and_path_on_the_command_line(tmp_path):
    from telemetry.analysis.compare import split_label
    odd = tmp_path / "lr=0.01"  # a run directory with '=' in its name stays a path
    odd.mkdir()
    assert split_label(str(odd)) == (None, str(odd))
    assert split_label(f"roce={odd}") == ("roce", str(odd))
    assert split_label("runs/a") == (None, "runs/a")
    with pytest.raises(CompareError, match=r"no label before '='; allowed: LABEL=RUN or RUN"):
        split_label(f"={odd}x")  # an empty label (`$LABEL=DIR`, LABEL unset) was taken as no label


def test_a_label_with_no_run_after_it(capsys, tmp_path):
    """`fast=` (its directory variable unset) said "error: : not a directory"."""
    from telemetry.__main__ import main
    run = write_run(tmp_path / "a", name="a")
    assert main(["compare", "slow=", f"fast={run}", "--out", str(tmp_path / "c")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: slow=: no run directory after '='; allowed: LABEL=RUN or RUN"]
    assert not (tmp_path / "c").exists()


# ---------------------------------------------------------------- a report fit to publish

NCCL_TABLES = REPO / "tests" / "telemetry" / "nccl_tests_tables"
SVG = "{http://www.w3.org/2000/svg}"


def svg_axes(path) -> dict[str, dict]:
    """Per axis of an SVG that matplotlib wrote (text kept as text): its tick labels and its label."""
    import xml.etree.ElementTree as ET
    axes = {}
    for g in ET.parse(path).getroot().iter(f"{SVG}g"):
        if not g.get("id", "").startswith("matplotlib.axis"):
            continue
        ticks = ["".join(t.itertext()).strip() for tick in g if tick.get("id", "").startswith(("xtick_", "ytick_"))
                 for t in tick.iter(f"{SVG}text")]
        label = [t.text for t in g if t.tag == f"{SVG}text"] + [
            "".join(t.itertext()) for sub in g if sub.get("id", "").startswith("text_") for t in sub.iter(f"{SVG}text")]
        axes[g.get("id")] = {"ticks": ticks, "label": " ".join(x for x in label if x)}
    return axes


def assert_readable(svg_path, labels=()):
    """Every axis of the figure has two or more tick labels, none of them raw math text (`labels`: fabric
    names, which are tick labels of bar charts as written)."""
    text = svg_path.read_text()
    assert "<text" in text, f"{svg_path.name}: text was drawn as paths (svg.fonttype is not 'none')"
    assert "mathdefault" not in text, svg_path.name
    axes = svg_axes(svg_path)
    assert axes, svg_path.name
    for name, axis in axes.items():
        assert len([t for t in axis["ticks"] if t]) >= (1 if set(axis["ticks"]) <= set(labels) else 2), (
            svg_path.name, name, axis)
        for tick in (t for t in axis["ticks"] if t not in labels):
            assert "$" not in tick and "\\" not in tick and "^" not in tick, (svg_path.name, name, tick)
    return axes


def test_sweep_figures_have_unit_tick_labels_in_png_and_svg(tmp_path, capsys):
    from telemetry.analysis.compare import compare
    a, b = NCCL_TABLES / "all_reduce_perf_h100_16ranks.txt", NCCL_TABLES / "all_reduce_perf_srun_labels_nofooter.txt"
    result = compare([f"h100=${a}".replace("$", ""), f"efa={b}"], str(tmp_path / "log"))
    assert result["busbw_axis"] == "log"
    axes = assert_readable(tmp_path / "log" / "sweep_all_reduce.svg")
    size_ticks, time_ticks, busbw_ticks = (axes["matplotlib.axis_1"]["ticks"], axes["matplotlib.axis_2"]["ticks"],
                                           axes["matplotlib.axis_4"]["ticks"])
    # 8 B - 16 GB: every fourth power of two, from 64 B to 16 GB
    assert size_ticks == ["64 B", "1 KB", "16 KB", "256 KB", "4 MB", "64 MB", "1 GB", "16 GB"]
    assert time_ticks == ["100 us", "1 ms", "10 ms", "100 ms"]
    assert busbw_ticks[0] == "10 MB/s" and busbw_ticks[-1] == "100 GB/s"
    assert "(log)" in axes["matplotlib.axis_4"]["label"]
    assert (tmp_path / "log" / "sweep_all_reduce.png").stat().st_size > 10_000
    # linear busbw: from 0, labelled in the unit of its largest value
    result = compare([f"h100={a}", f"efa={b}"], str(tmp_path / "lin"), busbw_axis="linear")
    busbw = assert_readable(tmp_path / "lin" / "sweep_all_reduce.svg")["matplotlib.axis_4"]
    assert busbw["ticks"][0] == "0" and all(t.endswith("GB/s") for t in busbw["ticks"][1:]), busbw
    assert "(linear)" in busbw["label"]
    from telemetry.__main__ import main as telemetry_main
    capsys.readouterr()
    assert telemetry_main(["compare", str(a), str(b), "--busbw-axis", "cubic", "--out", str(tmp_path / "bad")]) == 2
    assert capsys.readouterr().err == "error: --busbw-axis: got 'cubic'; allowed: log, linear\n"


def test_every_training_figure_is_readable_and_embedded(tmp_path):
    import base64
    import re

    from telemetry.analysis.compare import compare
    fast = write_run(tmp_path / "fast$1", rate_bps=1e9)  # a "$" in a name is text, not a formula
    slow = write_run(tmp_path / "slow", rate_bps=1e8, step_time=2.0)
    (fast / "collectives.json").write_text(json.dumps(sweep_result(scale=1.0)))
    (slow / "collectives.json").write_text(json.dumps(sweep_result(scale=3.0)))
    out = tmp_path / "cmp"
    result = compare([f"fast $x$={fast}", f"slow={slow}"], str(out))
    assert {"iteration_time.png", "samples_per_s.png", "loss.png", "step_time.png", "comm.png",
            "sweep_all_reduce.png", "sweep_sendrecv.png"} <= set(result["figures"])
    for name in result["figures"]:
        assert_readable(out / name.replace(".png", ".svg"), labels=result["labels"])
    assert "fast $x$" in (out / "loss.svg").read_text()  # the legend shows the label as written
    page = (out / "compare.html").read_text()
    srcs = re.findall(r"<img src='([^']*)' data-file='([^']*)'", page)
    assert sorted(f for _, f in srcs) == sorted(result["figures"])
    for src, name in srcs:  # the figure itself, as SVG: the page needs no other file
        assert src.startswith("data:image/svg+xml;base64,"), name
        svg = base64.b64decode(src.split(",", 1)[1])
        assert svg == (out / name.replace(".png", ".svg")).read_bytes()


def test_tick_labels_under_a_global_parse_math_false(tmp_path):
    """report.plots() sets text.parse_math False for the process; the comparison's axes still read plainly,
    and an axis over less than a decade still gets two or more labelled ticks."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from telemetry.analysis import compare_figures as cf
    with matplotlib.rc_context({"text.parse_math": False}):
        with cf.figure_style():
            fig, ax = plt.subplots()
            ax.plot([8, 1 << 20, 16 << 30], [0.5, 0.7, 0.9])
            cf.size_axis(ax.xaxis, [8, 1 << 20, 16 << 30])
            cf.value_axis(ax.yaxis, [0.5, 0.7, 0.9], cf.rate_text, "log")
            fig.canvas.draw()
            xs = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
            ys = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
            plt.close(fig)
    assert xs == ["64 B", "1 KB", "16 KB", "256 KB", "4 MB", "64 MB", "1 GB", "16 GB"]
    assert ys == ["500 MB/s", "1 GB/s"], ys
    assert cf.size_text(4) == "4 B" and cf.size_text(1536) == "1.5 KB" and cf.size_text(16 << 30) == "16 GB"
    assert cf.time_text(12.34) == "12.3 us" and cf.time_text(4500) == "4.5 ms" and cf.time_text(2e6) == "2 s"
    assert cf.rate_text(0.000542) == "542 kB/s" and cf.rate_text(24) == "24 GB/s"


def test_per_size_table_common_range_average_and_line_rate(tmp_path):
    from telemetry.analysis.compare import compare
    short = sweep_result(scale=3.0)
    for op in short["ops"].values():  # the slow fabric's sweep stops at 1 KB
        op["rows"] = op["rows"][:2]
    fast = write_run(tmp_path / "fast", rate_bps=1e10, sweep=sweep_result(scale=1.0))
    slow = write_run(tmp_path / "slow", rate_bps=5e6, sweep=short)
    result = compare([str(fast), str(slow)], str(tmp_path / "cmp"))
    md = (tmp_path / "cmp" / "compare.md").read_text()
    # every size both have, with % and ratio on time and on busbw; 1 MB only the fast one has is not a row
    assert ("| 8 B | 20 us | 60 us (+200.0%, 3x) | 400 kB/s | 133 kB/s (-66.7%, 0.333x) |") in md
    assert "| 1 KB | 21 us | 63.1 us (+200.0%, 3x) | 48.7 MB/s | 16.2 MB/s (-66.7%, 0.333x) |" in md
    assert "| 1 MB |" not in md
    # the average over 8 B and 1 KB only, and the report says what it left out
    assert ("all_reduce: the sweeps cover different sizes; averages use the common range 8 B - 1 KB (2 sizes) only "
            "(10000mbit lab also has 1 MB (1 size), left out of the average)") in md
    # (0.0004 + 0.0487) / 2 = 24.6 MB/s; the slow one's 8.18 MB/s at 5 Mbit/s (625 kB/s) cannot be: it says so
    assert ("| all_reduce | 8 B - 1 KB (2 sizes) | 24.6 MB/s; 2.0% of line rate | 8.18 MB/s (-66.7%, 0.333x); "
            "1309.5% of line rate (ABOVE the line rate: check the rate) |") in md
    assert "| line rate | 10 Gbit/s (1.25 GB/s; lab rate 10000mbit) | 5 Mbit/s (625 kB/s; lab rate 5mbit) |" in md
    assert "| all_reduce: peak busbw | 981 MB/s at 1 MB: 78.5% of line rate |" in md
    assert result["line_rates_bps"] == {"10000mbit lab": 1e10, "5mbit lab": 5e6}
    assert any("averages use the common range" in w for w in result["warnings"])


def test_nccl_tests_hosts_gpus_and_line_rate_given(tmp_path):
    from telemetry.analysis.compare import CompareError, compare
    a, b = NCCL_TABLES / "all_reduce_perf_h100_16ranks.txt", NCCL_TABLES / "all_reduce_perf_2.20_unalign_excerpt.txt"
    compare([f"h100={a}", f"gb10={b}"], str(tmp_path / "cmp"), line_rate=["h100=400gbit"])
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| hosts | 2: ztan-mig-235z, ztan-mig-gq73 | 2: spark-d708, spark-dbf4 |" in md
    assert "| devices | 16 x NVIDIA H100 80GB HBM3 | 2 x NVIDIA GB10 |" in md
    assert "| world size | 16 ranks on 2 hosts | 2 ranks on 2 hosts |" in md
    assert ("| line rate | 400 Gbit/s (50 GB/s; --line-rate; 8 ranks per host: busbw counts intra-host hops too, "
            "so it can exceed one link) | unknown: an nccl-tests table does not name its link rate") in md
    with pytest.raises(CompareError, match=r"--line-rate x=1gbit: expected LABEL=RATE with LABEL one of 'h100', 'gb10'"):
        compare([f"h100={a}", f"gb10={b}"], str(tmp_path / "x"), line_rate=["x=1gbit"])
    with pytest.raises(CompareError) as info:  # was "--line-rate h100=: got 'fast'; ... or 'none' for unshaped"
        compare([f"h100={a}", f"gb10={b}"], str(tmp_path / "x"), line_rate=["h100=fast"])
    assert str(info.value) == ("--line-rate h100: got 'fast'; expected a tc rate such as 10gbit, 1gbit, 100mbit, "
                               "500kbit")
    with pytest.raises(CompareError, match=r"--line-rate h100=2gbit: label 'h100' is given a line rate twice; "
                                           r"allowed: one --line-rate per label"):  # the last one silently won
        compare([f"h100={a}", f"gb10={b}"], str(tmp_path / "x"), line_rate=["h100=1gbit", "h100=2gbit"])


def test_a_line_rate_in_tcs_byte_units_is_warned_of_as_the_projection_warns(tmp_path, capsys):
    # 100Gbps is 100 gigabytes per second to tc (800 Gbit/s): the % of line rate was 8x off without a word
    from telemetry.analysis.compare import compare
    a, b = NCCL_TABLES / "all_reduce_perf_h100_16ranks.txt", NCCL_TABLES / "all_reduce_perf_2.20_unalign_excerpt.txt"
    compare([f"h100={a}", f"gb10={b}"], str(tmp_path / "cmp"), line_rate=["h100=8x100Gbps"])
    assert capsys.readouterr().err.strip().splitlines()[0] == (
        "warning: --line-rate h100 100Gbps: in tc units 'gbps' is bytes per second, so this is 800 Gbit/s; for "
        "100 Gbit/s write 100gbit")


def test_workload_header_mean_median_and_projection_miss(tmp_path):
    from telemetry.analysis.compare import compare
    recipe = {"data": {"seq_len": 160}, "model": {"path": "/models/tiny-llama"}}
    layout = {"layout": {"world_size": 4, "dp": 2, "tp": 2, "pp": 1, "data_parallel": "fsdp", "global_batch_size": 8,
                         "micro_batch_size": 2, "grad_accum_steps": 2}}
    # timed steps: 2, 3, 5, 6 (step 1 is warm-up, step 4 profiled): 1, 1, 1, 3 s -> median 1, mean 1.5, sd 1
    fast = write_run(tmp_path / "fast", rate_bps=1e9, recipe_extra=recipe, info_extra=layout,
                     step_times=[2.0, 1.0, 1.0, 1.0, 1.0, 3.0])
    slow = write_run(tmp_path / "slow", rate_bps=5e6, step_time=2.0, recipe_extra=recipe, info_extra=layout)
    result = compare([str(fast), str(slow)], str(tmp_path / "cmp"))
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert ("Workload: llm_lora (recipe recorded); model tiny-llama; world size 4 ranks on 2 hosts; layout dp 2 x tp 2 "
            "x pp 1 (fsdp); global batch 8 = micro-batch 2 x grad-accum 2 x dp 2; sequence length 160. Baseline: "
            "1000mbit lab") in md
    assert "| iteration time, median | 1 s | 2 s (+100.0%) |" in md
    assert "| iteration time, mean | 1.5 s | 2 s (+33.3%) |" in md
    assert "| iteration time, sd over steps | 1 s (4 timed steps) | 0 s (4 timed steps) |" in md
    # the collectives' busbw in training with its unit and its share of the link (4 MB/s of 1 Gbit/s)
    assert "| all_reduce | 0.25 s / 4 MB/s, 3.2% of line rate | 0.25 s / 4 MB/s, 640.0% of line rate (ABOVE" in md
    proj = result["projection"][0]
    lo, hi = proj["interval_s"]
    assert not proj["inside"] and not lo <= proj["measured_s"] <= hi
    where = "below" if proj["measured_s"] < lo else "above"
    assert f"| NO: measured {where} the interval |" in md
    loud = [w for w in result["warnings"] if w.startswith("PROJECTION MISSED 5mbit lab: predicted ")]
    assert len(loud) == 1 and f"({proj['error'] * 100:+.1f}%), outside its interval" in loud[0]
    assert f"> **{loud[0]}**" in md.replace("\\", "")
    html = (tmp_path / "cmp" / "compare.html").read_text()
    assert "<p class='warn'><strong>PROJECTION MISSED 5mbit lab" in html


def test_docs_compare_examples_are_evaluation_files():
    """The example evaluation files in docs/compare.md: the shape launch.evaluate reads (and, where it is
    installed, its own loader accepts them)."""
    import re

    import yaml
    text = (REPO / "docs" / "compare.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert len(blocks) == 3
    transports = {"ib", "infiniband", "roce", "efa", "socket", "tcp", "intra-node"}
    for block in blocks:
        ev = yaml.safe_load(block)
        assert {"name", "launcher", "repeats", "variants", "workloads", "out"} <= set(ev), ev
        assert ev["launcher"] in ("local", "lab", "slurm") and ev["repeats"] >= 5
        assert len(ev["variants"]) >= 2 and len({v["name"] for v in ev["variants"]}) == len(ev["variants"])
        for v in ev["variants"]:
            assert set(v) <= {"name", "expect_transport", "env", "lab", "hosts"}, v
            assert v["expect_transport"] in transports, v
            assert all(isinstance(x, str) for x in (v.get("env") or {}).values()), v
        for w in ev["workloads"]:
            assert (REPO / w["recipe"]).is_file(), w
            assert all("=" in o for o in w.get("overrides") or []), w
    tcp = yaml.safe_load(blocks[0])["variants"][1]
    assert tcp["env"]["NCCL_IB_DISABLE"] == "1" and "NCCL_SOCKET_IFNAME" in tcp["env"]
    assert len(yaml.safe_load(blocks[2])["variants"]) == 3
    try:
        from launch.evaluate.spec import load_evaluation
    except ImportError:  # the runner lives on its own branch until it is merged
        return
    import os
    import tempfile
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            os.chdir(REPO)
            for i, block in enumerate(blocks):
                path = os.path.join(tmp, f"example{i}.yaml")
                with open(path, "w", encoding="utf-8") as f:
                    f.write(block)
                load_evaluation(path)
        finally:
            os.chdir(cwd)


def test_a_claimed_transport_is_checked_in_the_comparison_itself(tmp_path):
    """--expect-transport: the compared report says which fabric did not use what it claims (evaluate passes
    its variants' claims), with the run's own evidence; a fabric whose transport was not detected is 'not
    verified', never ok."""
    from telemetry.analysis.compare import CompareError, compare
    roce = write_run(tmp_path / "roce", transport="tcp", fabric_extra={"backend": "gloo",
                                                                    "gloo": {"interface": "eth0"}})
    ib = write_run(tmp_path / "ib", transport="infiniband", fabric_extra={
        "nccl": {"devices": [{"device": "mlx5_0"}]}})
    unsure = write_run(tmp_path / "unsure", transport=None, fabric_extra={
        "nccl": {"unknown": {"transport": "no NCCL INFO lines were recorded"}}})
    result = compare([f"roce={roce}", f"ib={ib}", f"x={unsure}"], str(tmp_path / "cmp"),
                     expect_transport=["roce=roce", "ib=ib", "x=efa"])
    checks = result["transport_checks"]
    assert {k: v["verdict"] for k, v in checks.items()} == {"roce": "mismatch", "ib": "ok", "x": "unknown"}
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert ("| transport claimed | roce: MISMATCH (expected roce, the run used tcp over eth0) | ib: ok | efa: not "
            "verified (transport not detected: no NCCL INFO lines were recorded) |") in md
    loud = "TRANSPORT MISMATCH roce: expected roce, the run used tcp over eth0 - its numbers are not that fabric's"
    assert result["warnings"][0] == loud
    assert f"<p class='warn'><strong>{loud}" in (tmp_path / "cmp" / "compare.html").read_text().replace("&#x27;", "'")
    # without claims there is no row; a claim for a label that is not compared is refused in one line
    compare([f"roce={roce}", f"ib={ib}"], str(tmp_path / "plain"))
    assert "transport claimed" not in (tmp_path / "plain" / "compare.md").read_text()
    with pytest.raises(CompareError, match="--expect-transport eth=roce: expected LABEL=TRANSPORT with LABEL one of"):
        compare([f"roce={roce}", f"ib={ib}"], str(tmp_path / "y"), expect_transport=["eth=roce"])
    # a claim spelt like a transport word is not taken for an interface name
    with pytest.raises(CompareError, match="--expect-transport ib=TRANSPORT: got 'IB'; did you mean 'ib'"):
        compare([f"roce={roce}", f"ib={ib}"], str(tmp_path / "z"), expect_transport=["ib=IB"])


def test_an_unfinished_sweep_is_one_error_line_not_a_traceback(tmp_path):
    from telemetry.analysis.compare import CompareError, compare
    done = write_run(tmp_path / "done", sweep=sweep_result(scale=1.0))
    running = write_run(tmp_path / "running", sweep=sweep_result(scale=1.0))
    (running / "collectives.json").unlink()  # the lab sweep the docs show, compared before it had finished
    for order in ([done, running], [running, done]):
        with pytest.raises(CompareError, match=r"running: a collective sweep run without collectives\.json "
                                               r"\(run\.json status completed\): only a finished sweep"):
            compare([str(p) for p in order], str(tmp_path / "cmp"))


def test_loss_parity_names_the_fabric_that_differs_and_when_it_is_expected(tmp_path):
    """With more than two fabrics the verdict names the run that differs most; a run on another world size
    (a lab variant with 3 nodes against 2) differs by the order of its gradient sums, and the verdict says so."""
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b")
    c = write_run(tmp_path / "c", losses=[3.0, 2.9, 2.8, 2.75, 2.6, 2.5])
    runs = [load_run(str(p)) for p in (a, b, c)]
    parity = loss_parity(runs, ["unshaped", "10mbit", "10mbit-3nodes"])
    assert parity["verdict"].startswith("DIFFERENT") and parity["verdict"].endswith("(10mbit-3nodes against unshaped)")
    runs[2].info["layout"] = {**(runs[2].info.get("layout") or {}), "world_size": 3}
    runs[0].info["layout"] = {**(runs[0].info.get("layout") or {}), "world_size": 2}
    assert parity_text(runs).endswith("; expected where the world size differs (2 vs 3 ranks): the gradient sums run "
                                      "in another order")


def parity_text(runs) -> str:
    return loss_parity(runs, ["x", "y", "z"])["verdict"]


def test_one_label_on_runs_of_different_fabrics_is_said(tmp_path):
    """LABEL=RUN makes repeats; a label reused by mistake on another fabric would average two fabrics unseen."""
    a, b = write_run(tmp_path / "a", rate_bps=10e6), write_run(tmp_path / "b", rate_bps=100e6)
    c, d = write_run(tmp_path / "c", rate_bps=5e6), write_run(tmp_path / "d", rate_bps=5e6)
    result = compare([f"x={a}", f"x={b}", f"y={c}", f"y={d}"], str(tmp_path / "cmp"))
    (said,) = [w for w in result["warnings"] if "different fabrics" in w]
    assert said == (f"the runs labelled 'x' are on different fabrics (10mbit lab: {a}; 100mbit lab: {b}): their "
                    "figures mix them")


def test_a_sweep_cut_short_is_refused_with_where_its_measured_sizes_are(tmp_path):
    from .test_sweep_progress import HEAD, ROWS
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "run.json").write_text(json.dumps({"name": "collectives", "status": "failed",
                                              "recipe": {"workload": "collectives"}}))
    (cut / "collectives.txt").write_text(HEAD + "\n".join(ROWS) + "\n")
    done = write_run(tmp_path / "done", sweep=sweep_result())
    with pytest.raises(CompareError) as info:
        compare([str(cut), str(done)], str(tmp_path / "cmp"))
    assert str(info.value) == (f"{cut}: a collective sweep run without collectives.json (run.json status failed): "
                               f"only a finished sweep can be compared; the sizes it measured before it stopped are in "
                               f"{cut}/collectives.txt, which compare takes as nccl-tests output")
    (cut / "run.json").write_text((cut / "run.json").read_text().replace("failed", "running"))
    with pytest.raises(CompareError) as info:  # still running: its sizes so far, not 'before it stopped'
        compare([str(cut), str(done)], str(tmp_path / "cmp"))
    assert "(run.json status running): only a finished sweep can be compared; the sizes it measured so far are " \
           "in " in str(info.value)
    compare([str(cut / "collectives.txt"), str(done)], str(tmp_path / "cmp"))  # as the error says
    assert "all_reduce" in (tmp_path / "cmp" / "compare.md").read_text()
    (cut / "collectives.txt").write_text(HEAD)  # started, nothing measured: no pointer to an empty table
    with pytest.raises(CompareError) as info:
        compare([str(cut), str(done)], str(tmp_path / "cmp2"))
    assert str(info.value).endswith("only a finished sweep can be compared")
