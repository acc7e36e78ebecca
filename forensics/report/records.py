"""The report's view records: what :func:`forensics.report.view.build_view` hands the renderers.

Frozen dataclasses, one per thing a reader sees (the verdict, a finding, a chain step, a GPU, a
container, a bundle), and :class:`Split`, a long list cut into the rows shown in the body and
those left to the appendix. Every string in them is still untrusted text; renderers escape it.
The caps below bound what a report shows; the JSON report keeps everything.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from forensics.report.charts import ChartSpec, TimelineSpec

__all__ = [
    "APPENDIX_CAP",
    "BODY_ROWS",
    "CONTAINER_CHART_CAP",
    "EVIDENCE_CAP",
    "EXCERPT_CHARS",
    "GPU_CHART_CAP",
    "MARKER_CAP",
    "BundleView",
    "ChainStepView",
    "CollectorView",
    "ContainerView",
    "DerivedView",
    "EvidenceView",
    "FindingView",
    "GpuFactsView",
    "GpuView",
    "IncidentView",
    "NodeView",
    "ProcessView",
    "ReportView",
    "RuledOutView",
    "Split",
    "SubjectView",
    "UnattributedView",
    "VerdictView",
    "before_capture_text",
    "split",
]

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
class DerivedView:
    """Where a member the analysis rebuilt (``ring/<member>``, from the flight recorder's segments
    the bundle carries) got the cited line: the segment member, its line, its SHA-256 from the
    bundle manifest when known, and whether the analysis checked that SHA-256 against
    ``ring/provenance.json`` (``verified``: not where the bundle has no readable one). A sealed
    segment (``.jsonl.gz``) is the ring's file as the recorder sealed it; the other is the active
    one's whole lines, copied at capture."""

    member: str
    line: int
    member_sha256: str | None
    verified: bool = True

    @property
    def sealed(self) -> bool:
        return self.member.endswith(".gz")

    @property
    def note(self) -> str:
        """What the segment is: ``sealed segment, SHA-256 in ring/provenance.json``; one never
        checked says so (``..., NOT verified: no readable ring/provenance.json``)."""
        kind = "sealed segment" if self.sealed else "active segment, copied at capture"
        listed = "" if self.member_sha256 else "segment not in the manifest"
        if not self.verified:
            return ", ".join(x for x in (kind, "NOT verified: no readable ring/provenance.json", listed) if x)
        return f"{kind}, {listed or 'SHA-256 in ring/provenance.json'}"

    @property
    def text(self) -> str:
        """``rebuilt from ring/segments/seg-N.jsonl.gz line 37 (sealed segment, SHA-256 in ...)``."""
        return f"rebuilt from {self.member} line {self.line} ({self.note})"


@dataclass(frozen=True)
class EvidenceView:
    """One evidence reference, with the member's SHA-256 from the bundle manifest when known, and
    for a member the analysis rebuilt from the ring's segments, the segment line it came from."""

    bundle: str
    member: str
    locator: str
    excerpt: str
    member_sha256: str | None
    derived: DerivedView | None = None
    rebuilt: bool = False  # a ring/ member rebuilt from the segments: not in the manifest, not missing


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
    next_step: str = ""  # the rule's one-line next step (findings[].next_step), when the document has it
    before_capture_s: float | None = None  # how long before the capture it began, when it did
    raw_metrics: tuple[tuple[str, float], ...] = ()  # the numeric metrics by their document key
    occurrences: str = ""  # "6 occurrences, first ..., last ..., worst ..." for repeats merged into one

    @property
    def before_capture(self) -> str:
        """``before capture (7 min earlier)``, or "" for a finding inside the capture."""
        return before_capture_text(self.before_capture_s)

    @property
    def culprits(self) -> tuple[SubjectView, ...]:
        return tuple(s for s in self.subjects if s.role == "culprit")

    @property
    def victims(self) -> tuple[SubjectView, ...]:
        return tuple(s for s in self.subjects if s.role == "victim")


def before_capture_text(seconds: float | None) -> str:
    """The label of something that began before the capture, in every format."""
    if seconds is None or seconds < 1:
        return ""
    if seconds < 90:
        ago = f"{seconds:.0f} s"
    elif seconds < 5400:
        ago = f"{seconds / 60:.0f} min"
    elif seconds < 2 * 86400:
        ago = f"{seconds / 3600:.1f} h"
    else:
        ago = f"{seconds / 86400:.1f} days"
    return f"before capture ({ago} earlier)"


@dataclass(frozen=True)
class IncidentView:
    """One incident (``incidents[]``): connected findings with their own verdict line."""

    id: str
    relevance: str  # in-window | lead-up | history
    severity: str
    headline: str
    culprits: tuple[SubjectView, ...]
    victims: tuple[SubjectView, ...]
    parties: tuple[SubjectView, ...]
    impact: str
    start: str
    end: str
    before_capture_s: float | None
    finding_ids: tuple[str, ...]
    next_step: str

    @property
    def before_capture(self) -> str:
        return before_capture_text(self.before_capture_s)


@dataclass(frozen=True)
class GpuFactsView:
    """A GPU as page one names it: model, serial, VBIOS, MIG mode."""

    label: str
    name: str
    serial: str
    vbios_version: str
    mig_mode: str
    pci_bus_id: str


@dataclass(frozen=True)
class NodeView:
    """What a node is (``nodes[]`` facts and its GPUs)."""

    host: str
    driver_version: str
    cuda_version: str
    kernel: str
    os: str
    gpus: tuple[GpuFactsView, ...]


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
    expected: bool = True  # False: a source this kind of node need not have (Kubernetes on a Docker host)

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
    chart_note: str = ""  # findings of this GPU too far from its samples to mark on its chart

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
    allocation_blanket: bool  # GPUs reachable through a blanket grant (the "(blanket)" tag)
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
    chart_note: str = ""  # findings of this container too far from its samples to mark on its chart
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
    rebuilt: frozenset[str] = frozenset()  # the cited members rebuilt from the ring's segments
    integrity_failed: bool = False  # its members do not match its manifest (the document's integrity.ok false)


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
    #: Every finding and collector in the document's own order (the terminal summary's order).
    findings: tuple[FindingView, ...] = ()
    collectors_in_order: tuple[CollectorView, ...] = ()
    incidents: tuple[IncidentView, ...] = ()
    nodes: tuple[NodeView, ...] = ()
    timeline: TimelineSpec | None = None
    window: str = ""  # the window under investigation, when the user named one (analyze --window)

    @property
    def integrity_warning(self) -> str:
        """The verdict's integrity line when a bundle does not match its manifest ("" when all do):
        said beside the verdict, not only among the limitations further down."""
        bad = [b.name for b in self.bundles if b.integrity_failed]
        if not bad:
            return ""
        which = f"{bad[0]} does not match its manifest" if len(bad) == 1 else \
            f"{len(bad)} bundles do not match their manifests ({', '.join(bad)})"
        return (f"FAILED: {which}: the evidence was altered or damaged after capture; treat the findings "
                "as untrusted and run `gpuforensics verify`")

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

