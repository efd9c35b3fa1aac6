"""The front door and the docs: README stays short and undated, and every local link resolves."""
from __future__ import annotations

import re

from tests.conftest import REPO

LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")


def test_readme_is_a_front_door():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.encode()) <= 12 * 1024
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "dated timings belong in bench/RESULTS.md"
    # the two commands CI and a new user run
    assert "pip install torch==2.13.0 && pip install -e . && torchrun --standalone --nproc-per-node 2 -m trainer" in text
    assert ('pip install torch==2.13.0 && pip install --no-deps torchvision==0.28.0 && pip install -e ".[test]" '
            "&& python -m pytest -q") in text
    assert "docs/index.md" in text and "docs/architecture.md" in text


def test_every_local_link_resolves():
    broken = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target, _ in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert not broken, "\n".join(broken)


def test_every_doc_is_in_the_index():
    index = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    missing = [p.name for p in (REPO / "docs").glob("*.md") if p.name != "index.md" and f"({p.name})" not in index]
    assert not missing, missing
