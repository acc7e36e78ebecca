"""The report's view model: the analysis JSON document (docs/analysis-format.md) made presentable.

:func:`build_view` reads the document defensively (a field of the wrong type is treated as
unknown, never trusted), resolves references (evidence -> the member's SHA-256 from
``bundles[].members``, container ids -> names, GPU UUIDs -> ``GPU n``), orders content for a
reader (the chain first, most severe first), summarises long lists (the top entries in the body,
the rest in an appendix with a cap) and prepares chart specs. It is pure: no I/O, no matplotlib.
Every string it returns is still untrusted text; renderers escape it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from forensics.errors import ReportError
from forensics.report.charts import ChartSpec, Line, Marker, Panel
from forensics.report.formatting import (
    fmt_bytes,
    fmt_duration,
    fmt_pct,
    fmt_ratio,
    parse_time,
)

__all__ = [
    "BODY_ROWS",
    "APPENDIX_CAP",
    "BundleView",
    "ChainStepView",
    "CollectorView",
    "ContainerView",
    "EvidenceView",
    "FindingView",
    "GpuView",
    "ProcessView",
    "ReportView",
    "RuledOutView",
    "SEVERITIES",
    "Split",
    "SubjectView",
    "UnattributedView",
    "VerdictView",
    "build_view",
    "split",
]

FORMAT = "gpuforensics-analysis"
FORMAT_VERSION = 1
SEVERITIES = ("critical", "high", "medium", "low", "info")
#: Rows of a long table shown in the body; the rest goes to the appendix.
BODY_ROWS = 12
#: Rows of one table kept in the appendix; beyond that the JSON report has them.
APPENDIX_CAP = 500
#: Evidence items shown per finding.
EVIDENCE_CAP = 12
#: Charts drawn at most (GPUs, containers); the most relevant first.
GPU_CHART_CAP = 8
CONTAINER_CHART_CAP = 4
#: Finding markers per chart.
MARKER_CAP = 8
#: Longest excerpt shown (the analyzer already cuts at 240).
EXCERPT_CHARS = 400

T = TypeVar("T")
GIB = 1024**3


# --------------------------------------------------------------------------- tolerant access
def _str(d: Mapping[str, Any], key: str, default: str = "") -> str:
    value = d.get(key)
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return default
    if isinstance(value, int | float):
        return str(value)
    return default


def _num(d: Mapping[str, Any], key: str) -> float | None:
    value = d.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def _int(d: Mapping[str, Any], key: str) -> int | None:
    value = d.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _bool(d: Mapping[str, Any], key: str) -> bool | None:
    value = d.get(key)
    return value if isinstance(value, bool) else None


def _list(d: Mapping[str, Any], key: str) -> list[Any]:
    value = d.get(key)
    return value if isinstance(value, list) else []


def _dicts(d: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    return [item for item in _list(d, key) if isinstance(item, dict)]


def _dict(d: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = d.get(key)
    return value if isinstance(value, dict) else {}


def _strs(d: Mapping[str, Any], key: str) -> tuple[str, ...]:
    return tuple(item for item in _list(d, key) if isinstance(item, str))


def _unix(value: object) -> float | None:
    parsed = parse_time(value)
    return parsed.timestamp() if parsed is not None else None


def _severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


# --------------------------------------------------------------------------- summarised lists
@dataclass(frozen=True)
class Split(Generic[T]):
    """A long list cut for reading: ``body`` in the report, ``appendix`` (capped) at the end."""

    body: tuple[T, ...]
    appendix: tuple[T, ...]
    omitted: int
    anchor: str

    @property
    def total(self) -> int:
        return len(self.body) + len(self.appendix) + self.omitted

    @property
    def all_shown(self) -> tuple[T, ...]:
        return self.body + self.appendix


def split(
    items: Sequence[T], anchor: str, body_rows: int = BODY_ROWS, cap: int = APPENDIX_CAP
) -> Split[T]:
    """Keep ``body_rows`` items in the body and at most ``cap`` more in the appendix."""
    body = tuple(items[:body_rows])
    rest = items[body_rows:]
    return Split(body, tuple(rest[:cap]), max(0, len(rest) - cap), anchor)


# --------------------------------------------------------------------------- records
@dataclass(frozen=True)
class SubjectView:
    """A subject (container, pod, process, gpu, mig, host) as the document names it."""

    role: str
    type: str
    id: str
    name: str
    node: str

    @property
    def label(self) -> str:
        return self.name or self.id or "(unnamed)"


@dataclass(frozen=True)
class EvidenceView:
    """One evidence reference, with the member's SHA-256 from the bundle manifest when known."""

    bundle: str
    member: str
    locator: str
    excerpt: str
    member_sha256: str | None


