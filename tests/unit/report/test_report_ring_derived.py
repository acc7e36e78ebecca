"""The report says where evidence from a rebuilt ring member came from.

A recorder's ring (tests/support/ring_bundle.py), ``gpuforensics capture --since`` over it, then
``gpuforensics analyze -f html,md,pdf,json``, as a user runs them: a finding citing a member the
analysis rebuilt (``ring/nvml/samples.jsonl line 9``) shows, next to its citation, the segment
and line it was rebuilt from (``rebuilt from ring/segments/seg-N.jsonl.gz line 47 (sealed
segment, SHA-256 in ring/provenance.json)``) in the HTML, the Markdown, the PDF's text and the
terminal summary, in the evidence chain and in the findings table's first evidence; the segment is listed in the appendix with its SHA-256, the rebuilt member as
rebuilt (not as missing from the manifest); a report of live members says no such thing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.support.hostile_bundles import full, rewrite
from tests.support.ring_bundle import RING_SAMPLE, capture_since, ring_from_sample

ROOT = Path(__file__).resolve().parents[3]


class _Text(HTMLParser):
    """The HTML's text as a reader sees it (each element's text a word apart, whitespace runs one space)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)

    def text(self) -> str:
        return " ".join(" ".join(self.parts).split())


def _html_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    parser.close()
    return parser.text()


def _packed(text: str) -> str:
    """Text without spaces and hyphens: pdftotext wraps long names at ``-`` and ``/``."""
    return re.sub(r"[\s-]+", "", text)


def _analyze(bundle: Path, out: Path) -> dict[str, Any]:
    run = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(bundle), "-f", "html,md,pdf,json",
                          "-o", f"{out}/"], env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(bundle)],
                             env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                             capture_output=True, text=True, timeout=300)
    assert summary.returncode in (0, 1), summary.stderr[-3000:]
    reports = {p.suffix: p for p in out.glob(f"{bundle.stem}.report.*")}
    doc = json.loads(reports[".json"].read_text())
    return {"doc": doc, "html": reports[".html"].read_text(), "md": reports[".md"].read_text(),
            "pdf": reports[".pdf"].read_bytes(), "text": summary.stdout}


@pytest.fixture(scope="module")
def ring_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("ringcapture")
    ring_from_sample(tmp / "ring")
    return capture_since(tmp / "ring", tmp / "bundle", "2026-11-29T00:00:00Z")


