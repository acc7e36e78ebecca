"""``unattributed-gpu-process``: GPU processes in no container (host processes) or whose PIDs the
capture could not resolve, over NVML process samples and the PID -> cgroup join (/proc/<pid>/cgroup).

One finding per GPU and owner, not per process: the host processes of one cgroup together (64
``sleep`` workers of one job step are one cause, one finding), the unresolved PIDs of a GPU
together; the finding names every process it covers in its ``pids`` metric and its subjects, and
cites the first few processes' evidence (docs/analysis-format.md).
"""

from __future__ import annotations

from functools import reduce
from operator import add, attrgetter

from forensics.analysis.findings import Evidence, Finding, Role
from forensics.analysis.kinds import FindingKind, Harm
from forensics.analysis.model import Model, Owner
from forensics.analysis.naming import fmt_bytes, gpu_label, gpu_subject, name_of, process_label
from forensics.analysis.rules.common import dedupe_evidence, dedupe_subjects
from forensics.analysis.samples import ProcessGpuSample
from forensics.specs.roles import GPU_DEVICES, PROCESS_TABLE
from forensics.thresholds import AnalysisConfig

_BY_TIME = attrgetter("t")  # a C sort key: the series sorted here are per sample

__all__ = ["MPS_SERVER_COMM", "PIDS_CITED", "PIDS_NAMED", "UNATTRIBUTED_GPU_PROCESS", "is_mps_server",
           "unattributed_gpu_process"]

#: the comm of ``nvidia-cuda-mps-server`` (15 characters kept): it runs the kernels of the MPS
#: clients of every container sharing the GPU, so NVML lists it on their GPUs; it is never a user
#: of a GPU of its own
MPS_SERVER_COMM = "nvidia-cuda-mps"

UNATTRIBUTED_GPU_PROCESS = FindingKind(
    "unattributed-gpu-process", severity="low", needs=(GPU_DEVICES, PROCESS_TABLE), rank=30,
    causes=("gpu-compute-hog", "gpu-memory-pressure"))


@UNATTRIBUTED_GPU_PROCESS.next_step
def _unattributed_step(f: Finding, h: Harm) -> str:
    pid, n = f.metric("pid"), f.metric("processes")
    if isinstance(n, int) and n > 1:
        where = f" in cgroup {f.metric('cgroup')}" if f.metric("cgroup") is not None else ""
        who = f"the {n} processes{where} ({_pid_list(str(f.metric('pids')).split(', '))})"
    else:
        who = f"PID {pid}" if pid is not None else "the process"
    return (f"find who runs {who} on {h.gpu} (ps, nvidia-smi on the node; capture in the host PID namespace "
            "if NVML's PIDs were not found) and run it in a container with an explicit GPU grant, or stop it")


#: PIDs a grouped finding names in its text (all of them stay in its ``pids`` metric)
PIDS_NAMED = 8
#: processes whose first sample and /proc lines a grouped finding cites
PIDS_CITED = 3


def _pid_list(pids: list[str] | list[int]) -> str:
    shown = ", ".join(str(p) for p in pids[:PIDS_NAMED])
    return shown + (f" and {len(pids) - PIDS_NAMED} more" if len(pids) > PIDS_NAMED else "")


def is_mps_server(model: Model, node: str, pid: int) -> bool:
    """Whether GPU process ``pid`` is the MPS server (by its comm, /proc/<pid>/stat)."""
    proc = model.gpu_process(node, pid)
    return proc is not None and proc.comm == MPS_SERVER_COMM


def _unattributed_group(model: Model, node: str, pid: int) -> tuple[str, ...]:
    """Which unattributed processes of one GPU are reported together: host processes of one cgroup
    (one owner: a service, a session, a job step), and PIDs the capture could not resolve (no owner
    is claimed for them, only that none was found). A process with no cgroup recorded or whose
    /proc cannot be trusted (a reused PID) stands alone: nothing says whose it is."""
    proc = model.gpu_process(node, pid)
    if proc is None:
        return ("unresolved",)
    # one path is one cgroup, unless it is relative to a private cgroup namespace (two containers'
    # processes can both read "/"), unparsable or from a reused PID (no path then)
    # (the root cgroup is no one's: every process of a host that puts them in no cgroup of their own)
    if proc.cgroup_path and proc.cgroup_path != "/" and proc.unresolved_reason in (None, _no_runtime(proc.cgroup_path)):
        return ("cgroup", proc.cgroup_path)
    return ("pid", str(pid))


def _no_runtime(path: str) -> str:
    """The procfs loader's reason for a host cgroup no runtime's layout names."""
    return f"cgroup path {path} names no known runtime"


def _columns(model: Model, node: str, uuid: str, pid: int, samples: list[ProcessGpuSample]) -> tuple[
        list[float], list[float | None], list[int | None], bool]:
    """A process's samples (those that count as use, in time order) as columns: times, SM %,
    memory, and whether its times are distinct; the model's shared columns when every sample of
    the PID counts (the usual case), else made here."""
    col = model.proc_columns().get((node, uuid), {}).get(pid)
    every = model.proc_samples_by_pid().get((node, uuid), {}).get(pid)
    if col is not None and every and len(every) == len(samples) and every[0] is samples[0] and every[-1] is samples[-1]:
        return col.t, col.sm_util_pct, col.used_memory_bytes, col.distinct
    ts = list(map(_T, samples))
    return ts, list(map(_SM, samples)), list(map(_MEM, samples)), len(set(ts)) == len(ts)


