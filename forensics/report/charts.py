"""Time-series charts as inline SVG, drawn server-side with matplotlib's SVG backend.

The chart specs are plain frozen dataclasses built by :mod:`forensics.report.view` from the
analysis document's ``series`` (``gpus[].series``, ``containers[].series``); this module turns one
spec into an SVG string. matplotlib is imported lazily (only when a chart is drawn), without
pyplot, so no GUI backend and no global figure state is involved.

Safety: every label can come from a bundle. Text is written as SVG ``<text>`` by matplotlib,
which escapes it; mathtext is disabled (``text.parse_math``) so ``$...$`` in a container name is
shown, not interpreted, and labels matplotlib would hide (leading ``_``) are kept visible. The
SVG's ids are prefixed with the chart id so several charts can live in one HTML document.

Why this module is long: it is the one place that knows how matplotlib draws the report's
figures. Both figure shapes (series panels and the timeline's lanes) share the same private
helpers for the time axis, labels, the history band and capture line, lazy matplotlib set-up and
the SVG clean-up that prefixes ids; splitting the two shapes apart would turn those helpers into a
public API whose only users are the two halves, and the ids and styling would drift apart.
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from forensics.errors import ReportError

__all__ = [
    "ChartSpec",
    "Lane",
    "LaneItem",
    "Line",
    "Marker",
    "Panel",
    "TimelineSpec",
    "downsample",
    "padded_span",
    "render_svg",
    "render_timeline_svg",
]

#: Most points drawn per line; longer series are reduced to the max of each bucket (peaks kept).
MAX_POINTS = 600
#: Longest label kept in a legend.
MAX_LABEL_CHARS = 32
#: Longest lane name of the timeline (the left margin holds about this many characters).
LANE_LABEL_CHARS = 28
#: Okabe-Ito palette (readable for colour-blind readers and in greyscale print).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
SEVERITY_COLOURS = {
    "critical": "#8B0000",
    "high": "#C62828",
    "medium": "#E07B00",
    "low": "#1565C0",
    "info": "#607D8B",
}
WINDOW_COLOUR = "#FDE2E1"
#: Before the capture started (history the flight recorder kept): a grey ground, hatched so it
#: reads in greyscale print; the capture's start is a solid line (findings' starts are dashed).
HISTORY_COLOUR = "#EDEDED"
CAPTURE_LINE_COLOUR = "#37474F"


@dataclass(frozen=True)
class Line:
    """One series: ``values`` aligned with ``t`` (unix seconds); ``None`` is a gap."""

    label: str
    t: tuple[float, ...]
    values: tuple[float | None, ...]
    emphasis: bool = False


@dataclass(frozen=True)
class Panel:
    """One y axis: its lines, an optional horizontal reference (total memory, limit)."""

    title: str
    y_label: str
    lines: tuple[Line, ...]
    y_max: float | None = None
    reference: float | None = None
    reference_label: str = ""
    #: Single events on this panel's axes: (unix seconds, y value, label), drawn as a cross.
    points: tuple[tuple[float, float, str], ...] = ()
    #: Horizontal bands across the time axis: (low, high, label), a workload's normal range (its
    #: baseline, forensics.analysis.baseline), drawn as a shaded strip behind the lines.
    bands: tuple[tuple[float, float, str], ...] = ()


@dataclass(frozen=True)
class Marker:
    """A finding marked on the time axis at its start."""

    t: float
    label: str
    severity: str


@dataclass(frozen=True)
class ChartSpec:
    """A stack of panels sharing one time axis, with the incident window and finding markers."""

    chart_id: str
    title: str
    panels: tuple[Panel, ...]
    window: tuple[float, float] | None = None
    markers: tuple[Marker, ...] = ()
    #: the live capture (start, end): samples before its start are history (the flight
    #: recorder's ring), drawn on a hatched grey ground left of a solid "capture" line
    capture: tuple[float, float] | None = None

    def history_until(self) -> float | None:
        """The capture's start when the chart shows samples before it, else None."""
        if self.capture is None:
            return None
        times = [x for p in self.panels for line in p.lines for x in line.t] + \
            [pt[0] for p in self.panels for pt in p.points]
        return self.capture[0] if times and min(times) < self.capture[0] else None

    def span(self) -> tuple[float, float]:
        """The time axis: every sample, point and marker on it, at least :data:`MIN_SPAN_S` wide."""
        times = [x for p in self.panels for line in p.lines for x in line.t]
        times += [pt[0] for p in self.panels for pt in p.points] + [m.t for m in self.markers]
        return padded_span(times)


