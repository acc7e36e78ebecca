"""Silent degradation of a GPU's links: ``gpu-pcie-degraded`` and ``gpu-nvlink-errors``.

Sources: the reads at the start (``nvml/devices.json``) and end (``nvml/health_end.json``) of the
window: ``nvmlDeviceGetCurrPcieLinkWidth``/``Generation`` against ``nvmlDeviceGetMaxPcieLinkWidth``/
``Generation`` (the most the GPU and its slot support together) and ``GetGpuMaxPcieLinkGeneration``,
``nvmlDeviceGetPcieReplayCounter``; ``nvmlDeviceGetNvLinkState(<link>)`` and the four DL error counters
of ``nvmlDeviceGetNvLinkErrorCounter(<link>, ...)`` (replay, recovery, CRC flit, CRC data).

A narrower PCIe link than the maximum is degradation whatever the load. A lower *generation* is, too,
only on a busy GPU: an idle GPU lowers its link speed to save power (``nvidia-smi -q`` shows "Current"
below "Max" at idle), so a lower generation counts only when the GPU's mean utilization in the window
is at least ``pcie_gen_busy_util_pct``. Counters count since the driver loaded: only their growth
between the two readings is evidence about the window, stated with its rate per minute. Replays
alone (the link retried and recovered: slower, nothing lost) are low; a narrower or slower link is
medium; an NVLink that went down or needed recovery is high.

Next step: gpu-pcie-degraded: reseat the GPU / check the riser and slot, then the link comes back at
a reset; gpu-nvlink-errors: check the NVLink cabling or NVSwitch tray, reset the GPU's links (a GPU
reset) and replace the GPU or baseboard if the counters keep growing.
"""

from __future__ import annotations

from collections import defaultdict

from forensics.analysis.events import GpuHealthReading
from forensics.analysis.findings import Evidence, Finding, Severity, Subject
from forensics.analysis.kinds import FindingKind, Harm, RuledOutCheck
from forensics.analysis.model import Model
from forensics.analysis.naming import gpu_label
from forensics.analysis.rules.common import dedupe_evidence
from forensics.analysis.rules.gpu_health import health_pairs
from forensics.specs.roles import GPU_DEVICES
from forensics.thresholds import AnalysisConfig

__all__ = ["GPU_NVLINK_ERRORS", "GPU_PCIE_DEGRADED", "gpu_nvlink_errors", "gpu_pcie_degraded"]

GPU_PCIE_DEGRADED = FindingKind("gpu-pcie-degraded", severity="medium", needs=(GPU_DEVICES,), rank=86, hardware=True)
GPU_NVLINK_ERRORS = FindingKind("gpu-nvlink-errors", severity="medium", needs=(GPU_DEVICES,), rank=88, hardware=True)

#: NVLink DL error counters, as the finding names them.
NVLINK_COUNTERS = {"crc_flit": "CRC flit", "crc_data": "CRC data", "replay": "replay", "recovery": "recovery"}


def _subject(model: Model, node: str, uuid: str) -> Subject:
    gpu = model.gpus.get((node, uuid))
    return gpu.subject() if gpu else Subject("gpu", uuid, uuid, node)


def _window(first: GpuHealthReading | None, last: GpuHealthReading | None) -> float | None:
    if first is None or last is None or first.t is None or last.t is None or last.t <= first.t:
        return None
    return last.t - first.t


def _growth(first: GpuHealthReading | None, last: GpuHealthReading | None, name: str) -> int | None:
    a = first.get(name) if first else None
    b = last.get(name) if last else None
    return b - a if a is not None and b is not None and b > a else None


def _rate(n: int, window: float | None) -> str:
    return f" ({n / window * 60:.1f} per minute)" if window else ""


def _cite(readings: tuple[GpuHealthReading | None, ...], names: list[str]) -> list[Evidence]:
    return [e for r in readings if r is not None for n in names if (e := r.cite(n)) is not None]


def _mean_util(model: Model, node: str, uuid: str) -> float | None:
    utils = [s.util_gpu_pct for s in GPU_NVLINK_ERRORS.gpu_samples(model).get((node, uuid), []) if s.util_gpu_pct is not None]
    return sum(utils) / len(utils) if utils else None


def _when(at_start: bool, at_end: bool, both_read: bool) -> str:
    if at_start and at_end:
        return "for the whole window (start and end)"
    if at_start:
        return "at the start of the window, back to full by its end" if both_read else "when read"
    return "by the end of the window (full at its start)"