@dataclass(frozen=True)
class FindingView:
    """One finding (``findings[]``)."""

    id: str
    kind: str
    severity: str
    confidence: float | None
    summary: str
    start: str
    end: str
    node: str
    subjects: tuple[SubjectView, ...]
    metrics: tuple[tuple[str, str], ...]
    evidence: tuple[EvidenceView, ...]
    evidence_omitted: int
    causes: tuple[str, ...]

    @property
    def culprits(self) -> tuple[SubjectView, ...]:
        return tuple(s for s in self.subjects if s.role == "culprit")

    @property
    def victims(self) -> tuple[SubjectView, ...]:
        return tuple(s for s in self.subjects if s.role == "victim")


@dataclass(frozen=True)
class ChainStepView:
    """One step of the evidence chain: when, what, which finding backs it, what it led to."""

    time: str
    text: str
    finding_id: str
    finding: FindingView | None
    leads_to: tuple[str, ...]


@dataclass(frozen=True)
class RuledOutView:
    """A confounder checked and not found, with the evidence examined."""

    kind: str
    statement: str
    evidence: tuple[EvidenceView, ...]


@dataclass(frozen=True)
class VerdictView:
    """The verdict block: headline, culprits, victims, impact, span."""

    headline: str
    clean: bool
    severity: str
    culprits: tuple[SubjectView, ...]
    victims: tuple[SubjectView, ...]
    impact: str
    start: str
    end: str
    duration: str


@dataclass(frozen=True)
class CollectorView:
    """A collector's status from a bundle manifest (``collectors[]``)."""

    bundle: str
    name: str
    status: str
    duration_s: float | None
    error: str
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class ProcessView:
    """A process seen on a GPU, with its container resolved to a name."""

    pid: str
    name: str
    container: str
    pod: str
    used_memory_bytes: float | None
    sm_util_avg_pct: float | None
    allocated: bool | None


@dataclass(frozen=True)
class GpuView:
    """One GPU: who was allocated it, who used it, its processes and its chart."""

    key: str
    index: str
    uuid: str
    name: str
    node: str
    pci_bus_id: str
    memory_total_bytes: float | None
    mig_enabled: bool | None
    allocated_to: tuple[SubjectView, ...]
    used_by: tuple[SubjectView, ...]
    unallocated_users: tuple[SubjectView, ...]
    processes: Split[ProcessView]
    util_avg_pct: float | None
    util_max_pct: float | None
    memory_peak_bytes: float | None
    finding_ids: tuple[str, ...]
    chart: ChartSpec | None

    @property
    def label(self) -> str:
        return f"GPU {self.index}" if self.index else (self.uuid or "GPU")


@dataclass(frozen=True)
class ContainerView:
    """One container: allocation, limits, throttling, memory, OOM, related findings."""

    key: str
    id: str
    name: str
    node: str
    pod: str
    image: str
    state: str
    exit_code: str
    oom_killed: bool | None
    oom_kills: int | None
    allocation_kind: str
    allocation_explicit: bool | None
    allocation_gpus: tuple[str, ...]
    allocation_source: str
    allocation_detail: str
    cpu_quota_cores: float | None
    memory_limit_bytes: float | None
    throttled_avg_ratio: float | None
    throttled_max_ratio: float | None
    memory_peak_bytes: float | None
    memory_peak_of_limit_ratio: float | None
    finding_ids: tuple[str, ...]
    findings: tuple[FindingView, ...]
    chart: ChartSpec | None
    pod_name: str = ""  # namespace/name of the pod it belongs to, when the analysis knows it
    pod_container: str = ""  # its name inside the pod

    @property
    def label(self) -> str:
        if self.pod_name:  # an SRE on Kubernetes thinks in pods, not in kubelet container names
            return f"pod {self.pod_name} (container {self.pod_container or self.name or self.id[:12]})"
        return self.name or self.id[:12] or "(unnamed)"

    @property
    def oom_events(self) -> tuple[FindingView, ...]:
        """OOM kills the analysis found for this container (``oom-kill`` findings)."""
        return tuple(f for f in self.findings if f.kind == "oom-kill")

    @property
    def pressure(self) -> tuple[FindingView, ...]:
        """Pressure stalls (PSI) the analysis found for this container."""
        return tuple(f for f in self.findings if f.kind == "pressure-stall")


