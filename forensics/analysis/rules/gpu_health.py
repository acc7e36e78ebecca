"""GPU health counters: ``gpu-memory-health`` and ``gpu-recovery-action``.

Sources: the memory-error counters of the snapshot and of the reading after sampling
(``nvmlDeviceGetTotalEccErrors``, ``GetRetiredPages_v2``, ``GetRetiredPagesPendingStatus``,
``GetRemappedRows``) and the recovery action (field ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``), compared between the start and the end
of the window.

Next step: gpu-memory-health: reset the GPU when a reset is needed, open an RMA/support case for a
candidate; gpu-recovery-action: the action NVML names.
"""

from __future__ import annotations

from collections import defaultdict

from forensics.analysis.events import GpuHealthReading
from forensics.analysis.findings import Evidence, Finding, Severity, Subject
from forensics.analysis.kinds import FindingKind, Harm, RuledOutCheck
from forensics.analysis.model import Model
from forensics.analysis.naming import fmt_time, gpu_label
from forensics.analysis.rules.common import dedupe_evidence
from forensics.specs.roles import GPU_DEVICES
from forensics.thresholds import AnalysisConfig

__all__ = ["GPU_MEMORY_HEALTH", "GPU_RECOVERY_ACTION", "RECOVERY_ACTIONS", "gpu_memory_health", "health_pairs",
           "gpu_recovery_action"]

GPU_MEMORY_HEALTH = FindingKind("gpu-memory-health", severity="high", needs=(GPU_DEVICES,), rank=82, hardware=True)
GPU_RECOVERY_ACTION = FindingKind("gpu-recovery-action", severity="high", needs=(GPU_DEVICES,), rank=84, hardware=True)

#: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION values (nvmlDeviceGpuRecoveryAction_t, NVML API reference).
RECOVERY_ACTIONS: dict[int, str] = {0: "none", 1: "GPU reset", 2: "node reboot", 3: "drain P2P",
                                    4: "drain P2P and reset the GPU", 5: "recover the IMEX domain",
                                    6: "reset the GPU's PCIe bus", 7: "reboot the system"}


def health_pairs(model: Model) -> dict[tuple[str, str], tuple[GpuHealthReading | None, GpuHealthReading | None]]:
    out: dict[tuple[str, str], list[GpuHealthReading | None]] = defaultdict(lambda: [None, None])
    for r in model.series(GpuHealthReading):
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
    for (node, uuid), (first, last) in sorted(health_pairs(model).items()):
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
    """A GPU for which the driver recommends a recovery action (field ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``
    other than NONE), decoded."""
    findings: list[Finding] = []
    for (node, uuid), (first, last) in sorted(health_pairs(model).items()):
        value = _latest(first, last, "gpu_recovery_action")
        if not value:
            continue
        reading = last if last is not None and last.get("gpu_recovery_action") is not None else first
        action = RECOVERY_ACTIONS.get(value, f"action {value} (not in the analyzer's table)")
        gl = gpu_label(model, node, uuid)
        gpu = model.gpus.get((node, uuid))
        cite = reading.cite("gpu_recovery_action") if reading else None
        before = first.get("gpu_recovery_action") if first is not None and reading is last else None
        changed = False
        summary = f"The driver recommends {action} for {gl} (NVML field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = {value})"
        if before is not None and before != value:
            changed = True
            summary += (f"; it changed during the window (it was {RECOVERY_ACTIONS.get(before, before)} "
                        f"at {fmt_time(first.t if first else None)})")
        evidence = [e for e in ((first.cite("gpu_recovery_action") if changed and first else None), cite) if e]
        findings.append(Finding(
            kind=GPU_RECOVERY_ACTION.id, severity="critical" if value in (2, 7) else GPU_RECOVERY_ACTION.severity,
            confidence=GPU_RECOVERY_ACTION.confidence(model, node, 0.95, cfg),
            summary=summary, start=reading.t if reading else None, end=reading.t if reading else None, node=node,
            subjects=(gpu.subject() if gpu else Subject("gpu", uuid, uuid, node),),
            evidence=tuple(evidence), metrics=(("recovery_action", value), ("meaning", action),
                                               ("changed_during_window", int(changed))),
            key=f"recovery:{node}:{uuid}", headline=f"the driver recommends {action} for {gl}",
        ))
    return findings


@GPU_MEMORY_HEALTH.ruled_out(rank=15)
def _no_memory_errors(c: RuledOutCheck) -> tuple[str, list[Evidence]] | None:
    """No memory-error counter of any GPU of the node says reset, RMA or recorded errors."""
    pairs = [(a, b) for (node, _), (a, b) in sorted(health_pairs(c.model).items()) if node == c.node
             and any(r is not None and any(r.get(n) is not None for n in _MEMORY_COUNTERS) for r in (a, b))]
    if GPU_MEMORY_HEALTH.id in c.found or not pairs:
        return None
    both = sum(1 for a, b in pairs if a is not None and b is not None)
    when = "at the start and end of the window" if both == len(pairs) else "when read"
    evidence = [e for a, b in pairs for r in (b or a,) if r is not None
                for n in ("ecc_uncorrected_volatile", "remapped_rows_uncorrectable") if (e := r.cite(n)) is not None]
    return (f"no memory-error counter NVML gave for the {len(pairs)} GPU(s) of {c.node} {when} shows an "
            "uncorrectable ECC error, a pending or failed row remap or a retired page",
            list(dedupe_evidence(evidence, limit=4)))


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