@GPU_PCIE_DEGRADED.rule
def gpu_pcie_degraded(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """A GPU whose PCIe link ran narrower (or, busy, slower) than it and its slot support, or whose
    replay counter grew during the window."""
    findings: list[Finding] = []
    for (node, uuid), (first, last) in sorted(health_pairs(model).items()):
        readings = (first, last)
        both = first is not None and last is not None
        parts: list[str] = []
        cited: list[str] = []
        widths = []
        for r in readings:
            cur, top = (r.get("pcie_width_curr"), r.get("pcie_width_max")) if r else (None, None)
            widths.append((cur, top) if cur is not None and top is not None and 0 < cur < top else None)
        if any(widths):
            shown = next(w for w in widths if w)
            parts.append(f"link width x{shown[0]} of x{shown[1]} {_when(bool(widths[0]), bool(widths[1]), both)}")
            cited += ["pcie_width_curr", "pcie_width_max"]
        util = _mean_util(model, node, uuid)
        gens = []
        for r in readings:
            cur = r.get("pcie_gen_curr") if r else None
            caps = [v for v in ((r.get("pcie_gen_max"), r.get("pcie_gen_gpu_max")) if r else ()) if v]
            top = min(caps) if caps else None
            gens.append((cur, top) if cur is not None and top is not None and 0 < cur < top else None)
        gen_counted = util is not None and util >= cfg.pcie_gen_busy_util_pct
        if any(gens) and gen_counted:
            shown = next(g for g in gens if g)
            parts.append(f"link generation Gen{shown[0]} of Gen{shown[1]} {_when(bool(gens[0]), bool(gens[1]), both)} "
                         f"while the GPU was busy ({util:.0f}% mean utilization)")
            cited += ["pcie_gen_curr", "pcie_gen_max"]
        window = _window(first, last)
        replays = _growth(first, last, "pcie_replay_counter")
        if replays:
            parts.append(f"{replays} PCIe replay(s) during the {window:.0f} s window{_rate(replays, window)}"
                         if window else f"{replays} PCIe replay(s) between the readings")
            cited.append("pcie_replay_counter")
        if not parts:
            continue
        gl = gpu_label(model, node, uuid)
        narrow = any(widths)
        # replays alone: the link retried and recovered (slower, no data lost): low
        severity: Severity = "medium" if narrow or (gen_counted and any(gens)) else "low"
        summary = f"{gl}'s PCIe link degraded: " + "; ".join(parts)
        if any(gens) and not gen_counted:
            summary += ("; its lower link generation is not counted: the GPU was idle "
                        "(it lowers link speed to save power)" if util is not None else "")
        times = [r.t for r in readings if r is not None and r.t is not None]
        findings.append(Finding(
            kind=GPU_PCIE_DEGRADED.id, severity=severity,
            confidence=GPU_PCIE_DEGRADED.confidence(model, node, 0.9 if narrow or replays else 0.75, cfg),
            summary=summary, start=min(times) if times else None, end=max(times) if times else None, node=node,
            subjects=(_subject(model, node, uuid),), evidence=dedupe_evidence(_cite(readings, cited)),
            metrics=(("width", f"x{next(w for w in widths if w)[0]}" if narrow else None),
                     ("max_width", f"x{next(w for w in widths if w)[1]}" if narrow else None),
                     ("generation", next(g for g in gens if g)[0] if any(gens) else None),
                     ("max_generation", next(g for g in gens if g)[1] if any(gens) else None),
                     ("generation_counted", int(gen_counted) if any(gens) else None),
                     ("degraded_at_start", int(bool(widths[0] or (gen_counted and gens[0])))),
                     ("degraded_at_end", int(bool(widths[1] or (gen_counted and gens[1])))),
                     ("replays_in_window", replays), ("window_s", round(window, 1) if window else None),
                     ("mean_util_pct", round(util, 1) if util is not None else None)),
            key=f"pcie:{node}:{uuid}", headline=f"{gl}'s PCIe link degraded",
        ))
    return findings


def _links(reading: GpuHealthReading | None) -> set[int]:
    out: set[int] = set()
    for name, _ in reading.counters if reading else ():
        if name.startswith("nvlink_"):
            head = name.split("_")[1]
            if head.isdigit():
                out.add(int(head))
    return out


@GPU_NVLINK_ERRORS.rule
def gpu_nvlink_errors(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """A GPU with an NVLink that went down (or was down) or whose DL error counters grew during the window."""
    findings: list[Finding] = []
    for (node, uuid), (first, last) in sorted(health_pairs(model).items()):
        readings = (first, last)
        window = _window(first, last)
        down: list[str] = []
        grew: dict[int, list[str]] = defaultdict(list)
        cited: list[str] = []
        went_down = recovery = 0
        for link in sorted(_links(first) | _links(last)):
            a = first.get(f"nvlink_{link}_state") if first else None
            b = last.get(f"nvlink_{link}_state") if last else None
            if a == 1 and b == 0:
                down.append(f"link {link} went down during the window")
                went_down += 1
            elif a == 0 and b == 1:
                down.append(f"link {link} was down at the start and came back up")
            elif (a == 0 or a is None) and (b == 0 or b is None) and 0 in (a, b):
                down.append(f"link {link} is down")
            if a != b or 0 in (a, b):
                cited.append(f"nvlink_{link}_state")
            for counter, label in NVLINK_COUNTERS.items():
                n = _growth(first, last, f"nvlink_{link}_{counter}")
                if n:
                    grew[link].append(f"{label} +{n}{_rate(n, window)}")
                    cited.append(f"nvlink_{link}_{counter}")
                    recovery += n if counter == "recovery" else 0
        if not down and not grew:
            continue
        gl = gpu_label(model, node, uuid)
        parts = down + [f"link {link}: {', '.join(items)}" for link, items in sorted(grew.items())]
        summary = f"{gl}'s NVLink errors" + (f" during the {window:.0f} s window" if window else "") + ": " + \
            "; ".join(parts)
        severity: Severity = "high" if went_down or recovery else GPU_NVLINK_ERRORS.severity
        times = [r.t for r in readings if r is not None and r.t is not None]
        findings.append(Finding(
            kind=GPU_NVLINK_ERRORS.id, severity=severity,
            confidence=GPU_NVLINK_ERRORS.confidence(model, node, 0.9, cfg),
            summary=summary, start=min(times) if times else None, end=max(times) if times else None, node=node,
            subjects=(_subject(model, node, uuid),), evidence=dedupe_evidence(_cite(readings, cited), limit=16),
            metrics=(("links_down", ", ".join(d.split()[1] for d in down) or None),
                     ("links_went_down", went_down), ("links_with_errors", ", ".join(map(str, sorted(grew))) or None),
                     ("errors", "; ".join(parts)), ("window_s", round(window, 1) if window else None)),
            key=f"nvlink:{node}:{uuid}", headline=f"{gl} had NVLink errors",
        ))
    return findings


def _node_pairs(c: RuledOutCheck) -> list[tuple[GpuHealthReading | None, GpuHealthReading | None]]:
    return [pair for (node, _), pair in sorted(health_pairs(c.model).items()) if node == c.node]


@GPU_PCIE_DEGRADED.ruled_out(rank=22)
def _no_pcie_degradation(c: RuledOutCheck) -> tuple[str, list[Evidence]] | None:
    pairs = [p for p in _node_pairs(c) if any(r is not None and r.get("pcie_width_curr") is not None for r in p)]
    if GPU_PCIE_DEGRADED.id in c.found or not pairs:
        return None
    both = sum(1 for a, b in pairs if a is not None and b is not None)
    tail = (f"; no PCIe replay on {both} GPU(s) read at both ends of the window" if both
            else "; read once (no end-of-window reading to compare replay counters)")
    return (f"every GPU of {c.node} ran its PCIe link at full width ({len(pairs)} GPU(s)){tail}",
            list(dedupe_evidence(_cite(tuple(r for p in pairs for r in p), ["pcie_width_curr"]), limit=4)))


@GPU_NVLINK_ERRORS.ruled_out(rank=23)
def _no_nvlink_errors(c: RuledOutCheck) -> tuple[str, list[Evidence]] | None:
    pairs = [p for p in _node_pairs(c) if p[0] is not None and p[1] is not None and (_links(p[0]) or _links(p[1]))]
    if GPU_NVLINK_ERRORS.id in c.found or not pairs:
        return None
    links = sum(len(_links(a) | _links(b)) for a, b in pairs)
    return (f"no NVLink of {c.node} went down or counted errors during the window ({links} link(s) on "
            f"{len(pairs)} GPU(s) read at both ends)",
            list(dedupe_evidence(_cite(tuple(r for p in pairs for r in p),
                                       [f"nvlink_{link}_state" for link in range(18)]), limit=4)))


@GPU_PCIE_DEGRADED.next_step
def _pcie_step(f: Finding, h: Harm) -> str:
    if f.metric("width"):
        return (f"drain {h.gpu} and reseat it (check the riser, slot and cabling): its link trains below its width; "
                "nvidia-smi -q -d PCIE shows the current and maximum link")
    return (f"watch {h.gpu}'s PCIe replay counter (nvidia-smi -q -d PCIE); if it keeps growing, reseat the GPU "
            "and check the riser and slot")


@GPU_NVLINK_ERRORS.next_step
def _nvlink_step(f: Finding, h: Harm) -> str:
    return (f"check {h.gpu}'s NVLink connections (nvidia-smi nvlink -s, nvidia-smi nvlink -e): reset the GPU to "
            "retrain the links, and have the GPU or baseboard replaced if the errors come back")
