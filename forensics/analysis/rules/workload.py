"""The workload's own words: ``workload-cuda-error`` (a CUDA fault or out-of-memory error in a
container's or pod's log) and ``stalled-rank`` (the rank of a distributed job the others waited for).

Sources: container logs (``docker/containers/<id>/logs.txt``, ``GET /containers/{id}/logs``) and
pod logs (``kubernetes/logs/...``, ``GET .../pods/{name}/log``), parsed into typed signals by
:mod:`forensics.parsing.logsignals`; ranks mapped and the stalled one found by
:mod:`forensics.analysis.ranks`, with each node's clock offset and its uncertainty; the stalled
rank explained with its own node's Xid events, OOM kills and GPU utilization samples.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable

from forensics.analysis.events import LogSignal, LogTail, OomKill, XidEvent
from forensics.analysis.findings import Evidence, Finding, Severity, Subject
from forensics.analysis.kinds import FindingKind, Harm
from forensics.analysis.model import Model
from forensics.analysis.naming import fmt_bytes, fmt_time, gpu_label, gpu_subject, label, with_pod
from forensics.analysis.ranks import (
    NodeClock,
    RankState,
    Stall,
    collect_ranks,
    find_stalled,
    rank_ranges,
)
from forensics.analysis.rules.common import dedupe_evidence, dedupe_subjects
from forensics.analysis.rules.gpu_xid import xid_meaning
from forensics.analysis.rules.log_errors import APPLICATION, FAULT_WORDS, error_before, error_of
from forensics.analysis.rules.oom_context import oom_context
from forensics.analysis.samples import CpuSample, ProcessGpuSample, PsiSample
from forensics.parsing.logsignals.cuda import CudaFault, CudaOom
from forensics.parsing.logsignals.nccl import NcclAsyncError, NcclCommInit
from forensics.parsing.logsignals.process import ProcessEnd
from forensics.specs.roles import GPU_DEVICES
from forensics.thresholds import AnalysisConfig

__all__ = ["STALLED_RANK", "WORKLOAD_CUDA_ERROR", "gpus_used", "log_gpu", "stalled_rank", "workload_cuda_error"]

WORKLOAD_CUDA_ERROR = FindingKind(
    "workload-cuda-error", severity="high", needs=(GPU_DEVICES,), rank=85,
    caused_by=("gpu-xid-fault", "gpu-lost", "gpu-memory-pressure",
               "unallocated-gpu-use", "overlapping-gpu-allocation", "unattributed-gpu-process"))
STALLED_RANK = FindingKind("stalled-rank", severity="high", needs=(), rank=110,
                           caused_by=("gpu-xid-fault", "gpu-lost", "oom-kill"))

_EXPLAIN_BEFORE_S = 180.0  # node evidence this long before the stalled rank's last line explains it
_EXPLAIN_AFTER_S = 30.0
_IDLE_PCT, _BUSY_PCT = 5.0, 50.0


# ---------------------------------------------------------------------------------------------
# who wrote a log, and which GPU it names


def _writer(model: Model, s: LogSignal | LogTail) -> Subject:
    c = model.container(s.node, s.container_id)
    if c is not None:
        return c.subject()
    pod = model.pods.get(s.pod_key) if s.pod_key else None
    if pod is not None:
        return pod.subject()
    ident = s.container_id or s.pod_key or "?"
    return Subject("container", ident, ident[:12], s.node)


def _gpu_by_bus(model: Model, node: str, bus: str | None) -> str | None:
    gpu = model.gpu_by_pci(node, bus) if bus else None
    return gpu.uuid if gpu is not None else None


def gpus_used(model: Model) -> dict[tuple[str, str, str], set[str]]:
    """Owner subject key -> the GPUs its processes used (NVML samples), from each distinct
    (node, pid, GPU) once."""
    out: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for node, pid, uuid in {(ps.node, ps.pid, ps.gpu_uuid) for ps in model.series(ProcessGpuSample)}:
        out[model.joins.owner(node, pid).subject.key()].add(uuid)
    return out


def log_gpu(model: Model, node: str, container_id: str | None, cuda_device: int | None,
            bus_id: str | None, comm_buses: dict[int, str],
            used_by: dict[tuple[str, str, str], set[str]] | None = None) -> str | None:
    """The host GPU (UUID) a log line means, or None when the bundle cannot say: the PCI bus id
    the line names; NCCL's comm line of the same log for that CUDA device; the one GPU the
    container's processes used (NVML samples); the one GPU its allocation grants; or, on GPUs of
    one model, the ``cuda_device``-th of the GPUs it was granted in host order (CUDA's order)."""
    found = _gpu_by_bus(model, node, bus_id)
    if found:
        return found
    if cuda_device is not None and cuda_device in comm_buses:
        found = _gpu_by_bus(model, node, comm_buses[cuda_device])
        if found:
            return found
    c = model.container(node, container_id)
    if c is None:
        return None
    used = (used_by if used_by is not None else gpus_used(model)).get(c.subject().key(), set())
    if len(used) == 1:
        return next(iter(used))
    granted = [g for g in model.node_gpus(node) if c.allocation.grants(g.uuid)]
    if len(granted) == 1:
        return granted[0].uuid
    if cuda_device is not None and 0 <= cuda_device < len(granted) and len({g.name for g in granted}) == 1:
        return granted[cuda_device].uuid
    return None


@WORKLOAD_CUDA_ERROR.rule
def workload_cuda_error(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """One finding per (node, log writer, error): a CUDA fault or out-of-memory error the workload
    logged, the writer as victim, the GPU when the log or the bundle names it. An Xid on that GPU,
    or someone else's use of it, links to it in the chain."""
    comm_buses: dict[tuple[str, str], dict[int, str]] = defaultdict(dict)
    for s in model.series(LogSignal):
        if isinstance(s.signal, NcclCommInit) and s.signal.cuda_device is not None and s.signal.bus_id:
            comm_buses[(s.node, s.evidence.member)][s.signal.cuda_device] = s.signal.bus_id
    groups: dict[tuple[str, tuple[str, str, str], str], list[LogSignal]] = defaultdict(list)
    for s in model.series(LogSignal):
        error = error_of(s.signal)
        if error is not None:
            groups[(s.node, _writer(model, s).key(), error)].append(s)
    findings: list[Finding] = []
    used_by = gpus_used(model) if groups else {}
    for (node, writer_key, error), sigs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        first = sigs[0]
        sig = first.signal
        writer = _writer(model, first).with_role("victim")
        bus = sig.pci_bus_id if isinstance(sig, CudaFault) else None
        device = sig.cuda_device if isinstance(sig, CudaOom) else None
        if isinstance(sig, ProcessEnd) and sig.worker is not None and sig.worker.startswith("VllmWorker-"):
            device = sig.rank  # vLLM V1 gives its worker of rank N the local CUDA device N
        uuid = log_gpu(model, node, first.container_id, device, bus, comm_buses.get((node, first.evidence.member), {}),
                       used_by)
        times = [s.signal.t for s in sigs if s.signal.t is not None]
        start, end = (min(times), max(times)) if times else (None, None)
        words = FAULT_WORDS.get(error, error)
        where = f" on {gpu_label(model, node, uuid)}" if uuid else (f" on PCI {bus}" if bus else "")
        detail = ""
        if isinstance(sig, CudaOom) and sig.requested_bytes:
            detail = f" (tried to allocate {fmt_bytes(sig.requested_bytes)}"
            detail += f" of {fmt_bytes(sig.total_bytes)})" if sig.total_bytes else ")"
        elif isinstance(sig, CudaFault) and sig.detail:
            detail = f" ({sig.detail[:120]})"
        elif isinstance(sig, NcclAsyncError):
            detail = f" ({sig.code + ': ' if sig.code else ''}{sig.error[:120]})"
        elif isinstance(sig, ProcessEnd):
            detail = f" ({sig.worker}" + (f", rank {sig.rank}: the GPU is vLLM's local rank" if uuid else "") + ")"
        name = label(model, writer, long=False)
        count = len(sigs)
        summary = (f"{name} logged a {words}{where}{detail} at {fmt_time(start)}"
                   + (f"; {count} times until {fmt_time(end)}" if count > 1 else ""))
        context = oom_context(model, node, uuid, sig, writer) if isinstance(sig, CudaOom) else None
        if context is not None:
            summary += context.text
        if isinstance(sig, ProcessEnd) and (before := error_before(sigs[0], groups, node, writer_key)) is not None:
            summary += f"; after its {FAULT_WORDS.get(before[0], before[0])} at {fmt_time(before[1])}"
        subjects = [*with_pod(model, writer)]
        if uuid:
            subjects.append(gpu_subject(model, node, uuid))
        if context is not None:
            subjects.extend(context.holders)
        severity: Severity = "medium" if error in APPLICATION else WORKLOAD_CUDA_ERROR.severity
        findings.append(Finding(
            kind=WORKLOAD_CUDA_ERROR.id, severity=severity,
            confidence=WORKLOAD_CUDA_ERROR.confidence(model, node, 0.9 if uuid else 0.8, cfg),
            summary=summary, start=start, end=end, node=node,
            subjects=dedupe_subjects(subjects),
            evidence=dedupe_evidence([*(s.evidence for s in sigs[:5]), *(context.evidence if context else ())]),
            metrics=(("error", error), ("occurrences", count), ("gpu", gpu_label(model, node, uuid) if uuid else None),
                     ("requested_bytes", sig.requested_bytes if isinstance(sig, CudaOom) else None),
                     *(context.metrics if context else ())),
            key=f"cudaerr:{node}:{writer.id}:{error}",
            headline=f"{name} hit a {words}{where}{detail}",
        ))
    return findings


@WORKLOAD_CUDA_ERROR.harm
def _cuda_harm(f: Finding, h: Harm) -> str:
    return f"{FAULT_WORDS.get(str(f.metric('error')), 'CUDA error')} at {h.when}"


# ---------------------------------------------------------------------------------------------
# stalled-rank


def _clock(model: Model, node: str) -> NodeClock:
    """The node's offset to the first node's clock; unknown (no clock evidence) is an infinite
    uncertainty, so no cross-node ordering is claimed from it."""
    info = model.nodes.get(node)
    if info is None or info.clock_offset_s is None or info.clock_uncertainty_s is None:
        return NodeClock(0.0, math.inf)
    return NodeClock(info.clock_offset_s, info.clock_uncertainty_s)


def _rank_gpu(model: Model, st: RankState) -> str | None:
    return _gpu_by_bus(model, st.node, st.bus_id)


def _explain(model: Model, cfg: AnalysisConfig, st: RankState, uuid: str | None, stopped_local: float | None,
             peers: list[RankState]) -> tuple[list[str], list[Evidence], list[Subject]]:
    """The stalled rank's own node at the time it stopped: Xids (its GPU first), OOM kills of it
    or the whole node, and its GPU idle while the peers' GPUs were busy."""
    if stopped_local is None:
        return [], [], []
    lo, hi = stopped_local - _EXPLAIN_BEFORE_S, stopped_local + _EXPLAIN_AFTER_S
    why: list[str] = []
    ev: list[Evidence] = []
    subjects: list[Subject] = []
    xids = [x for x in model.series(XidEvent) if x.node == st.node and x.t is not None and lo <= x.t <= hi
            and (uuid is None or x.gpu_uuid in (None, uuid))]
    if xids:
        x = min(xids, key=lambda x: (x.gpu_uuid != uuid, x.t))
        _, meaning = xid_meaning(x.code)
        on = "its GPU" if uuid and x.gpu_uuid == uuid else (gpu_label(model, st.node, x.gpu_uuid) if x.gpu_uuid else "the node")
        why.append(_relative(f"Xid {x.code} on {on}", x.t, stopped_local) + f" ({meaning})")
        ev.append(x.evidence)
    writer_keys = {k for k in _keys(model, st.subject)}
    ooms = [o for o in model.series(OomKill) if o.node == st.node and o.t is not None and lo <= o.t <= hi
            and (o.global_oom or _oom_keys(model, o) & writer_keys)]
    if ooms:
        o = ooms[0]
        why.append(_relative("a node-wide OOM kill" if o.global_oom else "an OOM kill of it", o.t, stopped_local))
        ev.extend(o.evidence[:1])
    cids = {k[2] for k in writer_keys if k[1] == "container"}
    why_cpu, ev_cpu = _throttled_then(model, cfg, st.node, cids, lo, hi)
    why.extend(why_cpu)
    ev.extend(ev_cpu)
    why_psi, ev_psi = _pressure_then(model, cfg, st.node, cids, lo, hi)
    why.extend(why_psi)
    ev.extend(ev_psi)
    if uuid:
        by_gpu = STALLED_RANK.gpu_samples(model)
        mine = [s for s in by_gpu.get((st.node, uuid), [])
                if stopped_local <= s.t <= stopped_local + 120 and s.util_gpu_pct is not None]
        peer_gpus = {(p.node, g) for p in peers if (g := _rank_gpu(model, p))}
        theirs = [s for key in sorted(peer_gpus) for s in by_gpu.get(key, []) if s.util_gpu_pct is not None
                  and stopped_local - 5 <= s.t - _clock(model, st.node).offset_s + _clock(model, s.node).offset_s
                  <= stopped_local + 125]
        if mine and theirs:
            m = sum(s.util_gpu_pct or 0.0 for s in mine) / len(mine)
            t = sum(s.util_gpu_pct or 0.0 for s in theirs) / len(theirs)
            if m <= _IDLE_PCT and t >= _BUSY_PCT:
                why.append(f"its GPU was then at {m:.0f}% while the peers' GPUs were at {t:.0f}%")
                ev.extend([mine[0].evidence, theirs[0].evidence])
    if uuid:
        subjects.append(gpu_subject(model, st.node, uuid))
    return why, ev, subjects


def _throttled_then(model: Model, cfg: AnalysisConfig, node: str, cids: set[str], lo: float,
                    hi: float) -> tuple[list[str], list[Evidence]]:
    """The rank's container CPU-throttled (CFS) in ``cpu_throttled_ratio`` of its periods between
    ``lo`` and ``hi``, as the ``cpu-throttling`` rule counts it."""
    series: dict[str, list[CpuSample]] = defaultdict(list)
    for s in model.series(CpuSample):
        if s.node == node and s.container_id in cids and lo <= s.t <= hi:
            series[s.container_id].append(s)
    periods = throttled = 0
    ev: list[Evidence] = []
    for samples in series.values():
        samples.sort(key=lambda s: s.t)
        for a, b in zip(samples, samples[1:], strict=False):
            dp, dt = b.nr_periods - a.nr_periods, b.nr_throttled - a.nr_throttled
            if dp > 0 and dt >= 0:
                periods, throttled = periods + dp, throttled + dt
        ev.extend([samples[0].evidence, samples[-1].evidence] if len(samples) > 1 else [])
    if periods < 10 or throttled / periods < cfg.cpu_throttled_ratio:
        return [], []
    return [f"its container was then CPU-throttled in {throttled * 100 / periods:.0f}% of its CFS periods"], ev


def _pressure_then(model: Model, cfg: AnalysisConfig, node: str, cids: set[str], lo: float,
                   hi: float) -> tuple[list[str], list[Evidence]]:
    """Memory, CPU or IO pressure (PSI, the ``pressure-stall`` thresholds) on the rank's container or
    its node between ``lo`` and ``hi``: the worst reading of each."""
    out: list[str] = []
    ev: list[Evidence] = []
    for scope in (*sorted(cids), "host"):
        hot = [s for s in model.series(PsiSample) if s.node == node and s.scope == scope and lo <= s.t <= hi
               and (s.some_avg10_pct >= cfg.psi_some_avg10_pct
                    or (s.full_avg10_pct is not None and s.full_avg10_pct >= cfg.psi_full_avg10_pct))]
        if not hot:
            continue
        peak = max(hot, key=lambda s: (s.full_avg10_pct or 0.0, s.some_avg10_pct))
        where = "the node" if scope == "host" else "its container"
        out.append(f"{where} was then under {peak.resource} pressure (PSI some {peak.some_avg10_pct:.0f}%)")
        ev.append(peak.evidence)
        break  # its own container's pressure says it; the node's only when the container has none
    return out, ev


def _relative(what: str, t: float | None, stopped: float) -> str:
    """``2 s after Xid 79 on its GPU`` (or ``Xid 79 on its GPU 3 s later`` when it came after the
    last line; ``right after`` within a second): the node's evidence placed against the stop, on
    that node's own clock."""
    if t is None:
        return what
    gap = stopped - t
    if abs(gap) < 1.0:
        return f"right after {what}" if gap >= 0 else f"{what} within a second"
    return f"{gap:.0f} s after {what}" if gap > 0 else f"{what} {-gap:.0f} s later"


def _keys(model: Model, subject: Hashable) -> set[tuple[str, str, str]]:
    if not isinstance(subject, Subject):
        return set()
    return {s.key() for s in with_pod(model, subject)}


def _oom_keys(model: Model, o: object) -> set[tuple[str, str, str]]:
    node, cid, pod = getattr(o, "node", ""), getattr(o, "container_id", None), getattr(o, "pod_uid", None)
    out: set[tuple[str, str, str]] = set()
    if cid:
        out.add((node, "container", cid))
    if pod:
        out.add((node, "pod", pod))
    return out


@STALLED_RANK.rule
def stalled_rank(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """The rank of a distributed job the other ranks waited for (:func:`forensics.analysis.ranks.find_stalled`),
    across every analysed node, explained with its own node's evidence when it stopped."""
    by_log: dict[tuple[str, str], list[LogSignal]] = defaultdict(list)
    for s in model.series(LogSignal):
        by_log[(s.node, s.evidence.member)].append(s)
    tails = {(t.node, t.member): t for t in model.series(LogTail)}
    logs = []
    for key in sorted(set(by_log) | set(tails)):
        sigs = by_log.get(key, [])
        tail = tails.get(key)
        who = _writer(model, tail if tail is not None else sigs[0])
        logs.append((key[0], who, [(s.signal, s.evidence) for s in sigs],
                     tail.t if tail else None, tail.evidence if tail else None))
    ranks = collect_ranks(logs, _env_ranks(model))
    clocks = {n: _clock(model, n) for n in model.nodes}
    stall = find_stalled(ranks, clocks)
    if stall is None:
        return []
    return [_stall_finding(model, cfg, ranks, stall, clocks)]


def _env_ranks(model: Model) -> dict[tuple[str, Hashable], tuple[int, int | None]]:
    """(node, writer) -> (RANK, WORLD_SIZE) where the writer's processes' environment names one rank."""
    seen: dict[tuple[str, Hashable], set[tuple[int, int | None]]] = defaultdict(set)
    for (node, _), p in model.processes.items():
        env = dict(p.rank_env)
        rank = env.get("RANK", "")
        if not rank.isdigit() or p.container_id is None:
            continue
        c = model.container(node, p.container_id)
        if c is None:
            continue
        world = env.get("WORLD_SIZE", "")
        seen[(node, c.subject())].add((int(rank), int(world) if world.isdigit() else None))
    return {k: next(iter(v)) for k, v in seen.items() if len(v) == 1}


def _stall_finding(model: Model, cfg: AnalysisConfig, ranks: dict[int, RankState], stall: Stall,
                   clocks: dict[str, NodeClock]) -> Finding:
    st = ranks[stall.ranks[0]]
    node = st.node
    uuid = _rank_gpu(model, st)
    offset = clocks.get(node, NodeClock()).offset_s
    stopped_local = stall.stopped_at - offset if stall.stopped_at is not None else None
    peers = [ranks[r] for r in stall.peers] or [r for k, r in ranks.items() if k not in stall.ranks]
    why, ev, gpu_subjects = _explain(model, cfg, st, uuid, stopped_local, peers)
    writer = st.subject if isinstance(st.subject, Subject) else Subject("container", str(st.subject), str(st.subject), node)
    where = f"{label(model, writer, long=False)} on {node}" + (f", {gpu_label(model, node, uuid)}" if uuid else "")
    who = (f"rank {stall.ranks[0]}" if len(stall.ranks) == 1 else f"ranks {rank_ranges(stall.ranks)}")
    text = f"{who} ({where}) stopped at {fmt_time(stall.stopped_at)}"
    causes = [w for w in why if " was then " not in w]
    if causes:
        text += ", " + " and ".join(causes)
    text += "".join(f"; {w}" for w in why if " was then " in w)
    if stall.peers:
        what = f" in {stall.op}" if stall.op else ""
        what += f" SeqNum {stall.seq}" if stall.seq is not None else ""
        later = ""
        if stall.peer_timeout_at is not None and stall.stopped_at is not None:
            gap = stall.peer_timeout_at - stall.stopped_at
            later = f", {gap:.0f} s after it stopped" if gap >= 1.0 else ""
        text += f"; {'rank' if len(stall.peers) == 1 else 'ranks'} {rank_ranges(stall.peers)} timed out{what}{later}"
    method = {"no-timeout": "it reported no timeout while its peers did",
              "lowest-completed-seq": "its last completed SeqNum is the lowest",
              "stopped-logging-first": "its log ends first"}[stall.method]
    summary = f"{text} ({method}"
    if math.isinf(stall.uncertainty_s):
        summary += "; the nodes' clocks could not be aligned (no clock evidence), so times across nodes may be off"
    elif stall.uncertain:
        summary += (f"; the order of its last line against the next rank's is within the clocks' "
                    f"uncertainty (±{stall.uncertainty_s:.1f} s)")
    summary += ")"
    if stall.missing:
        summary += f"; no log of rank(s) {rank_ranges(stall.missing)}"
    subjects = [*with_pod(model, writer.with_role("victim")), *gpu_subjects]
    for p in peers[:8]:
        if isinstance(p.subject, Subject):
            subjects.append(p.subject.with_role("witness"))
    evidence = [*ev]
    if st.last_seen_ref is not None and isinstance(st.last_seen_ref, Evidence):
        evidence.append(st.last_seen_ref)
    if isinstance(st.progress_ref, Evidence):
        evidence.append(st.progress_ref)
    for p in peers[:3]:
        evidence.extend(ref for _, ref in p.timeouts[:1] if isinstance(ref, Evidence))
    confidence = {"no-timeout": 0.85, "lowest-completed-seq": 0.8, "stopped-logging-first": 0.6}[stall.method]
    if stall.corroborated_by:
        confidence += 0.1
    if stall.uncertain and not math.isinf(stall.uncertainty_s):
        confidence -= 0.2
    return Finding(
        kind=STALLED_RANK.id, severity=STALLED_RANK.severity,
        confidence=STALLED_RANK.confidence(model, node, confidence, cfg),
        summary=summary, start=stopped_local, end=stall.peer_timeout_at - offset if stall.peer_timeout_at else None,
        node=node, subjects=dedupe_subjects(subjects), evidence=dedupe_evidence(evidence),
        metrics=(("rank", stall.ranks[0]), ("method", stall.method), ("op", stall.op), ("seq", stall.seq),
                 ("peers", rank_ranges(stall.peers) or None), ("clock_uncertainty_s", None if math.isinf(stall.uncertainty_s) else round(stall.uncertainty_s, 3)),
                 ("order_uncertain", "yes" if stall.uncertain else "no")),
        key=f"stall:{node}:{stall.ranks[0]}",
        headline=text,
    )


@STALLED_RANK.harm
def _stall_harm(f: Finding, h: Harm) -> str:
    return f"stalled the job at {h.when}"


_CUDA_STEPS = {
    "out-of-memory": "give {victims} the GPU memory it needs (its own GPU, a smaller batch) and stop anyone "
                     "else using {gpu}",
    "illegal-memory-access": "if an Xid on {gpu} came first, drain the node and check the GPU; otherwise debug "
                             "{victims} with CUDA_LAUNCH_BLOCKING=1 and compute-sanitizer",
    "ecc-uncorrectable": "drain the node and check {gpu}'s ECC counters (nvidia-smi -q -d ECC); replace the GPU "
                         "if the errors repeat",
    "gpu-lost": "drain the node, collect nvidia-bug-report.sh, then reset or replace {gpu}",
    "device-side-assert": "debug {victims}: rerun with CUDA_LAUNCH_BLOCKING=1 to find the failing kernel "
                          "(usually an index out of range)",
    "no-device": "check {victims}'s GPU grant (--gpus, NVIDIA_VISIBLE_DEVICES, nvidia.com/gpu) and the node's driver",
    "driver-mismatch": "match {victims}'s CUDA libraries to the node's NVIDIA driver, or upgrade the driver",
}


@WORKLOAD_CUDA_ERROR.next_step
def _cuda_step(f: Finding, h: Harm) -> str:
    wording = _CUDA_STEPS.get(str(f.metric("error")), "read {victims}'s log around the error")
    return wording.format(victims=h.victims, gpu=h.gpu)


@STALLED_RANK.next_step
def _stall_step(f: Finding, h: Harm) -> str:
    return (f"look at {h.gpu} on {f.node} first (the stalled rank's own node: its Xid, OOM kill, CPU throttling, memory pressure or idle GPU); "
            "restart the job from its last checkpoint without that node if it is at fault")
