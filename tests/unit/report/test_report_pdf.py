"""PDF report (forensics/report/pdf.py): text, pagination, page furniture, nothing fetched."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forensics.errors import ReportError
from forensics.report.pdf import NoFetch, render_pdf

Rendered = Callable[..., Any]


def _flat(text: str) -> str:
    return " ".join(text.split())


class TestText:
    def test_verdict_culprit_and_evidence_references(
        self,
        rendered: Rendered,
        make_doc: Callable[[str], dict[str, Any]],
        pdftext: Callable[..., str],
    ) -> None:
        doc = make_doc("incident")
        text = _flat(pdftext(rendered("incident")["pdf"]))
        assert "Verdict" in text and "CRITICAL" in text
        assert _flat(doc["verdict"]["headline"]) in text
        assert "notebook" in text and "trainer" in text
        members = doc["bundles"][0]["members"]
        # long paths, locators and digests wrap inside their cells, and pdftotext drops the "-"
        # of a word broken after it: compare without spaces and hyphens
        packed = re.sub(r"[ -]", "", text)
        for ev in doc["findings"][0]["evidence"]:
            assert re.sub(r"[ -]", "", ev["locator"]) in packed
            assert re.sub(r"[ -]", "", ev["member"]) in packed
            assert members[ev["member"]] in packed
        assert "gpuforensics verify" in text

    @pytest.mark.parametrize(
        "name, low, high",
        [("incident", 4, 10), ("clean", 3, 8), ("snapshot", 2, 6), ("large", 15, 60)],
    )
    def test_page_count_in_range(
        self,
        rendered: Rendered,
        pdfinfo: Callable[[bytes], dict[str, str]],
        name: str,
        low: int,
        high: int,
    ) -> None:
        pages = int(pdfinfo(rendered(name)["pdf"])["Pages"])
        assert low <= pages <= high

    def test_running_header_and_footer_on_every_page(
        self,
        rendered: Rendered,
        make_doc: Callable[[str], dict[str, Any]],
        pdftext: Callable[..., str],
        pdfinfo: Callable[[bytes], dict[str, str]],
    ) -> None:
        pdf = rendered("incident")["pdf"]
        pages = int(pdfinfo(pdf)["Pages"])
        sha = make_doc("incident")["bundles"][0]["file_sha256"]
        for number, page in enumerate(pdftext(pdf).split("\f")[:pages], 1):
            flat = _flat(page)
            assert f"page {number} of {pages}" in flat
            assert sha in flat.replace(" ", "")
            assert "gpu-07 · captured 2026-11-29 14:00:00 UTC" in flat

    @pytest.mark.parametrize(
        "paper, size", [("a4", "595.276 x 841.89 pts (A4)"), ("letter", "612 x 792 pts (letter)")]
    )
    def test_paper_sizes(
        self, rendered: Rendered, pdfinfo: Callable[[bytes], dict[str, str]], paper: str, size: str
    ) -> None:
        assert pdfinfo(rendered("snapshot", paper)["pdf"])["Page size"] == size

    def test_repeated_table_header_in_long_tables(
        self, rendered: Rendered, pdftext: Callable[..., str]
    ) -> None:
        pages = pdftext(rendered("large")["pdf"]).split("\f")
        with_header = [p for p in pages if "Container / image GPU allocation" in _flat(p)]
        assert (
            len(with_header) >= 3
        )  # the containers' appendix table spans pages, its header repeats

    @pytest.mark.parametrize("name, paper", [("hostile", "a4"), ("large", "letter")])
    def test_nothing_clipped_right_margin(
        self, rendered: Rendered, tmp_path: Path, tool: Callable[[str], str], name: str, paper: str
    ) -> None:
        """Every word of every page lies inside the page (no table wider than the text block)."""
        pdf = tmp_path / "r.pdf"
        pdf.write_bytes(rendered(name, paper)["pdf"])
        out = subprocess.run(
            [tool("pdftotext"), "-bbox", str(pdf), "-"], check=True, capture_output=True, timeout=60
        ).stdout.decode()
        widths = [float(w) for w in re.findall(r'<page width="([\d.]+)"', out)]
        xmax = [float(x) for x in re.findall(r'xMax="([\d.]+)"', out)]
        assert (
            widths and xmax and max(xmax) <= widths[0] - 20
        )  # inside the right margin (14 mm ~ 40 pt)


class TestHostileAndFetching:
    def test_hostile_strings_are_text_in_the_pdf(
        self, rendered: Rendered, report_docs: Any, pdftext: Callable[..., str]
    ) -> None:
        render = rendered("hostile")
        text = pdftext(render["pdf"]).replace("\n", "")
        assert "<img src=file:///etc/passwd>" in text
        assert (
            render["refused"] == []
        )  # the markup was text: weasyprint was not even asked to fetch

    def test_no_local_file_is_read_even_when_the_html_asks(
        self, tmp_path: Path, pdftext: Callable[..., str]
    ) -> None:
        secret = tmp_path / "secret.css"
        secret.write_text('body::after { content: "SECRET-7f3a" }')
        html = (
            "<html><head>"
            f'<link rel="stylesheet" href="file://{secret}">'
            f'<style>@import url("file://{secret}");</style>'
            "</head><body><p>report</p>"
            '<img src="file:///etc/passwd"><img src="http://127.0.0.1:9/x.png">'
            "</body></html>"
        )
        fetcher = NoFetch()
        text = pdftext(render_pdf(html, fetcher))
        assert "report" in text and "SECRET-7f3a" not in text
        assert f"file://{secret}" in fetcher.refused
        assert "file:///etc/passwd" in fetcher.refused
        assert "http://127.0.0.1:9/x.png" in fetcher.refused

    def test_control_the_default_fetcher_would_have_read_it(
        self, tmp_path: Path, pdftext: Callable[..., str]
    ) -> None:
        """Proves the test above can fail: weasyprint's own fetcher does read local files."""
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import weasyprint

        secret = tmp_path / "secret.css"
        secret.write_text('body::after { content: "SECRET-7f3a" }')
        html = f'<html><head><link rel="stylesheet" href="file://{secret}"></head><body><p>report</p></body></html>'
        assert "SECRET-7f3a" in pdftext(weasyprint.HTML(string=html).write_pdf())

    def test_garbage_html_still_gives_a_pdf_or_a_report_error(self) -> None:
        try:
            pdf = render_pdf("<html><body><table><tr><td>" * 50)
        except ReportError:
            return
        assert pdf.startswith(b"%PDF")


class TestVisual:
    @pytest.mark.parametrize("name", ["incident", "hostile", "clean", "large"])
    def test_first_page_is_not_blank(
        self, rendered: Rendered, tmp_path: Path, tool: Callable[[str], str], name: str
    ) -> None:
        from PIL import Image

        pdf = tmp_path / "r.pdf"
        pdf.write_bytes(rendered(name)["pdf"])
        subprocess.run(
            [
                tool("pdftoppm"),
                "-r",
                "40",
                "-f",
                "1",
                "-l",
                "1",
                "-png",
                str(pdf),
                str(tmp_path / "p"),
            ],
            check=True,
            timeout=60,
        )
        png = next(tmp_path.glob("p-*.png"))
        with Image.open(png) as image:
            grey = image.convert("L")
            histogram = grey.histogram()
            ink = sum(histogram[:200]) / (grey.width * grey.height)
            colour = image.convert("RGB").getcolors(1 << 16)
        assert 0.02 < ink < 0.6  # text and the verdict box, on a mostly white page
        assert colour is not None and len(colour) > 20  # severity colours, not just black on white
