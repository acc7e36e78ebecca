"""The analysis document's contract (docs/analysis-format.md): what the analysis writes and the
report and the CLI read.

It holds the format name and version a document carries, the severities (worst first) findings
and verdicts use, and the output formats ``gpuforensics analyze -f`` accepts with their one way of
splitting ``-f html,PDF,markdown``. It sits at the bottom layer, beside :mod:`forensics.errors`,
and imports nothing of the package: the analysis that writes documents, the report that renders
them and the CLI import this module, and the report never imports :mod:`forensics.analysis`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

__all__ = [
    "FORMAT",
    "FORMAT_ALIASES",
    "FORMAT_VERSION",
    "OUTPUT_FORMATS",
    "REPORT_FORMATS",
    "SEVERITIES",
    "Severity",
    "severity_rank",
    "split_formats",
]

#: ``format`` and ``format_version`` of every analysis document.
FORMAT = "gpuforensics-analysis"
FORMAT_VERSION = 1

Severity = Literal["critical", "high", "medium", "low", "info"]
#: Worst first: ``critical`` ranks 0.
SEVERITIES: tuple[Severity, ...] = ("critical", "high", "medium", "low", "info")
_RANK: dict[str, int] = {s: i for i, s in enumerate(SEVERITIES)}

#: What ``analyze -f`` accepts: the terminal summary and the four report formats.
OUTPUT_FORMATS = ("text", "json", "html", "pdf", "md")
#: The formats :func:`forensics.report.render` writes to files (``text`` is for the terminal).
REPORT_FORMATS = ("html", "pdf", "md", "json")
#: Other spellings accepted for a format.
FORMAT_ALIASES = {"markdown": "md", "htm": "html"}


def severity_rank(severity: str) -> int:
    """0 for critical .. 4 for info (lower is worse); unknown severities rank last."""
    return _RANK.get(severity, len(SEVERITIES))


def split_formats(value: str | Iterable[str]) -> list[str]:
    """``"html, PDF,markdown,html"`` (or a list of such) -> ``["html", "pdf", "md"]``.

    Lower-cased, aliases resolved, empty parts skipped, order kept, duplicates dropped; names are
    not checked (each caller says what it accepts, in its own error).
    """
    out: list[str] = []
    for raw in [value] if isinstance(value, str) else value:
        for part in str(raw).split(","):
            name = part.strip().lower()
            name = FORMAT_ALIASES.get(name, name)
            if name and name not in out:
                out.append(name)
    return out