#: The narrowest time axis drawn: one sample (or several within a second) still gets distinct
#: tick labels (``HH:MM:SS`` a few seconds apart), never seven labels of the same second.
MIN_SPAN_S = 10.0


def padded_span(times: Sequence[float]) -> tuple[float, float]:
    """(start, end) around ``times``: 3 % margin, at least :data:`MIN_SPAN_S` wide."""
    if not times:
        return 0.0, MIN_SPAN_S
    lo, hi = min(times), max(times)
    pad = max((hi - lo) * 0.03, (MIN_SPAN_S - (hi - lo)) / 2)
    return lo - pad, hi + pad


@dataclass(frozen=True)
class LaneItem:
    """Something on a timeline lane: a finding (a bar from ``t`` to ``end``) or an event (a mark)."""

    t: float
    label: str
    kind: str  # "finding", or the document's timeline kind: oom-kill, xid, container-start, ...
    severity: str = "info"
    end: float | None = None


@dataclass(frozen=True)
class Lane:
    """One row of the cross-source timeline: a GPU, a container or pod, the kernel, the cluster."""

    label: str
    group: str  # gpu | container | pod | kernel | cluster | host
    items: tuple[LaneItem, ...]


@dataclass(frozen=True)
class TimelineSpec:
    """The whole story on one time axis: one lane per party, the capture window shaded."""

    chart_id: str
    lanes: tuple[Lane, ...]
    window: tuple[float, float] | None = None

    def span(self) -> tuple[float, float]:
        times = [x for lane in self.lanes for it in lane.items for x in (it.t, it.end or it.t)]
        if self.window is not None:
            times += list(self.window)
        return padded_span(times)


#: How each event kind is drawn on a lane: (matplotlib marker, colour, legend text).
EVENT_STYLES: dict[str, tuple[str, str, str]] = {
    "oom-kill": ("X", "#C62828", "OOM kill"),
    "xid": ("^", "#8B0000", "Xid"),
    "cuda-oom": ("v", "#E07B00", "CUDA out of memory"),
    "container-start": ("o", "#009E73", "started"),
    "container-exit": ("s", "#555555", "exited"),
}


def downsample(
    t: Sequence[float], values: Sequence[float | None], max_points: int = MAX_POINTS
) -> tuple[list[float], list[float | None]]:
    """Reduce a series to at most ``max_points`` buckets, keeping each bucket's maximum.

    The maximum (not the mean) keeps the spikes an investigator looks for; a bucket with no
    known value stays a gap.
    """
    n = min(len(t), len(values))
    if n <= max_points:
        return list(t[:n]), list(values[:n])
    size = -(-n // max_points)
    out_t: list[float] = []
    out_v: list[float | None] = []
    for start in range(0, n, size):
        bucket = [v for v in values[start : start + size] if v is not None]
        out_t.append(t[start])
        out_v.append(max(bucket) if bucket else None)
    return out_t, out_v


def _label(text: str, limit: int = MAX_LABEL_CHARS) -> str:
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    # matplotlib hides legend entries whose label starts with "_".
    return "\u2009" + text if text.startswith("_") else text


_ID_RE = re.compile(r'id="([^"]+)"')


def _prefix_ids(svg: str, prefix: str) -> str:
    """Make every ``id`` (and its ``#ref`` uses) unique to this chart."""
    ids = set(_ID_RE.findall(svg))
    if not ids:
        return svg

    def sub_id(match: re.Match[str]) -> str:
        return f'id="{prefix}-{match.group(1)}"'

    def sub_ref(match: re.Match[str]) -> str:
        name = match.group(2)
        return f"{match.group(1)}#{prefix}-{name}" if name in ids else match.group(0)

    svg = _ID_RE.sub(sub_id, svg)
    return re.sub(r'(url\(|href=")#([^)"]+)', sub_ref, svg)


def _clean_svg(svg: str, chart_id: str) -> str:
    start = svg.find("<svg")
    if start < 0:
        raise ReportError(f"chart {chart_id}: matplotlib produced no <svg> element")
    svg = svg[start:]
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, count=1, flags=re.S)
    # matplotlib's "*{stroke-linejoin...}" rule would apply to the whole HTML page once inlined.
    svg = re.sub(r"<style[^>]*>.*?</style>", "", svg, flags=re.S)
    svg = svg.replace("<svg ", f'<svg class="chart" role="img" aria-label="{chart_id}" ', 1)
    return _prefix_ids(svg, re.sub(r"[^A-Za-z0-9_-]", "_", chart_id))


