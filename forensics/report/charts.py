"""Time-series charts as inline SVG, drawn server-side with matplotlib's SVG backend.

The chart specs are plain frozen dataclasses built by :mod:`forensics.report.view` from the
analysis document's ``series`` (``gpus[].series``, ``containers[].series``); this module turns one
spec into an SVG string. matplotlib is imported lazily (only when a chart is drawn), without
pyplot, so no GUI backend and no global figure state is involved.

Safety: every label can come from a bundle. Text is written as SVG ``<text>`` by matplotlib,
which escapes it; mathtext is disabled (``text.parse_math``) so ``$...$`` in a container name is
shown, not interpreted, and labels matplotlib would hide (leading ``_``) are kept visible. The
SVG's ids are prefixed with the chart id so several charts can live in one HTML document.
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

__all__ = ["ChartSpec", "Line", "Marker", "Panel", "downsample", "render_svg"]

#: Most points drawn per line; longer series are reduced to the max of each bucket (peaks kept).
MAX_POINTS = 600
#: Longest label kept in a legend.
MAX_LABEL_CHARS = 32
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


def _label(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > MAX_LABEL_CHARS:
        text = text[: MAX_LABEL_CHARS - 1] + "…"
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


def _draw_panel(ax: Any, panel: Panel, spec: ChartSpec, dates: Any) -> None:
    from matplotlib import ticker

    if spec.window is not None:
        start, end = (_num(dates, x) for x in spec.window)
        ax.axvspan(start, end, color=WINDOW_COLOUR, zorder=0, lw=0)
    for i, line in enumerate(panel.lines):
        xs, ys = downsample(line.t, line.values)
        ax.plot(
            [_num(dates, x) for x in xs],
            [float("nan") if y is None else y for y in ys],
            label=_label(line.label),
            color=PALETTE[i % len(PALETTE)],
            lw=2.4 if line.emphasis else 1.1,
            zorder=2 if line.emphasis else 3,  # thin lines on top stay visible where they overlap
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
    if panel.reference is not None:
        known = [v for line in panel.lines for v in line.values if v is not None]
        top = max([panel.reference * 1.08, *(v * 1.05 for v in known)])
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
    # With no writable config directory (HOME read-only, another user's HOME under sudo -u)
    # matplotlib logs two warnings to stderr and carries on with a temporary one: the report is
    # unaffected, and the CLI's stderr stays one line per problem.
    logging.getLogger("matplotlib").setLevel(logging.ERROR)
    try:
        import matplotlib
        from matplotlib import dates
        from matplotlib.backends.backend_svg import FigureCanvasSVG
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise ReportError(f"matplotlib is not available ({exc}): pip install matplotlib") from exc

    rc: dict[str, Any] = {
        "svg.fonttype": "none",
        "svg.hashsalt": "gpuforensics",
        "text.parse_math": False,
        "font.family": "DejaVu Sans",
        "axes.unicode_minus": False,
        "path.simplify": True,
    }
    try:
        with matplotlib.rc_context(rc):  # type: ignore[arg-type]
            height = 0.7 + 1.25 * len(spec.panels)
            fig = Figure(figsize=(7.6, height), dpi=72)
            FigureCanvasSVG(fig)
            axes = fig.subplots(len(spec.panels), 1, sharex=True, squeeze=False)[:, 0]
            for ax, panel in zip(axes, spec.panels, strict=True):
                _draw_panel(ax, panel, spec, dates)
            locator = dates.AutoDateLocator(minticks=4, maxticks=9)  # type: ignore[no-untyped-call]
            axes[-1].xaxis.set_major_locator(locator)
            axes[-1].xaxis.set_major_formatter(dates.DateFormatter("%H:%M:%S", tz="UTC"))  # type: ignore[no-untyped-call]
            axes[-1].set_xlabel("time (UTC)", fontsize=8)
            _label_markers(axes[0], spec.markers, dates)
            fig.subplots_adjust(
                left=0.08, right=0.72, top=1 - 0.3 / height, bottom=0.5 / height, hspace=0.5
            )
            buf = io.StringIO()
            fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    except ReportError:
        raise
    except Exception as exc:  # matplotlib raises many types; report which chart failed
        raise ReportError(f"chart {spec.chart_id} could not be drawn: {exc}") from exc
    return _clean_svg(buf.getvalue(), spec.chart_id)
