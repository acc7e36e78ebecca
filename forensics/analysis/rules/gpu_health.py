"""GPU health confounders: ``gpu-xid-fault`` and ``gpu-clock-throttle``.

Sources: kernel log ``NVRM: Xid (PCI:...): <code>, pid=..., name=..., ...`` lines and NVML
``nvmlEventTypeXidCriticalError`` events; ``nvmlDeviceGetCurrentClocksEventReasons`` bitmask per
sample. Xid meanings follow NVIDIA's Xid catalog (see shared REFERENCE.md).
"""

from __future__ import annotations

from collections import defaultdict

from forensics.analysis.findings import Evidence, Finding, Role, Severity, Subject
from forensics.analysis.kinds import FindingKind, Harm, RuledOutCheck
from forensics.analysis.model import Model, XidEvent
from forensics.analysis.naming import fmt_time, gpu_label, with_pod
from forensics.analysis.rules.common import dedupe_evidence, dedupe_subjects
from forensics.analysis.thresholds import AnalysisConfig

__all__ = [
    "CLOCK_REASONS",
    "GPU_CLOCK_THROTTLE",
    "GPU_XID_FAULT",
    "XID_CATALOG",
    "gpu_clock_throttle",
    "gpu_xid_fault",
    "xid_meaning",
]

GPU_XID_FAULT = FindingKind("gpu-xid-fault", severity="medium", needs=(), rank=80)
GPU_CLOCK_THROTTLE = FindingKind("gpu-clock-throttle", severity="low", needs=("nvml",), rank=90)

# code -> (class, meaning). Class: hardware, driver, application.
XID_CATALOG: dict[int, tuple[str, str]] = {
    8: ("driver", "GPU stopped processing (timeout)"),
    13: ("application", "graphics engine exception"),
    31: ("application", "GPU memory page fault (MMU fault)"),
    32: ("driver", "invalid or corrupted push buffer stream"),
    38: ("driver", "driver firmware error"),
    43: ("application", "GPU stopped processing (user application fault)"),
    45: ("application", "preemptive cleanup, due to previous errors (process killed or reset)"),
    48: ("hardware", "double-bit ECC error"),
    61: ("driver", "internal micro-controller breakpoint/warning"),
    62: ("hardware", "internal micro-controller halt"),
    63: ("hardware", "ECC page retirement or row remapping recorded"),
    64: ("hardware", "ECC page retirement or row remapping failure"),
    68: ("hardware", "video processor exception"),
    69: ("hardware", "graphics engine class error"),
    74: ("hardware", "NVLink error"),
    79: ("hardware", "GPU has fallen off the bus"),
    92: ("hardware", "high single-bit ECC error rate"),
    94: ("hardware", "contained ECC error"),
    95: ("hardware", "uncontained ECC error (GPU reset required)"),
    109: ("application", "context switch timeout"),
    119: ("driver", "GSP RPC timeout"),
    120: ("driver", "GSP error"),
    121: ("hardware", "C2C link error"),
    140: ("hardware", "unrecovered ECC error"),
    154: ("driver", "GPU recovery action changed"),
}
_CRITICAL_XIDS = frozenset({48, 64, 74, 79, 95, 140})

# nvmlClocksEventReason* bits that slow the GPU down (not GpuIdle 0x1, AppClocks 0x2, SyncBoost 0x10).
CLOCK_REASONS: dict[int, str] = {
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
}
_SEVERE_CLOCK_BITS = 0x8 | 0x40 | 0x80


def xid_meaning(code: int) -> tuple[str, str]:
    """(class, meaning) of an Xid code; unknown codes are class ``unknown``."""
    return XID_CATALOG.get(code, ("unknown", "not in the analyzer's Xid catalog: see NVIDIA's Xid documentation"))


def _merge_xids(xids: list[XidEvent]) -> list[list[XidEvent]]:
    """Kernel and NVML records of the same Xid (same node, code, GPU, within 5 s) are one event."""
    groups: list[list[XidEvent]] = []
    for x in sorted(xids, key=lambda x: (x.node, x.t or 0.0)):
        for g in groups:
            y = g[0]
            if (y.node == x.node and y.code == x.code and (y.gpu_uuid == x.gpu_uuid or not y.gpu_uuid or not x.gpu_uuid)
                    and (x.t is None or y.t is None or abs(x.t - y.t) <= 5)):
                g.append(x)
                break
        else:
            groups.append([x])
    return groups


