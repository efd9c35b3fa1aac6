"""Every table of the report and of the comparison says the same text in both formats: report.md read by a
Markdown renderer (markdown-it-py, CommonMark with GFM tables, as GitHub renders) and report.html read by an
HTML parser give the same cells, and the .md file is plain text where the text has no markup ("->", not
"-&gt;")."""
from __future__ import annotations

from html.parser import HTMLParser

from markdown_it import MarkdownIt

from telemetry.analysis.compare import compare
from telemetry.analysis.report import md_escape, write_report

from ..recorded import sweep_result, write_run

TRICKY = "a<b> & c &amp; <x@y.z> [l](u) `t` *e* $m$ | ~s~ -> <- 1 < 2 > 0"


class _Tables(HTMLParser):
    """The tables of an HTML document as (heading, rows of cell texts)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tables, self.heading, self._cell, self._row, self._in_h2 = [], "", None, None, False

    def handle_starttag(self, tag, attrs):
        if tag == "h2":
            self._in_h2, self.heading = True, ""
        elif tag == "table":
            self.tables.append((self.heading, []))
        elif tag == "tr":
            self._row = []
            self.tables[-1][1].append(self._row)
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag):
        if tag == "h2":
            self._in_h2 = False
        elif tag in ("td", "th"):
            self._row.append(self._cell.strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data
        elif self._in_h2:
            self.heading += data


def tables_of(html_text: str) -> list[tuple[str, list[list[str]]]]:
    p = _Tables()
    p.feed(html_text)
    # a table without a header: Markdown needs an empty header row, the HTML leaves it out
    return [(h, [r for r in rows if any(r)]) for h, rows in p.tables]


def markdown_tables(md_text: str) -> list[tuple[str, list[list[str]]]]:
    return tables_of(MarkdownIt("commonmark").enable("table").render(md_text))


def assert_same_tables(out, base: str) -> int:
    md = (out / f"{base}.md").read_text(encoding="utf-8")
    from_md, from_html = markdown_tables(md), tables_of((out / f"{base}.html").read_text(encoding="utf-8"))
    assert [h for h, _ in from_md] == [h for h, _ in from_html]
    for (heading, a), (_, b) in zip(from_md, from_html):
        assert a == b, f"{base}: table {heading!r} reads differently in Markdown and HTML"
    assert "&gt;" not in md and "&lt;" not in md  # plain text in the file
    return len(from_md)


def test_escape_keeps_plain_text_plain_and_markup_inert():
    assert md_escape("loss first -> last") == "loss first -> last"
    assert md_escape("1 < 2 & 3 > 0") == "1 < 2 & 3 > 0"
    assert md_escape("<script>") == "\\<script>" and md_escape("&amp;") == "\\&amp;"
    rendered = MarkdownIt("commonmark").enable("table").render(f"| h |\n|---|\n| {md_escape(TRICKY)} |\n")
    assert tables_of(rendered)[0][1][1] == [TRICKY]


def test_every_report_table_reads_the_same_in_markdown_and_html(tmp_path):
    run = write_run(tmp_path / "run", name=TRICKY, fabric_extra={"interfaces": [TRICKY]})
    write_report(str(run))
    assert assert_same_tables(run / "report", "report") >= 3
    md = (run / "report" / "report.md").read_text()
    assert "| loss first -> last |" in md and "-&gt;" not in md


def test_every_compare_table_reads_the_same_in_markdown_and_html(tmp_path):
    a = write_run(tmp_path / "fast", name=TRICKY, rate_bps=1e9)
    b = write_run(tmp_path / "slow", name=TRICKY, rate_bps=1e8, step_time=2.0)
    (b / "collectives.json").write_text(__import__("json").dumps(sweep_result(scale=3.0)))
    sweep = write_run(tmp_path / "sweep-fast", sweep=sweep_result(scale=1.0))
    compare([f"{TRICKY}={a}", f"slow -> b={b}"], str(tmp_path / "cmp"), sweeps=[f"{TRICKY}={sweep}"])
    assert assert_same_tables(tmp_path / "cmp", "compare") >= 5
