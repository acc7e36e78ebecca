"""``gpu-xid-fault``: an Xid the driver logged, classified from NVIDIA's Xid catalog.

Sources: kernel log ``NVRM: Xid (PCI:...): <code>, pid=..., name=..., ...`` lines and NVML
``nvmlEventTypeXidCriticalError`` events, grouped into bursts by :mod:`.xid_bursts`. Xid meanings and
actions come from NVIDIA's Xid catalog (:mod:`forensics.parsing.xid_catalog`). Xid 79 (fallen off the
bus) is ``gpu-lost``'s (:mod:`.gpu_lost`).

Next step: the catalog's immediate action for the cause (``metrics.action``).
"""

from __future__ import annotations

from collections import defaultdict

from forensics.analysis.findings import Evidence, Finding, Role, Severity, Subject
from forensics.analysis.kinds import FindingKind, Harm, RuledOutCheck
from forensics.analysis.model import Model
from forensics.analysis.naming import fmt_time
from forensics.analysis.rules.common import dedupe_evidence, dedupe_subjects
from forensics.analysis.rules.gpu_lost import GPU_LOST
from forensics.analysis.rules.xid_bursts import (
    FELL_OFF_BUS,
    Cause,
    consequence_text,
    gpu_name,
    gpu_where,
    pid_phrase,
    record_pids,
    running_on,
    xid_causes,
)
from forensics.parsing.xid_catalog import BUCKETS, CATALOG_URL, XidInfo, xid_info
from forensics.specs.roles import KERNEL_LOG
from forensics.thresholds import AnalysisConfig

__all__ = ["GPU_XID_FAULT", "gpu_xid_fault", "xid_meaning"]

# A critical Xid is a hardware fault when its class is ``device`` (incidents read ``xid_class``).
GPU_XID_FAULT = FindingKind("gpu-xid-fault", severity="medium", needs=(), rank=80)

# Investigatory buckets that point at the application: its process is a witness, not a victim.
_APP_BUCKETS = frozenset({"CHECK_APP/CUDA", "WORKFLOW_XID_13", "WORKFLOW_XID_31", "XID_137_FLOW"})
# Immediate actions that take the GPU (or the node) out of service.
_CRITICAL_BUCKETS = frozenset({"RESTART_BM", "RESET_GPU", "RESTART_VM", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR"})
_HIGH_BUCKETS = frozenset({"CONTACT_SUPPORT", "CHECK_MECHANICALS", "UPDATE_SWFW", "CHECK_UVM", "XID_154",
                           "WORKFLOW_NVLINK5_ERR"})


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


@GPU_XID_FAULT.rule
def gpu_xid_fault(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """One finding per (node, GPU, cause code): the catalog's description and action, its
    consequences chained to it. Xid 79 (fallen off the bus) is ``gpu-lost``'s."""
    by_key: dict[tuple[str, str, int], list[Cause]] = defaultdict(list)
    for c in xid_causes(model, cfg):
        if c.code != FELL_OFF_BUS:
            by_key[(c.node, c.gpu, c.code)].append(c)
    findings: list[Finding] = []
    for (node, gpu, code), causes in sorted(by_key.items()):
        info = xid_info(code, gpu_name(model, node, gpu))
        cls = _xid_class(info)
        events = [g for c in causes for g in c.events]
        every = events + [g for c in causes for g, _ in c.consequences]
        first = events[0][0]
        where, gpu_subject, enumerated = gpu_where(model, node, gpu, first.pci_bus_id, first.evidence.excerpt)
        times = [e.t for g in every for e in g if e.t is not None]
        start, end = (min(times), max(times)) if times else (None, None)
        role: Role = "witness" if cls == "application" else "victim"
        subjects: list[Subject] = [gpu_subject]
        subjects += record_pids(model, node, gpu, events, role, enumerated)
        instances = frozenset(e.gpu_instance_id for g in events for e in g if e.gpu_instance_id is not None)
        if instances:
            where += (f", GPU instance {', '.join(str(i) for i in sorted(instances))} (MIG: only who ran on "
                      f"{'it' if len(instances) == 1 else 'them'} is named)")
        if cls == "device":
            for c in causes:
                subjects += running_on(model, node, gpu, c.t, enumerated, instances)
        consequences, links, recovery = consequence_text(causes)
        name = f"Xid {code}" + (f" ({info.mnemonic})" if info.mnemonic else "")
        summary = (f"{name} on {where}{pid_phrase(subjects)}: {info.description}; "
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
                     ("gpu_enumerated", int(enumerated)),
                     ("gpu_instance_id", ", ".join(str(i) for i in sorted(instances)) or None)),
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
    has_kernel = model.has_role(node, KERNEL_LOG)
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