def _draw_panel(ax: Any, panel: Panel, spec: ChartSpec, dates: Any, index: int = 0) -> None:
    from matplotlib import ticker

    history = spec.history_until()
    if history is not None:
        lo, _ = spec.span()
        band = ax.axvspan(_num(dates, lo), _num(dates, history), facecolor=HISTORY_COLOUR, edgecolor="#BDBDBD",
                          hatch="///", lw=0, zorder=0)
        band.set_gid(f"history-{index}")
        line = ax.axvline(_num(dates, history), color=CAPTURE_LINE_COLOUR, ls="-", lw=1.6, zorder=4)
        line.set_gid(f"capture-start-{index}")
    if spec.window is not None:
        start, end = (_num(dates, x) for x in spec.window)
        ax.axvspan(start, end, color=WINDOW_COLOUR, zorder=0, lw=0)
    for k, (lo, hi, text) in enumerate(panel.bands):
        colour = PALETTE[(len(panel.lines) + k) % len(PALETTE)]
        mid, half = (lo + hi) / 2, max((hi - lo) / 2, 1.5)  # a flat normal still shows as a strip
        strip = ax.axhspan(mid - half, mid + half, facecolor=colour, edgecolor=colour, alpha=0.35, lw=1.0,
                           ls="--", zorder=1, label=_label(text))
        strip.set_gid(f"baseline-{index}-{k}")
    for i, line in enumerate(panel.lines):
        xs, ys = downsample(line.t, line.values)
        # A known value with no known neighbour would draw nothing as a line: give it a dot.
        alone = [
            k
            for k, y in enumerate(ys)
            if y is not None
            and (k == 0 or ys[k - 1] is None)
            and (k == len(ys) - 1 or ys[k + 1] is None)
        ]
        ax.plot(
            [_num(dates, x) for x in xs],
            [float("nan") if y is None else y for y in ys],
            label=_label(line.label),
            color=PALETTE[i % len(PALETTE)],
            lw=2.4 if line.emphasis else 1.1,
            zorder=2 if line.emphasis else 3,  # thin lines on top stay visible where they overlap
            marker="o" if alone else None,
            markevery=alone or None,
            markersize=4,
        )
    for t, y, text in panel.points:
        x = _num(dates, t)
        ax.plot([x], [y], marker="X", ms=8, color=SEVERITY_COLOURS["high"], ls="none", zorder=7)
        ax.annotate(
            _label(text),
            xy=(x, y),
            xytext=(-6, -9),
            textcoords="offset points",
            ha="right",
            va="top",
            fontsize=7,
            color=SEVERITY_COLOURS["high"],
            zorder=7,
        )
    if not any(v is not None for line in panel.lines for v in line.values):
        ax.text(
            0.5,
            0.5,
            "no samples",
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=8,
            color="#777777",
        )
    if panel.reference is not None:
        ax.axhline(panel.reference, color="#444444", lw=0.9, ls=(0, (5, 3)), zorder=1)
        if panel.reference_label:
            ax.annotate(
                _label(panel.reference_label),
                xy=(0.005, panel.reference),
                xycoords=("axes fraction", "data"),
                xytext=(2, 2),
                textcoords="offset points",
                fontsize=7,
                color="#444444",
            )
    for marker in spec.markers:
        ax.axvline(
            _num(dates, marker.t),
            color=SEVERITY_COLOURS.get(marker.severity, "#607D8B"),
            lw=1.0,
            ls=(0, (2, 2)),
            zorder=4,
        )
    top = panel.y_max
    if panel.reference is not None or panel.points:
        known = [v for line in panel.lines for v in line.values if v is not None]
        known += [pt[1] for pt in panel.points]
        top = max([(panel.reference or 0.0) * 1.08, *(v * 1.05 for v in known)]) or None
    ax.set_ylim(bottom=0, top=top)
    ax.set_ylabel(panel.y_label, fontsize=8)
    # A text, not ax.set_title: title placement measures every tick label (slow, and not needed here).
    ax.text(
        0.0,
        1.035,
        panel.title,
        transform=ax.transAxes,
        fontsize=9,
        color="#222222",
        ha="left",
        va="bottom",
    )
    ax.yaxis.set_major_locator(ticker.MaxNLocator(nbins=5, min_n_ticks=3))
    ax.grid(True, color="#E3E3E3", lw=0.6)
    ax.tick_params(labelsize=7.5)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if panel.lines:
        ax.legend(
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize=7,
            frameon=False,
            borderaxespad=0,
            handlelength=1.6,
        )