@dataclass(frozen=True)
class UnattributedView:
    """An entity the analyzer could not join (kept rather than dropped)."""

    type: str
    id: str
    name: str
    node: str
    reason: str
    gpu: str


@dataclass(frozen=True)
class BundleView:
    """One analysed bundle and its manifest digest."""

    path: str
    name: str
    file_sha256: str
    host: str
    captured_start: str
    captured_end: str
    interrupted: bool | None
    tool_version: str
    member_count: int
    cited: Split[tuple[str, str]]


@dataclass(frozen=True)
class ReportView:
    """Everything a renderer needs, in reading order."""

    title: str
    hosts: tuple[str, ...]
    tool_version: str
    generated_at: str
    capture_start: str
    capture_end: str
    primary_sha256: str
    verdict: VerdictView
    severity_counts: tuple[tuple[str, int], ...]
    chain: tuple[ChainStepView, ...]
    chain_findings: tuple[FindingView, ...]
    other_findings: Split[FindingView]
    ruled_out: tuple[RuledOutView, ...]
    limitations: tuple[str, ...]
    collectors: Split[CollectorView]
    collector_problems: tuple[CollectorView, ...]
    gpus: Split[GpuView]
    containers: Split[ContainerView]
    unattributed: Split[UnattributedView]
    bundles: tuple[BundleView, ...]
    thresholds: tuple[tuple[str, str], ...]

    @property
    def charts(self) -> tuple[ChartSpec, ...]:
        items: Iterable[GpuView | ContainerView] = (
            *self.gpus.all_shown,
            *self.containers.all_shown,
        )
        return tuple(item.chart for item in items if item.chart is not None)

    @property
    def has_appendix(self) -> bool:
        return any(
            part.appendix or part.omitted
            for part in (
                self.other_findings,
                self.collectors,
                self.gpus,
                self.containers,
                self.unattributed,
            )
        ) or any(b.cited.total for b in self.bundles)


# --------------------------------------------------------------------------- builders
def _subject(d: Mapping[str, Any]) -> SubjectView:
    return SubjectView(
        _str(d, "role"), _str(d, "type"), _str(d, "id"), _str(d, "name"), _str(d, "node")
    )


def _subjects(d: Mapping[str, Any], key: str) -> tuple[SubjectView, ...]:
    return tuple(_subject(s) for s in _dicts(d, key))


_UNIT_SUFFIXES = ("_bytes", "_pct", "_ratio", "_s")


def _metric_name(key: str) -> str:
    """``gpu_memory_used_bytes`` -> ``gpu memory used`` (the unit shows in the value)."""
    for suffix in _UNIT_SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            key = key[: -len(suffix)]
            break
    return key.replace("_", " ")


def _metric_text(key: str, value: object) -> str:
    if key.endswith("_bytes"):
        return fmt_bytes(value)
    if key.endswith("_pct"):
        return fmt_pct(value, 1)
    if key.endswith("_ratio"):
        return fmt_ratio(value, 1)
    if key.endswith("_s"):
        return fmt_duration(value)
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "—"


class _Members:
    """bundle basename -> member -> sha256, from ``bundles[].members``."""

    def __init__(self, bundles: Sequence[Mapping[str, Any]]) -> None:
        self._by_bundle: dict[str, dict[str, str]] = {}
        self.cited: dict[str, set[str]] = {}
        for bundle in bundles:
            members = {k: v for k, v in _dict(bundle, "members").items() if isinstance(v, str)}
            self._by_bundle[posixpath.basename(_str(bundle, "path"))] = members

    def sha(self, bundle: str, member: str) -> str | None:
        """The member's SHA-256, recording the member as cited by the report."""
        key = posixpath.basename(bundle)
        if key not in self._by_bundle and len(self._by_bundle) == 1:
            key = next(iter(self._by_bundle))
        self.cited.setdefault(key, set()).add(member)
        return self._by_bundle.get(key, {}).get(member)