def _per_tick_totals(model: Model, node: str, uuid: str,
                     members: list[tuple[int, list[ProcessGpuSample]]]) -> tuple[int, float | None]:
    """The group's peak GPU memory (summed over its processes at each sampling time) and its SM
    use summed the same way, averaged over the times that report SM; ``members``: each process's
    PID and samples in time order, processes in PID order (the order the sums are taken in)."""
    cols = [_columns(model, node, uuid, pid, ss) for pid, ss in members]
    ts = cols[0][0]
    if cols[0][3] and all(c[0] == ts for c in cols):  # the same ticks, each once: by columns
        mems = [[m or 0 for m in c[2]] if None in c[2] else c[2] for c in cols]
        sms = [c[1] for c in cols]
        peak = max(map(sum, zip(*mems, strict=True)), default=0)
        if not any(None in c for c in sms):
            per_tick = [reduce(add, vals, 0.0) for vals in zip(*sms, strict=True)]
            return peak, (sum(per_tick) / len(per_tick) if per_tick else None)
        if all(set(c) == {None} for c in sms):  # no SM figure at all
            return peak, None
    mem: dict[float, int] = {}
    sm: dict[float, float] = {}
    mem_at, sm_at = mem.get, sm.get  # per process sample: bound once
    for _, samples in members:
        for s in samples:
            t = s.t
            mem[t] = mem_at(t, 0) + (s.used_memory_bytes or 0)
            v = s.sm_util_pct
            if v is not None:
                sm[t] = sm_at(t, 0.0) + v
    return max(mem.values(), default=0), (sum(sm.values()) / len(sm) if sm else None)


_T = attrgetter("t")
_MEM = attrgetter("used_memory_bytes")
_SM = attrgetter("sm_util_pct")


