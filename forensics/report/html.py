"""HTML report: one self-contained file (inline CSS and SVG charts, no script, no external fetch).

Source: the analysis document (docs/analysis-format.md) through :func:`view.build_view`; template
``report_templates/report.html.j2`` (the page, its header and footer) with one
``report_templates/sections/<anchor>.html.j2`` per section of :data:`sections.SECTIONS`, in that
order, and ``report.css`` inlined. The same HTML, with its print
rules, is what :mod:`forensics.report.pdf` lays out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from forensics.errors import ReportError
from forensics.report import charts as charts_module
from forensics.report.environment import make_environment, read_stylesheet
from forensics.report.records import ReportView
from forensics.report.sections import SECTIONS, toc
from forensics.report.view import build_view

__all__ = ["PAPER_SIZES", "render_html", "render_html_view"]

#: ``--paper`` values -> CSS ``@page size``.
PAPER_SIZES = {"a4": "A4", "letter": "letter"}


def page_size(paper: str) -> str:
    """The CSS page size for ``paper`` (``a4`` or ``letter``); :class:`ReportError` otherwise."""
    try:
        return PAPER_SIZES[paper.lower()]
    except KeyError:
        raise ReportError(
            f"unknown paper size {paper!r} (use one of: {', '.join(PAPER_SIZES)})"
        ) from None


def render_html_view(view: ReportView, paper: str = "a4") -> str:
    """Render a prepared view to the HTML document (charts drawn here)."""
    from markupsafe import Markup

    svgs: dict[str, Any] = {
        spec.chart_id: Markup(charts_module.render_svg(spec)) for spec in view.charts
    }
    if view.timeline is not None:
        svgs[view.timeline.chart_id] = Markup(charts_module.render_timeline_svg(view.timeline))
    template = make_environment().get_template("report.html.j2")
    hosts = {b.host for b in view.bundles if b.host}
    try:
        return template.render(
            v=view,
            sections=SECTIONS,
            toc=toc(view),
            css=Markup(read_stylesheet()),
            page_size=page_size(paper),
            charts=svgs,
            multi_node=len(hosts) > 1,
            multi_bundle=len(view.bundles) > 1,
        )
    except ReportError:
        raise
    except Exception as exc:  # a template error is a bug, but name it as a report failure
        raise ReportError(
            f"HTML report could not be rendered: {type(exc).__name__}: {exc}"
        ) from exc


def render_html(doc: Mapping[str, Any], paper: str = "a4") -> str:
    """The analysis document -> the HTML report as a string."""
    return render_html_view(build_view(doc), paper)
