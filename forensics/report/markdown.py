"""Markdown report, for pasting into a postmortem document (GitHub-flavoured tables).

Source: the analysis document (docs/analysis-format.md) through :func:`view.build_view`, so the
content and its order match the HTML report; charts are left out and long lists keep only their
top entries (the HTML and JSON reports have the rest).

Escaping: Markdown renders inline HTML, so every string from the bundle has ``&``, ``<`` and
``>`` turned into entities and the Markdown punctuation that would format or link escaped with
a backslash; excerpts go into code spans (where nothing is interpreted) with a fence longer than
any backtick run inside. Newlines are folded so a value never breaks a table row.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from forensics.report.formatting import (
    fmt_bytes,
    fmt_confidence,
    fmt_duration,
    fmt_pct,
    fmt_ratio,
    fmt_time,
    fmt_time_short,
    fmt_unix_clock,
    short_id,
)
from forensics.report.records import EvidenceView, FindingView, ReportView, Split, SubjectView
from forensics.report.sections import SECTIONS, Section
from forensics.report.view import build_view

__all__ = ["md_code", "md_text", "render_markdown", "render_markdown_view"]

T = TypeVar("T")
_SPECIAL = re.compile(r"([\\`*_\[\]|~#])")


def md_text(value: object) -> str:
    """Untrusted text -> inert Markdown text (no HTML, no formatting, no link, one line)."""
    text = " ".join(str(value).split()) if value is not None else ""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _SPECIAL.sub(r"\\\1", text)


def md_code(value: object, in_table: bool = True) -> str:
    """Untrusted text -> a code span (shown verbatim); ``|`` escaped for GFM tables."""
    text = " ".join(str(value).split()) if value is not None else ""
    if not text:
        return ""
    if in_table:
        text = text.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or longest else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cell or " " for cell in cells) + " |"


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = [_row(headers), _row("---" for _ in headers)]
    lines.extend(_row(r) for r in rows)
    return lines


def _subject(s: SubjectView) -> str:
    text = f"{md_text(s.type)} **{md_text(s.label)}**"
    if s.type in ("container", "pod") and s.id:
        text += f" ({md_code(short_id(s.id))})"
    return text


def _subjects(items: Sequence[SubjectView], empty: str) -> str:
    return ", ".join(_subject(s) for s in items) if items else empty


def _evidence_line(e: EvidenceView) -> str:
    where = md_code(e.member, in_table=False)
    if e.locator:
        where += f" {md_code(e.locator, in_table=False)}"
    text = f"{where}: {md_code(e.excerpt, in_table=False)}" if e.excerpt else where
    if e.member_sha256:
        return f"{text} (sha256 {md_code(e.member_sha256, in_table=False)})"
    if e.derived:
        return text
    return f"{text} (rebuilt from the ring segments)" if e.rebuilt else f"{text} (not in the manifest)"


def _derived(e: EvidenceView, in_table: bool = False) -> str:
    """For a member rebuilt from the ring's segments, where its cited line came from
    (``line 9: rebuilt from ring/segments/seg-N.jsonl.gz line 47 (sealed ...)``); else ``""``."""
    d = e.derived
    if not d:
        return ""
    return (f"{md_code(e.locator or e.member, in_table)}: rebuilt from {md_code(d.member, in_table)} "
            f"line {d.line} ({md_text(d.note)})")


def _evidence_lines(e: EvidenceView, indent: str) -> list[str]:
    """The evidence item, and under it, for a member rebuilt from the ring's segments, where its
    line came from (:func:`_derived`)."""
    lines = [f"{indent}- {_evidence_line(e)}"]
    if e.derived:
        lines.append(f"{indent}  - {_derived(e)}")
    return lines


def _first_evidence(f: FindingView) -> str:
    """A findings table's first-evidence cell: the member and locator, then (a table's cell is one
    line) where a rebuilt member's line came from, as the evidence chain says it."""
    if not f.evidence:
        return "—"
    e = f.evidence[0]
    cited = md_code(e.member) + " " + md_code(e.locator)
    return f"{cited}; {_derived(e, in_table=True)}" if e.derived else cited


def _split_table(headers: Sequence[str], part: Split[T], row: Callable[[T], Sequence[str]],
                 what: str) -> list[str]:
    """A table of the rows of ``part`` shown in the body, then how many more the other reports hold."""
    return [*_table(headers, (row(x) for x in part.body)), "", *_more(part, what)]


def _heading(section: Section) -> list[str]:
    """A section's first lines: its title, then a blank line."""
    return [f"## {section.title}", ""]


