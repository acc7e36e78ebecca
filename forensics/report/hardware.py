"""The GPU and container sections' views: allocation against use, processes, limits and charts.

GPUs that findings name come first among those that get a chart; containers are ordered by
relevance (the worst finding naming them, then OOM kills, then CPU throttling). Only the first
few of each get a chart (:data:`~forensics.report.records.GPU_CHART_CAP`,
:data:`~forensics.report.records.CONTAINER_CHART_CAP`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from forensics.document_format import SEVERITIES, severity_rank
from forensics.report.access import (
    get_bool,
    get_dict,
    get_dicts,
    get_int,
    get_num,
    get_str,
    get_strs,
    unix,
)
from forensics.report.charts import ChartSpec, Line, Panel
from forensics.report.findings import ViewContext, involves, sorted_findings, subject_views
from forensics.report.records import (
    CONTAINER_CHART_CAP,
    GPU_CHART_CAP,
    ContainerView,
    FindingView,
    GpuView,
    ProcessView,
    Split,
    split,
)
from forensics.report.series import (
    finding_markers,
    incident_band,
    memory_panel,
    off_chart_note,
    series_axis,
    series_stats,
    series_values,
)
from forensics.report.timeline import capture_window

__all__ = ["container_views", "gpu_views"]


def _gpu(ctx: ViewContext, d: Mapping[str, Any], position: int, draw: bool) -> GpuView:
    uuid, index = get_str(d, "uuid"), get_str(d, "index")
    allocated = subject_views(d, "allocated_to")
    used = subject_views(d, "used_by")
    allocated_ids = {s.id for s in allocated if s.id}
    allocated_names = {s.name for s in allocated if s.name}
    unallocated = tuple(
        s
        for s in used
        if s.type in ("container", "pod")
        and s.id not in allocated_ids
        and s.name not in allocated_names
    )
    procs = []
    for p in get_dicts(d, "processes"):
        container = get_str(p, "container")
        procs.append(
            ProcessView(
                pid=get_str(p, "pid"),
                name=get_str(p, "name"),
                container=ctx.container_names.get(container, container[:12])
                if container
                else "",
                pod=get_str(p, "pod"),
                used_memory_bytes=get_num(p, "used_memory_bytes"),
                sm_util_avg_pct=get_num(p, "sm_util_avg_pct"),
                allocated=(container in allocated_ids) if container and allocated_ids else None,
            )
        )
    procs.sort(key=lambda p: -(p.used_memory_bytes or 0))
    key = f"gpu-{position}"
    series = get_dict(d, "series")
    avg, peak = series_stats(series.get("gpu_util_pct"))
    _, mem_peak = series_stats(series.get("memory_used_bytes"))
    ids = {uuid} | {s.id for s in used if s.id} | {p.pid for p in procs}
    related = [f for f in ctx.findings if involves(f, ids)]
    t = series_axis(series) if draw else ()
    chart = _gpu_chart(ctx, key, d, t, series, related) if t else None
    note = off_chart_note(finding_markers(related, t)[1]) if chart else ""
    return GpuView(
        key=key,
        index=index,
        uuid=uuid,
        name=get_str(d, "name"),
        node=get_str(d, "node"),
        pci_bus_id=get_str(d, "pci_bus_id"),
        memory_total_bytes=get_num(d, "memory_total_bytes"),
        mig_enabled=get_bool(d, "mig_enabled"),
        allocated_to=allocated,
        used_by=used,
        unallocated_users=unallocated,
        processes=split(procs, f"{key}-processes"),
        util_avg_pct=avg,
        util_max_pct=peak,
        memory_peak_bytes=mem_peak,
        finding_ids=tuple(f.id for f in related),
        chart=chart,
        chart_note=note,
    )


def _gpu_chart(
    ctx: ViewContext,
    key: str,
    d: Mapping[str, Any],
    t: tuple[float, ...],
    series: Mapping[str, Any],
    related: Sequence[FindingView],
) -> ChartSpec | None:
    gpu_util = series_values(series.get("gpu_util_pct"), len(t))
    memory = series_values(series.get("memory_used_bytes"), len(t))
    pid_names = {
        get_str(p, "pid"): (get_str(p, "name"), get_str(p, "container")) for p in get_dicts(d, "processes")
    }

    def pid_label(pid: str) -> str:
        name, container = pid_names.get(pid, ("", ""))
        owner = ctx.container_names.get(container, "") if container else "host"
        return f"pid {pid} {name} ({owner})" if owner else f"pid {pid} {name}"

    util_lines = [Line("GPU utilization", t, gpu_util, emphasis=True)] if _known(gpu_util) else []
    proc_sm = get_dict(series, "process_sm_util_pct")
    ranked = sorted(proc_sm.items(), key=lambda kv: -(series_stats(kv[1])[0] or 0))
    for pid, values in ranked[:6]:
        util_lines.append(Line(f"SM {pid_label(str(pid))}", t, series_values(values, len(t))))
    total = get_num(d, "memory_total_bytes")
    mem_lines: list[tuple[str, tuple[float | None, ...], bool]] = (
        [("memory used", memory, True)] if _known(memory) else []
    )
    proc_mem = get_dict(series, "process_memory_bytes")
    ranked_mem = sorted(proc_mem.items(), key=lambda kv: -(series_stats(kv[1])[1] or 0))
    for pid, values in ranked_mem[:6]:
        mem_lines.append((pid_label(str(pid)), series_values(values, len(t)), False))
    panels = []
    if any(_known(line.values) for line in util_lines):
        panels.append(Panel("Utilization (GPU and per-process SM)", "%", tuple(util_lines), y_max=105.0,
                            bands=baseline_bands(related)))
    if any(_known(values) for _, values, _ in mem_lines):
        panels.append(memory_panel("GPU memory", t, mem_lines, total, "total"))
    if not panels:
        return None  # no chart for series with no samples
    index = get_str(d, "index")
    return ChartSpec(
        key,
        f"GPU {index}",
        tuple(panels),
        incident_band(ctx.incidents, ctx.verdict, related, t),
        finding_markers(related, t)[0],
        capture=capture_window(ctx),
    )


def baseline_bands(related: Sequence[FindingView]) -> tuple[tuple[float, float, str], ...]:
    """The normal range (5th-95th percentile of its baseline) of each workload a ``below-baseline``
    finding on this GPU names, to draw behind its SM line."""
    out = []
    for f in related:
        if f.kind != "below-baseline":
            continue
        raw = dict(f.raw_metrics)
        lo, hi = raw.get("baseline_p5_pct"), raw.get("baseline_p95_pct")
        victim = next((s.name for s in f.subjects if s.role == "victim"), "")
        if lo is not None and hi is not None:
            out.append((lo, hi, f"{victim} normal {lo:.0f}-{hi:.0f}%"))
    return tuple(out)


def _known(values: Sequence[float | None]) -> bool:
    return any(v is not None for v in values)


def gpu_views(ctx: ViewContext) -> Split[GpuView]:
    raw = get_dicts(ctx.doc, "gpus")
    # Only GPUs a finding cites get a chart (an idle GPU's flat lines say nothing), first cited first.
    involved = {s.id for f in ctx.findings for s in f.subjects if s.type in ("gpu", "mig")}
    order = sorted(range(len(raw)), key=lambda i: (get_str(raw[i], "uuid") not in involved, i))
    draw = {i for i in order[:GPU_CHART_CAP] if get_str(raw[i], "uuid") in involved}
    views = [_gpu(ctx, raw[i], i, i in draw) for i in order]
    return split(views, "appendix-gpus", body_rows=GPU_CHART_CAP)


def _container(
    ctx: ViewContext,
    d: Mapping[str, Any],
    position: int,
    related: Sequence[FindingView],
    draw: bool,
    throttled_stats: tuple[float | None, float | None],
) -> ContainerView:
    key = f"container-{position}"
    series = get_dict(d, "series")
    thr_avg, thr_max = throttled_stats
    _, sampled_peak = series_stats(series.get("memory_bytes"))
    # The cgroup's own high-water mark and the OOM record beat the samples (they miss the kill).
    mem_peak = get_num(d, "memory_peak_bytes")
    mem_peak = sampled_peak if mem_peak is None else max(mem_peak, sampled_peak or 0.0)
    t = series_axis(series) if draw else ()
    limit = get_num(d, "memory_limit_bytes")
    alloc = get_dict(d, "gpu_allocation")
    gpus = tuple(ctx.gpu_names.get(g, g) for g in get_strs(alloc, "gpus"))
    chart = _container_chart(ctx, key, d, t, series, related, limit) if t else None
    note = off_chart_note(finding_markers(related, t)[1]) if chart else ""
    oom_killed = get_bool(d, "oom_killed")
    pod_name, pod_container = _pod_of(ctx, get_str(d, "pod"), get_str(d, "id"))
    return ContainerView(
        pod_name=pod_name,
        pod_container=pod_container,
        key=key,
        id=get_str(d, "id"),
        name=get_str(d, "name"),
        node=get_str(d, "node"),
        pod=get_str(d, "pod"),
        image=get_str(d, "image"),
        state=get_str(d, "state"),
        exit_code=get_str(d, "exit_code"),
        oom_killed=oom_killed,
        oom_kills=get_int(d, "oom_kills"),
        allocation_kind=get_str(alloc, "kind", "unknown") + _claims_text(alloc) + _cdi_text(alloc),
        allocation_explicit=get_bool(alloc, "explicit"),
        allocation_blanket=bool(alloc.get("blanket_gpus") or alloc.get("blanket_detail")),
        allocation_gpus=gpus,
        allocation_source=get_str(alloc, "source"),
        allocation_detail=get_str(alloc, "detail"),
        cpu_quota_cores=get_num(d, "cpu_quota_cores"),
        memory_limit_bytes=limit,
        throttled_avg_ratio=thr_avg,
        throttled_max_ratio=thr_max,
        memory_peak_bytes=mem_peak,
        memory_peak_of_limit_ratio=mem_peak / limit if mem_peak is not None and limit else None,
        finding_ids=tuple(f.id for f in related),
        findings=tuple(sorted_findings(related)),
        chart=chart,
        chart_note=note,
    )


def _oom_points(related: Sequence[FindingView]) -> tuple[tuple[float, float, str], ...]:
    """Each OOM kill of the container at its time, at the usage its record gives."""
    out = []
    for f in related:
        at = unix(f.start)
        usage = next((raw for name, raw in f.raw_metrics if name == "usage_bytes"), None)
        if f.kind == "oom-kill" and at is not None and usage is not None:
            out.append((at, usage, f"OOM kill {f.id}"))
    return tuple(out)


def _container_chart(
    ctx: ViewContext,
    key: str,
    d: Mapping[str, Any],
    t: tuple[float, ...],
    series: Mapping[str, Any],
    related: Sequence[FindingView],
    limit: float | None,
) -> ChartSpec | None:
    """CPU throttling and memory against its limit, each panel only when it has samples; the OOM
    kills marked on the memory panel."""
    throttled = series_values(series.get("cpu_throttled_ratio"), len(t))
    memory = series_values(series.get("memory_bytes"), len(t))
    panels = []
    if _known(throttled):
        panels.append(
            Panel(
                "CPU throttling (share of CFS periods throttled)",
                "%",
                (Line("throttled periods", t, tuple(None if v is None else v * 100 for v in throttled), True),),
                y_max=105.0,
            )
        )
    oom = _oom_points(related)
    if _known(memory) or oom:
        panel = memory_panel(
            "Memory against its limit" if limit else "Memory (no limit set)",
            t,
            [("memory used", memory, True)],
            limit,
            "limit",
            points=oom,
        )
        panels.append(panel)
    if not panels:
        return None  # no chart for series with no samples
    return ChartSpec(
        key,
        get_str(d, "name"),
        tuple(panels),
        incident_band(ctx.incidents, ctx.verdict, related, t),
        finding_markers(related, t)[0],
        capture=capture_window(ctx),
    )


def _pod_of(ctx: ViewContext, uid: str, container_id: str) -> tuple[str, str]:
    """(``namespace/name``, container name in the pod) from the document's ``pods``."""
    if not uid:
        return "", ""
    for p in get_dicts(ctx.doc, "pods"):
        if get_str(p, "uid") != uid:
            continue
        ids, names = p.get("containers"), p.get("container_names")
        cname = ""
        if isinstance(ids, list) and isinstance(names, list) and container_id in ids:
            i = ids.index(container_id)
            cname = str(names[i]) if i < len(names) else ""
        ns, name = get_str(p, "namespace"), get_str(p, "name")
        return (f"{ns}/{name}" if ns and name else name), cname
    return "", ""


