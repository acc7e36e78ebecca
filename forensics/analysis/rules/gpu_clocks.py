"""``gpu-clock-throttle``: a GPU whose clocks were held down by thermal, power or hardware slowdown.

Source: ``nvmlDeviceGetCurrentClocksEventReasons`` per sample.

Next step: check the GPU's cooling and power.
"""

from __future__ import annotations

from forensics.analysis.findings import Evidence, Finding, Subject
from forensics.analysis.kinds import FindingKind, Harm, RuledOutCheck
from forensics.analysis.model import Model
from forensics.analysis.naming import gpu_label
from forensics.analysis.rules.common import dedupe_evidence
from forensics.analysis.thresholds import AnalysisConfig

__all__ = ["CLOCK_REASONS", "GPU_CLOCK_THROTTLE", "gpu_clock_throttle"]

GPU_CLOCK_THROTTLE = FindingKind("gpu-clock-throttle", severity="low", needs=("nvml",), rank=90)

# nvmlClocksEventReason* bits that slow the GPU down (not GpuIdle 0x1, AppClocks 0x2, SyncBoost 0x10).
CLOCK_REASONS: dict[int, str] = {
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
}
_SEVERE_CLOCK_BITS = 0x8 | 0x40 | 0x80


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


@GPU_CLOCK_THROTTLE.next_step
def _clock_step(f: Finding, h: Harm) -> str:
    return (f"check {h.gpu}'s cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER): airflow, "
            "power cap, the node's power supply")
