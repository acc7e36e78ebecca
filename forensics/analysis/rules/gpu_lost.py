"""``gpu-lost``: a GPU that fell off the bus or that NVML answers GpuIsLost for, with every witness.

Sources: Xid 79 records (kernel log and NVML events, grouped by :mod:`.xid_bursts`), the driver's
fell-off-the-bus messages without an Xid number (continuation records joined by the kernel loader)
and NVML calls answering GpuIsLost for a device the capture had enumerated. NVML reading the GPU
while it sampled, after the last record (:mod:`.gpu_answers`), makes it an earlier episode: the
finding says so and is no cause of anything after that reading (``Finding.contradicted_at``).

Next step: drain the node and restart it (Xid 79's RESTART_BM), then check the PCIe link, seating
and power.
"""

from __future__ import annotations

from collections import defaultdict

from forensics.analysis.events import GpuLostWitness
from forensics.analysis.findings import Finding, Subject
from forensics.analysis.kinds import FindingKind, Harm
from forensics.analysis.model import Model
from forensics.analysis.naming import fmt_time
from forensics.analysis.rules.common import dedupe_evidence, dedupe_subjects
from forensics.analysis.rules.gpu_answers import answered_after
from forensics.analysis.rules.xid_bursts import (
    FELL_OFF_BUS,
    Cause,
    consequence_text,
    gpu_name,
    gpu_where,
    record_pids,
    running_on,
    xid_causes,
)
from forensics.parsing.pci import pci_bus_key
from forensics.parsing.xid_catalog import xid_info
from forensics.thresholds import AnalysisConfig

__all__ = ["GPU_LOST", "gpu_lost"]

GPU_LOST = FindingKind("gpu-lost", severity="critical", needs=(), rank=78, hardware=True)


@GPU_LOST.rule
def gpu_lost(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """One finding per GPU that fell off the bus or was lost, with every witness: Xid 79 records
    (kernel and NVML events), the driver's fell-off-the-bus messages without an Xid number, and NVML
    calls that answered GpuIsLost for a device the capture had enumerated."""
    witnesses: dict[tuple[str, str], list[GpuLostWitness]] = defaultdict(list)
    causes: dict[tuple[str, str], list[Cause]] = defaultdict(list)
    for c in xid_causes(model, cfg):
        if c.code == FELL_OFF_BUS:
            causes[(c.node, c.gpu)].append(c)
            for g in c.events:
                for e in g:
                    source = "nvml-event" if e.evidence.member.startswith("nvml/") else "kernel-xid"
                    witnesses[(c.node, c.gpu)].append(GpuLostWitness(
                        e.node, e.t, e.pci_bus_id, e.gpu_uuid, source, e.text, (e.evidence,)))
    for w in model.series(GpuLostWitness):
        key = w.gpu_uuid or (f"pci:{pci_bus_key(w.pci_bus_id)}" if w.pci_bus_id else
                             f"index:{w.gpu_index}" if w.gpu_index is not None else "unknown")
        witnesses[(w.node, key)].append(w)
    findings: list[Finding] = []
    for (node, gpu), ws in sorted(witnesses.items()):
        ws.sort(key=lambda w: w.t if w.t is not None else float("-inf"))
        pci = next((w.pci_bus_id for w in ws if w.pci_bus_id), None)
        where, gpu_subject, enumerated = gpu_where(model, node, gpu, pci, " ".join(e.excerpt for w in ws for e in w.evidence))
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
        subjects += record_pids(model, node, gpu, events, "victim", enumerated)
        subjects += running_on(model, node, gpu, start, enumerated)
        consequences, links, recovery = consequence_text(causes.get((node, gpu), []))
        info = xid_info(FELL_OFF_BUS, gpu_name(model, node, gpu))
        summary = f"{where[0].upper() + where[1:]} fell off the bus: {'; '.join(parts)}"
        if consequences:
            summary += f"; then {consequences}"
        if recovery:
            summary += f"; the driver's recovery action (Xid 154): {recovery}"
        # the GPU's own later state: NVML reading it after the last record contradicts the records
        # from then on (an earlier episode, the GPU reset or the driver reloaded since)
        uuid = next((w.gpu_uuid for w in ws if w.gpu_uuid), None)
        answer = answered_after(model, node, uuid, pci, end)
        if answer is not None:
            summary += (f"; NVML read {where} again at {fmt_time(answer.t)}, after the last record: an earlier "
                        "episode (the GPU was reset or the driver reloaded since), no cause of what followed")
        summary += f". NVIDIA's Xid catalog (Xid 79): {info.action}"
        evidence = [e for w in ws for e in w.evidence] + ([answer.evidence] if answer is not None else [])
        findings.append(Finding(
            kind=GPU_LOST.id, severity=GPU_LOST.severity, contradicted_at=answer.t if answer is not None else None,
            confidence=GPU_LOST.confidence(model, node, 0.98 if len(by_source) > 1 else 0.9, cfg),
            summary=summary, start=start, end=end, node=node,
            subjects=dedupe_subjects(sorted(subjects, key=lambda s: ("victim", "culprit", "witness").index(s.role))),
            evidence=dedupe_evidence(evidence, limit=16),
            metrics=(("witnesses", len(ws)), ("witness_sources", ",".join(sorted(by_source))),
                     ("pci_bus_id", pci), ("gpu_enumerated", int(enumerated)), ("action", info.immediate or None),
                     ("consequences", consequences or None), ("consequence_links", links or None),
                     ("recovery_action", recovery), ("catalog", info.source),
                     ("answered_nvml_at", fmt_time(answer.t) if answer is not None else None)),
            key=f"lost:{node}:{gpu}",
            headline=f"{where} fell off the bus",
        ))
    return findings


@GPU_LOST.harm
def _lost_harm(f: Finding, h: Harm) -> str:
    return f"lost its GPU ({h.gpu} fell off the bus) at {h.when}"


@GPU_LOST.next_step
def _lost_step(f: Finding, h: Harm) -> str:
    return (f"drain the node and reboot it to bring {h.gpu} back; check its PCIe link, seating and power, "
            "and have it replaced (RMA) if it falls off the bus again")