def _evidence(items: list[dict[str, Any]], members: _Members) -> tuple[EvidenceView, ...]:
    out = []
    for item in items:
        bundle, member = _str(item, "bundle"), _str(item, "member")
        excerpt = _str(item, "excerpt")
        if len(excerpt) > EXCERPT_CHARS:
            excerpt = excerpt[: EXCERPT_CHARS - 3] + "..."
        out.append(
            EvidenceView(
                bundle, member, _str(item, "locator"), excerpt, members.sha(bundle, member)
            )
        )
    return tuple(out)


def _finding(d: Mapping[str, Any], members: _Members) -> FindingView:
    evidence = _evidence(_dicts(d, "evidence"), members)
    metrics = tuple(
        (_metric_name(str(k)), _metric_text(str(k), v))
        for k, v in sorted(_dict(d, "metrics").items())
    )
    severity = _str(d, "severity", "info").lower()
    return FindingView(
        id=_str(d, "id"),
        kind=_str(d, "kind"),
        severity=severity if severity in SEVERITIES else "info",
        confidence=_num(d, "confidence"),
        summary=_str(d, "summary"),
        start=_str(d, "start"),
        end=_str(d, "end"),
        node=_str(d, "node"),
        subjects=_subjects(d, "subjects"),
        metrics=metrics,
        evidence=evidence[:EVIDENCE_CAP],
        evidence_omitted=max(0, len(evidence) - EVIDENCE_CAP),
        causes=_strs(d, "causes"),
    )


def _verdict(d: Mapping[str, Any], findings: Sequence[FindingView]) -> VerdictView:
    start, end = _str(d, "start"), _str(d, "end")
    t0, t1 = _unix(start), _unix(end)
    severity = _str(d, "severity").lower()
    if severity not in SEVERITIES:
        ranked = sorted(findings, key=lambda f: _severity_rank(f.severity))
        severity = ranked[0].severity if ranked else ""
    clean = _bool(d, "clean")
    return VerdictView(
        headline=_str(d, "headline")
        or ("no incident found" if clean else "no verdict in the analysis"),
        clean=bool(clean) if clean is not None else not findings,
        severity=severity,
        culprits=_subjects(d, "culprits"),
        victims=_subjects(d, "victims"),
        impact=_str(d, "impact"),
        start=start,
        end=end,
        duration=fmt_duration(t1 - t0) if t0 is not None and t1 is not None and t1 >= t0 else "",
    )


def _times(series: Mapping[str, Any]) -> tuple[float, ...]:
    """A series' ``t`` axis (unix seconds); empty when any entry is not a number."""
    raw = _list(series, "t")
    t = tuple(float(x) for x in raw if type(x) is float or type(x) is int)
    return t if len(t) == len(raw) else ()


def _known(raw: object) -> list[float]:
    """The known (finite, numeric) values of a series, for statistics."""
    if not isinstance(raw, list):
        return []
    return [
        v for v in raw if (type(v) is float and v == v and v not in (_INF, -_INF)) or type(v) is int
    ]


def _values(raw: object, n: int) -> tuple[float | None, ...]:
    """A series' values as floats (``None`` for unknown or non-numeric), at most ``n`` of them."""
    if not isinstance(raw, list):
        return ()
    out: list[float | None] = []
    append = out.append
    for value in raw[:n]:
        kind = type(value)  # exact types: bool is not a number here, and this loop is hot
        if kind is float:
            append(value if value == value and value not in (_INF, -_INF) else None)
        elif kind is int:
            append(float(value))
        else:
            append(None)
    return tuple(out)


_INF = float("inf")


_MEMORY_UNITS = (("GiB", 1024.0**3), ("MiB", 1024.0**2), ("KiB", 1024.0), ("B", 1.0))


def _memory_panel(
    title: str,
    t: tuple[float, ...],
    lines: Sequence[tuple[str, tuple[float | None, ...], bool]],
    reference: float | None,
    reference_name: str,
) -> Panel:
    """A memory panel in the unit that suits its largest value (GiB for GPUs, KiB for busybox)."""
    peak = max([v for _, values, _ in lines for v in values if v is not None] + [reference or 0.0])
    unit, size = next(((u, n) for u, n in _MEMORY_UNITS if peak >= n), _MEMORY_UNITS[-1])
    return Panel(
        title,
        unit,
        tuple(
            Line(label, t, tuple(None if v is None else v / size for v in values), emphasis)
            for label, values, emphasis in lines
        ),
        reference=reference / size if reference else None,
        reference_label=f"{reference_name} {fmt_bytes(reference)}" if reference else "",
    )


