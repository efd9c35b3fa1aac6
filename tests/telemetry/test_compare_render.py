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

from .recorded import sweep_result, write_run
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
