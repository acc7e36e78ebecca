"""Charts and page one that show the evidence (issue 12), checked on the sample bundles as a
reader would: the analysis JSON's container series sit on one time base, the throttling chart is
continuous, the OOM victim's chart shows its limit and the kill, tick labels never repeat, each
finding is marked on its own chart, idle GPUs get no chart, the timeline is inline, node facts
are on page one, and next steps and incidents render when the document has them.
"""

from __future__ import annotations

import copy
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from forensics.report import render_text
from forensics.report.charts import ChartSpec, Line, Panel, render_svg
from forensics.report.html import render_html_view
from forensics.report.markdown import render_markdown
from forensics.report.view import build_view
from tests.support.env import need

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "sample_bundles"
CLOCK = re.compile(r"^\d\d:\d\d:\d\d$")
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def docs() -> dict[str, dict[str, Any]]:
    from forensics.analysis import analyze_bundles

    bundles = sorted(SAMPLES.glob("*.tgz"))
    need(bool(bundles), f"no sample bundles in {SAMPLES}")
    # relative, as a user types it: the document keeps the path as given
    return {b.stem: analyze_bundles([os.path.relpath(b)]) for b in bundles}


@pytest.fixture(scope="module")
def htmls(docs: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {stem: render_html_view(build_view(doc)) for stem, doc in docs.items()}


def _doc(docs: dict[str, dict[str, Any]], stem: str) -> dict[str, Any]:
    need(stem in docs, f"sample bundle {stem}.tgz is missing")
    return docs[stem]


def _container(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in doc["containers"] if c["name"] == name)


def _svgs(html: str) -> dict[str, ET.Element]:
    """aria-label -> parsed inline <svg> of every chart in the page."""
    out = {}
    for match in re.finditer(r"<svg class=\"chart\".*?</svg>", html, re.S):
        root = ET.fromstring(match.group(0))
        out[root.get("aria-label") or ""] = root
    return out


def _texts(root: ET.Element) -> list[str]:
    return ["".join(el.itertext()).strip() for el in root.iter(f"{SVG}text")]


class TestOneTimeBase:
    def test_no_two_points_of_a_container_series_within_a_tick(self, docs: dict[str, dict[str, Any]]) -> None:
        for stem, doc in docs.items():
            for c in doc["containers"]:
                t = c["series"]["t"]
                gaps = [b - a for a, b in zip(t, t[1:], strict=False)]
                assert all(g > 0.1 for g in gaps), (stem, c["name"], min(gaps))

    def test_throttling_ratio_has_no_null_between_two_readings(self, docs: dict[str, dict[str, Any]]) -> None:
        loader = _container(_doc(docs, "cpu-throttled-loader"), "loader")
        ratio = loader["series"]["cpu_throttled_ratio"]
        known = [i for i, v in enumerate(ratio) if v is not None]
        assert len(known) >= 10
        assert all(ratio[i] is not None for i in range(known[0], known[-1] + 1)), ratio


class TestOomChart:
    def test_peak_is_the_cgroup_and_oom_record_not_the_last_sample(self, docs: dict[str, dict[str, Any]]) -> None:
        etl = _container(_doc(docs, "memcg-oom"), "etl")
        assert etl["memory_limit_bytes"] == 32 << 20
        assert etl["memory_peak_bytes"] == 32 << 20  # the kernel's "usage 32768kB" at the kill
        assert max(v for v in etl["series"]["memory_bytes"] if v is not None) < 1 << 20

    def test_victim_chart_has_its_limit_and_the_kill(self, docs: dict[str, dict[str, Any]], htmls: dict[str, str]) -> None:
        doc = _doc(docs, "memcg-oom")
        view = build_view(doc)
        etl = next(c for c in view.containers.all_shown if c.name == "etl")
        assert etl.chart is not None
        oom = next(f for f in etl.findings if f.kind == "oom-kill")
        assert oom.id in {m.label for m in etl.chart.markers}
        texts = _texts(_svgs(htmls["memcg-oom"])[etl.chart.chart_id])
        assert "limit 32.0 MiB" in texts
        assert f"OOM kill {oom.id} at 32.0 MiB" in texts
        assert "32.0 MiB / 32.0 MiB" in re.sub(r"<[^>]+>", "", htmls["memcg-oom"])


class TestTicksAndMarkers:
    def test_tick_labels_never_repeat(self, htmls: dict[str, str]) -> None:
        for stem, html in htmls.items():
            for chart_id, root in _svgs(html).items():
                clocks = [t for t in _texts(root) if CLOCK.match(t)]
                assert len(clocks) == len(set(clocks)), (stem, chart_id, clocks)

    def test_one_sample_is_a_point_with_distinct_ticks(self) -> None:
        t0 = 1796021960.4
        spec = ChartSpec("one", "one", (Panel("Memory", "KiB", (Line("used", (t0,), (604.0,), True),)),))
        root = ET.fromstring(render_svg(spec))
        clocks = [t for t in _texts(root) if CLOCK.match(t)]
        assert len(clocks) >= 2 and len(clocks) == len(set(clocks)), clocks
        # the lone value is drawn as a marker (a <use> of a marker path), not an invisible line
        assert any(True for _ in root.iter(f"{SVG}use"))

    def test_each_finding_is_marked_on_the_charts_of_its_subjects(self, docs: dict[str, dict[str, Any]]) -> None:
        for stem, doc in docs.items():
            view = build_view(doc)
            for item in (*view.gpus.all_shown, *view.containers.all_shown):
                if item.chart is None:
                    continue
                marked = {m.label for m in item.chart.markers}
                for fid in item.finding_ids:
                    assert fid in marked or fid in item.chart_note, (stem, item.label, fid)

    def test_throttling_finding_marked_on_the_throttled_container(self, docs: dict[str, dict[str, Any]]) -> None:
        view = build_view(_doc(docs, "cpu-throttled-loader"))
        loader = next(c for c in view.containers.all_shown if c.name == "loader")
        throttling = next(f for f in loader.findings if f.kind == "cpu-throttling")
        assert loader.chart is not None and throttling.id in {m.label for m in loader.chart.markers}

    def test_no_chart_for_an_uncited_gpu_or_an_empty_series(self, docs: dict[str, dict[str, Any]]) -> None:
        for stem, doc in docs.items():
            view = build_view(doc)
            cited = {s.id for f in view.findings for s in f.subjects if s.type in ("gpu", "mig")}
            for g in view.gpus.all_shown:
                assert (g.chart is not None) <= (g.uuid in cited), (stem, g.label)
            for c in view.containers.all_shown:
                for panel in c.chart.panels if c.chart else ():
                    assert any(v is not None for line in panel.lines for v in line.values) or panel.points, (
                        stem, c.label, panel.title)
        assert not build_view(_doc(docs, "clean-host")).gpus.body[0].chart


class TestPageOne:
    def test_timeline_svg_inline_near_the_top(self, htmls: dict[str, str]) -> None:
        html = htmls["cpu-throttled-loader"]
        assert 'aria-label="timeline"' in html
        assert html.index('id="timeline"') < html.index('id="chain"')
        timeline = _svgs(html)["timeline"]
        labels = _texts(timeline)
        assert "container loader" in labels and "GPU 1" in labels
        assert not re.search(r'(?:href|src)="(?!#)', html)  # still one self-contained file

    def test_node_facts_before_the_verdict(self, htmls: dict[str, str]) -> None:
        html = htmls["xid-fault"]
        head = html[: html.index('id="verdict"')]
        for fact in ("550.54.15", "12.4", "6.18.44-fc-v657", "NVIDIA H100 80GB HBM3", "1652923000001", "VBIOS", "MIG"):
            assert fact in head, fact

    def test_bundle_path_as_given(self, docs: dict[str, dict[str, Any]], htmls: dict[str, str]) -> None:
        given = os.path.relpath(SAMPLES / "memcg-oom.tgz")
        assert _doc(docs, "memcg-oom")["bundles"][0]["path"] == given
        assert given in htmls["memcg-oom"]
        if not given.startswith("/"):
            assert str(ROOT) not in htmls["memcg-oom"]

    def test_sources_not_expected_are_not_limits(self, docs: dict[str, dict[str, Any]], htmls: dict[str, str]) -> None:
        view = build_view(_doc(docs, "cpu-throttled-loader"))
        kube = next(c for c in view.collectors.all_shown if c.name == "kubernetes")
        assert kube.status == "unavailable" and not kube.expected
        assert kube not in view.collector_problems
        assert "not expected on this node" in htmls["cpu-throttled-loader"]
        verdict = htmls["cpu-throttled-loader"].split('id="verdict"')[1].split("</section>")[0]
        assert "kubernetes" not in verdict

    def test_finding_text_once(self, docs: dict[str, dict[str, Any]], htmls: dict[str, str]) -> None:
        doc = _doc(docs, "cpu-throttled-loader")
        html = htmls["cpu-throttled-loader"]
        for f in doc["findings"]:
            escaped = f["summary"].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            assert html.count(escaped) <= 1, f["id"]


def _with_trust_fields(doc: dict[str, Any]) -> dict[str, Any]:
    """The document as the analysis adds next steps, before-capture times and incidents."""
    doc = copy.deepcopy(doc)
    first = doc["findings"][0]
    first["next_step"] = "Raise the CPU quota of loader or find what spins"
    first["before_capture_s"] = 420.0
    doc["incidents"] = [
        {"id": "I1", "relevance": "window", "severity": "high", "headline": "Loader starved",
         "culprits": [], "victims": [], "parties": [], "impact": "loader throttled",
         "start": first["start"], "end": first["end"], "before_capture_s": None,
         "findings": [first["id"]], "kinds": [first["kind"]], "next_step": "Raise the CPU quota"},
        {"id": "I2", "relevance": "history", "severity": "low", "headline": "Old pressure",
         "culprits": [], "victims": [], "parties": [], "impact": "", "start": first["start"],
         "end": first["start"], "before_capture_s": 420.0, "findings": [doc["findings"][-1]["id"]],
         "kinds": [], "next_step": ""},
    ]
    return doc


class TestTrustFields:
    def test_next_step_incidents_and_before_capture_render_in_every_format(self, docs: dict[str, dict[str, Any]]) -> None:
        doc = _with_trust_fields(_doc(docs, "cpu-throttled-loader"))
        view = build_view(doc)
        html, md, text = render_html_view(view), render_markdown(doc), render_text(doc)
        for out in (html, md, text):
            assert "Raise the CPU quota of loader or find what spins" in out
            assert "before capture (7 min earlier)" in out
        for out in (html, md):
            assert "Loader starved" in out and "Old pressure" in out
        assert "Incidents (most relevant first):" in text

    def test_absent_fields_render_nothing(self, docs: dict[str, dict[str, Any]]) -> None:
        doc = copy.deepcopy(_doc(docs, "busy-node" if "busy-node" in docs else "cpu-throttled-loader"))
        doc.pop("incidents", None)
        for f in doc["findings"]:
            f.pop("next_step", None)
            f.pop("before_capture_s", None)
        html = render_html_view(build_view(doc))  # a document of an older analysis still renders
        assert "Next step" not in html and 'id="incidents"' not in html
        assert 'class="before"' not in html
