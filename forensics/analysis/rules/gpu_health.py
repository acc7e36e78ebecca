"""GPU health: ``gpu-xid-fault``, ``gpu-lost``, ``gpu-memory-health``, ``gpu-recovery-action`` and
``gpu-clock-throttle``.

Sources: kernel log ``NVRM: Xid (PCI:...): <code>, pid=..., name=..., ...`` lines, the driver's
fell-off-the-bus messages without an Xid number (continuation records joined by the kernel loader)
and NVML ``nvmlEventTypeXidCriticalError`` events; NVML calls answering GpuIsLost; the memory-error
counters of the snapshot and of the reading after sampling (``nvmlDeviceGetTotalEccErrors``,
``GetRetiredPages_v2``, ``GetRetiredPagesPendingStatus``, ``GetRemappedRows``) and
``nvmlDeviceGetGpuRecoveryAction``; ``nvmlDeviceGetCurrentClocksEventReasons`` per sample.

Xid meanings and actions come from NVIDIA's Xid catalog (:mod:`forensics.analysis.xid_catalog`).
Records are grouped per GPU (its UUID, else its PCI address: records of different addresses are
never merged); the Xids of one GPU less than ``xid_burst_window_s`` apart are a burst, whose first
Xid is the cause and whose later Xids that the catalog says an earlier one causes (45 after any,
63/64 after memory errors, 154 summarising the others, ...) are consequences chained to it. Each PID
a finding names is given its own record's time (``subjects[].time``).

Next step (one line per kind, until FindingKind carries one): gpu-xid-fault: the catalog's immediate
action for the cause (``metrics.action``); gpu-lost: drain the node and restart it (Xid 79's
RESTART_BM), then check the PCIe link, seating and power; gpu-memory-health: reset the GPU when a
reset is needed, open an RMA/support case for a candidate; gpu-recovery-action: the action NVML names.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from forensics.analysis.findings import Evidence, Finding, Role, Severity, Subject
from forensics.analysis.kinds import FindingKind, Harm, RuledOutCheck
from forensics.analysis.model import GpuHealthReading, GpuLostWitness, Model, XidEvent, norm_pci
from forensics.analysis.naming import fmt_time, gpu_label, with_pod
from forensics.analysis.rules.common import dedupe_evidence, dedupe_subjects
from forensics.analysis.thresholds import AnalysisConfig
from forensics.analysis.xid_catalog import BUCKETS, CATALOG_URL, XidInfo, caused_by, xid_info

__all__ = [
    "CLOCK_REASONS",
    "GPU_CLOCK_THROTTLE",
    "GPU_LOST",
    "GPU_MEMORY_HEALTH",
    "GPU_RECOVERY_ACTION",
    "GPU_XID_FAULT",
    "RECOVERY_ACTIONS",
    "gpu_clock_throttle",
    "gpu_lost",
    "gpu_memory_health",
    "gpu_recovery_action",
    "gpu_xid_fault",
    "xid_meaning",
]

GPU_LOST = FindingKind("gpu-lost", severity="critical", needs=(), rank=78, hardware=True)
# A critical Xid is a hardware fault when its class is ``device`` (incidents read ``xid_class``).
GPU_XID_FAULT = FindingKind("gpu-xid-fault", severity="medium", needs=(), rank=80)
GPU_MEMORY_HEALTH = FindingKind("gpu-memory-health", severity="high", needs=("nvml",), rank=82, hardware=True)
GPU_RECOVERY_ACTION = FindingKind("gpu-recovery-action", severity="high", needs=("nvml",), rank=84, hardware=True)
GPU_CLOCK_THROTTLE = FindingKind("gpu-clock-throttle", severity="low", needs=("nvml",), rank=90)

_FELL_OFF_BUS = 79
# Investigatory buckets that point at the application: its process is a witness, not a victim.
_APP_BUCKETS = frozenset({"CHECK_APP/CUDA", "WORKFLOW_XID_13", "WORKFLOW_XID_31", "XID_137_FLOW"})
# Immediate actions that take the GPU (or the node) out of service.
_CRITICAL_BUCKETS = frozenset({"RESTART_BM", "RESET_GPU", "RESTART_VM", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR"})
_HIGH_BUCKETS = frozenset({"CONTACT_SUPPORT", "CHECK_MECHANICALS", "UPDATE_SWFW", "CHECK_UVM", "XID_154",
                           "WORKFLOW_NVLINK5_ERR"})

#: nvmlDeviceGetGpuRecoveryAction values (nvmlDeviceGpuRecoveryAction_t, NVML API reference).
RECOVERY_ACTIONS: dict[int, str] = {0: "none", 1: "GPU reset", 2: "node reboot", 3: "drain P2P",
                                    4: "drain P2P and reset the GPU", 5: "recover the IMEX domain",
                                    6: "reset the GPU's PCIe bus", 7: "reboot the system"}
# "Xid 154 GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)" (catalog, Xid 154)
_XID154 = re.compile(r"to (0x[0-9a-fA-F]+) \(([^)]{1,60})\)")

# nvmlClocksEventReason* bits that slow the GPU down (not GpuIdle 0x1, AppClocks 0x2, SyncBoost 0x10).
CLOCK_REASONS: dict[int, str] = {
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
}
_SEVERE_CLOCK_BITS = 0x8 | 0x40 | 0x80


def _xid_class(info: XidInfo) -> str:
    if not info.known:
        return "unknown"
    return "application" if info.investigatory in _APP_BUCKETS else "device"


def xid_meaning(code: int, gpu_name: str | None = None) -> tuple[str, str]:
    """(class, description) of an Xid code: class ``application`` (the catalog sends it to the
    application), ``device`` (GPU, driver or firmware) or ``unknown`` (not in NVIDIA's catalog)."""
    info = xid_info(code, gpu_name)
    return _xid_class(info), info.description


def _severity(info: XidInfo) -> Severity:
    if info.immediate in _CRITICAL_BUCKETS:
        return "critical"
    if info.immediate in _HIGH_BUCKETS:
        return "high"
    if info.immediate == "IGNORE":
        return "low"
    return GPU_XID_FAULT.severity


# -- grouping: one GPU's records, bursts, causes and their consequences ------------------------------
def _gpu_key(x: XidEvent) -> str:
    if x.gpu_uuid:
        return x.gpu_uuid
    return f"pci:{norm_pci(x.pci_bus_id)}" if x.pci_bus_id else "unknown"


def _merge_xids(xids: list[XidEvent]) -> list[list[XidEvent]]:
    """Kernel and NVML records of the same Xid (same node, GPU, code, within 5 s) are one event."""
    groups: list[list[XidEvent]] = []
    last: dict[tuple[str, str, int], list[XidEvent]] = {}
    for x in sorted(xids, key=lambda x: (x.node, x.t if x.t is not None else float("-inf"))):
        k = (x.node, _gpu_key(x), x.code)
        g = last.get(k)
        if g is not None and x.evidence.member != g[-1].evidence.member and (
                x.t is None or g[0].t is None or abs(x.t - g[0].t) <= 5):
            g.append(x)
            continue
        g = [x]
        last[k] = g
        groups.append(g)
    return groups


@dataclass
class _Cause:
    """The first Xid of a burst (or one the catalog does not link to an earlier one), its repeats in
    the burst and the consequences the driver raised because of it."""

    node: str
    gpu: str
    code: int
    events: list[list[XidEvent]]
    consequences: list[tuple[list[XidEvent], str]] = field(default_factory=list)  # (event, link source)

    @property
    def t(self) -> float | None:
        return self.events[0][0].t


def _causes(model: Model, cfg: AnalysisConfig) -> list[_Cause]:
    by_gpu: dict[tuple[str, str], list[list[XidEvent]]] = defaultdict(list)
    for g in _merge_xids(model.xids):
        by_gpu[(g[0].node, _gpu_key(g[0]))].append(g)
    out: list[_Cause] = []
    for (node, gpu), groups in sorted(by_gpu.items()):
        groups.sort(key=lambda g: g[0].t if g[0].t is not None else float("-inf"))
        burst: list[_Cause] = []
        prev_t: float | None = None
        for g in groups:
            t = g[0].t
            if not burst or t is None or prev_t is None or t - prev_t > cfg.xid_burst_window_s:
                burst = []
            prev_t = t if t is not None else prev_t
            seen = {c.code for c in burst} | {x[0].code for c in burst for x, _ in c.consequences}
            code = g[0].code
            same = next((c for c in burst if c.code == code), None)
            link = caused_by(code, seen) if burst else None
            if same is not None:
                same.events.append(g)
            elif link is not None:
                owner = next((c for c in burst if link.cause is None or c.code in link.cause
                              or any(x[0].code in link.cause for x, _ in c.consequences)), burst[0])
                owner.consequences.append((g, link.source))
            else:
                cause = _Cause(node, gpu, code, [g])
                burst.append(cause)
                out.append(cause)
    return out


def _gpu_name(model: Model, node: str, gpu: str) -> str | None:
    g = model.gpus.get((node, gpu))
    return g.name if g else None


_ADDRESS = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?")


def _where(model: Model, node: str, gpu: str, pci: str | None, text: str = "") -> tuple[str, Subject, bool]:
    """How a sentence names the GPU, its subject, and whether NVML enumerated it in this capture.
    A GPU NVML did not enumerate is its PCI address, as the record wrote it (``text``)."""
    g = model.gpus.get((node, gpu))
    if g is not None:
        where = gpu_label(model, node, gpu) + (f" (PCI {g.pci_bus_id})" if g.pci_bus_id else "")
        return where, g.subject(), True
    if gpu.startswith("index:"):
        index = gpu[6:]
        return (f"GPU {index} (lost before NVML gave its UUID)", Subject("gpu", f"GPU {index}", f"GPU {index}", node),
                False)
    address = pci or (gpu[4:] if gpu.startswith("pci:") else gpu)
    written = next((m.group(0) for m in _ADDRESS.finditer(text)
                    if pci is None or norm_pci(m.group(0)).split(".")[0] == norm_pci(pci).split(".")[0]), address)
    subject = Subject("gpu", written if not gpu.startswith("GPU-") else gpu, f"GPU at PCI {address}", node)
    if model.has_source(node, "nvml") and model.node_gpus(node):
        return (f"the GPU at PCI {address}, which NVML did not enumerate in this capture "
                "(it vanished, or is hidden from this capture)", subject, False)
    return f"the GPU at PCI {address} (NVML not in the bundle: which GPU it is is unknown)", subject, False


def _record_pids(model: Model, node: str, gpu: str, events: list[list[XidEvent]], role: Role,
                 enumerated: bool) -> list[Subject]:
    """The PIDs the records name, each at its own first record's time. A PID is joined to its
    container/pod only when NVML saw it on this same GPU; otherwise it is named as the driver logged it."""
    first: dict[int, tuple[float | None, str | None]] = {}
    for g in events:
        for e in g:
            if e.pid is not None and e.pid not in first:
                first[e.pid] = (e.t, e.proc_name)
    on_gpu = {ps.pid for ps in model.proc_samples_by_gpu().get((node, gpu), [])} if enumerated else set()
    out: list[Subject] = []
    for pid, (t, name) in sorted(first.items(), key=lambda kv: (kv[1][0] or 0.0, kv[0])):
        if pid in on_gpu:
            owner = model.joins.owner(node, pid, name)
            out.extend(s.at(t) for s in with_pod(model, owner.subject.with_role(role)))
        else:
            out.append(Subject("process", str(pid), name or "?", node, role, t))
    return out


def _running_on(model: Model, node: str, gpu: str, t: float | None, enumerated: bool) -> list[Subject]:
    """Whoever ran on the GPU around ``t`` (30 s before to 5 s after), harmed by a device fault."""
    if t is None or not enumerated:
        return []
    out: list[Subject] = []
    for pid in sorted({ps.pid for ps in model.proc_samples_by_gpu().get((node, gpu), []) if t - 30 <= ps.t <= t + 5}):
        out.extend(s.at(t) for s in with_pod(model, model.joins.owner(node, pid).subject.with_role("victim")))
    return out


def _pid_phrase(subjects: list[Subject]) -> str:
    procs = [s for s in subjects if s.type == "process"]
    if not procs:
        return ""
    parts = [f"{s.id}" + (f" ({s.name})" if s.name and s.name != "?" else "") + f" at {fmt_time(s.time)}"
             for s in procs[:4]]
    more = f" and {len(procs) - 4} more" if len(procs) > 4 else ""
    return f", process{'es' if len(procs) > 1 else ''} {', '.join(parts)}{more} as the driver logged"


def _recovery_from_154(events: list[list[XidEvent]]) -> str | None:
    for g in events:
        for e in g:
            found = _XID154.search(e.text)
            if e.code == 154 and found:
                return f"{found.group(2)} ({found.group(1)})"
    return None


def _consequence_text(causes: list[_Cause]) -> tuple[str, str, str | None]:
    """('Xid 45 (2x), Xid 154 (1x)', 'links', recovery action from an Xid 154 among them) of the causes."""
    counts: dict[int, int] = defaultdict(int)
    links: dict[int, str] = {}
    for g, source in (x for cause in causes for x in cause.consequences):
        counts[g[0].code] += 1
        links[g[0].code] = source
    text = ", ".join(f"Xid {c} ({n}x)" for c, n in sorted(counts.items()))
    link_text = "; ".join(f"Xid {c}: {src}" for c, src in sorted(links.items()))
    return text, link_text, _recovery_from_154([g for cause in causes for g, _ in cause.consequences])


@GPU_XID_FAULT.rule
def gpu_xid_fault(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """One finding per (node, GPU, cause code): the catalog's description and action, its
    consequences chained to it. Xid 79 (fallen off the bus) is ``gpu-lost``'s."""
    by_key: dict[tuple[str, str, int], list[_Cause]] = defaultdict(list)
    for c in _causes(model, cfg):
        if c.code != _FELL_OFF_BUS:
            by_key[(c.node, c.gpu, c.code)].append(c)
    findings: list[Finding] = []
    for (node, gpu, code), causes in sorted(by_key.items()):
        info = xid_info(code, _gpu_name(model, node, gpu))
        cls = _xid_class(info)
        events = [g for c in causes for g in c.events]
        every = events + [g for c in causes for g, _ in c.consequences]
        first = events[0][0]
        where, gpu_subject, enumerated = _where(model, node, gpu, first.pci_bus_id, first.evidence.excerpt)
        times = [e.t for g in every for e in g if e.t is not None]
        start, end = (min(times), max(times)) if times else (None, None)
        role: Role = "witness" if cls == "application" else "victim"
        subjects: list[Subject] = [gpu_subject]
        subjects += _record_pids(model, node, gpu, events, role, enumerated)
        if cls == "device":
            for c in causes:
                subjects += _running_on(model, node, gpu, c.t, enumerated)
        consequences, links, recovery = _consequence_text(causes)
        name = f"Xid {code}" + (f" ({info.mnemonic})" if info.mnemonic else "")
        summary = (f"{name} on {where}{_pid_phrase(subjects)}: {info.description}; "
                   f"{len(events)} occurrence(s), first at {fmt_time(start)}")
        if consequences:
            summary += f"; it caused {consequences}"
        if recovery:
            summary += f"; the driver's recovery action (Xid 154): {recovery}"
        summary += f". NVIDIA's Xid catalog: {info.action}"
        severity = _severity(info) if info.known else GPU_XID_FAULT.severity
        if recovery and severity not in ("critical",):
            severity = "high"
        findings.append(Finding(
            kind=GPU_XID_FAULT.id, severity=severity,
            confidence=GPU_XID_FAULT.confidence(model, node, 0.95 if enumerated else 0.75, cfg),
            summary=summary, start=start, end=end, node=node,
            subjects=dedupe_subjects(sorted(subjects, key=lambda s: ("victim", "culprit", "witness").index(s.role))),
            evidence=dedupe_evidence(e.evidence for g in every for e in g),
            metrics=(("xid", code), ("mnemonic", info.mnemonic or None), ("xid_class", cls),
                     ("meaning", info.description), ("occurrences", len(events)),
                     ("action", info.immediate or None), ("investigatory_action", info.investigatory or None),
                     ("consequences", consequences or None), ("consequence_links", links or None),
                     ("recovery_action", recovery), ("catalog", info.source if info.known else CATALOG_URL),
                     ("gpu_enumerated", int(enumerated))),
            key=f"xid:{node}:{gpu}:{code}",
            headline=f"{where} reported Xid {code} ({info.description})",
        ))
    return findings


@GPU_XID_FAULT.harm
def _xid_harm(f: Finding, h: Harm) -> str:
    return f"hit by Xid {f.metric('xid')} on {h.gpu} at {h.when}"


@GPU_XID_FAULT.ruled_out(rank=10)
def _no_xid(c: RuledOutCheck) -> tuple[str, list[Evidence]] | None:
    """No Xid in the kernel log, nor from NVML's XidCriticalError events, where either was read."""
    model, node, info = c.model, c.node, c.info
    watched = info.xid_watch_gpus
    has_kernel = model.has_source(node, "kernel")
    if GPU_XID_FAULT.id in c.found or GPU_LOST.id in c.found or not (has_kernel or watched):
        return None
    parts: list[str] = []
    evidence: list[Evidence] = []
    if has_kernel:
        parts.append(f"no Xid error in the kernel log of {node} ({info.kernel_records} records"
                     + ("; an empty log window proves little on its own)" if not info.kernel_records else ")"))
        evidence += c.evidence("kernel", f"{info.kernel_records} records, no 'NVRM: Xid'")
    if watched and info.xid_watch_evidence is not None:
        parts.append(f"no XidCriticalError event from NVML on the {watched} GPU(s) it watched "
                     "during the sampling window")
        evidence.append(info.xid_watch_evidence)
    return "; ".join(parts), evidence


@GPU_LOST.rule
def gpu_lost(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """One finding per GPU that fell off the bus or was lost, with every witness: Xid 79 records
    (kernel and NVML events), the driver's fell-off-the-bus messages without an Xid number, and NVML
    calls that answered GpuIsLost for a device the capture had enumerated."""
    witnesses: dict[tuple[str, str], list[GpuLostWitness]] = defaultdict(list)
    causes: dict[tuple[str, str], list[_Cause]] = defaultdict(list)
    for c in _causes(model, cfg):
        if c.code == _FELL_OFF_BUS:
            causes[(c.node, c.gpu)].append(c)
            for g in c.events:
                for e in g:
                    source = "nvml-event" if e.evidence.member.startswith("nvml/") else "kernel-xid"
                    witnesses[(c.node, c.gpu)].append(GpuLostWitness(
                        e.node, e.t, e.pci_bus_id, e.gpu_uuid, source, e.text, (e.evidence,)))
    for w in model.lost_witnesses:
        key = w.gpu_uuid or (f"pci:{norm_pci(w.pci_bus_id)}" if w.pci_bus_id else
                             f"index:{w.gpu_index}" if w.gpu_index is not None else "unknown")
        witnesses[(w.node, key)].append(w)
    findings: list[Finding] = []
    for (node, gpu), ws in sorted(witnesses.items()):
        ws.sort(key=lambda w: w.t if w.t is not None else float("-inf"))
        pci = next((w.pci_bus_id for w in ws if w.pci_bus_id), None)
        where, gpu_subject, enumerated = _where(model, node, gpu, pci, " ".join(e.excerpt for w in ws for e in w.evidence))
        times = [w.t for w in ws if w.t is not None]
        start, end = (min(times), max(times)) if times else (None, None)
        parts: list[str] = []
        by_source: dict[str, list[GpuLostWitness]] = defaultdict(list)
        for w in ws:
            by_source[w.source].append(w)
        if "kernel-xid" in by_source:
            parts.append(f"Xid 79 in the kernel log at {fmt_time(by_source['kernel-xid'][0].t)}")
        if "kernel-nvrm" in by_source:
            parts.append(f"the driver's message without an Xid number at {fmt_time(by_source['kernel-nvrm'][0].t)} "
                         f"(\"{by_source['kernel-nvrm'][0].text[:120]}\")")
        if "nvml-event" in by_source:
            parts.append(f"NVML's XidCriticalError event 79 at {fmt_time(by_source['nvml-event'][0].t)}")
        if "nvml" in by_source:
            lost = by_source["nvml"]
            span = f" to {fmt_time(lost[-1].t)}" if len(lost) > 1 and lost[-1].t != lost[0].t else ""
            parts.append(f"NVML answered GpuIsLost from {fmt_time(lost[0].t)}{span}")
        events = [g for c in causes.get((node, gpu), []) for g in c.events]
        subjects: list[Subject] = [gpu_subject]
        subjects += _record_pids(model, node, gpu, events, "victim", enumerated)
        subjects += _running_on(model, node, gpu, start, enumerated)
        consequences, links, recovery = _consequence_text(causes.get((node, gpu), []))
        info = xid_info(_FELL_OFF_BUS, _gpu_name(model, node, gpu))
        summary = f"{where[0].upper() + where[1:]} fell off the bus: {'; '.join(parts)}"
        if consequences:
            summary += f"; then {consequences}"
        if recovery:
            summary += f"; the driver's recovery action (Xid 154): {recovery}"
        summary += f". NVIDIA's Xid catalog (Xid 79): {info.action}"
        evidence = [e for w in ws for e in w.evidence]
        findings.append(Finding(
            kind=GPU_LOST.id, severity="critical",
            confidence=GPU_LOST.confidence(model, node, 0.98 if len(by_source) > 1 else 0.9, cfg),
            summary=summary, start=start, end=end, node=node,
            subjects=dedupe_subjects(sorted(subjects, key=lambda s: ("victim", "culprit", "witness").index(s.role))),
            evidence=dedupe_evidence(evidence, limit=16),
            metrics=(("witnesses", len(ws)), ("witness_sources", ",".join(sorted(by_source))),
                     ("pci_bus_id", pci), ("gpu_enumerated", int(enumerated)), ("action", info.immediate or None),
                     ("consequences", consequences or None), ("consequence_links", links or None),
                     ("recovery_action", recovery), ("catalog", info.source)),
            key=f"lost:{node}:{gpu}",
            headline=f"{where} fell off the bus",
        ))
    return findings


@GPU_LOST.harm
def _lost_harm(f: Finding, h: Harm) -> str:
    return f"lost its GPU ({h.gpu} fell off the bus) at {h.when}"


def _health_pairs(model: Model) -> dict[tuple[str, str], tuple[GpuHealthReading | None, GpuHealthReading | None]]:
    out: dict[tuple[str, str], list[GpuHealthReading | None]] = defaultdict(lambda: [None, None])
    for r in model.gpu_health:
        slot = out[(r.node, r.gpu_uuid)]
        i = 0 if r.phase == "start" else 1
        if slot[i] is None:
            slot[i] = r
    return {k: (v[0], v[1]) for k, v in out.items()}


def _latest(start: GpuHealthReading | None, end: GpuHealthReading | None, name: str) -> int | None:
    for r in (end, start):
        if r is not None and r.get(name) is not None:
            return r.get(name)
    return None


_MEMORY_COUNTERS = ("ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "retired_pages_sbe",
                    "retired_pages_dbe", "retired_pages_pending", "remapped_rows_correctable",
                    "remapped_rows_uncorrectable", "remap_pending", "remap_failure")


@GPU_MEMORY_HEALTH.rule
def gpu_memory_health(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """A GPU whose memory-error counters say it needs a reset (a row remap or page retirement pending,
    uncorrectable ECC errors since the last reset) or is an RMA candidate (a row remapping failed),
    or that recorded memory errors; counters that moved between the start and the end of the window
    are named (stronger evidence: it happened during the incident)."""
    findings: list[Finding] = []
    for (node, uuid), (first, last) in sorted(_health_pairs(model).items()):
        value = {n: _latest(first, last, n) for n in _MEMORY_COUNTERS}
        moved = []
        if first is not None and last is not None:
            for n in _MEMORY_COUNTERS:
                a, b = first.get(n), last.get(n)
                if a is not None and b is not None and b > a:
                    moved.append(f"{n} {a} -> {b}")
        reset: list[str] = []
        rma: list[str] = []
        if value["remap_pending"]:
            reset.append("a row remapping is pending (nvmlDeviceGetRemappedRows isPending=1: "
                         "'a reset will be required to actually remap the row')")
        if value["retired_pages_pending"]:
            reset.append("a page retirement is pending (nvmlDeviceGetRetiredPagesPendingStatus): "
                         "it takes effect when the driver reloads")
        if value["ecc_uncorrected_volatile"]:
            reset.append(f"{value['ecc_uncorrected_volatile']} uncorrectable ECC error(s) since the last reset "
                         "(volatile; NVIDIA's catalog for Xid 48: 'a GPU reset or node reboot is needed to clear')")
        if value["remap_failure"]:
            rma.append("a row remapping failed (nvmlDeviceGetRemappedRows failureOccurred=1; NVIDIA's catalog "
                       "sends its Xid 64 to CONTACT_SUPPORT)")
        recorded = [f"{n}={value[n]}" for n in ("ecc_uncorrected_aggregate", "remapped_rows_uncorrectable",
                                                 "remapped_rows_correctable", "retired_pages_dbe",
                                                 "retired_pages_sbe") if value[n]]
        if not (reset or rma or recorded):
            continue
        verdict = "rma-candidate" if rma else "reset-needed" if reset else "errors-recorded"
        severity: Severity = "critical" if rma or (reset and moved) else "high" if reset else "low"
        gl = gpu_label(model, node, uuid)
        gpu = model.gpus.get((node, uuid))
        lead = {"rma-candidate": f"{gl} is an RMA candidate", "reset-needed": f"{gl} needs a reset",
                "errors-recorded": f"{gl} has recorded memory errors"}[verdict]
        summary = lead + ": " + "; ".join(rma + reset + ([f"counters {', '.join(recorded)}"] if recorded else []))
        summary += (f"; during the window {', '.join(moved)}" if moved
                    else "; no counter moved during the window" if first is not None and last is not None
                    else "; read once (no end-of-window reading to compare)")
        evidence: list[Evidence] = []
        for r in (first, last):
            if r is None:
                continue
            for n in _MEMORY_COUNTERS:
                if value[n] and r.cite(n) is not None:
                    evidence.append(r.cite(n))  # type: ignore[arg-type]
        times = [r.t for r in (first, last) if r is not None and r.t is not None]
        findings.append(Finding(
            kind=GPU_MEMORY_HEALTH.id, severity=severity,
            confidence=GPU_MEMORY_HEALTH.confidence(model, node, 0.95 if moved else 0.85, cfg),
            summary=summary, start=min(times) if times else None, end=max(times) if times else None, node=node,
            subjects=(gpu.subject() if gpu else Subject("gpu", uuid, uuid, node),),
            evidence=dedupe_evidence(evidence),
            metrics=(("verdict", verdict), ("moved", ", ".join(moved) or None),
                     *((n, value[n]) for n in _MEMORY_COUNTERS)),
            key=f"memhealth:{node}:{uuid}",
            headline=lead,
        ))
    return findings


@GPU_RECOVERY_ACTION.rule
def gpu_recovery_action(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """A GPU for which the driver recommends a recovery action (``nvmlDeviceGetGpuRecoveryAction``
    other than NONE), decoded."""
    findings: list[Finding] = []
    for (node, uuid), (first, last) in sorted(_health_pairs(model).items()):
        value = _latest(first, last, "gpu_recovery_action")
        if not value:
            continue
        reading = last if last is not None and last.get("gpu_recovery_action") is not None else first
        action = RECOVERY_ACTIONS.get(value, f"action {value} (not in the analyzer's table)")
        gl = gpu_label(model, node, uuid)
        gpu = model.gpus.get((node, uuid))
        cite = reading.cite("gpu_recovery_action") if reading else None
        findings.append(Finding(
            kind=GPU_RECOVERY_ACTION.id, severity="critical" if value in (2, 7) else GPU_RECOVERY_ACTION.severity,
            confidence=GPU_RECOVERY_ACTION.confidence(model, node, 0.95, cfg),
            summary=f"The driver recommends {action} for {gl} (nvmlDeviceGetGpuRecoveryAction = {value})",
            start=reading.t if reading else None, end=reading.t if reading else None, node=node,
            subjects=(gpu.subject() if gpu else Subject("gpu", uuid, uuid, node),),
            evidence=(cite,) if cite else (), metrics=(("recovery_action", value), ("meaning", action)),
            key=f"recovery:{node}:{uuid}", headline=f"the driver recommends {action} for {gl}",
        ))
    return findings


@GPU_CLOCK_THROTTLE.rule
def gpu_clock_throttle(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """A GPU whose clocks were held down by thermal, power or hardware slowdown in enough samples."""
    findings: list[Finding] = []
    for (node, uuid), samples in sorted(model.samples_by_gpu().items()):
        known = [s for s in samples if s.clocks_event_reasons is not None]
        if not known:
            continue
        hot = [s for s in known if (s.clocks_event_reasons or 0) & sum(CLOCK_REASONS)]
        if not hot or len(hot) / len(known) < cfg.clock_throttle_min_ratio:
            continue
        bits = 0
        for s in hot:
            bits |= (s.clocks_event_reasons or 0)
        reasons = [name for bit, name in CLOCK_REASONS.items() if bits & bit]
        temps = [s.temperature_c for s in hot if s.temperature_c is not None]
        power = [s.power_w for s in hot if s.power_w is not None]
        gl = gpu_label(model, node, uuid)
        summary = (f"{gl} clocks were slowed by {', '.join(reasons)} in {len(hot)} of {len(known)} samples "
                   f"({len(hot) / len(known) * 100:.0f}%)")
        if temps:
            summary += f"; temperature up to {max(temps):.0f} C"
        if power:
            summary += f"; power up to {max(power):.0f} W"
        gpu = model.gpus.get((node, uuid))
        subj = gpu.subject() if gpu else Subject("gpu", uuid, uuid, node)
        findings.append(Finding(
            kind=GPU_CLOCK_THROTTLE.id, severity="medium" if bits & _SEVERE_CLOCK_BITS else GPU_CLOCK_THROTTLE.severity,
            confidence=GPU_CLOCK_THROTTLE.confidence(model, node, 0.9, cfg),
            summary=summary, start=hot[0].t, end=hot[-1].t, node=node,
            subjects=(subj,), evidence=dedupe_evidence([hot[0].evidence, hot[-1].evidence]),
            metrics=(("gpu", gl), ("reasons_mask", bits), ("samples_throttled", len(hot)),
                     ("samples", len(known)), ("max_temperature_c", max(temps) if temps else None)),
            key=f"clock:{node}:{uuid}",
            headline=f"{gl} was clock-throttled ({', '.join(reasons)})",
        ))
    return findings


@GPU_CLOCK_THROTTLE.ruled_out(rank=20)
def _no_clock_slowdown(c: RuledOutCheck) -> tuple[str, list[Evidence]] | None:
    if GPU_CLOCK_THROTTLE.id in c.found or not any(
            s.node == c.node and s.clocks_event_reasons is not None for s in c.model.gpu_samples):
        return None
    n = c.model.gpu_sample_count(c.node)
    return (f"no thermal, power or hardware clock slowdown on any GPU of {c.node} ({n} samples)",
            c.evidence("nvml", f"{n} samples, no slowdown reason bits"))


# The catalog's immediate action, as the step an operator takes on the GPU (``{gpu}``).
_XID_STEPS = {
    "RESTART_BM": "drain the node and reboot it; check {gpu}'s PCIe link, power and cooling (nvidia-smi -q, "
                  "the kernel log) and have the GPU replaced if the Xid repeats",
    "RESET_GPU": "drain {gpu} and reset it (nvidia-smi -r, or reboot the node); have it replaced if the Xid repeats",
    "RESTART_VM": "restart the VM that owns {gpu}",
    "RESTART_APP": "restart the application that ran on {gpu}; no GPU reset is needed",
    "CONTACT_SUPPORT": "collect nvidia-bug-report.sh and open a case with NVIDIA support about {gpu}",
    "UPDATE_SWFW": "update {gpu}'s firmware and the NVIDIA driver",
    "CHECK_MECHANICALS": "check {gpu}'s seating and its power and other connections",
    "IGNORE": "no action is needed on {gpu}; watch whether the Xid repeats",
}


@GPU_XID_FAULT.next_step
def _xid_step(f: Finding, h: Harm) -> str:
    action, code = f.metric("action"), f.metric("xid")
    if f.metric("xid_class") == "application":
        return (f"debug the application that ran on {h.gpu} (compute-sanitizer for memory faults); the GPU itself "
                f"is not at fault (Xid {code}: {action or 'no catalog action'})")
    wording = _XID_STEPS.get(str(action))
    if wording is not None:
        return wording.format(gpu=h.gpu)
    if isinstance(action, str) and action in BUCKETS:
        return f"{BUCKETS[action]} ({action}, NVIDIA's Xid catalog for Xid {code} on {h.gpu})"
    return f"look up Xid {code} in NVIDIA's Xid catalog and act on {h.gpu} as it says"


@GPU_LOST.next_step
def _lost_step(f: Finding, h: Harm) -> str:
    return (f"drain the node and reboot it to bring {h.gpu} back; check its PCIe link, seating and power, "
            "and have it replaced (RMA) if it falls off the bus again")


@GPU_MEMORY_HEALTH.next_step
def _memory_health_step(f: Finding, h: Harm) -> str:
    verdict = f.metric("verdict")
    if verdict == "rma-candidate":
        return (f"drain the node and open an RMA case for {h.gpu} with NVIDIA support (a row remapping failed; "
                "nvidia-smi -q -d ROW_REMAPPER,ECC shows the counters)")
    if verdict == "reset-needed":
        return (f"drain {h.gpu} and reset it (nvidia-smi -r) so the pending remap or page retirement takes "
                "effect; RMA it if uncorrectable errors come back")
    return f"watch {h.gpu}'s ECC counters (nvidia-smi -q -d ECC); no action unless they grow"


@GPU_RECOVERY_ACTION.next_step
def _recovery_step(f: Finding, h: Harm) -> str:
    return f"drain {h.gpu} and carry out the driver's recommended action: {f.metric('meaning')}"


@GPU_CLOCK_THROTTLE.next_step
def _clock_step(f: Finding, h: Harm) -> str:
    return (f"check {h.gpu}'s cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER): airflow, "
            "power cap, the node's power supply")