def container_views(ctx: ViewContext) -> Split[ContainerView]:
    raw = get_dicts(ctx.doc, "containers")
    related = [[f for f in ctx.findings if involves(f, {get_str(c, "id")} - {""})] for c in raw]
    throttled = [series_stats(get_dict(c, "series").get("cpu_throttled_ratio")) for c in raw]

    def relevance(i: int) -> tuple[Any, ...]:
        c, found = raw[i], related[i]
        worst = min((severity_rank(f.severity) for f in found), default=len(SEVERITIES))
        thr_max = throttled[i][1]
        return (worst, -(get_int(c, "oom_kills") or 0), -(thr_max or 0), get_str(c, "name"), i)

    order = sorted(range(len(raw)), key=relevance)
    draw = set(order[:CONTAINER_CHART_CAP])
    views = [_container(ctx, raw[i], i, related[i], i in draw, throttled[i]) for i in order]
    return split(views, "appendix-containers")


def _claims_text(alloc: dict[str, Any]) -> str:
    """`` (claim ml/train-0-gpu-x7k2p)`` after the grant kind ``dra``: the claim a user looks up."""
    claims = [c for c in alloc.get("claims") or () if isinstance(c, str)]
    return f" (claim {', '.join(claims)})" if claims else ""


def _cdi_text(alloc: dict[str, Any]) -> str:
    """`` nvidia.com/gpu=0`` after the grant kind: the CDI device names that granted the GPUs."""
    names = [n for n in alloc.get("cdi_devices") or () if isinstance(n, str)]
    return f" {', '.join(names)}" if names else ""
