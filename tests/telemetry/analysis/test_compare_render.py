"""The compare report as a browser shows it: headless Chromium (Debian's `chromium` package, driven by
playwright from the test extra) opens compare.html from disk, copied alone into an empty directory (the
page carries its figures as data: URIs), and every figure must have loaded.

Without playwright the test fails (the test extra installs it). Where Chromium is missing it skips with
the reason, except under CI (CI set, as .ci/run is run), where it fails: .ci/run installs Chromium, so a
missing browser there is a broken set-up, not a reason to skip the check.
"""
from __future__ import annotations

import json
import os
import shutil

import pytest

from ..recorded import sweep_result, write_run
from .test_compare import cli

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _browser() -> str:
    import playwright.sync_api  # noqa: F401  (in the test extra: missing is a failure, never a skip)

    path = next((p for p in map(shutil.which, BROWSERS) if p), None)
    if path is None:
        problem = "no Chromium found (Debian: apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"{problem}; CI must render the report (.ci/run installs Chromium)")
        pytest.skip(problem)
    return path


def render(html_path, browser: str) -> dict:
    """Open the page from disk; what each <img> loaded, which requests failed, console errors."""
    from playwright.sync_api import sync_playwright

    failed, errors = [], []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=browser, args=["--no-sandbox"], timeout=60_000)
        try:
            page = b.new_page()
            page.on("requestfailed", lambda r: failed.append(r.url))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(html_path.as_uri(), wait_until="load", timeout=60_000)
            images = page.evaluate("""() => Array.from(document.images, i => ({
                src: i.getAttribute('src'), file: i.dataset.file, complete: i.complete, width: i.naturalWidth,
                height: i.naturalHeight}))""")
            headings = page.evaluate("() => Array.from(document.querySelectorAll('h2'), h => h.textContent)")
        finally:
            b.close()
    return {"images": images, "failed": failed, "errors": errors, "headings": headings}


@pytest.mark.integration
def test_every_figure_of_the_compare_report_loads_in_chromium(tmp_path):
    browser = _browser()
    fast = write_run(tmp_path / "fast", rate_bps=1e9)
    slow = write_run(tmp_path / "slow", rate_bps=1e8, step_time=2.0)
    sweep = write_run(tmp_path / "sweep-fast", sweep=sweep_result(scale=1.0))
    (slow / "collectives.json").write_text(json.dumps(sweep_result(scale=3.0)))
    out = tmp_path / "cmp"
    proc = cli("compare", str(fast), str(slow), "--sweep", f"{fast.name}={sweep}", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    figures = json.loads((out / "compare.json").read_text())["figures"]
    assert {"iteration_time.png", "samples_per_s.png", "loss.png", "sweep_all_reduce.png"} <= set(figures)
    # the page alone, moved away from its figure files (as a mail attachment is): every figure is inside it
    alone = tmp_path / "mailed"
    alone.mkdir()
    shutil.copy(out / "compare.html", alone / "compare.html")
    page = render(alone / "compare.html", browser)
    assert sorted(i["file"] for i in page["images"]) == sorted(figures)
    assert all(i["src"].startswith("data:image/svg+xml;base64,") for i in page["images"])
    broken = [i["file"] for i in page["images"] if not (i["complete"] and i["width"] > 100 and i["height"] > 100)]
    assert not broken, f"figures that did not load: {broken}"
    assert not page["failed"] and not page["errors"], page
    assert page["headings"][:2] == ["Fabrics", "Workload"] and "Figures" in page["headings"]


@pytest.mark.integration
def test_the_fabric_evaluation_tables_render_in_chromium(tmp_path):
    """A sweep comparison with the fabric-evaluation tables (fabric configuration rows, congestion and loss,
    server power per size, NCCL's algorithm per size, the line rate) renders in Chromium with no error."""
    from .test_congestion_summary import with_hosts
    from .test_fabric_config import info as config_info
    from .test_nccl_algorithms import _with_logs
    from ..capture.test_power_per_host import sweep_run
    from telemetry.analysis.compare import compare

    browser = _browser()
    a = with_hosts(sweep_run(tmp_path / "roce", {1024: 800.0, 1048576: 900.0}, gpu_w=300.0))
    b = with_hosts(sweep_run(tmp_path / "tcp", {1024: 880.0, 1048576: 810.0}, gpu_w=330.0, scale=3.0), pfc_rx=0)
    _with_logs(a, "nccl_ebpf_2.29.7_broadcast_socket.log")
    for run, routing in ((a, "ecmp"), (b, "adaptive-routing")):
        info = json.loads((run / "run.json").read_text())
        extra = config_info({"routing": routing})
        info["recipe"]["fabric"] = extra["recipe"]["fabric"]
        info.update({k: v for k, v in extra.items() if k != "recipe"})
        (run / "run.json").write_text(json.dumps(info))
    out = tmp_path / "cmp"
    compare([f"roce -> 8x400G={a}", f"tcp <slow>={b}"], str(out))
    page = render(out / "compare.html", browser)
    assert not page["failed"] and not page["errors"], page
    headings = page["headings"]
    for start in ("Congestion and loss", "Server power per collective and size",
                  "NCCL's algorithm and protocol per collective and size", "Bus bandwidth against the line rate"):
        assert any(h.startswith(start) for h in headings), (start, headings)
    html = (out / "compare.html").read_text()
    assert "config: routing" in html and "differs: adaptive-routing (recipe fabric.config)" in html
    assert "roce -&gt; 8x400G" in html and "tcp &lt;slow&gt;" in html  # labels are text