@UNATTRIBUTED_GPU_PROCESS.rule
def unattributed_gpu_process(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """GPU processes in no container (host processes) or whose PIDs cannot be resolved: one finding
    per GPU and owner (a cgroup's host processes together, the unresolved PIDs together), naming
    every process it covers (``pids``) and citing the first few."""
    findings: list[Finding] = []
    for (node, uuid), owners in sorted(model.joins.active_owners(cfg.process_active_sm_pct).items()):
        groups: dict[tuple[str, ...], list[tuple[int, Owner, list[ProcessGpuSample]]]] = {}
        for subject, (owner, samples) in owners.items():
            if owner.attributed:
                continue
            pid = int(subject.id)
            groups.setdefault(_unattributed_group(model, node, pid), []).append((pid, owner, samples))
        for group, members in sorted(groups.items()):
            members.sort(key=lambda m: m[0])
            if len(members) == 1:
                findings.append(_unattributed_one(model, cfg, node, uuid, *members[0]))
            else:
                findings.append(_unattributed_many(model, cfg, node, uuid, group, members))
    return findings


def _unattributed_one(model: Model, cfg: AnalysisConfig, node: str, uuid: str, pid: int, owner: Owner,
                      samples: list[ProcessGpuSample]) -> Finding:
    proc = model.gpu_process(node, pid)
    holders = model.joins.explicit_holders(node, uuid)
    gl = gpu_label(model, node, uuid)
    peak_mem, sm_avg = _per_tick_totals(model, node, uuid, [(pid, samples)])
    start, end = samples[0].t, samples[-1].t  # (in time order)
    if proc is not None:
        where = f"in cgroup {proc.cgroup_path}" if proc.cgroup_path else "in no container"
        what = f"host process {pid} ({proc.comm or '?'}) ran on {gl} {where}, outside any container"
        if proc.unresolved_reason:
            what += f" ({proc.unresolved_reason})"
    else:
        what = (f"GPU process {pid} on {gl} cannot be resolved to a container: "
                + ("the capture's /proc is not the host's PID namespace" if node in model.pid_mismatch_nodes
                   else f"no trustworthy /proc/{pid} in the bundle (exited before capture, "
                        "appeared after procfs read /proc, or another PID namespace)"))
    mps = is_mps_server(model, node, pid)
    role: Role = "culprit" if holders and proc is not None and not mps else "witness"
    if mps:
        what += " (the MPS server: it runs the kernels of the GPU's MPS clients, no use of its own)"
    subjects = [owner.subject.with_role(role)]
    subjects += [h[0].with_role("victim") for h in holders] if role == "culprit" else []
    subjects.append(gpu_subject(model, node, uuid))
    if holders and proc is not None:
        what += "; the GPU is allocated to " + ", ".join(name_of(h[0]) for h in holders)
    summary = f"{what}; peak {fmt_bytes(peak_mem)} of GPU memory"
    first = min(samples, key=_BY_TIME)
    return Finding(
        kind=UNATTRIBUTED_GPU_PROCESS.id,
        severity="medium" if role == "culprit" else UNATTRIBUTED_GPU_PROCESS.severity,
        confidence=UNATTRIBUTED_GPU_PROCESS.confidence(model, node, 0.9 if proc is not None else 0.6, cfg),
        summary=summary, start=start, end=end, node=node,
        subjects=dedupe_subjects(subjects),
        evidence=dedupe_evidence([first.evidence, *owner.evidence[:2]]),
        metrics=(("gpu", gl), ("pid", pid), ("processes", 1), ("pids", str(pid)),
                 *((("cgroup", proc.cgroup_path),) if proc is not None and proc.cgroup_path else ()),
                 ("peak_gpu_memory_bytes", peak_mem),
                 ("sm_util_avg_pct", round(sm_avg, 1) if sm_avg is not None else None)),
        key=f"unattributed:{node}:{uuid}:{pid}",
        headline=(f"host process {pid} ({proc.comm or '?'}) used {gl} outside any container"
                  if proc is not None else f"{process_label(model, node, pid)}, used {gl}")
                 + (f", holding {fmt_bytes(peak_mem)}" if peak_mem else ""),
    )


def _unattributed_many(model: Model, cfg: AnalysisConfig, node: str, uuid: str, group: tuple[str, ...],
                       members: list[tuple[int, Owner, list[ProcessGpuSample]]]) -> Finding:
    """Several processes of one owner on one GPU (host processes of one cgroup), or several PIDs
    the capture could not resolve, as one finding."""
    holders = model.joins.explicit_holders(node, uuid)
    gl = gpu_label(model, node, uuid)
    pids = [m[0] for m in members]
    peak_mem, sm_avg = _per_tick_totals(model, node, uuid, [(m[0], m[2]) for m in members])
    start, end = min(m[2][0].t for m in members), max(m[2][-1].t for m in members)  # (each in time order)
    n = len(members)
    named = _pid_list(pids)
    resolved = group[0] == "cgroup"
    if resolved:
        comms = sorted({p.comm or "?" for pid in pids if (p := model.gpu_process(node, pid)) is not None})
        comm_text = ", ".join(comms[:3]) + (f" and {len(comms) - 3} other names" if len(comms) > 3 else "")
        what = (f"{n} host processes ({comm_text}; PIDs {named}) ran on {gl} in cgroup {group[1]}, "
                "outside any container")
        first_proc = model.gpu_process(node, pids[0])
        if first_proc is not None and first_proc.unresolved_reason:  # the same for every process of the path
            what += f" ({first_proc.unresolved_reason})"
        brief = f"{n} host processes ({comm_text}) in cgroup {group[1]} used {gl} outside any container"
    else:
        what = (f"{n} GPU processes on {gl} (PIDs {named}) cannot be resolved to a container: "
                + ("the capture's /proc is not the host's PID namespace" if node in model.pid_mismatch_nodes
                   else "no trustworthy /proc/<pid> in the bundle (exited before capture, "
                        "appeared after procfs read /proc, or another PID namespace)"))
        brief = f"{n} GPU processes not found in this capture's /proc used {gl}"
    role: Role = "culprit" if holders and resolved and not all(is_mps_server(model, node, p) for p in pids) \
        else "witness"
    subjects = [owner.subject.with_role(role) for _, owner, _ in members]
    subjects += [h[0].with_role("victim") for h in holders] if role == "culprit" else []
    subjects.append(gpu_subject(model, node, uuid))
    if role == "culprit":
        what += "; the GPU is allocated to " + ", ".join(name_of(h[0]) for h in holders)
    sm_text = f", SM {sm_avg:.0f}% on average" if sm_avg is not None else ""
    summary = f"{what}; together peak {fmt_bytes(peak_mem)} of GPU memory{sm_text}"
    evidence: list[Evidence] = []
    for _, owner, ss in members[:PIDS_CITED]:
        evidence.append(min(ss, key=_BY_TIME).evidence)
        evidence.extend(owner.evidence[:2])
    return Finding(
        kind=UNATTRIBUTED_GPU_PROCESS.id,
        severity="medium" if role == "culprit" else UNATTRIBUTED_GPU_PROCESS.severity,
        confidence=UNATTRIBUTED_GPU_PROCESS.confidence(model, node, 0.9 if resolved else 0.6, cfg),
        summary=summary, start=start, end=end, node=node,
        subjects=dedupe_subjects(subjects),
        evidence=dedupe_evidence(evidence),
        metrics=(("gpu", gl), ("processes", n), ("pids", ", ".join(str(p) for p in pids)),
                 *((("cgroup", group[1]),) if resolved else ()),
                 ("peak_gpu_memory_bytes", peak_mem),
                 ("sm_util_avg_pct", round(sm_avg, 1) if sm_avg is not None else None)),
        key=f"unattributed:{node}:{uuid}:" + (f"cgroup:{group[1]}" if resolved else "unresolved"),
        headline=brief + (f", holding {fmt_bytes(peak_mem)}" if peak_mem else ""),
    )