@GPU_XID_FAULT.rule
def gpu_xid_fault(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """One finding per (node, GPU, Xid code), with the code's meaning and class."""
    by_key: dict[tuple[str, str | None, int], list[list[XidEvent]]] = defaultdict(list)
    for g in _merge_xids(model.xids):
        x = next((e for e in g if e.gpu_uuid), g[0])
        by_key[(x.node, x.gpu_uuid, x.code)].append(g)
    findings: list[Finding] = []
    for (node, uuid, code), events in sorted(by_key.items(), key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2])):
        cls, meaning = xid_meaning(code)
        first = events[0][0]
        times = [e.t for g in events for e in g if e.t is not None]
        start, end = (min(times), max(times)) if times else (None, None)
        subjects: list[Subject] = []
        if uuid is not None:
            gpu = model.gpus.get((node, uuid))
            subjects.append(gpu.subject() if gpu else Subject("gpu", uuid, uuid, node))
        pids = sorted({e.pid for g in events for e in g if e.pid is not None})
        for pid in pids[:3]:
            owner = model.joins.owner(node, pid, next((e.proc_name for g in events for e in g if e.pid == pid and e.proc_name), None))
            role: Role = "witness" if cls == "application" else "victim"
            subjects.extend(with_pod(model, owner.subject.with_role(role)))
        if uuid is not None and cls in ("hardware", "driver") and start is not None:
            # Whoever was running on the faulted GPU then was harmed by it.
            for ps in model.proc_samples:
                if ps.node == node and ps.gpu_uuid == uuid and start - 30 <= ps.t <= start + 5:
                    subjects.extend(with_pod(model, model.joins.owner(node, ps.pid).subject.with_role("victim")))
        if not subjects:
            subjects.append(Subject("host", node, node, node))
        where = gpu_label(model, node, uuid) if uuid else (f"PCI {first.pci_bus_id}" if first.pci_bus_id else "an unidentified GPU")
        who = f", process {pids[0]} ({first.proc_name})" if pids and first.proc_name else (f", process {pids[0]}" if pids else "")
        count = len(events)
        summary = (f"Xid {code} on {where}{who}: {meaning} ({cls} fault); {count} occurrence(s), "
                   f"first at {fmt_time(start)}")
        severity: Severity
        if code in _CRITICAL_XIDS:
            severity = "critical"
        elif cls in ("hardware", "driver"):
            severity = "high"
        else:  # application faults and codes outside the catalog
            severity = GPU_XID_FAULT.severity
        findings.append(Finding(
            kind=GPU_XID_FAULT.id, severity=severity,
            confidence=GPU_XID_FAULT.confidence(model, node, 0.95 if uuid else 0.75, cfg),
            summary=summary, start=start, end=end, node=node,
            subjects=dedupe_subjects(sorted(subjects, key=lambda s: ("victim", "culprit", "witness").index(s.role))),
            evidence=dedupe_evidence(e.evidence for g in events for e in g),
            metrics=(("xid", code), ("xid_class", cls), ("meaning", meaning), ("occurrences", count)),
            key=f"xid:{node}:{uuid}:{code}",
            headline=f"{where} reported Xid {code} ({meaning})",
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
    if GPU_XID_FAULT.id in c.found or not (has_kernel or watched):
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


_XID_STEPS = {
    "hardware": "drain the node and reboot it; check {gpu}'s PCIe link, power and cooling (nvidia-smi -q, "
                "the kernel log) and have the GPU replaced if the Xid repeats",
    "driver": "collect nvidia-bug-report.sh, then reset {gpu} or reboot the node; update the NVIDIA driver "
              "if the Xid repeats",
    "application": "debug the application that ran on {gpu} (compute-sanitizer for memory faults); the GPU "
                   "itself is not at fault",
}


@GPU_XID_FAULT.next_step
def _xid_step(f: Finding, h: Harm) -> str:
    wording = _XID_STEPS.get(str(f.metric("xid_class")))
    if wording is None:
        return f"look up Xid {f.metric('xid')} in NVIDIA's Xid catalogue and act on {h.gpu} as it says"
    return wording.format(gpu=h.gpu)


@GPU_CLOCK_THROTTLE.next_step
def _clock_step(f: Finding, h: Harm) -> str:
    return (f"check {h.gpu}'s cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER): airflow, "
            "power cap, the node's power supply")