def _label_markers(ax: Any, markers: Sequence[Marker], dates: Any) -> None:
    """Finding ids just inside the top of the first panel, staggered when close together."""
    if not markers:
        return
    lo, hi = ax.get_xlim()
    span = (hi - lo) or 1.0
    last_x: float | None = None
    level = 0
    for marker in sorted(markers, key=lambda m: m.t):
        x = _num(dates, marker.t)
        level = level + 1 if last_x is not None and (x - last_x) / span < 0.045 else 0
        last_x = x
        ax.annotate(
            marker.label,
            xy=(x, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(2, -2 - 9 * (level % 4)),
            textcoords="offset points",
            ha="left",
            va="top",
            fontsize=7,
            fontweight="bold",
            color=SEVERITY_COLOURS.get(marker.severity, "#607D8B"),
            bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.85},
            zorder=6,
        )


def _label_history(ax: Any, spec: ChartSpec, dates: Any) -> None:
    """"history (recorder)" left of the capture's start line and "capture" right of it, under
    the top of the first panel."""
    history = spec.history_until()
    if history is None:
        return
    x = _num(dates, history)
    for text, dx, ha in (("history (recorder)", -3, "right"), ("capture", 3, "left")):
        label = ax.annotate(text, xy=(x, 0.0), xycoords=("data", "axes fraction"), xytext=(dx, 2),
                            textcoords="offset points", ha=ha, va="bottom", fontsize=6.5,
                            color=CAPTURE_LINE_COLOUR, fontstyle="italic",
                            bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8},
                            zorder=6)
        label.set_gid("history-label" if dx < 0 else "capture-label")


def _time_axis(ax: Any, span: tuple[float, float], dates: Any) -> None:
    """The shared x axis over ``span`` with tick labels that never repeat: clock times within a
    day, dates with them across days (a day-spaced tick would otherwise read 00:00:00 each time)."""
    lo, hi = span
    ax.set_xlim(_num(dates, lo), _num(dates, hi))
    locator = dates.AutoDateLocator(minticks=3, maxticks=8)
    ax.xaxis.set_major_locator(locator)
    fmt = "%H:%M:%S" if hi - lo < 6 * 3600 else "%m-%d %H:%M"
    ax.xaxis.set_major_formatter(dates.DateFormatter(fmt, tz="UTC"))
    ax.set_xlabel("time (UTC)", fontsize=8)


def _num(dates: Any, unix: float) -> float:
    """Unix seconds -> matplotlib date number (days since matplotlib's epoch)."""
    return _epoch_offset(dates) + unix / 86400.0


_EPOCH_OFFSET: list[float] = []


def _epoch_offset(dates: Any) -> float:
    if not _EPOCH_OFFSET:
        _EPOCH_OFFSET.append(float(dates.date2num(datetime(1970, 1, 1, tzinfo=UTC))))
    return _EPOCH_OFFSET[0]