def _stats(raw: object) -> tuple[float | None, float | None]:
    """(mean, max) of a series' known values, ``(None, None)`` when none is known."""
    known = _known(raw)
    return (sum(known) / len(known), float(max(known))) if known else (None, None)


def _markers(findings: Sequence[FindingView], t: Sequence[float]) -> tuple[Marker, ...]:
    if not t:
        return ()
    lo, hi = min(t), max(t)
    ranked = sorted(findings, key=lambda f: (_severity_rank(f.severity), f.start))[:MARKER_CAP]
    out = []
    for finding in sorted(ranked, key=lambda f: f.start):
        at = _unix(finding.start)
        if at is not None and lo <= at <= hi:
            out.append(Marker(at, finding.id, finding.severity))
    return tuple(out)


def _window(verdict: VerdictView, t: Sequence[float]) -> tuple[float, float] | None:
    start, end = _unix(verdict.start), _unix(verdict.end)
    if start is None or not t:
        return None
    end = end if end is not None and end >= start else start
    lo, hi = min(t), max(t)
    if end < lo or start > hi:
        return None
    if end - start < (hi - lo) / 120:
        end = start + (hi - lo) / 120  # a one-instant incident still gets a visible band
    return max(start, lo), min(end, hi)


def _involves(finding: FindingView, ids: set[str]) -> bool:
    return any(s.id in ids for s in finding.subjects if s.id)