@pytest.fixture(scope="module")
def ring_report(ring_capture: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _analyze(ring_capture, tmp_path_factory.mktemp("ringreport"))


def _first_derived(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    for f in doc["findings"]:
        for e in f["evidence"][:3]:  # shown in the report's chain (the JSON keeps them all)
            if e.get("derived_from"):
                return f, e
    raise AssertionError("no finding cites a rebuilt ring member")


@pytest.mark.slow
def test_a_ring_cited_finding_says_which_segment_line_it_was_rebuilt_from(
        ring_report: dict[str, Any], pdftext: Callable[..., str]) -> None:
    _finding, e = _first_derived(ring_report["doc"])
    seg, line = e["derived_from"]["member"], e["derived_from"]["line"]
    assert e["member"].startswith("ring/") and seg.startswith("ring/segments/seg-")
    kind = "sealed segment" if seg.endswith(".gz") else "active segment, copied at capture"
    said = f"rebuilt from {seg} line {line} ({kind}, SHA-256 in ring/provenance.json)"

    html = _html_text(ring_report["html"])
    assert f"{e['locator']}: {said}" in html, said
    assert f"{seg} {ring_report['doc']['bundles'][0]['members'][seg]}" in html  # the appendix: its SHA-256

    md = ring_report["md"]
    assert f"`{e['locator']}`: rebuilt from `{seg}` line {line} ({kind}, SHA-256 in ring/provenance.json)" in md

    text = pdftext(ring_report["pdf"])
    assert _packed(f"{e['locator']}: {said}") in _packed(text)

    summary = ring_report["text"]  # the terminal summary: the item, then where it came from under it
    cited = f"evidence: {e['member']} {e['locator']}: "
    assert cited in summary and f"{e['locator']}: {said}" in summary.split(cited, 1)[1].splitlines()[1], summary

    # a rebuilt member is not reported missing: it is not in the manifest, its segments are
    for report in (html, md, text):
        assert "not in the manifest" not in report
    assert f"{e['member']} rebuilt from the ring segments" in html  # the appendix's row


@pytest.mark.slow
def test_segments_read_unverified_never_claim_a_check(
        ring_capture: Path, tmp_path: Path, pdftext: Callable[..., str]) -> None:
    """The same capture without its ``ring/provenance.json`` (dropped from the manifest too): the
    segments' SHA-256 was never checked, so the document says ``verified: false`` and no report
    says the SHA-256 is in the provenance; each says the line is NOT verified and why."""
    def drop(top: str, members: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
        manifest = json.loads(dict(members)["manifest.json"])
        manifest["members"] = [m for m in manifest["members"] if m["path"] != "ring/provenance.json"]
        return full(top, [(n, json.dumps(manifest).encode() if n == "manifest.json" else d)
                          for n, d in members if n != "ring/provenance.json"])

    (tmp_path / "no-provenance").mkdir()
    bundle = rewrite(ring_capture, tmp_path / "no-provenance" / ring_capture.name, drop)
    report = _analyze(bundle, tmp_path / "reports")
    _finding, e = _first_derived(report["doc"])
    derived = [x["derived_from"] for f in report["doc"]["findings"] for x in f["evidence"] if "derived_from" in x]
    assert all(d["verified"] is False for d in derived), derived
    seg, line = e["derived_from"]["member"], e["derived_from"]["line"]
    kind = "sealed segment" if seg.endswith(".gz") else "active segment, copied at capture"
    said = f"rebuilt from {seg} line {line} ({kind}, NOT verified: no readable ring/provenance.json)"
    html, md, pdf, text = _html_text(report["html"]), report["md"], pdftext(report["pdf"]), report["text"]
    assert f"{e['locator']}: {said}" in html and f"{e['locator']}: {said}" in text
    assert f"`{e['locator']}`: rebuilt from `{seg}` line {line} ({kind}, NOT verified: no readable " in md
    assert _packed(said) in _packed(pdf)
    for out in (report["html"], html, md, pdf, text):
        assert "SHA-256 in ring/provenance.json" not in out
    assert f'class="warn-text">({kind}, NOT verified' in report["html"]  # it stands out


@pytest.mark.slow
def test_ruled_out_checks_of_a_ring_only_bundle_name_its_ring_members(ring_report: dict[str, Any]) -> None:
    """Without a live nvml or cgroup collector, what a ruled-out check examined is the rebuilt
    ``ring/`` member, so the report names a member the reader can find (with the ring view)."""
    cited = {e["member"] for r in ring_report["doc"]["ruled_out"] for e in r["evidence"]}
    assert {"ring/nvml/samples.jsonl", "ring/cgroup/samples.jsonl"} <= cited, cited
    assert not {"nvml/samples.jsonl", "cgroup/samples.jsonl"} & cited
    assert "`ring/cgroup/samples.jsonl`" in ring_report["md"]


@pytest.mark.slow
def test_a_live_finding_has_no_derived_line(tmp_path: Path, pdftext: Callable[..., str]) -> None:
    """The same incident from the live members (the sample the ring was made from): no evidence is
    rebuilt, and no report says it was."""
    live = _analyze(RING_SAMPLE, tmp_path)
    assert live["doc"]["findings"]
    assert not any("derived_from" in e for f in live["doc"]["findings"] for e in f["evidence"])
    for text in (_html_text(live["html"]), live["md"], pdftext(live["pdf"]), live["text"]):
        assert "rebuilt from" not in text and "rebuilt, see below" not in text


@pytest.mark.parametrize(("derived_from", "members", "said"), [
    ({"member": "ring/segments/seg-7.jsonl.gz", "line": 37}, {"ring/segments/seg-7.jsonl.gz": "ab" * 32},
     "rebuilt from ring/segments/seg-7.jsonl.gz line 37 (sealed segment, SHA-256 in ring/provenance.json)"),
    ({"member": "ring/segments/seg-8.jsonl", "line": 2}, {"ring/segments/seg-8.jsonl": "cd" * 32},
     "rebuilt from ring/segments/seg-8.jsonl line 2 (active segment, copied at capture, SHA-256 in ring/provenance.json)"),
    ({"member": "ring/segments/seg-9.jsonl.gz", "line": 5}, {},
     "rebuilt from ring/segments/seg-9.jsonl.gz line 5 (sealed segment, segment not in the manifest)"),
    ({"member": "ring/segments/seg-7.jsonl.gz", "line": 37, "verified": False}, {"ring/segments/seg-7.jsonl.gz": "ab" * 32},
     "rebuilt from ring/segments/seg-7.jsonl.gz line 37 (sealed segment, NOT verified: no readable ring/provenance.json)"),
    ({"member": "ring/segments/seg-8.jsonl", "line": 2, "verified": "yes"}, {"ring/segments/seg-8.jsonl": "cd" * 32},
     "rebuilt from ring/segments/seg-8.jsonl line 2 (active segment, copied at capture, NOT verified: no readable "
     "ring/provenance.json)"),
    ({"member": "ring/segments/seg-9.jsonl.gz", "line": 5, "verified": False}, {},
     "rebuilt from ring/segments/seg-9.jsonl.gz line 5 (sealed segment, NOT verified: no readable "
     "ring/provenance.json, segment not in the manifest)"),
    ({"member": "ring/segments/seg-7.jsonl.gz", "line": 37, "verified": True}, {"ring/segments/seg-7.jsonl.gz": "ab" * 32},
     "rebuilt from ring/segments/seg-7.jsonl.gz line 37 (sealed segment, SHA-256 in ring/provenance.json)"),
    ({"member": "ring/segments/seg-9.jsonl.gz", "line": "5"}, {}, None),
    ({"member": "ring/segments/seg-9.jsonl.gz", "line": True}, {}, None),
    ({"line": 5}, {}, None),
    ("seg-9", {}, None),
])
def test_derived_from_as_the_report_reads_it(derived_from: Any, members: dict[str, str], said: str | None) -> None:
    """What the analysis wrote decides the line; a malformed ``derived_from`` shows none."""
    from forensics.report.findings import Members, evidence_views

    known = Members([{"path": "/x/b.tgz", "members": members}])
    (view,) = evidence_views([{"bundle": "b.tgz", "member": "ring/nvml/samples.jsonl", "locator": "line 9",
                               "excerpt": "{}", "derived_from": derived_from}], known)
    assert (view.derived.text if view.derived else None) == said
    if said and members:
        assert known.cited["b.tgz"] == {"ring/nvml/samples.jsonl", derived_from["member"]}  # in the appendix


def test_a_hostile_segment_name_is_text(make_doc: Callable[[str], dict[str, Any]]) -> None:
    from forensics.report.html import render_html
    from forensics.report.markdown import render_markdown

    doc = make_doc("incident")
    evidence = doc["findings"][0]["evidence"][0]
    evidence["derived_from"] = {"member": "ring/segments/<img src=x onerror=alert(1)>`|*", "line": 3}
    html, md = render_html(doc, "a4"), render_markdown(doc)
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    (line,) = [x for x in md.splitlines() if "rebuilt from" in x]  # in a code span, shown verbatim
    assert "rebuilt from `` ring/segments/<img src=x onerror=alert(1)>`|* `` line 3 (active segment," in line


def test_the_findings_tables_first_evidence_says_where_a_rebuilt_line_came_from(
        make_doc: Callable[[str], dict[str, Any]], pdftext: Callable[..., str]) -> None:
    """A finding outside the chain (the findings table) whose first evidence is a rebuilt member's
    line: under its member and locator, the segment and line it came from, as the chain says it, in
    the HTML, the PDF and the Markdown; hostile names in it are text."""
    from forensics.report.html import render_html
    from forensics.report.markdown import render_markdown
    from forensics.report.pdf import NoFetch, render_pdf
    from forensics.report.view import build_view

    doc = make_doc("incident")
    (other,) = build_view(doc).other_findings.body
    (finding,) = [f for f in doc["findings"] if f["id"] == other.id]
    e = finding["evidence"][0]
    e.update(member="ring/cgroup/samples.jsonl", locator="line 9",
             derived_from={"member": "ring/segments/seg-7.jsonl.gz", "segment": "seg-7.jsonl.gz", "line": 47})
    said = "line 9: rebuilt from ring/segments/seg-7.jsonl.gz line 47 (sealed segment, segment not in the manifest)"

    html = render_html(doc, "a4")
    row = html.split(f'<tr id="finding-{other.id}">', 1)[1].split("</tr>", 1)[0]
    assert said in _html_text(row), _html_text(row)
    assert _packed(said) in _packed(pdftext(render_pdf(html, NoFetch())))

    md = render_markdown(doc)
    (line,) = [x for x in md.splitlines() if x.startswith(f"| {other.id} |")]
    assert line.endswith("| `ring/cgroup/samples.jsonl` `line 9`; `line 9`: rebuilt from "
                         "`ring/segments/seg-7.jsonl.gz` line 47 (sealed segment, segment not in the manifest) |"), line

    e["derived_from"]["member"] = "ring/segments/<img src=x onerror=alert(1)>|x"
    html, md = render_html(doc, "a4"), render_markdown(doc)
    row = html.split(f'<tr id="finding-{other.id}">', 1)[1].split("</tr>", 1)[0]
    assert "<img src=x" not in row and "&lt;img src=x onerror=alert(1)&gt;" in row
    (line,) = [x for x in md.splitlines() if x.startswith(f"| {other.id} |")]
    assert "rebuilt from `ring/segments/<img src=x onerror=alert(1)>\\|x` line 47" in line  # one cell: | escaped
