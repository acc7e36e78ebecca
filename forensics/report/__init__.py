"""Reports from the analysis JSON document (docs/analysis-format.md): HTML, PDF, Markdown, JSON
and the terminal summary.

::

    analysis dict --build_view--> ReportView --report.html.j2 + charts--> HTML --weasyprint--> PDF
                                             \\--markdown.py--> Markdown
                                             \\--text.py--> terminal summary
    analysis dict --json.dumps(sort_keys)--> JSON

Renderers know the analysis document (through :mod:`forensics.document_format`) and nothing
else: this package never imports :mod:`forensics.analysis`. The sections of the HTML and
Markdown reports, and the HTML table of contents, come from one list (:mod:`.sections`).
:func:`render` writes the requested formats and returns their paths; :func:`render_text` returns
the terminal summary; every failure is a :class:`forensics.errors.ReportError`. weasyprint and
matplotlib are imported only when a PDF or a chart is made.
"""

from __future__ import annotations

from forensics.report.outputs import FORMATS, output_paths, render
from forensics.report.text import printable, render_text

__all__ = ["FORMATS", "output_paths", "printable", "render", "render_text"]