class _Builder:
    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.doc = doc
        bundles = _dicts(doc, "bundles")
        if not bundles and isinstance(doc.get("bundle"), dict):
            bundles = [doc["bundle"]]
        self.bundles = bundles
        self.members = _Members(bundles)
        findings = [_finding(f, self.members) for f in _dicts(doc, "findings")]
        self.findings = findings
        self.by_id = {f.id: f for f in findings if f.id}
        self.verdict = _verdict(_dict(doc, "verdict"), findings)
        self.container_names: dict[str, str] = {}
        for c in _dicts(doc, "containers"):
            if _str(c, "id"):
                self.container_names[_str(c, "id")] = _str(c, "name") or _str(c, "id")[:12]
        self.gpu_names: dict[str, str] = {}
        for g in _dicts(doc, "gpus"):
            if _str(g, "uuid"):
                index = _str(g, "index")
                self.gpu_names[_str(g, "uuid")] = f"GPU {index}" if index else _str(g, "uuid")

    # ---------------------------------------------------------------- gpus
    def gpu(self, d: Mapping[str, Any], position: int, draw: bool) -> GpuView:
        uuid, index = _str(d, "uuid"), _str(d, "index")
        allocated = _subjects(d, "allocated_to")
        used = _subjects(d, "used_by")
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
        for p in _dicts(d, "processes"):
            container = _str(p, "container")
            procs.append(
                ProcessView(
                    pid=_str(p, "pid"),
                    name=_str(p, "name"),
                    container=self.container_names.get(container, container[:12])
                    if container
                    else "",
                    pod=_str(p, "pod"),
                    used_memory_bytes=_num(p, "used_memory_bytes"),
                    sm_util_avg_pct=_num(p, "sm_util_avg_pct"),
                    allocated=(container in allocated_ids) if container and allocated_ids else None,
                )
            )
        procs.sort(key=lambda p: -(p.used_memory_bytes or 0))
        key = f"gpu-{position}"
        series = _dict(d, "series")
        avg, peak = _stats(series.get("gpu_util_pct"))
        _, mem_peak = _stats(series.get("memory_used_bytes"))
        ids = {uuid} | {s.id for s in used if s.id} | {p.pid for p in procs}
        related = [f for f in self.findings if _involves(f, ids)]
        t = _times(series) if draw else ()
        chart = self._gpu_chart(key, d, t, series, related) if t else None
        return GpuView(
            key=key,
            index=index,
            uuid=uuid,
            name=_str(d, "name"),
            node=_str(d, "node"),
            pci_bus_id=_str(d, "pci_bus_id"),
            memory_total_bytes=_num(d, "memory_total_bytes"),
            mig_enabled=_bool(d, "mig_enabled"),
            allocated_to=allocated,
            used_by=used,
            unallocated_users=unallocated,
            processes=split(procs, f"{key}-processes"),
            util_avg_pct=avg,
            util_max_pct=peak,
            memory_peak_bytes=mem_peak,
            finding_ids=tuple(f.id for f in related),
            chart=chart,
        )

    def _gpu_chart(
        self,
        key: str,
        d: Mapping[str, Any],
        t: tuple[float, ...],
        series: Mapping[str, Any],
        related: Sequence[FindingView],
    ) -> ChartSpec:
        gpu_util = _values(series.get("gpu_util_pct"), len(t))
        memory = _values(series.get("memory_used_bytes"), len(t))
        pid_names = {
            _str(p, "pid"): (_str(p, "name"), _str(p, "container")) for p in _dicts(d, "processes")
        }

        def pid_label(pid: str) -> str:
            name, container = pid_names.get(pid, ("", ""))
            owner = self.container_names.get(container, "") if container else "host"
            return f"pid {pid} {name} ({owner})" if owner else f"pid {pid} {name}"

        util_lines = [Line("GPU utilization", t, gpu_util, emphasis=True)] if gpu_util else []
        proc_sm = _dict(series, "process_sm_util_pct")
        ranked = sorted(proc_sm.items(), key=lambda kv: -(_stats(kv[1])[0] or 0))
        for pid, values in ranked[:6]:
            util_lines.append(Line(f"SM {pid_label(str(pid))}", t, _values(values, len(t))))
        total = _num(d, "memory_total_bytes")
        mem_lines: list[tuple[str, tuple[float | None, ...], bool]] = (
            [("memory used", memory, True)] if memory else []
        )
        proc_mem = _dict(series, "process_memory_bytes")
        ranked_mem = sorted(proc_mem.items(), key=lambda kv: -(_stats(kv[1])[1] or 0))
        for pid, values in ranked_mem[:6]:
            mem_lines.append((pid_label(str(pid)), _values(values, len(t)), False))
        panels = [
            Panel("Utilization (GPU and per-process SM)", "%", tuple(util_lines), y_max=105.0),
            _memory_panel("GPU memory", t, mem_lines, total, "total"),
        ]
        index = _str(d, "index")
        return ChartSpec(
            key, f"GPU {index}", tuple(panels), _window(self.verdict, t), _markers(related, t)
        )

    def gpus(self) -> Split[GpuView]:
        raw = _dicts(self.doc, "gpus")
        # The GPUs findings point at come first among those that get a chart.
        involved = {s.id for f in self.findings for s in f.subjects if s.type in ("gpu", "mig")}
        order = sorted(range(len(raw)), key=lambda i: (_str(raw[i], "uuid") not in involved, i))
        draw = set(order[:GPU_CHART_CAP])
        views = [self.gpu(raw[i], i, i in draw) for i in order]
        return split(views, "appendix-gpus", body_rows=GPU_CHART_CAP)

    # ---------------------------------------------------------------- containers
    def container(
        self,
        d: Mapping[str, Any],
        position: int,
        related: Sequence[FindingView],
        draw: bool,
        throttled_stats: tuple[float | None, float | None],
    ) -> ContainerView:
        key = f"container-{position}"
        series = _dict(d, "series")
        thr_avg, thr_max = throttled_stats
        _, mem_peak = _stats(series.get("memory_bytes"))
        t = _times(series) if draw else ()
        limit = _num(d, "memory_limit_bytes")
        alloc = _dict(d, "gpu_allocation")
        gpus = tuple(self.gpu_names.get(g, g) for g in _strs(alloc, "gpus"))
        chart = None
        if t:
            throttled = _values(series.get("cpu_throttled_ratio"), len(t))
            memory = _values(series.get("memory_bytes"), len(t))
            panels = (
                Panel(
                    "CPU throttling (share of CFS periods throttled)"
                    if _num(d, "cpu_quota_cores") is not None or any(v is not None for v in throttled)
                    else "CPU throttling: none possible (no CPU quota, so CFS never throttles it)",
                    "%",
                    (
                        Line(
                            "throttled periods",
                            t,
                            tuple(None if v is None else v * 100 for v in throttled),
                            True,
                        ),
                    ),
                    y_max=105.0,
                ),
                _memory_panel("Memory", t, [("memory used", memory, True)], limit, "limit"),
            )
            chart = ChartSpec(
                key, _str(d, "name"), panels, _window(self.verdict, t), _markers(related, t)
            )
        oom_killed = _bool(d, "oom_killed")
        pod_name, pod_container = self._pod_of(_str(d, "pod"), _str(d, "id"))
        return ContainerView(
            pod_name=pod_name,
            pod_container=pod_container,
            key=key,
            id=_str(d, "id"),
            name=_str(d, "name"),
            node=_str(d, "node"),
            pod=_str(d, "pod"),
            image=_str(d, "image"),
            state=_str(d, "state"),
            exit_code=_str(d, "exit_code"),
            oom_killed=oom_killed,
            oom_kills=_int(d, "oom_kills"),
            allocation_kind=_str(alloc, "kind", "unknown"),
            allocation_explicit=_bool(alloc, "explicit"),
            allocation_gpus=gpus,
            allocation_source=_str(alloc, "source"),
            allocation_detail=_str(alloc, "detail"),
            cpu_quota_cores=_num(d, "cpu_quota_cores"),
            memory_limit_bytes=limit,
            throttled_avg_ratio=thr_avg,
            throttled_max_ratio=thr_max,
            memory_peak_bytes=mem_peak,
            memory_peak_of_limit_ratio=mem_peak / limit if mem_peak is not None and limit else None,
            finding_ids=tuple(f.id for f in related),
            findings=tuple(_sorted_findings(related)),
            chart=chart,
        )

    def _pod_of(self, uid: str, container_id: str) -> tuple[str, str]:
        """(``namespace/name``, container name in the pod) from the document's ``pods``."""
        if not uid:
            return "", ""
        for p in _dicts(self.doc, "pods"):
            if _str(p, "uid") != uid:
                continue
            ids, names = p.get("containers"), p.get("container_names")
            cname = ""
            if isinstance(ids, list) and isinstance(names, list) and container_id in ids:
                i = ids.index(container_id)
                cname = str(names[i]) if i < len(names) else ""
            ns, name = _str(p, "namespace"), _str(p, "name")
            return (f"{ns}/{name}" if ns and name else name), cname
        return "", ""

    def containers(self) -> Split[ContainerView]:
        raw = _dicts(self.doc, "containers")
        related = [[f for f in self.findings if _involves(f, {_str(c, "id")} - {""})] for c in raw]
        throttled = [_stats(_dict(c, "series").get("cpu_throttled_ratio")) for c in raw]

        def relevance(i: int) -> tuple[Any, ...]:
            c, found = raw[i], related[i]
            worst = min((_severity_rank(f.severity) for f in found), default=len(SEVERITIES))
            thr_max = throttled[i][1]
            return (worst, -(_int(c, "oom_kills") or 0), -(thr_max or 0), _str(c, "name"), i)

        order = sorted(range(len(raw)), key=relevance)
        draw = set(order[:CONTAINER_CHART_CAP])
        views = [self.container(raw[i], i, related[i], i in draw, throttled[i]) for i in order]
        return split(views, "appendix-containers")

    # ---------------------------------------------------------------- rest
    def chain(self) -> tuple[ChainStepView, ...]:
        steps = []
        for d in _dicts(self.doc, "chain"):
            fid = _str(d, "finding")
            finding = self.by_id.get(fid)
            steps.append(
                ChainStepView(
                    time=_str(d, "time") or (finding.start if finding else ""),
                    text=_str(d, "text") or (finding.summary if finding else ""),
                    finding_id=fid,
                    finding=finding,
                    leads_to=_strs(d, "leads_to"),
                )
            )
        steps.sort(key=lambda s: (_unix(s.time) is None, _unix(s.time) or 0.0))
        return tuple(steps)

    def bundle(self, d: Mapping[str, Any], position: int) -> BundleView:
        """A bundle with the members the report cites (all members are in its manifest.json)."""
        path = _str(d, "path")
        name = posixpath.basename(path)
        manifest = _dict(d, "members")
        cited = sorted(
            (m, v if isinstance(v, str) else "")
            for m in self.members.cited.get(name, set())
            for v in [manifest.get(m)]
        )
        return BundleView(
            path=path,
            name=name,
            file_sha256=_str(d, "file_sha256"),
            host=_str(d, "host"),
            captured_start=_str(d, "captured_start"),
            captured_end=_str(d, "captured_end"),
            interrupted=_bool(d, "interrupted"),
            tool_version=_str(d, "tool_version"),
            member_count=len(manifest),
            cited=split(cited, f"appendix-members-{position}", body_rows=0),
        )

    def collectors(self) -> list[CollectorView]:
        out = []
        for d in _dicts(self.doc, "collectors"):
            out.append(
                CollectorView(
                    bundle=_str(d, "bundle"),
                    name=_str(d, "name"),
                    status=_str(d, "status", "unknown"),
                    duration_s=_num(d, "duration_s"),
                    error=_str(d, "error"),
                    notes=_strs(d, "notes"),
                )
            )
        # Problems first: they say what the report cannot say.
        out.sort(key=lambda c: (c.ok, c.bundle, c.name))
        return out


