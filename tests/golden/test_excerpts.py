"""Every excerpt of every sample bundle's analysis is found, as written, in the member it cites
(a member the analysis rebuilt from the flight recorder's segments, ``ring/...``, as rebuilt)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forensics.analysis import analyze_bundles
from forensics.analysis.excerpt import OMISSION
from forensics.analysis.ring_view import ring_view
from forensics.analysis.source import Source
from forensics.bundle.reader import ReadLimits, open_bundle
from tests.golden.test_golden import BUNDLES


def check_excerpts(bundle: Path, doc: dict[str, Any] | None = None) -> int:
    """Assert every excerpt of ``bundle``'s analysis is in its member; the number quoted verbatim."""
    doc = doc if doc is not None else analyze_bundles([bundle])
    opened = open_bundle(bundle)
    view = ring_view(Source(opened, bundle.name, opened.members))
    items = [(f["id"], e) for f in doc["findings"] for e in f["evidence"]]
    items += [(f"ruled-out {r['kind']}", e) for r in doc["ruled_out"] for e in r["evidence"]]
    quoted = 0
    for where, e in items:
        data = opened.members.get(e["member"])
        if data is None and view is not None:
            data = view.real_bytes(e["member"])  # rebuilt from the ring segments the bundle carries
        assert data is not None, (where, e)
        if e["excerpt_normalised"]:
            # only a description of the whole member (what a ruled-out check examined) may be
            assert e["locator"] == "" and where.startswith("ruled-out"), (where, e)
            continue
        text = bytes(data).decode("utf-8")
        excerpt = e["excerpt"][:-3] if e["excerpt"].endswith("...") else e["excerpt"]
        for piece in excerpt.split(OMISSION):
            assert piece and piece in text, f"{where}: {piece!r} not in {e['member']}"
        quoted += 1
    assert quoted or not doc["findings"]
    return quoted


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.stem for b in BUNDLES])
def test_every_excerpt_is_in_its_member(bundle: Path) -> None:
    check_excerpts(bundle)


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.stem for b in BUNDLES])
def test_the_analysis_is_the_same_when_no_member_is_held(bundle: Path) -> None:
    """Every member read again from the bundle file (forensics.bundle.reader.Members, as a big one
    always is): the same findings, evidence and excerpts as with every member held."""
    held = analyze_bundles([bundle])
    reread = analyze_bundles([bundle], limits=ReadLimits(held_member_bytes=0))
    for doc in (held, reread):
        doc.pop("generated_at", None)
    assert reread == held
    assert check_excerpts(bundle, reread) == check_excerpts(bundle, held)
