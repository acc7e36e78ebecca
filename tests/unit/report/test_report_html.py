"""HTML report (forensics/report/html.py + report_templates/): self-contained, inert, ordered."""

from __future__ import annotations

import re
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

import pytest

from forensics.errors import ReportError
from forensics.report.html import render_html

Rendered = Callable[..., dict[str, Any]]


class _Collect(HTMLParser):
    """Tags, attributes, text and section ids of a document (stdlib parser, strict enough)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str, str | None]] = []
        self.text: list[str] = []
        self.sections: list[str] = []
        self.ids: list[str] = []
        self.open: list[str] = []
        self.errors: list[str] = []

    _VOID = {
        "meta",
        "br",
        "col",
        "img",
        "link",
        "hr",
        "input",
        "path",
        "use",
        "rect",
        "line",
        "polyline",
        "circle",
    }

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.extend((tag, k, val) for k, val in attrs)
        found = dict(attrs)
        if tag == "section" and found.get("id"):
            self.sections.append(found["id"] or "")
        if found.get("id"):
            self.ids.append(found["id"] or "")
        if tag not in self._VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.extend((tag, k, val) for k, val in attrs)
        if dict(attrs).get("id"):
            self.ids.append(dict(attrs)["id"] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._VOID:
            return
        if not self.open or self.open[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.open[-1] if self.open else None}>")
            if tag in self.open:
                while self.open and self.open.pop() != tag:
                    pass
            return
        self.open.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(html: str) -> _Collect:
    parser = _Collect()
    parser.feed(html)
    parser.close()
    return parser


class TestStructure:
    @pytest.mark.parametrize("name", ["incident", "clean", "snapshot", "hostile"])
    def test_parses_balanced_with_no_script(self, rendered: Rendered, name: str) -> None:
        doc = parse(rendered(name)["html"])
        assert doc.errors == []
        assert doc.open == []
        assert "script" not in doc.tags
        assert "<script" not in rendered(name)["html"].lower()

    @pytest.mark.parametrize("name", ["incident", "hostile", "large"])
    def test_self_contained_no_external_fetch(self, rendered: Rendered, name: str) -> None:
        html = rendered(name)["html"]
        doc = parse(html)
        assert not {"img", "link", "iframe", "object", "embed", "audio", "video", "source"} & set(
            doc.tags
        )
        for tag, attr, value in doc.attrs:
            if attr in ("src", "srcset", "action", "formaction", "poster", "background"):
                pytest.fail(f"<{tag} {attr}={value!r}>")
            if attr in ("href", "xlink:href"):
                assert (value or "").startswith("#"), (tag, attr, value)
            assert not attr.startswith("on"), (tag, attr)
        assert not re.search(r"url\((?!#)", html)  # CSS and SVG urls only point inside the page
        assert "@import" not in html
        assert "Content-Security-Policy" in html

    def test_every_internal_link_has_a_target(self, rendered: Rendered) -> None:
        doc = parse(rendered("large")["html"])
        targets = set(doc.ids)
        links = {
            v[1:] for t, a, v in doc.attrs if a == "href" and v and v.startswith("#") and t == "a"
        }
        assert links and links <= targets, links - targets

    def test_sections_in_reading_order(self, rendered: Rendered) -> None:
        doc = parse(rendered("incident")["html"])
        assert doc.sections == [
            "verdict",
            "timeline",
            "chain",
            "other-findings",
            "ruled-out",
            "gpus",
            "containers",
            "collectors",
            "verify",
            "appendix",
        ]

    def test_charts_are_inline_svg(self, rendered: Rendered) -> None:
        html = rendered("incident")["html"]
        assert html.count('<svg class="chart"') == 4  # two GPUs, two containers
        assert "<?xml" not in html


class TestContent:
    def test_verdict_chain_and_evidence(
        self, rendered: Rendered, make_doc: Callable[[str], dict[str, Any]]
    ) -> None:
        doc = make_doc("incident")
        text = " ".join(" ".join(parse(rendered("incident")["html"]).text).split())
        assert doc["verdict"]["headline"] in text
        assert "notebook" in text and "trainer" in text
        for step in doc["chain"]:
            assert step["text"] in text
        members = doc["bundles"][0]["members"]
        for finding in doc["findings"][:3]:
            for ev in finding["evidence"]:
                assert ev["member"] in text and ev["excerpt"] in text
                assert members[ev["member"]] in text  # the member's SHA-256 from the manifest
        assert "gpuforensics verify gpuforensics-gpu-07-20261129T140500Z.tgz" in text
        assert doc["bundles"][0]["file_sha256"] in text
        assert "What this report cannot say" in text and "pod allocations unknown" in text

    def test_clean_report_says_so(self, rendered: Rendered) -> None:
        text = " ".join(parse(rendered("clean")["html"]).text)
        assert "NO INCIDENT FOUND" in text and "No chain" in text

    def test_large_report_moves_rows_to_an_appendix(self, rendered: Rendered) -> None:
        doc = parse(rendered("large")["html"])
        assert {
            "appendix",
            "appendix-containers",
            "appendix-findings",
            "appendix-members-0",
        } <= set(doc.ids)
        assert "Showing 12 of 122 containers" in " ".join(" ".join(doc.text).split())

    def test_appendix_is_capped(self, make_doc: Callable[[str], dict[str, Any]]) -> None:
        from forensics.report.records import APPENDIX_CAP, BODY_ROWS

        doc = make_doc("snapshot")
        template = doc["containers"][0]
        doc["containers"] = [
            {**template, "id": f"{i:064x}", "name": f"c{i}"} for i in range(APPENDIX_CAP + 100)
        ]
        html = render_html(doc)
        assert html.count("<tr") < APPENDIX_CAP + BODY_ROWS + 60
        text = " ".join(" ".join(parse(html).text).split())
        assert f"{100 - BODY_ROWS} beyond the appendix cap are only in the JSON report" in text
        assert f"{100 - BODY_ROWS} more containers are only in the JSON report" in text

    @pytest.mark.parametrize(
        "paper, size", [("a4", "A4"), ("letter", "letter"), ("Letter", "letter")]
    )
    def test_paper_size(
        self, make_doc: Callable[[str], dict[str, Any]], paper: str, size: str
    ) -> None:
        assert f"@page {{ size: {size}; }}" in render_html(make_doc("snapshot"), paper)

    def test_unknown_paper_is_a_report_error(
        self, make_doc: Callable[[str], dict[str, Any]]
    ) -> None:
        with pytest.raises(ReportError, match="paper"):
            render_html(make_doc("snapshot"), "a3")


class TestHostile:
    def test_markup_and_template_syntax_render_as_text(
        self, rendered: Rendered, report_docs: Any
    ) -> None:
        html = rendered("hostile")["html"]
        doc = parse(html)
        assert "img" not in doc.tags and "script" not in doc.tags
        assert doc.tags.count("style") == 1  # ours; the hostile </style> did not close it
        text = "".join(doc.text)
        for hostile in (
            report_docs.HOSTILE_IMG,
            report_docs.HOSTILE_STYLE,
            report_docs.HOSTILE_TEMPLATE,
            report_docs.HOSTILE_MATH,
        ):
            assert hostile in text, hostile
        assert "trainer49" not in text  # {{ 7*7 }} was not evaluated
        assert "&lt;img src=file:///etc/passwd&gt;" in html


class TestCluster:
    def test_two_nodes_name_their_node(self, make_doc: Callable[[str], dict[str, Any]]) -> None:
        from forensics.report.markdown import render_markdown

        doc = make_doc("snapshot")
        second = {
            **doc["bundles"][0],
            "path": "/x/gpuforensics-gpu-08-20261129T140500Z.tgz",
            "host": "gpu-08",
            "file_sha256": "b" * 64,
        }
        doc["bundles"].append(second)
        doc["gpus"].append({**doc["gpus"][1], "node": "gpu-08", "uuid": "GPU-other", "index": 0})
        doc["findings"][0]["evidence"].append(
            {
                "bundle": "gpuforensics-gpu-08-20261129T140500Z.tgz",
                "member": "nvml/devices.json",
                "locator": "",
                "excerpt": "[]",
            }
        )
        html = render_html(doc)
        text = " ".join(" ".join(parse(html).text).split())
        assert "GPU incident report: 2 nodes" in text
        assert "gpu-07, gpu-08" in text and "(+1 more)" in text
        assert "GPU 0 gpu-08" in text  # the second node's GPU 0 is told apart
        assert "gpuforensics verify gpuforensics-gpu-08-20261129T140500Z.tgz" in text
        assert "b" * 64 in text
        md = render_markdown(doc)
        assert "# GPU incident report: gpu-07, gpu-08" in md and "GPU 0 (gpu-08)" in md