def _more(part: Split[Any], what: str) -> list[str]:
    rest = part.total - len(part.body)
    return [f"*{rest} more {what} are in the HTML and JSON reports.*", ""] if rest > 0 else []


def _finding_head(f: FindingView) -> str:
    span = fmt_time_short(f.start)
    if f.end and f.end != f.start:
        span += f"–{fmt_time_short(f.end)}"
    before = f", {f.before_capture}" if f.before_capture else ""
    repeats = f", {f.occurrences}" if f.occurrences else ""
    return (f"**[{f.severity.upper()}] {md_text(f.id)}** {md_code(f.kind, False)}, confidence "
            f"{fmt_confidence(f.confidence)}, {span}{before}{repeats}")


def _verdict(v: ReportView, section: Section) -> list[str]:
    """The verdict: headline, culprits, victims, impact, span, counts, limits."""
    out: list[str] = []
    add = out.append
    verdict = v.verdict
    label = "NO INCIDENT FOUND" if verdict.clean else (verdict.severity.upper() or "UNRATED")
    add(f"## {section.title}: {label}")
    add("")
    add(f"**{md_text(verdict.headline)}**")
    add("")
    span = "—"
    if verdict.start:
        span = f"{fmt_time(verdict.start)} – {fmt_time(verdict.end)}"
        if verdict.duration:
            span += f" ({verdict.duration})"
    counts = ", ".join(f"{n} {sev}" for sev, n in v.severity_counts) or "none"
    rows = [
        ["Culprits", _subjects(verdict.culprits, "none identified")],
        ["Victims", _subjects(verdict.victims, "none identified")],
        ["Impact", md_text(verdict.impact) or "—"],
        ["Time span", span],
        ["Findings", counts],
    ]
    if v.window:
        rows.append(["Window", f"{md_text(v.window)} (analyze --window)"])
    if v.incidents and v.incidents[0].next_step:
        rows.append(["Next step", md_text(v.incidents[0].next_step)])
    if v.integrity_warning:
        rows.append(["Integrity", f"**{md_text(v.integrity_warning)}**"])
    if v.collector_problems:
        names = ", ".join(f"{md_text(c.name)} ({md_text(c.status)})" for c in v.collector_problems)
        rows.append(["Limits", f"collectors that did not complete: {names}"])
    out.extend(_table(["", ""], rows))
    add("")
    return out


def _incidents(v: ReportView, section: Section) -> list[str]:
    """Every incident, most relevant to the window first, with its parties and next step."""
    out = [*_heading(section), f"{len(v.incidents)} incidents, most relevant first:", ""]
    add = out.append
    if v.incidents:
        for i in v.incidents:
            when = fmt_time_short(i.start) + (f"–{fmt_time_short(i.end)}" if i.end and i.end != i.start else "")
            extra = f", {i.before_capture}" if i.before_capture else ""
            add(f"- **{md_text(i.id)}** [{i.severity.upper()}] {when} ({md_text(i.relevance)}{extra}): "
                f"{md_text(i.headline)}; findings {', '.join(md_text(x) for x in i.finding_ids)}"
                + (f". Next step: {md_text(i.next_step)}" if i.next_step else ""))
        add("")
    return out


def _timeline(v: ReportView, section: Section) -> list[str]:
    """The cross-source timeline as one list per lane (the HTML and PDF draw it)."""
    out = _heading(section)
    if v.timeline is None:
        return out
    for lane in v.timeline.lanes:
        items = sorted(lane.items, key=lambda it: it.t)
        shown = "; ".join(
            f"{fmt_unix_clock(it.t)} {md_text(it.label)}"
            + (f"–{fmt_unix_clock(it.end)}" if it.kind == "finding" and it.end and it.end > it.t else "")
            for it in items[:20]
        )
        more = f" (+{len(items) - 20} more)" if len(items) > 20 else ""
        out.append(f"- **{md_text(lane.label)}**: {shown}{more}")
    out.append("")
    return out


