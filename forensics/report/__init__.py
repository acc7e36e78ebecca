"""Reports from the analysis JSON document (docs/analysis-format.md): HTML, PDF, Markdown, JSON.

::

    analysis dict --build_view--> ReportView --report.html.j2 + charts--> HTML --weasyprint--> PDF
                                              \\--markdown.py--> Markdown
    analysis dict --json.dumps(sort_keys)--> JSON

Renderers know the analysis document and nothing else. :func:`render` writes the requested
formats and returns their paths; every failure is a :class:`forensics.errors.ReportError`.
weasyprint and matplotlib are imported only when a PDF or a chart is made.
"""

from __future__ import annotations

from forensics.report.outputs import FORMATS, output_paths, render

__all__ = ["FORMATS", "output_paths", "render"]
