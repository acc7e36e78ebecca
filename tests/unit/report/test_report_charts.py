"""SVG charts (forensics/report/charts.py): valid, inert SVG; escaped labels; bounded size."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forensics.errors import ReportError
from forensics.report.charts import (
    MAX_LABEL_CHARS,
    ChartSpec,
    Lane,
    LaneItem,
    Line,
    Marker,
    Panel,
    TimelineSpec,
    downsample,
    render_svg,
    render_timeline_svg,
)

T0 = 1764424800.0
T = tuple(T0 + i for i in range(300))


def _spec(label: str = "GPU utilization", chart_id: str = "gpu-0") -> ChartSpec:
    values = tuple(50.0 + (i % 20) for i in range(300))
    return ChartSpec(
        chart_id,
        "GPU 0",
        (
            Panel(
                "Utilization",
                "%",
                (Line(label, T, values, True), Line("_hidden? no", T, values)),
                y_max=105.0,
            ),
            Panel(
                "Memory",
                "GiB",
                (Line("used", T, tuple(None if i < 10 else 20.0 for i in range(300))),),
                reference=80.0,
                reference_label="total 80.0 GiB",
            ),
        ),
        window=(T0 + 100, T0 + 200),
        markers=(Marker(T0 + 100, "F1", "high"), Marker(T0 + 104, "F2", "critical")),
    )


def _texts(svg: str) -> list[str]:
    root = ET.fromstring(svg)
    return ["".join(el.itertext()) for el in root.iter("{http://www.w3.org/2000/svg}text")]


class TestRenderSvg:
    def test_is_one_inline_svg_element(self) -> None:
        svg = render_svg(_spec())
        assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
        assert "<?xml" not in svg and "<!DOCTYPE" not in svg
        root = ET.fromstring(svg)
        assert root.get("class") == "chart"

    def test_no_script_no_style_no_external_reference(self) -> None:
        svg = render_svg(_spec())
        assert "<script" not in svg and "<style" not in svg
        assert not re.search(r'href="(?!#)', svg)
        assert "url(#" in svg or 'href="#' in svg  # internal references still resolve (clip paths)

    def test_ids_are_prefixed_per_chart_and_references_follow(self) -> None:
        svg = render_svg(_spec(chart_id="container-3"))
        ids = re.findall(r'id="([^"]+)"', svg)
        assert ids and all(i.startswith("container-3-") for i in ids)
        refs = re.findall(r'(?:url\(|href=")#([^)"]+)', svg)
        assert refs and set(refs) <= set(ids)

    def test_labels_markers_and_titles_are_text(self) -> None:
        texts = _texts(render_svg(_spec()))
        assert "Utilization" in texts and "Memory" in texts
        assert "F1" in texts and "F2" in texts
        assert "total 80.0 GiB" in texts
        assert "_hidden? no" in "".join(texts)  # matplotlib would drop a "_" label from the legend

    @pytest.mark.parametrize(
        "label",
        [
            "<img src=file:///etc/passwd>",
            "</style><script>alert(1)</script>",
            "{{ 7*7 }}",
            "$\\alpha$ & $x^2$",
        ],
    )
    def test_hostile_labels_are_escaped_text_not_markup_or_math(self, label: str) -> None:
        svg = render_svg(_spec(label=label))
        assert "<img" not in svg and "<script" not in svg
        shown = label if len(label) <= MAX_LABEL_CHARS else label[: MAX_LABEL_CHARS - 1] + "…"
        assert shown in _texts(svg)  # verbatim, so $...$ was not typeset as math

    def test_empty_chart_is_a_report_error(self) -> None:
        with pytest.raises(ReportError):
            render_svg(ChartSpec("x", "x", ()))

    def test_all_unknown_values_still_draw(self) -> None:
        spec = ChartSpec("x", "x", (Panel("p", "%", (Line("l", T, tuple(None for _ in T)),)),))
        assert render_svg(spec).startswith("<svg")


class TestDownsample:
    def test_short_series_unchanged(self) -> None:
        assert downsample([1.0, 2.0], [3.0, None]) == ([1.0, 2.0], [3.0, None])

    @given(
        st.lists(st.one_of(st.none(), st.floats(0, 100)), min_size=0, max_size=3000),
        st.integers(10, 700),
    )
    def test_keeps_peak_and_bounds_length(
        self, values: list[float | None], max_points: int
    ) -> None:
        t = [float(i) for i in range(len(values))]
        out_t, out_v = downsample(t, values, max_points)
        assert len(out_t) == len(out_v) <= max(max_points, 0) or len(values) <= max_points
        assert len(out_t) <= max_points
        known = [x for x in values if x is not None]
        kept = [x for x in out_v if x is not None]
        assert (max(kept) if kept else None) == (max(known) if known else None)
        assert out_t == sorted(out_t)


class TestCaptureWindow:
    """History before the capture (the flight recorder's ring) is set apart from the live capture."""

    @staticmethod
    def _ids(svg: str) -> set[str]:
        return {el.get("id", "") for el in ET.fromstring(svg).iter()}

    def test_history_before_the_capture_is_hatched_and_the_start_is_a_labelled_line(self) -> None:
        spec = ChartSpec("gpu-0", "GPU 0", _spec().panels, capture=(T0 + 200, T0 + 400))
        svg = render_svg(spec)
        ids = self._ids(svg)
        assert {"gpu-0-history-0", "gpu-0-history-1", "gpu-0-capture-start-0", "gpu-0-capture-start-1"} <= ids
        assert {"gpu-0-history-label", "gpu-0-capture-label"} <= ids
        assert "history (recorder)" in _texts(svg) and "capture" in _texts(svg)
        hatch = next(el for el in ET.fromstring(svg).iter() if el.get("id") == "gpu-0-history-0")
        assert "url(#gpu-0-" in ET.tostring(hatch, encoding="unicode")  # filled with the hatch pattern

    def test_a_chart_of_the_capture_alone_has_no_history_marks(self) -> None:
        for capture in ((T0, T0 + 400), (T0 - 50, T0 + 400), None):
            svg = render_svg(ChartSpec("gpu-0", "GPU 0", _spec().panels, capture=capture))
            assert not any("history" in i or "capture-" in i for i in self._ids(svg)), capture
            assert "history (recorder)" not in _texts(svg)


def test_report_charts_mark_the_history_before_the_capture() -> None:
    """Through the document: a bundle whose capture began halfway through the GPU series draws
    the first half as history on the GPU and container charts; the whole series inside the
    capture draws none."""
    from forensics.report.html import render_html
    from tests.support.report_docs import T0 as DOC_T0
    from tests.support.report_docs import build_incident_doc, iso

    doc = build_incident_doc(seconds=300)
    plain = render_html(doc)
    assert "history (recorder)" not in plain
    doc["bundles"][0]["captured_start"] = iso(DOC_T0 + 150)
    html = render_html(doc)
    charts = re.findall(r'id="([A-Za-z0-9_-]+)-capture-start-0"', html)
    assert len(charts) >= 2 and any(c.startswith("gpu") for c in charts), charts
    assert html.count("history (recorder)") == len(charts)
    assert html.count("Hatched: history before the capture") == len(charts)
    assert "Hatched: history" not in plain


@pytest.mark.parametrize(("start_s", "anchor"), [(0.0, "start"), (900.0, "start"), (1500.0, None), (1800.0, "end"),
                                                (1830.0, "end")])
def test_the_capture_window_label_stays_on_the_timeline(start_s: float, anchor: str | None) -> None:
    """A capture after 30 minutes of the recorder's history is a sliver at the timeline's right
    end: its "capture window" label then ends at the window's end instead of starting at its start
    and running off the figure (cut to "captur" in the PDF)."""
    lanes = (Lane("GPU 0", "gpu", (LaneItem(T0, "F1", "finding", "high", T0 + 1800),)),
             Lane("container a", "container", (LaneItem(T0 + 100, "started", "container-start"),)))
    svg = render_timeline_svg(TimelineSpec("timeline", lanes, window=(T0 + start_s, T0 + start_s + 30)))
    width = float(ET.fromstring(svg).get("viewBox", "").split()[2])
    text = next(el for el in ET.fromstring(svg).iter() if el.tag.endswith("text")
                and (el.text or "").strip() == "capture window")
    drawn = re.search(r"text-anchor: (start|end)", text.get("style", ""))
    assert drawn is not None and drawn[1] == (anchor or drawn[1])  # from the start where it fits
    x = float(text.get("x", ""))
    words = 6.5 * 0.6 * len("capture window ")  # DejaVu Sans at 6.5 pt: about 0.6 em a character
    assert (x if drawn[1] == "end" else x + words) <= width  # inside the figure, not cut off
