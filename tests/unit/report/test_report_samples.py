"""Every format rendered for every sample bundle (sample_bundles/*.tgz, analysed for real).

The PDF's text (pdftotext) must hold the verdict headline, every culprit's name and the
evidence references of the chain; its page count stays in a sane range; the HTML parses with
no <script>; page 1 is not blank. Skips while there are no sample bundles (fails in CI).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from forensics.report import render
from tests.support.env import need

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = Path(os.environ.get("GPUFORENSICS_SAMPLE_BUNDLES", ROOT / "sample_bundles"))
BUNDLES = sorted(SAMPLES.glob("*.tgz"))


def _packed(text: str) -> str:
    """Text without spaces and hyphens: pdftotext joins a word broken after "-" without it."""
    return re.sub(r"[\s-]+", "", text)


def test_sample_bundles_exist() -> None:
    need(bool(BUNDLES), f"no sample bundles in {SAMPLES} to render")


@pytest.mark.slow
@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.stem for b in BUNDLES])
def test_every_format(
    bundle: Path,
    tmp_path: Path,
    pdftext: Callable[..., str],
    pdfinfo: Callable[[bytes], dict[str, str]],
    tool: Callable[[str], str],
) -> None:
    from forensics.analysis import analyze_bundles

    doc: dict[str, Any] = analyze_bundles([bundle])
    paths = render(doc, ["html", "pdf", "md", "json"], tmp_path, bundle_paths=[bundle])
    assert [p.name for p in paths] == [
        f"{bundle.stem}.report.{ext}" for ext in ("html", "pdf", "md", "json")
    ]
    html, pdf, md = paths[0].read_text(), paths[1].read_bytes(), paths[2].read_text()

    parser = HTMLParser()
    parser.feed(html)
    parser.close()
    assert "<script" not in html.lower()

    text = pdftext(pdf)
    packed = _packed(text)
    assert _packed(doc["verdict"]["headline"]) in packed
    for culprit in doc["verdict"]["culprits"]:
        assert _packed(culprit["name"]) in packed
    for step in doc["chain"]:
        finding = next(f for f in doc["findings"] if f["id"] == step["finding"])
        for ev in finding["evidence"][:12]:
            assert _packed(ev["member"]) in packed
    assert 2 <= int(pdfinfo(pdf)["Pages"]) <= 40
    assert _packed(doc["verdict"]["headline"]).replace("\\", "")[:40] in _packed(md).replace(
        "\\", ""
    )

    subprocess.run(
        [
            tool("pdftoppm"),
            "-r",
            "30",
            "-f",
            "1",
            "-l",
            "1",
            "-png",
            str(paths[1]),
            str(tmp_path / "p"),
        ],
        check=True,
        timeout=60,
    )
    from PIL import Image

    with Image.open(next(tmp_path.glob("p-*.png"))) as image:
        histogram = image.convert("L").histogram()
    assert sum(histogram[:200]) / sum(histogram) > 0.02