def render_svg(spec: ChartSpec) -> str:
    """Draw ``spec`` and return the ``<svg>`` element (no XML prolog), safe to inline."""
    if not spec.panels:
        raise ReportError(f"chart {spec.chart_id}: no panel to draw")
    matplotlib, dates, FigureCanvasSVG, Figure = _mpl()  # noqa: N806 - classes
    try:
        with matplotlib.rc_context(_RC):
            height = 0.7 + 1.25 * len(spec.panels)
            fig = Figure(figsize=(7.6, height), dpi=72)
            FigureCanvasSVG(fig)
            axes = fig.subplots(len(spec.panels), 1, sharex=True, squeeze=False)[:, 0]
            for index, (ax, panel) in enumerate(zip(axes, spec.panels, strict=True)):
                _draw_panel(ax, panel, spec, dates, index)
            _time_axis(axes[-1], spec.span(), dates)
            _label_markers(axes[0], spec.markers, dates)
            _label_history(axes[0], spec, dates)
            fig.subplots_adjust(
                left=0.08, right=0.72, top=1 - 0.3 / height, bottom=0.5 / height, hspace=0.5
            )
            svg = _svg_text(fig)
    except ReportError:
        raise
    except Exception as exc:  # matplotlib raises many types; report which chart failed
        raise ReportError(f"chart {spec.chart_id} could not be drawn: {exc}") from exc
    return _clean_svg(svg, spec.chart_id)


#: matplotlib settings of every chart: text stays text (escaped), no mathtext, stable ids.
_RC: dict[str, Any] = {
    "svg.fonttype": "none",
    "svg.hashsalt": "gpuforensics",
    "text.parse_math": False,
    "font.family": "DejaVu Sans",
    "axes.unicode_minus": False,
    "path.simplify": True,
}


