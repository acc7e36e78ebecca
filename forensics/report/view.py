"""The report's view model: the analysis JSON document (docs/analysis-format.md) made presentable.

:func:`build_view` reads the document defensively (a field of the wrong type is treated as
unknown, never trusted: :mod:`~forensics.report.access`), resolves references (evidence -> the
member's SHA-256 from ``bundles[].members``, container ids -> names, GPU UUIDs -> ``GPU n``:
:mod:`~forensics.report.findings`), orders content for a reader (the chain first, most severe
first), summarises long lists (the top entries in the body, the rest in an appendix with a cap)
and prepares chart specs (:mod:`~forensics.report.hardware`, :mod:`~forensics.report.series`).
It is pure: no I/O, no matplotlib. The records it returns, and the caps, are in
:mod:`~forensics.report.records`; every string in them is still untrusted text, and renderers
escape it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from forensics.document_format import FORMAT, FORMAT_VERSION, SEVERITIES
from forensics.errors import ReportError
from forensics.parsing.timestamps import format_iso
from forensics.report.access import get_bool, get_dict, get_dicts, get_num, get_str, get_strs, unix
from forensics.report.findings import ViewContext, evidence_views, metric_text, sorted_findings
from forensics.report.formatting import fmt_time
from forensics.report.hardware import container_views, gpu_views
from forensics.report.records import (
    BODY_ROWS,
    BundleView,
    ChainStepView,
    CollectorView,
    GpuFactsView,
    NodeView,
    ReportView,
    RuledOutView,
    UnattributedView,
    split,
)
from forensics.report.timeline import timeline_view

__all__ = ["build_view"]


def _chain(ctx: ViewContext) -> tuple[ChainStepView, ...]:
    steps = []
    for d in get_dicts(ctx.doc, "chain"):
        fid = get_str(d, "finding")
        finding = ctx.by_id.get(fid)
        steps.append(
            ChainStepView(
                time=get_str(d, "time") or (finding.start if finding else ""),
                text=get_str(d, "text") or (finding.summary if finding else ""),
                finding_id=fid,
                finding=finding,
                leads_to=get_strs(d, "leads_to"),
            )
        )
    steps.sort(key=lambda s: (unix(s.time) is None, unix(s.time) or 0.0))
    return tuple(steps)


def _bundle(ctx: ViewContext, d: Mapping[str, Any], position: int) -> BundleView:
    """A bundle with the members the report cites (all members are in its manifest.json)."""
    path = get_str(d, "path")
    name = posixpath.basename(path)
    manifest = get_dict(d, "members")
    cited = sorted(
        (m, v if isinstance(v, str) else "")
        for m in ctx.members.cited.get(name, set())
        for v in [manifest.get(m)]
    )
    return BundleView(
        path=path,
        name=name,
        file_sha256=get_str(d, "file_sha256"),
        host=get_str(d, "host"),
        captured_start=get_str(d, "captured_start"),
        captured_end=get_str(d, "captured_end"),
        interrupted=get_bool(d, "interrupted"),
        tool_version=get_str(d, "tool_version"),
        member_count=len(manifest),
        cited=split(cited, f"appendix-members-{position}", body_rows=0),
        rebuilt=frozenset(m for m, _ in cited if ctx.members.rebuilt(name, m)),
        integrity_failed=get_dict(d, "integrity").get("ok") is False,
    )


def _collectors(ctx: ViewContext) -> tuple[CollectorView, ...]:
    """The collectors in the document's order."""
    return tuple(
        CollectorView(
            bundle=get_str(d, "bundle"),
            name=get_str(d, "name"),
            status=get_str(d, "status", "unknown"),
            duration_s=get_num(d, "duration_s"),
            error=get_str(d, "error"),
            notes=get_strs(d, "notes"),
            expected=get_bool(d, "expected") is not False,
        )
        for d in get_dicts(ctx.doc, "collectors")
    )


def _nodes(ctx: ViewContext) -> tuple[NodeView, ...]:
    """Each node's facts and its GPUs (model, serial, VBIOS, MIG mode), for page one."""
    out = []
    for n in get_dicts(ctx.doc, "nodes"):
        host = get_str(n, "host")
        gpus = tuple(
            GpuFactsView(
                label=f"GPU {get_str(g, 'index')}",
                name=get_str(g, "name"),
                serial=get_str(g, "serial"),
                vbios_version=get_str(g, "vbios_version"),
                mig_mode=get_str(g, "mig_mode")
                or {True: "enabled", False: "not enabled"}.get(get_bool(g, "mig_enabled") or False, ""),
                pci_bus_id=get_str(g, "pci_bus_id"),
            )
            for g in get_dicts(ctx.doc, "gpus")
            if get_str(g, "node") in ("", host)
        )
        out.append(
            NodeView(
                host=host,
                driver_version=get_str(n, "driver_version"),
                cuda_version=get_str(n, "cuda_version"),
                kernel=get_str(n, "kernel"),
                os=get_str(n, "os"),
                gpus=gpus,
            )
        )
    return tuple(out)


