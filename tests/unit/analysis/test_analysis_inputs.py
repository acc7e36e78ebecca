"""What `analyze` accepts: each bundle checked against its manifest, a bundle given twice counted once, finite thresholds."""

from __future__ import annotations

import shutil
from pathlib import Path

from forensics.analysis import analyze_bundles
from tests.support.hostile_bundles import build_bundle, full, rewrite


def _tampered(tmp_path: Path) -> tuple[Path, Path]:
    """A genuine bundle, and a copy of it whose host/proc/loadavg was changed after capture."""
    good = build_bundle(tmp_path)
    bad = tmp_path / "tampered.tgz"

    def tamper(top: str, members: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
        return [(name, b"0.00 0.00 0.00 1/1 1\n" if name.endswith("loadavg") else data)
                for name, data in full(top, members)]

    rewrite(good, bad, tamper)  # type: ignore[arg-type]
    return good, bad


def test_tampered_member_is_a_loud_limitation(tmp_path: Path) -> None:
    good, bad = _tampered(tmp_path)
    doc = analyze_bundles([bad])
    assert doc["bundles"][0]["integrity"]["ok"] is False
    assert any("hash mismatch: host/proc/loadavg" in p for p in doc["bundles"][0]["integrity"]["problems"])
    assert any("INTEGRITY CHECK FAILED" in lim and "tampered.tgz" in lim for lim in doc["limitations"])

    clean = analyze_bundles([good])
    assert clean["bundles"][0]["integrity"] == {"ok": True, "problems": []}
    assert not any("INTEGRITY" in lim for lim in clean["limitations"])


def test_same_bundle_twice_is_analysed_once(tmp_path: Path) -> None:
    good = build_bundle(tmp_path)
    copy = tmp_path / "copy.tgz"
    shutil.copyfile(good, copy)
    doc = analyze_bundles([good, copy])
    assert len(doc["bundles"]) == 1
    assert any("copy.tgz is the same bundle as" in lim for lim in doc["limitations"])


def test_config_refuses_non_finite_thresholds(tmp_path: Path) -> None:
    import pytest

    from forensics.analysis import load_config
    from forensics.errors import UsageError

    for text in ("gpu_hog_share_ratio = nan\n", "gpu_hog_share_ratio = inf\n"):
        cfg = tmp_path / "t.toml"
        cfg.write_text(text)
        with pytest.raises(UsageError, match="finite"):
            load_config(cfg)


def test_a_tampered_bundle_says_so_beside_the_verdict_in_every_report(tmp_path: Path) -> None:
    """An on-call engineer reads the verdict box and stops there: a bundle that does not match its
    manifest says so in it (HTML, Markdown, terminal), not only among the limitations further down."""
    import re

    from forensics.report import markdown, render_text
    from forensics.report.html import render_html

    good, bad = _tampered(tmp_path)
    said = "FAILED: tampered.tgz does not match its manifest"
    doc = analyze_bundles([bad])
    verdict = re.search(r'<section id="verdict".*?</section>', render_html(doc), re.S)
    assert verdict is not None and "<th>Integrity</th>" in verdict[0] and said in verdict[0]
    md = markdown.render_markdown(doc)
    assert f"| Integrity | **{said}" in md and md.index(said) < md.index("## Evidence chain")
    text = render_text(doc)
    assert text.splitlines()[text.splitlines().index(next(x for x in text.splitlines() if x.startswith("Verdict:"))) - 1] \
        .startswith(f"INTEGRITY: {said}")
    clean = analyze_bundles([good])
    assert "Integrity" not in render_html(clean) and "INTEGRITY" not in render_text(clean)
    assert "| Integrity |" not in markdown.render_markdown(clean)
