"""One ordered list of sections (forensics/report/sections.py) drives the HTML page, its table of
contents and the Markdown report; the terminal summary (report/text.py) reads the same view."""

from __future__ import annotations

import re
from pathlib import Path

from forensics.report import markdown, render_text
from forensics.report.html import render_html
from forensics.report.sections import SECTIONS, toc
from forensics.report.view import build_view
from tests.support import report_docs as docs

TEMPLATES = Path(__file__).resolve().parents[3] / "report_templates" / "sections"


def test_every_section_has_one_template_and_every_template_a_section() -> None:
    assert {p.name for p in TEMPLATES.glob("*.html.j2")} == {f"{s.anchor}.html.j2" for s in SECTIONS}


def test_markdown_renders_exactly_the_markdown_sections() -> None:
    assert list(markdown._SECTIONS) == [s.anchor for s in SECTIONS if s.markdown]


def _html_order(html: str) -> list[str]:
    return re.findall(r'<(?:section|nav) (?:id="([a-z-]+)"|class="toc")', html)


def test_html_sections_follow_the_list_and_skip_the_empty_ones() -> None:
    for doc in (docs.build_incident_doc(), docs.build_clean_doc()):
        view = build_view(doc)
        html = render_html(doc)
        ids = [i or "contents" for i in _html_order(html)]
        assert ids == [s.anchor for s in SECTIONS if s.shown(view)]
        nav = html[html.index('<nav class="toc">'):html.index("</nav>")]
        assert re.findall(r'href="#([a-z-]+)"', nav) == [s.anchor for s in toc(view)]
        assert "verdict" not in [s.anchor for s in toc(view)]


def test_a_section_with_nothing_to_say_is_out_of_page_and_contents() -> None:
    doc = docs.build_clean_doc()
    view = build_view(doc)
    assert not view.other_findings.total
    assert "other-findings" not in [s.anchor for s in toc(view)]
    assert 'id="other-findings"' not in render_html(doc)
    assert "## Other findings" not in markdown.render_markdown(doc)


def test_markdown_headings_follow_the_list() -> None:
    doc = docs.build_incident_doc()
    view = build_view(doc)
    headings = [h.split(":")[0] for h in re.findall(r"^## (.+)$", markdown.render_markdown(doc), re.M)]
    assert headings == [s.title for s in SECTIONS if s.markdown and s.shown(view)]


class TestTerminalSummary:
    def test_document_order_and_three_evidence_items_per_finding(self) -> None:
        doc = docs.build_incident_doc()
        doc["collectors"] = list(reversed(doc["collectors"]))
        text = render_text(doc)
        ids = re.findall(r"^  (F\d+)\s", text, re.M)
        assert ids == [f["id"] for f in doc["findings"]]
        names = re.findall(r"^  (\S+)\s+(?:ok|partial|failed|unavailable|skipped)\b", text, re.M)
        assert names == [c["name"] for c in doc["collectors"]]
        first = text.split("\n  F2 ")[0].split("\n  F1 ")[1]
        assert first.count("evidence: ") == min(3, len(doc["findings"][0]["evidence"]))

    def test_control_characters_are_shown_as_escapes(self) -> None:
        doc = docs.build_incident_doc()
        doc["findings"][0]["summary"] = "x\x1b[2J\r\nVerdict: all fine\u202e"
        text = render_text(doc)
        assert "\x1b" not in text and "\r" not in text and "\u202e" not in text
        assert "x\\x1b[2J\\r\\nVerdict: all fine\\u202e" in text
