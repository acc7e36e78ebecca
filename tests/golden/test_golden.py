"""Scenario bundles (``sample_bundles/*.tgz``, captured by the real capture) against their golden
expectations (``tests/golden/<stem>.json``): kind, culprits and victims; see README.md here."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis import analyze_bundles
from tests.support.env import need

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = Path(os.environ.get("GPUFORENSICS_SAMPLE_BUNDLES", ROOT / "sample_bundles"))
GOLDEN = Path(__file__).resolve().parent
BUNDLES = sorted(SAMPLES.glob("*.tgz"))


def _names(subjects: list[dict[str, Any]], role: str | None = None) -> set[str]:
    return {s["name"] for s in subjects if role is None or s["role"] == role}


def test_sample_bundles_exist() -> None:
    need(bool(BUNDLES), f"no sample bundles in {SAMPLES} (build them: sudo python3 sample_bundles/build.py)")


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.stem for b in BUNDLES])
def test_golden(bundle: Path) -> None:
    expected_file = GOLDEN / f"{bundle.stem}.json"
    assert expected_file.exists(), f"no golden expectations for {bundle.name}: write {expected_file}"
    want = json.loads(expected_file.read_text())
    doc = analyze_bundles([bundle])
    ours = set(want["containers"])
    culprits = _names(doc["verdict"]["culprits"]) & ours
    assert culprits == set(want["culprits"]), doc["verdict"]
    if want.get("pods_only"):  # Kubernetes: the verdict names pods, never their containers
        types = {s["type"] for s in doc["verdict"]["culprits"] + doc["verdict"]["victims"] if s["name"] in ours}
        assert types == {"pod"}, doc["verdict"]
    assert set(want["victims"]) <= _names(doc["verdict"]["victims"]), doc["verdict"]
    for req in want["required"]:
        matching = [f for f in doc["findings"] if f["kind"] == req["kind"]
                    and set(req["culprits"]) == _names(f["subjects"], "culprit") & ours
                    and set(req["victims"]) <= _names(f["subjects"], "victim")]
        assert matching, f"{req} not among {[(f['kind'], f['summary']) for f in doc['findings']]}"
        if "severity" in req:
            assert any(f["severity"] == req["severity"] for f in matching), matching
        if want.get("pods_only"):  # each pod party is followed by its container(s), with the same role
            for f in matching:
                for role in ("culprit", "victim"):
                    types = [s["type"] for s in f["subjects"] if s["role"] == role]
                    assert types.count("container") >= types.count("pod") > 0 or not types, f["subjects"]
    for f in doc["findings"]:
        if f["kind"] in want["forbidden"]:
            assert not _names(f["subjects"]) & ours, f"forbidden {f['kind']}: {f['summary']}"
    # never accuse a scenario container that the story does not blame
    accused = _names([s for f in doc["findings"] for s in f["subjects"]], "culprit") & ours
    blamed = set(want["culprits"]) | {n for r in want["required"] for n in r["culprits"]}
    assert not accused - blamed
    if "incidents" in want:
        _check_incidents(bundle, doc, want["incidents"])


def _incident_of(doc: dict[str, Any], name: str) -> dict[str, Any]:
    found = [i for i in doc["incidents"] if name in _names(i["parties"])]
    assert len(found) == 1, (name, [(i["id"], i["headline"]) for i in doc["incidents"]])
    return found[0]


def _check_incidents(bundle: Path, doc: dict[str, Any], want: dict[str, Any]) -> None:
    """Independent causes are separate incidents; analysed with ``--window`` set to the capture
    window, the in-window ones come first and what ended before the window is history."""
    assert len(doc["incidents"]) >= want["min"], doc["incidents"]
    separate = [_incident_of(doc, n)["id"] for n in want["separate"]]
    assert len(set(separate)) == len(separate), separate
    b = doc["bundle"]
    named = analyze_bundles([bundle], window=f"{b['captured_start']}..{b['captured_end']}")
    order = [i["id"] for i in named["incidents"]]
    inside = [_incident_of(named, n) for n in want["in_window"]]
    before = [_incident_of(named, n) for n in want["before_window"]]
    assert all(i["relevance"] == "window" for i in inside), inside
    assert all(i["relevance"] == "history" for i in before), before
    assert max(order.index(i["id"]) for i in inside) < min(order.index(i["id"]) for i in before)
    assert named["verdict"]["incident"] == order[0] and named["incidents"][0] in inside
