"""The terminal summary (``gpuforensics analyze``'s default output): verdict, findings, what was
ruled out, limitations and collector status, from the same view as the HTML and Markdown reports.

Findings and collectors keep the document's order (the analysis already put the verdict's first);
at most three evidence items per finding, each excerpt cut at 100 characters; under an item
citing a member rebuilt from the flight recorder's segments, the segment and line it came from
(as the HTML and Markdown reports say it). A bundle is
untrusted, so every string of the document has its control characters shown as escapes
(:func:`printable`) before the view is built: a process named ``"\\x1b[2J"`` or
``"x\\rVerdict: ..."`` must not drive the on-call engineer's terminal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from forensics.report.records import ReportView
from forensics.report.view import build_view

__all__ = ["printable", "render_text", "render_text_view"]

# C0/C1 controls and the bidi overrides.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(value: Any) -> Any:
    """``value`` with every string's control characters shown as escapes (for terminal views)."""
    if isinstance(value, str):
        return _UNPRINTABLE.sub(lambda m: repr(m.group())[1:-1] if m.group() not in "\t" else " ", value)
    if isinstance(value, dict):
        return {k: printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [printable(v) for v in value]
    return value


def render_text_view(v: ReportView) -> str:
    """A view (built from a :func:`printable` document) -> the terminal summary."""
    lines: list[str] = []
    for b in v.bundles:
        lines.append(f"Bundle  {b.path}  host {b.host}  {b.captured_start} -> {b.captured_end}"
                     + ("  [INTERRUPTED]" if b.interrupted else ""))
    for n in v.nodes:
        lines.append(f"Node    {n.host}  driver {n.driver_version or '?'}  CUDA {n.cuda_version or '?'}  "
                     f"kernel {n.kernel or '?'}  {len(n.gpus)} GPU(s)"
                     + (f": {n.gpus[0].name}" if n.gpus and len({g.name for g in n.gpus}) == 1 else ""))
    lines.append("")
    if v.integrity_warning:
        lines.append(f"INTEGRITY: {v.integrity_warning}")
    lines.append(f"Verdict: {v.verdict.headline}")
    if v.verdict.impact:
        lines.append(f"Impact:  {v.verdict.impact}")
    if len(v.incidents) > 1:
        lines.append("")
        lines.append("Incidents (most relevant first):")
        for i in v.incidents:
            before = f", {i.before_capture}" if i.before_capture else ""
            lines.append(f"  {i.id:<4} {i.severity:<8} {i.relevance}{before}: {i.headline} "
                         f"[{' '.join(i.finding_ids)}]")
    if v.findings:
        lines.append("")
        lines.append("Findings:")
        for f in v.findings:
            shown = f.before_capture and f.before_capture.lower() not in f.summary.lower()
            before = f" ({f.before_capture})" if shown else ""
            lines.append(f"  {f.id:<4} {f.severity:<8} {f.kind:<28} {f.summary}{before}")
            if f.occurrences and f.occurrences not in f.summary:
                lines.append(f"         {f.occurrences}")
            if f.next_step:
                lines.append(f"         next step: {f.next_step}")
            for ev in f.evidence[:3]:
                lines.append(f"         evidence: {ev.member} {ev.locator}: {ev.excerpt[:100]}")
                if ev.derived:
                    lines.append(f"                   {ev.locator or ev.member}: {ev.derived.text}")
    if v.ruled_out:
        lines.append("")
        lines.append("Ruled out:")
        lines.extend(f"  - {r.statement}" for r in v.ruled_out)
    if v.limitations:
        lines.append("")
        lines.append("Limitations:")
        lines.extend(f"  - {x}" for x in v.limitations)
    lines.append("")
    lines.append("Collectors:")
    for c in v.collectors_in_order:
        err = f"  {c.error}" if c.error else ""
        unexpected = " (not expected on this node)" if not (c.ok or c.expected) else ""
        lines.append(f"  {c.name or '?':<14} {c.status or '?':<12}{err}{unexpected}")
    return "\n".join(lines)


def render_text(doc: Mapping[str, Any]) -> str:
    """The analysis document -> the terminal summary (control characters escaped)."""
    return render_text_view(build_view(printable(doc)))