def _sorted_findings(findings: Iterable[FindingView]) -> list[FindingView]:
    return sorted(findings, key=lambda f: (_severity_rank(f.severity), _unix(f.start) or 0.0, f.id))


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
    b = _Builder(doc)
    chain = b.chain()
    in_chain = {s.finding_id for s in chain}
    chain_findings = tuple(
        b.by_id[fid] for fid in dict.fromkeys(s.finding_id for s in chain) if fid in b.by_id
    )
    others = _sorted_findings(f for f in b.findings if f.id not in in_chain)
    ruled_out = tuple(
        RuledOutView(
            _str(d, "kind"), _str(d, "statement"), _evidence(_dicts(d, "evidence"), b.members)
        )
        for d in _dicts(doc, "ruled_out")
    )
    bundles = tuple(
        b.bundle(d, i) for i, d in enumerate(b.bundles)
    )  # after every evidence is cited
    hosts = tuple(dict.fromkeys(v.host for v in bundles if v.host))
    starts = [s for s in (_unix(v.captured_start) for v in bundles) if s is not None]
    ends = [e for e in (_unix(v.captured_end) for v in bundles) if e is not None]
    counts = {s: 0 for s in SEVERITIES}
    for f in b.findings:
        counts[f.severity] += 1
    collectors = b.collectors()
    unattributed = [
        UnattributedView(
            _str(d, "type"),
            _str(d, "id"),
            _str(d, "name"),
            _str(d, "node"),
            _str(d, "reason"),
            b.gpu_names.get(_str(d, "gpu"), _str(d, "gpu")),
        )
        for d in _dicts(doc, "unattributed")
    ]
    thresholds = tuple(
        (str(k), _metric_text(str(k), v)) for k, v in sorted(_dict(doc, "thresholds").items())
    )
    title_host = (
        hosts[0] if len(hosts) == 1 else (f"{len(hosts)} nodes" if hosts else "unknown host")
    )
    return ReportView(
        title=f"GPU incident report: {title_host}",
        hosts=hosts,
        tool_version=_str(doc, "tool_version"),
        generated_at=_str(doc, "generated_at"),
        capture_start=bundles[0].captured_start
        if len(bundles) == 1
        else (_iso(min(starts)) if starts else ""),
        capture_end=bundles[0].captured_end
        if len(bundles) == 1
        else (_iso(max(ends)) if ends else ""),
        primary_sha256=bundles[0].file_sha256 if bundles else "",
        verdict=b.verdict,
        severity_counts=tuple((s, n) for s, n in counts.items() if n),
        chain=chain,
        chain_findings=chain_findings,
        other_findings=split(
            others, "appendix-findings", body_rows=BODY_ROWS if chain else 2 * BODY_ROWS
        ),
        ruled_out=ruled_out,
        limitations=_strs(doc, "limitations"),
        collectors=split(collectors, "appendix-collectors", body_rows=3 * BODY_ROWS),
        collector_problems=tuple(c for c in collectors if not c.ok),
        gpus=b.gpus(),
        containers=b.containers(),
        unattributed=split(unattributed, "appendix-unattributed"),
        bundles=bundles,
        thresholds=thresholds,
    )


def _iso(unix: float) -> str:
    parsed = parse_time(unix)
    return parsed.strftime("%Y-%m-%dT%H:%M:%SZ") if parsed else ""


def finding_lookup(view: ReportView) -> Callable[[str], FindingView | None]:
    """id -> finding, for templates that follow ``causes`` and ``leads_to`` links."""
    table = {f.id: f for f in (*view.chain_findings, *view.other_findings.all_shown)}
    return table.get
