"""Markdown report (forensics/report/markdown.py): content order, inert text, sound tables."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forensics.report.markdown import md_code, md_text

Rendered = Callable[..., Any]


def _cells(row: str) -> int:
    """Cells of a GFM table row: pipes not escaped by a backslash."""
    return len(re.findall(r"(?<!\\)\|", row)) - 1


class TestEscaping:
    @given(st.text())
    def test_text_is_inert(self, value: str) -> None:
        out = md_text(value)
        assert "<" not in out and ">" not in out and "\n" not in out
        assert not re.search(r"(?<!\\)[`*_\[\]|~#]", out.replace("\\\\", ""))

    @given(st.text())
    def test_code_span_is_one_span(self, value: str) -> None:
        out = md_code(value)
        if not " ".join(value.split()):
            assert out == ""
            return
        fence = re.match(r"`+", out)
        assert fence is not None and out.endswith(fence.group(0))
        inner = out[len(fence.group(0)) : -len(fence.group(0))]
        assert fence.group(0) not in inner  # nothing inside closes the span early
        assert "\n" not in out and not re.search(r"(?<!\\)\|", out)

    def test_examples(self) -> None:
        assert md_text("<img src=x>") == "&lt;img src=x&gt;"
        assert md_text("a|b *c* [d](e)") == "a\\|b \\*c\\* \\[d\\](e)"
        assert md_code("a`b") == "`` a`b ``"


class TestReport:
    def test_sections_in_order(self, rendered: Rendered) -> None:
        md = rendered("incident")["md"]
        heads = [line for line in md.splitlines() if line.startswith("## ")]
        assert heads == [
            "## Verdict: CRITICAL",
            "## Timeline",
            "## Evidence chain",
            "## Other findings",
            "## Ruled out",
            "## GPUs",
            "## Containers",
            "## Collector status",
            "## Verify the bundle",
        ]

    def test_content(self, rendered: Rendered, make_doc: Callable[[str], dict[str, Any]]) -> None:
        doc = make_doc("incident")
        md = rendered("incident")["md"]
        assert "**container notebook used GPU 0 allocated to trainer" in md
        members = doc["bundles"][0]["members"]
        for ev in doc["findings"][0]["evidence"]:
            assert f"`{ev['member']}`" in md and members[ev["member"]] in md
        assert "gpuforensics verify gpuforensics-gpu-07-20261129T140500Z.tgz" in md
        assert "pod allocations unknown" in md

    def test_tables_have_consistent_rows(self, rendered: Rendered) -> None:
        for name in ("incident", "hostile", "large"):
            lines = rendered(name)["md"].splitlines()
            width = None
            for line in lines:
                if line.startswith("|"):
                    cells = _cells(line)
                    width = cells if width is None else width
                    assert cells == width, (name, line)
                else:
                    width = None

    def test_hostile_strings_are_escaped(self, rendered: Rendered) -> None:
        md = rendered("hostile")["md"]
        outside_code = re.sub(r"(`+).*?\1", "", md)
        assert (
            "<img" not in outside_code
            and "<script" not in outside_code
            and "</style" not in outside_code
        )
        assert "notebook&lt;img src=file:///etc/passwd&gt;" in md

    def test_large_is_capped(self, rendered: Rendered) -> None:
        md = rendered("large")["md"]
        assert "more containers are in the HTML and JSON reports" in md
        assert len(md.splitlines()) < 400
