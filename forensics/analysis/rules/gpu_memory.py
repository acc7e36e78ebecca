"""Ghost GPU memory: ``gpu-memory-unattributed``, device memory no listed process accounts for.

Sources: ``nvmlDeviceGetMemoryInfo[_v2]`` ``used`` per sample against the sum of ``usedGpuMemory``
of the processes NVML listed in the same reading (``nvmlDeviceGetComputeRunningProcesses`` and the
graphics and MPS lists): NVML's own readings only (sampled or the snapshot's), never dcgm-exporter
history, whose memory figures come with no process list (the GPUs with only that are not judged,
and the analysis says so). The gap, when it appeared (between which two readings), and the last owner
seen: the processes listed on the GPU before it appeared that had left the list when it did (the
memory they held stayed behind). A GPU in MIG mode is left out (its processes are per instance).

Processes in uninterruptible sleep (``/proc/<pid>/stat`` state D) holding ``/dev/nvidia*`` open
(``/proc/<pid>/fd`` links, ``proc/dstate.json``) are named as the likely holders: they cannot be
killed, so only a GPU reset (or a reboot) frees what they hold. Which ``/dev/nvidiaN`` is which GPU
comes from ``nvmlDeviceGetMinorNumber`` (N): a holder is named on the GPU whose device file it holds
open; one holding only files that are no GPU's own (``/dev/nvidiactl``, ``/dev/nvidia-uvm``,
``/dev/nvidia-modeset``, ``/dev/nvidia-caps/...``) is named on every GPU, saying so. When a GPU's
minor number was not read, every such process of the node is named on its finding, and it says so.

Next step: find and end the process that still holds the GPU (``fuser -v /dev/nvidia*``); when none
does, only a GPU reset (``nvidia-smi -r``) frees the memory.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Set as AbstractSet

from forensics.analysis.findings import Evidence, Finding, Subject
from forensics.analysis.kinds import FindingKind, RuledOutCheck
from forensics.analysis.model import DStateHolder, Gpu, Model
from forensics.analysis.naming import fmt_bytes, fmt_time, gpu_label, label, with_pod
from forensics.analysis.rules.common import dedupe_evidence, dedupe_subjects
from forensics.analysis.samples import LISTS_PROCESSES, GpuSample, ProcessGpuSample
from forensics.specs.nvml import SAMPLES as SAMPLES_MEMBER
from forensics.specs.roles import GPU_DEVICES
from forensics.thresholds import AnalysisConfig

__all__ = ["GPU_MEMORY_UNATTRIBUTED", "gpu_memory_unattributed"]

GPU_MEMORY_UNATTRIBUTED = FindingKind(
    "gpu-memory-unattributed", severity="medium", needs=(GPU_DEVICES,), rank=55, gpu_samples=LISTS_PROCESSES,
    unjudged="exporter history lists no processes, so no memory gap can be told from it",
    next_step="find the process still holding the GPU's device files (fuser -v /dev/nvidia*) and end it; "
              "when none does, drain the GPU and reset it (nvidia-smi -r) to free the memory")


#: ``/dev/nvidiaN``: one GPU's own device file (N its minor number); every other ``/dev/nvidia*`` is the driver's
_GPU_DEVICE_FILE = re.compile(r"^/dev/nvidia(\d+)$")


def _gpu_minors(h: DStateHolder) -> set[int]:
    return {int(m.group(1)) for d in h.devices if (m := _GPU_DEVICE_FILE.match(d)) is not None}


def _holders_on(model: Model, node: str, gpu: Gpu | None) -> tuple[list[tuple[DStateHolder, str]], str]:
    """The D-state holders to name on this GPU's finding, each with what ties it to the GPU, and a
    sentence on how they were matched ("" when by the GPU's own device file)."""
    holders = [h for h in model.series(DStateHolder) if h.node == node]
    if gpu is None or gpu.minor_number is None:
        return ([(h, f"on {', '.join(h.devices)}") for h in holders],
                " (this GPU's minor number was not read, so which /dev/nvidiaN is its own is not known: "
                "every such process of the node is named)" if holders else "")
    own = f"/dev/nvidia{gpu.minor_number}"
    out: list[tuple[DStateHolder, str]] = []
    for h in holders:
        minors = _gpu_minors(h)
        if gpu.minor_number in minors:
            out.append((h, f"on {own}, this GPU's device file"))
        elif not minors:
            out.append((h, f"on {', '.join(h.devices)} (no GPU's own device file: which GPU is not known)"))
    return out, ""


# a device reading with memory known: (it, its memory minus the listed processes', those PIDs)
_Row = tuple[GpuSample, int, AbstractSet[int]]


def _by_tick(model: Model, node: str, uuid: str, samples: list[GpuSample]) -> list[_Row]:
    """Per device reading with memory known and every listed process's memory known, the gap."""
    at: dict[float, list[ProcessGpuSample]] = defaultdict(list)
    for ps in model.proc_samples_by_gpu().get((node, uuid), []):
        at[ps.t].append(ps)
    rows: list[_Row] = []
    for s in samples:
        if s.memory_used_bytes is None:
            continue
        listed = [p for p in at.get(s.t, []) if p.proc_index >= 0 or p.ref.member != SAMPLES_MEMBER]
        if any(p.used_memory_bytes is None for p in listed):
            continue  # NVML could not say what a process holds: no gap can be told
        gap = s.memory_used_bytes - sum(p.used_memory_bytes or 0 for p in listed)
        rows.append((s, gap, {p.pid for p in listed}))
    return rows


def _by_columns(model: Model, node: str, uuid: str, samples: list[GpuSample]) -> list[_Row] | None:
    """:func:`_by_tick` where every process of the GPU was listed, with its memory, once on every
    tick of the same ticks (an hour of 1 Hz ring: millions of samples): the listed memory summed
    per tick by columns. None when the processes are not so regular."""
    cols = list(model.proc_columns().get((node, uuid), {}).values())
    if not cols:
        return None
    ts = cols[0].t
    if not all(c.distinct and c.all_listed and None not in c.used_memory_bytes and c.t == ts for c in cols):
        return None
    held = dict(zip(ts, map(sum, zip(*(c.used_memory_bytes for c in cols), strict=True)), strict=True))
    pids = frozenset(model.proc_columns()[(node, uuid)])
    rows: list[_Row] = []
    for s in samples:
        if s.memory_used_bytes is not None:
            listed = held.get(s.t)
            rows.append((s, s.memory_used_bytes - (listed or 0), pids if listed is not None else frozenset()))
    return rows


@GPU_MEMORY_UNATTRIBUTED.rule
def gpu_memory_unattributed(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    findings: list[Finding] = []
    for (node, uuid), samples in sorted(GPU_MEMORY_UNATTRIBUTED.gpu_samples(model).items()):
        gpu = model.gpus.get((node, uuid))
        if gpu is not None and gpu.mig_enabled:
            continue
        rows = _by_columns(model, node, uuid, samples)
        if rows is None:
            rows = _by_tick(model, node, uuid, samples)
        if not rows:
            continue
        total = rows[0][0].memory_total_bytes or (gpu.memory_total_bytes if gpu else None) or 0
        floor = max(cfg.ghost_memory_min_bytes, int(cfg.ghost_memory_min_ratio * total))
        ghost = [r for r in rows if r[1] >= floor]
        if len(ghost) < cfg.ghost_memory_min_samples:
            continue
        first_i = rows.index(ghost[0])
        before = rows[first_i - 1] if first_i > 0 else None
        seen_before = {pid: r[0].t for r in rows[:first_i] for pid in r[2]}
        left = sorted((t, pid) for pid, t in seen_before.items() if pid not in ghost[0][2])
        gl = gpu_label(model, node, uuid)
        peak = max(ghost, key=lambda r: r[1])
        last = rows[-1]
        when = (f"it appeared between {fmt_time(before[0].t)} and {fmt_time(ghost[0][0].t)}" if before
                else f"it was there from the first reading at {fmt_time(ghost[0][0].t)}")
        subjects: list[Subject] = [(gpu.subject() if gpu else Subject("gpu", uuid, uuid, node))]
        owner_text = ""
        if left:
            t_last, pid = left[-1]
            owner = model.joins.owner(node, pid)
            subjects.extend(s.at(t_last) for s in with_pod(model, owner.subject.with_role("culprit")))
            owner_text = (f"; the last owner seen: {label(model, owner.subject)} (PID {pid}), listed on {gl} until "
                          f"{fmt_time(t_last)} and gone when the gap appeared")
        attributed = last[0].memory_used_bytes - last[1] if last[0].memory_used_bytes is not None else 0
        peak_used = peak[0].memory_used_bytes or 0
        summary = (f"{fmt_bytes(peak[1])} of {gl}'s memory was used by no listed process "
                   f"({fmt_bytes(peak_used)} used, {fmt_bytes(peak_used - peak[1])} "
                   f"attributed) in {len(ghost)} of {len(rows)} readings; {when}{owner_text}")
        named, matched = _holders_on(model, node, gpu)
        holders = [h for h, _ in named]
        for h in holders:
            subjects.extend(s.at(h.t) for s in with_pod(model, model.joins.owner(node, h.pid, h.comm).subject
                                                         .with_role("culprit")))
        if holders:
            summary += ("; in uninterruptible sleep (state D), unkillable, holding NVIDIA device files open: "
                        + ", ".join(f"PID {h.pid}" + (f" ({h.comm})" if h.comm else "")
                                    + (f" waiting in {h.wchan}" if h.wchan else "") + f" {why}"
                                    for h, why in named[:4])
                        + (f" and {len(holders) - 4} more" if len(holders) > 4 else "")
                        + matched + ": only a GPU reset or a reboot frees what they hold")
        elif last[1] >= floor and not last[2]:
            files = (f"/dev/nvidia{gpu.minor_number} (this GPU's device file)"
                     if gpu is not None and gpu.minor_number is not None else "/dev/nvidia*")
            checked = (f"no process in uninterruptible sleep holds {files} open" if node in model.dstate_scanned
                       else "unless a process still holds /dev/nvidia* open (not read by this capture)")
            summary += (f"; at the last reading no process was listed and {fmt_bytes(last[1])} stayed used: "
                        f"{checked}; only a GPU reset frees it")
        findings.append(Finding(
            kind=GPU_MEMORY_UNATTRIBUTED.id,
            severity="high" if peak[1] >= 0.25 * total > 0 else GPU_MEMORY_UNATTRIBUTED.severity,
            confidence=GPU_MEMORY_UNATTRIBUTED.confidence(model, node, 0.85, cfg),
            summary=summary, start=ghost[0][0].t, end=ghost[-1][0].t, node=node,
            subjects=dedupe_subjects(subjects),
            evidence=dedupe_evidence([*(r[0].evidence for r in ([before] if before else [])),
                                      ghost[0][0].evidence, peak[0].evidence, last[0].evidence,
                                      *(h.evidence for h in holders),
                                      *([gpu.minor_evidence] if holders and gpu and gpu.minor_evidence else [])]),
            metrics=(("gap_bytes", peak[1]), ("used_bytes", peak[0].memory_used_bytes),
                     ("attributed_bytes", attributed), ("readings", len(rows)), ("readings_with_gap", len(ghost)),
                     ("last_owner_pid", left[-1][1] if left else None),
                     ("dstate_holders", ", ".join(str(h.pid) for h in holders) or None),
                     ("device_file", f"/dev/nvidia{gpu.minor_number}"
                      if gpu is not None and gpu.minor_number is not None else None)),
            key=f"ghost:{node}:{uuid}",
            headline=f"{fmt_bytes(peak[1])} of {gl}'s memory belonged to no listed process",
        ))
    return findings


@GPU_MEMORY_UNATTRIBUTED.ruled_out(rank=25)
def _no_ghost(c: RuledOutCheck) -> tuple[str, list[Evidence]] | None:
    if GPU_MEMORY_UNATTRIBUTED.id in c.found or not GPU_MEMORY_UNATTRIBUTED.judged_on(c.model, c.node):
        return None
    return (f"no GPU memory on {c.node} was left unaccounted for by the processes NVML listed",
            c.evidence("nvml", "device memory used vs the processes' usedGpuMemory"))