def _chain(v: ReportView, section: Section) -> list[str]:
    """The evidence chain, step by step, each with its finding and evidence."""
    out = _heading(section)
    add = out.append
    verdict = v.verdict
    if not v.chain:
        add(
            "No chain: nothing in the bundle points to an incident."
            if verdict.clean
            else "The analysis linked no findings into a chain."
        )
        add("")
    for number, step in enumerate(v.chain, 1):
        add(f"{number}. **{fmt_time_short(step.time)}** {md_text(step.text)}  ")
        f = step.finding
        if f is None:
            add(f"   finding {md_text(step.finding_id)} is not in the analysis document")
        else:
            add(f"   {_finding_head(f)}: {md_text(f.summary)}")
            if f.next_step:
                add(f"   - next step: {md_text(f.next_step)}")
            for e in f.evidence:
                for line in _evidence_lines(e, "   "):
                    add(line)
            if f.evidence_omitted:
                add(f"   - {f.evidence_omitted} more evidence items in the JSON report")
        if step.leads_to:
            add(f"   - leads to {', '.join(md_text(x) for x in step.leads_to)}")
    if v.chain:
        add("")
    return out


def _other_findings(v: ReportView, section: Section) -> list[str]:
    """Findings outside the chain, as a table."""
    out = _heading(section)
    out.extend(_split_table(
        ["ID", "Severity", "Kind", "Start (UTC)", "Summary", "First evidence"],
        v.other_findings,
        lambda f: [
            md_text(f.id),
            f.severity.upper(),
            md_code(f.kind),
            fmt_time_short(f.start),
            md_text(f.summary),
            _first_evidence(f),
        ],
        "findings",
    ))
    return out


def _ruled_out(v: ReportView, section: Section) -> list[str]:
    """Causes checked and not found, with the evidence examined."""
    out = _heading(section)
    add = out.append
    if not v.ruled_out:
        add("Nothing was explicitly ruled out.")
    for r in v.ruled_out:
        add(f"- {md_code(r.kind, False)}: {md_text(r.statement)}")
        for e in r.evidence:
            for line in _evidence_lines(e, "  "):
                add(line)
    add("")
    return out


def _gpus(v: ReportView, section: Section) -> list[str]:
    """GPUs (allocation against use) and the processes on each."""
    out = _heading(section)
    add = out.append
    if v.gpus.total:
        out.extend(_split_table(
            [
                "GPU",
                "Model",
                "Allocated to",
                "Used by",
                "Without allocation",
                "Util avg / max",
                "Memory peak / total",
            ],
            v.gpus,
            lambda g: [
                md_text(g.label + (f" ({g.node})" if len(v.hosts) > 1 else "")),
                md_text(g.name),
                _subjects(g.allocated_to, "nobody"),
                _subjects(g.used_by, "idle"),
                ", ".join(f"**{md_text(s.label)}**" for s in g.unallocated_users) or "—",
                f"{fmt_pct(g.util_avg_pct)} / {fmt_pct(g.util_max_pct)}",
                f"{fmt_bytes(g.memory_peak_bytes)} / {fmt_bytes(g.memory_total_bytes)}",
            ],
            "GPUs",
        ))
        for g in v.gpus.body:
            if not g.processes.total:
                continue
            add(f"Processes on {md_text(g.label)}:")
            add("")
            out.extend(_split_table(
                ["PID", "Command", "Container", "GPU memory", "SM avg", "Allocated this GPU"],
                g.processes,
                lambda p: [
                    md_text(p.pid),
                    md_text(p.name),
                    md_text(p.container or "host (no container)"),
                    fmt_bytes(p.used_memory_bytes),
                    fmt_pct(p.sm_util_avg_pct),
                    "unknown"
                    if p.allocated is None
                    else ("yes" if p.allocated else "**no**"),
                ],
                "processes",
            ))
    else:
        add("No GPU in the analysis (no NVML data).")
        add("")
    return out


def _containers(v: ReportView, section: Section) -> list[str]:
    """Containers, then what could not be attributed to one."""
    out = _heading(section)
    add = out.append
    if v.containers.total:
        out.extend(_split_table(
            [
                "Container",
                "Image",
                "GPU allocation",
                "CPU quota",
                "Throttled avg / max",
                "Memory peak / limit",
                "OOM kills",
                "State",
                "Findings",
            ],
            v.containers,
            lambda c: [
                f"**{md_text(c.label)}** {md_code(short_id(c.id))}",
                md_text(c.image),
                md_text(c.allocation_kind)
                + (" (blanket)" if c.allocation_blanket else "")
                + (
                    f": {md_text(', '.join(c.allocation_gpus))}"
                    if c.allocation_gpus
                    else ""
                ),
                f"{c.cpu_quota_cores:.1f} cores" if c.cpu_quota_cores is not None else "—",
                f"{fmt_ratio(c.throttled_avg_ratio)} / {fmt_ratio(c.throttled_max_ratio)}",
                f"{fmt_bytes(c.memory_peak_bytes)} / {fmt_bytes(c.memory_limit_bytes)}",
                (str(c.oom_kills) if c.oom_kills is not None else "—")
                + (" (OOMKilled)" if c.oom_killed else "")
                + "".join(
                    f", {md_text(f.id)} at {fmt_time_short(f.start)}" for f in c.oom_events
                ),
                md_text(c.state or "—")
                + (f", exit {md_text(c.exit_code)}" if c.exit_code else ""),
                ", ".join(md_text(x) for x in c.finding_ids) or "—",
            ],
            "containers",
        ))
    else:
        add("No container in the analysis.")
        add("")
    if v.unattributed.total:
        add("Not attributed to a container or pod:")
        add("")
        out.extend(_split_table(
            ["Type", "ID", "Name", "GPU", "Reason"],
            v.unattributed,
            lambda u: [
                md_text(u.type),
                md_code(u.id),
                md_text(u.name),
                md_text(u.gpu or "—"),
                md_text(u.reason),
            ],
            "entries",
        ))
    return out


