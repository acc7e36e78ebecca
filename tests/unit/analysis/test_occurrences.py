"""Repeated findings as one (forensics/analysis/occurrences.py): the same kind, parties and cause
found again and again are one finding with its occurrences (count, first, last, worst); another
role or cause stays apart; what the rules already merged is left alone; every renderer shows the
occurrences."""

from __future__ import annotations

from typing import Any

from forensics.analysis.findings import Evidence, Finding, Subject
from forensics.analysis.occurrences import merge_repeats
from forensics.report.html import render_html
from forensics.report.markdown import render_markdown
from forensics.report.text import render_text
from forensics.report.view import build_view
from tests.support.analysis_bundles import T0, BundleSpec
from tests.unit.analysis.conftest import Analyze, of_kind

XID = "NVRM: Xid (PCI:0000:{bus}:00): {code}, pid=4242, name=python, Ch 00000010"


def _hour_of_xids(codes: dict[str, int]) -> BundleSpec:
    """GPU 0 (bus 3b) and GPU 1 (bus 86): each bus's Xid every 10 minutes for an hour, far apart
    enough (600 s > xid_burst_window_s) that each is a burst, so a finding of its own before merging."""
    b = BundleSpec(duration_s=3600)
    b.gpu(0)
    b.gpu(1)
    for k in range(6):
        for bus, code in codes.items():
            b.kmsg(T0 + 60 + 600 * k + (300 if code == 43 else 0), XID.format(bus=bus, code=code))
    return b


def test_findings_the_rules_already_merged_and_findings_found_once_are_left_as_they_are(analyze: Analyze) -> None:
    # the Xid rule makes one finding per GPU and code, its bursts counted in metrics.occurrences
    doc = analyze(_hour_of_xids({"3b": 13, "86": 43}))
    found = sorted((f["metrics"]["xid"], f["metrics"]["occurrences"]) for f in of_kind(doc, "gpu-xid-fault"))
    assert found == [(13, 6), (43, 6)]
    assert all("occurrences" not in f and " occurrences, first " not in f["summary"] for f in doc["findings"])


def _finding(start: float, severity: str, share: float, role_of_b: str = "victim") -> Finding:
    subjects = (Subject("container", "a" * 64, "hog", "n1", "culprit"), Subject("container", "b" * 64, "trainer", "n1",
                                                                                  role_of_b, start))  # type: ignore[arg-type]
    return Finding("gpu-compute-hog", severity, 0.9, f"hog took {share:.0f}%", start, start + 30, "n1", subjects,  # type: ignore[arg-type]
                   (Evidence("b.tgz", "nvml/samples.jsonl", f"line {int(start)}", "{}"),),
                   metrics=(("sm_share_pct", share), ("gpu", "GPU 0")), key=f"k{start}", headline=f"hog took {share:.0f}%")


def test_the_worst_occurrence_stands_for_the_finding_and_roles_keep_findings_apart() -> None:
    merged = merge_repeats([_finding(100, "low", 60), _finding(700, "high", 95), _finding(1300, "medium", 80),
                            _finding(1900, "medium", 70, role_of_b="witness")])
    assert len(merged) == 2
    f = merged[0]
    assert f.occurrences is not None and f.occurrences.count == 3
    assert (f.severity, f.metric("sm_share_pct"), f.start, f.end) == ("high", 95, 100, 1330)
    assert f.occurrences.worst_start == 700 and f.occurrences.last_start == 1300
    assert [e.locator for e in f.evidence] == ["line 100", "line 700", "line 1300"]
    assert merged[1].occurrences is None


def test_the_json_document_and_every_renderer_show_the_occurrences(analyze: Analyze) -> None:
    merged = merge_repeats([_finding(100, "low", 60), _finding(700, "high", 95), _finding(1300, "medium", 80)])
    assert merged[0].occurrences is not None
    occ = merged[0].occurrences.to_json()
    assert occ["count"] == 3 and occ["worst"]["start"] == "1970-01-01T00:11:40Z"
    assert occ["first"] == {"start": "1970-01-01T00:01:40Z", "end": "1970-01-01T00:02:10Z"}
    # a document as analyze writes it, its Xid finding carrying those occurrences
    doc: dict[str, Any] = analyze(_hour_of_xids({"3b": 13}))
    (f,) = of_kind(doc, "gpu-xid-fault")
    f["occurrences"] = occ
    (view,) = [v for v in build_view(doc).findings if v.kind == "gpu-xid-fault"]
    phrase = "3 occurrences, first 00:01:40Z, last 00:21:40Z, worst 00:11:40Z"
    assert view.occurrences == phrase
    assert phrase in render_text(doc) and phrase in render_markdown(doc)
    assert f'<span class="occurrences">{phrase}</span>' in render_html(doc)
