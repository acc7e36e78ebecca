"""Every excerpt of every sample bundle's analysis is found, as written, in the member it cites."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.analysis import analyze_bundles
from forensics.analysis.excerpt import OMISSION
from forensics.bundle.reader import open_bundle
from tests.golden.test_golden import BUNDLES


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.stem for b in BUNDLES])
def test_every_excerpt_is_in_its_member(bundle: Path) -> None:
    doc = analyze_bundles([bundle])
    opened = open_bundle(bundle)
    items = [(f["id"], e) for f in doc["findings"] for e in f["evidence"]]
    items += [(f"ruled-out {r['kind']}", e) for r in doc["ruled_out"] for e in r["evidence"]]
    quoted = 0
    for where, e in items:
        assert e["member"] in opened.members, (where, e)
        if e["excerpt_normalised"]:
            # only a description of the whole member (what a ruled-out check examined) may be
            assert e["locator"] == "" and where.startswith("ruled-out"), (where, e)
            continue
        text = opened.read_bytes(e["member"]).decode("utf-8")
        excerpt = e["excerpt"][:-3] if e["excerpt"].endswith("...") else e["excerpt"]
        for piece in excerpt.split(OMISSION):
            assert piece and piece in text, f"{where}: {piece!r} not in {e['member']}"
        quoted += 1
    assert quoted or not doc["findings"]
