"""``gpu-clock-throttle``: a GPU whose clocks were held down by thermal, power or hardware slowdown,
and for how long each reason was active in the window.

Source: ``nvmlDeviceGetCurrentClocksEventReasons`` per sample. Each sample stands for the time to the
next sample of the same GPU (the last one for the median interval, at most ``max_sample_gap_s``: a
gap in sampling is not counted as throttled time); a reason's duration is the sum over the samples
that have its bit; its longest stretch is the longest run of consecutive such samples.

Next step: check the GPU's cooling and power.
"""

from __future__ import annotations

from statistics import median

from forensics.analysis.findings import Evidence, Finding, Subject
from forensics.analysis.kinds import FindingKind, Harm, RuledOutCheck
from forensics.analysis.model import Model
from forensics.analysis.naming import gpu_label
from forensics.analysis.rules.common import dedupe_evidence
from forensics.analysis.samples import GpuSample
from forensics.specs.roles import GPU_DEVICES
from forensics.thresholds import AnalysisConfig

__all__ = ["CLOCK_REASONS", "GPU_CLOCK_THROTTLE", "gpu_clock_throttle", "reason_durations", "throttled_seconds"]

GPU_CLOCK_THROTTLE = FindingKind("gpu-clock-throttle", severity="low", needs=(GPU_DEVICES,), rank=90)

# nvmlClocksEventReason* bits that slow the GPU down (not GpuIdle 0x1, AppClocks 0x2, SyncBoost 0x10).
CLOCK_REASONS: dict[int, str] = {
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
}
_SEVERE_CLOCK_BITS = 0x8 | 0x40 | 0x80
_SLOWDOWN_BITS = sum(CLOCK_REASONS)
#: a pause in sampling longer than this is not counted as time the reason was active
_MAX_SAMPLE_GAP_S = 30.0


def _spans(samples: list[GpuSample]) -> list[float]:
    """The seconds each sample stands for: to the next sample (at most _MAX_SAMPLE_GAP_S), the last
    one the median interval."""
    gaps = [b.t - a.t for a, b in zip(samples, samples[1:], strict=False) if b.t > a.t]
    tail = min(median(gaps), _MAX_SAMPLE_GAP_S) if gaps else 0.0
    return [max(min(samples[i + 1].t - smp.t, _MAX_SAMPLE_GAP_S), 0.0) if i + 1 < len(samples) else tail
            for i, smp in enumerate(samples)]


def reason_durations(samples: list[GpuSample]) -> dict[int, tuple[float, float]]:
    """Slowdown bit -> (seconds active, longest continuous stretch in seconds) over ``samples``
    (one GPU's, in time order, each with its reasons known); only bits seen at least once."""
    spans = _spans(samples)
    out: dict[int, tuple[float, float]] = {}
    for bit in CLOCK_REASONS:
        total = longest = run = 0.0
        seen = False
        for smp, span in zip(samples, spans, strict=True):
            if (smp.clocks_event_reasons or 0) & bit:
                seen = True
                total += span
                run += span
                longest = max(longest, run)
            else:
                run = 0.0
        if seen:
            out[bit] = (total, longest)
    return out


def throttled_seconds(samples: list[GpuSample]) -> float:
    """Seconds in which any slowdown reason was active (the reasons overlap: not their sum)."""
    return sum(span for smp, span in zip(samples, _spans(samples), strict=True)
               if (smp.clocks_event_reasons or 0) & _SLOWDOWN_BITS)


@GPU_CLOCK_THROTTLE.rule
def gpu_clock_throttle(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """A GPU whose clocks were held down by thermal, power or hardware slowdown in enough samples."""
    findings: list[Finding] = []
    for (node, uuid), samples in sorted(GPU_CLOCK_THROTTLE.gpu_samples(model).items()):
        known = [s for s in samples if s.clocks_event_reasons is not None]
        if not known:
            continue
        hot = [s for s in known if (s.clocks_event_reasons or 0) & _SLOWDOWN_BITS]
        if not hot or len(hot) / len(known) < cfg.clock_throttle_min_ratio:
            continue
        bits = 0
        for s in hot:
            bits |= (s.clocks_event_reasons or 0)
        durations = reason_durations(known)
        by_time = sorted(durations.items(), key=lambda kv: (-kv[1][0], kv[0]))
        reasons = [CLOCK_REASONS[bit] for bit, _ in by_time]
        temps = [s.temperature_c for s in hot if s.temperature_c is not None]
        power = [s.power_w for s in hot if s.power_w is not None]
        gl = gpu_label(model, node, uuid)
        window = known[-1].t - known[0].t
        throttled = throttled_seconds(known)
        how_long = ", ".join(f"{CLOCK_REASONS[bit]} for {total:.0f} s (longest stretch {longest:.0f} s)"
                             for bit, (total, longest) in by_time)
        summary = (f"{gl} clocks were slowed for {throttled:.0f} s of the {window:.0f} s sampled: "
                   f"{how_long}; {len(hot)} of {len(known)} samples ({len(hot) / len(known) * 100:.0f}%)")
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
                     ("samples", len(known)), ("max_temperature_c", max(temps) if temps else None),
                     ("throttled_s", round(throttled, 1)), ("window_s", round(window, 1)),
                     ("reason_seconds", "; ".join(f"{CLOCK_REASONS[bit]}={total:.1f}"
                                                  for bit, (total, _) in by_time)),
                     ("longest_reason", reasons[0] if reasons else None)),
            key=f"clock:{node}:{uuid}",
            headline=f"{gl} was clock-throttled ({', '.join(reasons)})",
        ))
    return findings


@GPU_CLOCK_THROTTLE.ruled_out(rank=20)
def _no_clock_slowdown(c: RuledOutCheck) -> tuple[str, list[Evidence]] | None:
    if GPU_CLOCK_THROTTLE.id in c.found or not any(
            n == c.node and any(s.clocks_event_reasons is not None for s in samples)
            for (n, _), samples in GPU_CLOCK_THROTTLE.gpu_samples(c.model).items()):
        return None
    n = GPU_CLOCK_THROTTLE.judged_on(c.model, c.node)
    return (f"no thermal, power or hardware clock slowdown on any GPU of {c.node} ({n} samples)",
            c.evidence("nvml", f"{n} samples, no slowdown reason bits"))


@GPU_CLOCK_THROTTLE.next_step
def _clock_step(f: Finding, h: Harm) -> str:
    return (f"check {h.gpu}'s cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER): airflow, "
            "power cap, the node's power supply")