def _svg_text(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    return buf.getvalue()


def _mpl() -> Any:
    """matplotlib, its dates module, the SVG canvas and Figure (imported lazily, without pyplot).

    With no writable config directory (HOME read-only, another user's HOME under sudo -u)
    matplotlib logs two warnings to stderr and carries on with a temporary one: the report is
    unaffected, and the CLI's stderr stays one line per problem."""
    logging.getLogger("matplotlib").setLevel(logging.ERROR)
    try:
        import matplotlib
        from matplotlib import dates
        from matplotlib.backends.backend_svg import FigureCanvasSVG
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise ReportError(f"matplotlib is not available ({exc}): pip install matplotlib") from exc
    return matplotlib, dates, FigureCanvasSVG, Figure


def _pack(findings: Sequence[LaneItem], sliver: float) -> dict[int, int]:
    """Sub-row of each finding bar in a lane (by ``id``): overlapping bars stack, never cover."""
    ends: list[float] = []
    out: dict[int, int] = {}
    for item in sorted(findings, key=lambda it: it.t):
        end = max(item.end or item.t, item.t + sliver) + 6 * sliver  # room for the next label
        row = next((k for k, e in enumerate(ends) if e <= item.t), len(ends))
        if row == len(ends):
            ends.append(end)
        else:
            ends[row] = end
        out[id(item)] = row
    return out


#: the share of the timeline's width right of a point that " capture window" needs to be read
#: there: the label is ~17 % of the axis wide (6.5 pt text on the 7.6 in figure's axes)
WINDOW_LABEL_ROOM = 0.2


def _label_window(ax: Any, window: tuple[float, float], span: tuple[float, float], dates: Any) -> None:
    """"capture window" at the bottom of the shaded window: from its start rightwards, or, where
    the window starts too near the axis' right end for the words to fit (a capture after a ring's
    history always does), ending at the window's end, so the label never runs off the figure."""
    lo, hi = span
    fits = (hi - window[0]) / max(hi - lo, 1e-9) >= WINDOW_LABEL_ROOM
    label = ax.text(
        _num(dates, window[0] if fits else window[1]), -0.68, " capture window" if fits else "capture window ",
        fontsize=6.5, color="#4A6A8A", va="bottom", ha="left" if fits else "right", zorder=1,
    )
    label.set_gid("window-label")


def render_timeline_svg(spec: TimelineSpec) -> str:
    """Draw the cross-source timeline and return its ``<svg>`` element, safe to inline.

    Lanes top to bottom in ``spec`` order; a finding is a bar from its start to its end (at least
    a sliver wide) labelled with its id in its severity's colour; an event is a mark whose shape
    says its kind (legend below the axis)."""
    if not spec.lanes:
        raise ReportError(f"timeline {spec.chart_id}: no lane to draw")
    matplotlib, dates, canvas_cls, figure_cls = _mpl()
    lo, hi = spec.span()
    n = len(spec.lanes)
    try:
        with matplotlib.rc_context(_RC):
            height = 1.15 + 0.34 * n
            fig = figure_cls(figsize=(7.6, height), dpi=72)
            canvas_cls(fig)
            ax = fig.add_subplot(1, 1, 1)
            if spec.window is not None:
                ax.axvspan(*(_num(dates, x) for x in spec.window), color="#EEF3FA", lw=0, zorder=0)
                _label_window(ax, spec.window, (lo, hi), dates)
            sliver = (hi - lo) / 150
            seen_kinds: dict[str, None] = {}
            for row, lane in enumerate(spec.lanes):
                y = n - 1 - row
                ax.axhline(y, color="#E3E3E3", lw=0.6, zorder=1)
                rows = _pack([it for it in lane.items if it.kind == "finding"], sliver)
                depth = max(rows.values(), default=0) + 1
                bar_h = 0.5 / depth
                for item in sorted(lane.items, key=lambda it: it.t):
                    x0 = _num(dates, item.t)
                    if item.kind == "finding":
                        end = max(item.end or item.t, item.t + sliver)
                        colour = SEVERITY_COLOURS.get(item.severity, "#607D8B")
                        bottom = y + 0.25 - (rows[id(item)] + 1) * bar_h
                        ax.broken_barh(
                            [(x0, _num(dates, end) - x0)], (bottom + 0.02, bar_h - 0.04),
                            facecolors=colour, alpha=0.85, zorder=3,
                        )
                        ax.annotate(
                            _label(item.label), xy=(x0, bottom + bar_h / 2), xytext=(-2, 0),
                            textcoords="offset points", fontsize=6, fontweight="bold",
                            color=colour, ha="right", va="center", zorder=5,
                        )
                    else:
                        marker, colour, _ = EVENT_STYLES.get(item.kind, ("D", "#607D8B", item.kind))
                        seen_kinds.setdefault(item.kind, None)
                        ax.plot([x0], [y], marker=marker, ms=6, color=colour, ls="none", zorder=4,
                                mec="white", mew=0.5)
            ax.set_ylim(-0.7, n - 0.3)
            ax.set_yticks(range(n))
            ax.set_yticklabels([_label(lane.label, LANE_LABEL_CHARS) for lane in reversed(spec.lanes)], fontsize=7.5)
            ax.tick_params(axis="x", labelsize=7.5)
            ax.tick_params(axis="y", length=0)
            for side in ("top", "right", "left"):
                ax.spines[side].set_visible(False)
            _time_axis(ax, (lo, hi), dates)
            if seen_kinds:
                from matplotlib.lines import Line2D

                handles = [
                    Line2D(
                        [], [], marker=EVENT_STYLES.get(k, ("D", "#607D8B", k))[0], ls="none",
                        color=EVENT_STYLES.get(k, ("D", "#607D8B", k))[1], label=EVENT_STYLES.get(k, ("D", "", k))[2],
                    )
                    for k in seen_kinds
                ]
                ax.legend(
                    handles=handles, loc="upper left", bbox_to_anchor=(0.0, -0.32 * 2.0 / height),
                    ncol=min(5, len(handles)), fontsize=7, frameon=False, borderaxespad=0,
                    handletextpad=0.3, columnspacing=1.2,
                )
            fig.subplots_adjust(left=0.24, right=0.98, top=1 - 0.12 / height, bottom=0.78 / height)
            svg = _svg_text(fig)
    except Exception as exc:  # matplotlib raises many types; report which chart failed
        raise ReportError(f"timeline {spec.chart_id} could not be drawn: {exc}") from exc
    return _clean_svg(svg, spec.chart_id)
