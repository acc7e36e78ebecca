"""The report's sections, in reading order: the one list the HTML page, its table of contents and
the Markdown report are built from.

Each :class:`Section` names its anchor (the HTML ``id`` and the template
``report_templates/sections/<anchor>.html.j2``), its title, whether the table of contents lists
it, when it shows (a section with nothing to say is left out, and out of the contents), and
whether the Markdown report has it (Markdown has no table of contents and no appendix: the HTML
and JSON reports keep the rest). Adding a section is one entry here, its template, and its
Markdown function in :mod:`forensics.report.markdown` (a test checks all three agree).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from forensics.report.records import ReportView

__all__ = ["SECTIONS", "Section", "toc"]


def _always(view: ReportView) -> bool:
    return True


@dataclass(frozen=True)
class Section:
    """One part of the report."""

    anchor: str
    title: str
    in_toc: bool = True
    when: Callable[[ReportView], bool] = _always
    markdown: bool = True

    def shown(self, view: ReportView) -> bool:
        """Whether ``view`` has something for this section to say."""
        return self.when(view)


SECTIONS: tuple[Section, ...] = (
    Section("verdict", "Verdict", in_toc=False),
    Section("contents", "Contents", in_toc=False, markdown=False),
    Section("incidents", "Incidents", when=lambda v: len(v.incidents) > 1),
    Section("timeline", "Timeline", when=lambda v: v.timeline is not None),
    Section("chain", "Evidence chain"),
    Section("other-findings", "Other findings", when=lambda v: bool(v.other_findings.total)),
    Section("ruled-out", "Ruled out"),
    Section("gpus", "GPUs"),
    Section("containers", "Containers"),
    Section("collectors", "Collector status"),
    Section("verify", "Verify the bundle"),
    Section("appendix", "Appendix", when=lambda v: v.has_appendix, markdown=False),
)


def toc(view: ReportView) -> tuple[Section, ...]:
    """The sections the table of contents links to, for ``view``."""
    return tuple(s for s in SECTIONS if s.in_toc and s.shown(view))