def _window(doc: Mapping[str, Any]) -> str:
    w = get_dict(doc, "window")  # only a window the user named (analyze --window) is news
    start, end = get_str(w, "start"), get_str(w, "end")
    return f"{fmt_time(start)} – {fmt_time(end)}" if start and end and get_bool(w, "named") else ""


def _iso(t: float) -> str:
    return format_iso(t, precision="seconds") or ""


def build_view(doc: object) -> ReportView:
    """Validate the document's header and build the view; :class:`ReportError` if unusable."""
    if not isinstance(doc, dict):
        raise ReportError(f"analysis document must be a JSON object, not {type(doc).__name__}")
    if doc.get("format") != FORMAT:
        raise ReportError(
            f"not an analysis document (format {doc.get('format')!r}, expected {FORMAT!r})"
        )
    if doc.get("format_version") != FORMAT_VERSION:
        raise ReportError(
            f"unsupported analysis format_version {doc.get('format_version')!r} (this renderer reads {FORMAT_VERSION})"
        )
    ctx = ViewContext(doc)
    chain = _chain(ctx)
    in_chain = {s.finding_id for s in chain}
    chain_findings = tuple(
        ctx.by_id[fid] for fid in dict.fromkeys(s.finding_id for s in chain) if fid in ctx.by_id
    )
    others = sorted_findings(f for f in ctx.findings if f.id not in in_chain)
    ruled_out = tuple(
        RuledOutView(
            get_str(d, "kind"),
            get_str(d, "statement"),
            evidence_views(get_dicts(d, "evidence"), ctx.members),
        )
        for d in get_dicts(doc, "ruled_out")
    )
    # after every evidence is cited
    bundles = tuple(_bundle(ctx, d, i) for i, d in enumerate(ctx.bundles))
    hosts = tuple(dict.fromkeys(v.host for v in bundles if v.host))
    starts = [s for s in (unix(v.captured_start) for v in bundles) if s is not None]
    ends = [e for e in (unix(v.captured_end) for v in bundles) if e is not None]
    counts: dict[str, int] = {s: 0 for s in SEVERITIES}
    for f in ctx.findings:
        counts[f.severity] += 1
    in_order = _collectors(ctx)
    # Problems first: they say what the report cannot say.
    collectors = sorted(in_order, key=lambda c: (c.ok, not c.expected, c.bundle, c.name))
    unattributed = [
        UnattributedView(
            get_str(d, "type"),
            get_str(d, "id"),
            get_str(d, "name"),
            get_str(d, "node"),
            get_str(d, "reason"),
            ctx.gpu_names.get(get_str(d, "gpu"), get_str(d, "gpu")),
        )
        for d in get_dicts(doc, "unattributed")
    ]
    thresholds = tuple(
        (str(k), metric_text(str(k), v)) for k, v in sorted(get_dict(doc, "thresholds").items())
    )
    title_host = (
        hosts[0] if len(hosts) == 1 else (f"{len(hosts)} nodes" if hosts else "unknown host")
    )
    return ReportView(
        title=f"GPU incident report: {title_host}",
        hosts=hosts,
        tool_version=get_str(doc, "tool_version"),
        generated_at=get_str(doc, "generated_at"),
        capture_start=bundles[0].captured_start
        if len(bundles) == 1
        else (_iso(min(starts)) if starts else ""),
        capture_end=bundles[0].captured_end
        if len(bundles) == 1
        else (_iso(max(ends)) if ends else ""),
        primary_sha256=bundles[0].file_sha256 if bundles else "",
        verdict=ctx.verdict,
        severity_counts=tuple((s, n) for s, n in counts.items() if n),
        chain=chain,
        chain_findings=chain_findings,
        other_findings=split(
            others, "appendix-findings", body_rows=BODY_ROWS if chain else 2 * BODY_ROWS
        ),
        ruled_out=ruled_out,
        limitations=get_strs(doc, "limitations"),
        collectors=split(collectors, "appendix-collectors", body_rows=3 * BODY_ROWS),
        collector_problems=tuple(c for c in collectors if not c.ok and c.expected),
        gpus=gpu_views(ctx),
        containers=container_views(ctx),
        unattributed=split(unattributed, "appendix-unattributed"),
        bundles=bundles,
        thresholds=thresholds,
        findings=tuple(ctx.findings),
        collectors_in_order=in_order,
        incidents=ctx.incidents,
        nodes=_nodes(ctx),
        timeline=timeline_view(ctx),
        window=_window(doc),
    )