def _collectors(v: ReportView, section: Section) -> list[str]:
    """What the report cannot say, and each collector's status."""
    out = _heading(section)
    add = out.append
    if v.limitations:
        add("**What this report cannot say:**")
        add("")
        out.extend(f"- {md_text(item)}" for item in v.limitations)
        add("")
    out.extend(_split_table(
        ["Collector", "Status", "Duration", "Error"],
        v.collectors,
        lambda c: [
            md_text(c.name),
            md_text(c.status) + ("" if c.ok or c.expected else " (not expected on this node)"),
            fmt_duration(c.duration_s),
            md_text(c.error) or "—",
        ],
        "collectors",
    ))
    return out


def _verify(v: ReportView, section: Section) -> list[str]:
    """How to check the bundle before relying on the report."""
    out = _heading(section)
    add = out.append
    for b in v.bundles:
        add(
            f"- {md_code(b.path or b.name, False)}: SHA-256 {md_code(b.file_sha256 or 'unknown', False)}, "
            f"host {md_text(b.host or '—')}, {b.member_count} members in the manifest"
        )
    add("")
    add("```")
    for b in v.bundles:
        name = " ".join(b.name.replace("`", "").split()) or "BUNDLE.tgz"
        add(f"sha256sum {name}")
        add(f"gpuforensics verify {name}")
    add("```")
    add("")
    return out


#: Section anchor -> its Markdown; the order and which sections show come from SECTIONS.
_SECTIONS: dict[str, Callable[[ReportView, Section], list[str]]] = {
    "verdict": _verdict,
    "incidents": _incidents,
    "timeline": _timeline,
    "chain": _chain,
    "other-findings": _other_findings,
    "ruled-out": _ruled_out,
    "gpus": _gpus,
    "containers": _containers,
    "collectors": _collectors,
    "verify": _verify,
}


def render_markdown_view(v: ReportView) -> str:
    """A prepared view -> the Markdown report."""
    out: list[str] = []
    add = out.append
    hosts = ", ".join(md_text(h) for h in v.hosts) or "unknown host"
    add(f"# GPU incident report: {hosts}")
    add("")
    bundles = ", ".join(md_code(b.path or b.name, False) for b in v.bundles) or "none recorded"
    add(f"**Capture window:** {fmt_time(v.capture_start)} – {fmt_time(v.capture_end)}  ")
    add(f"**Bundle:** {bundles}  ")
    add(f"**Analysed:** {fmt_time(v.generated_at)} by gpuforensics {md_text(v.tool_version)}")
    add("")
    for n in v.nodes:
        host = f"**{md_text(n.host)}**: " if len(v.nodes) > 1 else ""
        add(f"{host}driver {md_text(n.driver_version or '—')}, CUDA {md_text(n.cuda_version or '—')}, "
            f"kernel {md_text(n.kernel or '—')}" + (f", {md_text(n.os)}" if n.os else ""))
        add("")
        if n.gpus:
            out.extend(_table(["GPU", "Model", "Serial", "VBIOS", "MIG", "PCI"], (
                [md_text(g.label), md_text(g.name or "—"), md_code(g.serial or "—"),
                 md_code(g.vbios_version or "not captured"), md_text(g.mig_mode or "—"), md_code(g.pci_bus_id or "—")]
                for g in n.gpus)))
            add("")

    for section in SECTIONS:
        if section.markdown and section.shown(v):
            out.extend(_SECTIONS[section.anchor](v, section))
    return "\n".join(out)


def render_markdown(doc: Mapping[str, Any]) -> str:
    """The analysis document -> the Markdown report as a string."""
    return render_markdown_view(build_view(doc))
