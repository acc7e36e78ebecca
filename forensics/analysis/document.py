"""Builds the analysis JSON document (docs/analysis-format.md) from the model and the chain."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any

from forensics._version import __version__
from forensics.analysis.chain import ChainResult
from forensics.analysis.events import CudaOom, LogSignal, OomKill, XidEvent
from forensics.analysis.findings import Finding, Subject
from forensics.analysis.incidents import Incident, Window
from forensics.analysis.joins import owner_of
from forensics.analysis.model import Model
from forensics.analysis.naming import cap, label
from forensics.analysis.samples import CpuSample, MemorySample, ProcessGpuSample
from forensics.document_format import FORMAT, FORMAT_VERSION
from forensics.parsing.logsignals.line import split_context
from forensics.parsing.timestamps import format_iso
from forensics.specs import prometheus as prometheus_spec
from forensics.thresholds import AnalysisConfig

_BY_TIME = attrgetter("t")  # a C sort key: the series sorted here are per sample

__all__ = ["FORMAT", "FORMAT_VERSION", "build_document", "iso"]


def iso(t: float | None) -> str | None:
    """Unix seconds -> ISO 8601 UTC with ``Z`` (milliseconds kept when present)."""
    return format_iso(t, precision="milli")


def _history(model: Model, f: Finding) -> dict[str, Any] | None:
    """Which history a finding rests on and at what resolution: Prometheus answers it cites, at the step asked."""
    prefix = f"{prometheus_spec.PREFIX}/"
    members = sorted({e.member for e in f.evidence if e.member.startswith(prefix)})
    if not members:
        return None
    info = model.nodes.get(f.node)
    step = info.history_step_s if info is not None else None
    return {"source": prometheus_spec.SPEC.name, "step_s": step, "members": members,
            "only": all(e.member.startswith(prefix) for e in f.evidence)}


def _finding_json(f: Finding, model: Model | None = None) -> dict[str, Any]:
    out = {
        "id": f.key,
        "kind": f.kind,
        "severity": f.severity,
        "confidence": f.confidence,
        "summary": f.summary,
        "start": iso(f.start),
        "end": iso(f.end),
        "node": f.node,
        "subjects": [s.to_json() for s in f.subjects],
        "metrics": {k: v for k, v in f.metrics},
        "evidence": [e.to_json() for e in f.evidence],
        "causes": list(f.cause_keys),
        "next_step": f.next_step,
        "before_capture_s": f.before_capture_s,
    }
    if f.occurrences is not None:
        out["occurrences"] = f.occurrences.to_json()
    history = _history(model, f) if model is not None else None
    if history is not None:
        out["history"] = history
    return out


def _verdict_json(v: dict[str, Any]) -> dict[str, Any]:
    out = dict(v)
    out["culprits"] = _subjects(v.get("culprits", []))
    out["victims"] = _subjects(v.get("victims", []))
    out["start"] = iso(v.get("start"))
    out["end"] = iso(v.get("end"))
    return out


def _incident_json(inc: Incident, model: Model) -> dict[str, Any]:
    v = _verdict_json(inc.verdict)
    starts = [info.start for info in model.nodes.values() if info.start is not None]
    start = inc.verdict.get("start")
    before = (round(min(starts) - start, 3) if starts and isinstance(start, float | int)
              and min(starts) - start >= 1.0 else None)
    root = next((f for f in inc.findings if f.next_step and f.severity == v["severity"]), inc.findings[0])
    return {"id": inc.key, "relevance": inc.relevance, "severity": v["severity"],
            "headline": v["headline"], "culprits": v["culprits"], "victims": v["victims"],
            "parties": [s.to_json() for s in inc.parties], "impact": v["impact"],
            "start": v["start"], "end": v["end"], "before_capture_s": before,
            "findings": [f.key for f in inc.findings], "kinds": sorted({f.kind for f in inc.findings}),
            "next_step": root.next_step}


def _top_verdict(incidents: list[dict[str, Any]], fallback: dict[str, Any]) -> dict[str, Any]:
    """The verdict: the top incident's (compatible with a one-verdict reader), its headline saying
    how many more incidents with harm there are; the whole analysis's when none has harm."""
    harmful = [i for i in incidents if not i["_clean"]]
    if not harmful:
        return dict(fallback, incident=None)
    top = harmful[0]
    more = len(harmful) - 1
    headline = top["headline"] + (f" (+{more} more incident{'s' if more > 1 else ''})" if more else "")
    return {"headline": headline, "clean": False, "severity": top["severity"],
            "culprits": top["culprits"], "victims": top["victims"], "impact": top["impact"],
            "start": top["start"], "end": top["end"], "incident": top["id"]}


_FACTS = ("driver_version", "cuda_version", "nvml_version", "kernel", "os")


def _facts(facts: dict[str, str]) -> dict[str, str | None]:
    """A node's facts for page one, each key present (None when the bundle did not say)."""
    return {k: facts.get(k) for k in _FACTS}


def _subjects(items: Any) -> list[dict[str, Any]]:
    return [s.to_json() for s in items if isinstance(s, Subject)]


def _gpus(model: Model) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    gpu_series = model.samples_by_gpu()
    proc_series = model.proc_columns()
    for (node, uuid), gpu in sorted(model.gpus.items(), key=lambda kv: (kv[0][0], kv[1].index)):
        allocated = [c.subject().to_json() for (n, _), c in sorted(model.containers.items())
                     if n == node and uuid in c.allocation.gpus]
        samples = gpu_series.get((node, uuid), [])
        by_pid = proc_series.get((node, uuid), {})  # PIDs as first seen (by time, then PID)
        times = {s.t for s in samples}
        for col in by_pid.values():
            times.update(col.t)
        t_axis = sorted(times)
        pos = {t: i for i, t in enumerate(t_axis)}
        n = len(t_axis)
        util: list[float | None] = [None] * n
        mem: list[int | None] = [None] * n
        temp: list[float | None] = [None] * n
        power: list[float | None] = [None] * n
        for s in samples:
            i = pos[s.t]
            util[i], mem[i], temp[i], power[i] = s.util_gpu_pct, s.memory_used_bytes, s.temperature_c, s.power_w
        per_pid_sm: dict[str, list[float | None]] = {}
        per_pid_mem: dict[str, list[int | None]] = {}
        procs: dict[int, dict[str, Any]] = {}
        used_by: dict[tuple[str, str, str], dict[str, Any]] = {}
        for pid, col in by_pid.items():  # per PID its two series: whole columns, no per-sample lookups
            ts, sms, mems = col.t, col.sm_util_pct, col.used_memory_bytes
            if ts == t_axis:  # present on every tick (once each)
                sm_row, mem_row = list(sms), list(mems)
            else:  # (of two readings on one tick, the later, as a row filled in order keeps)
                at = list(map(pos.__getitem__, ts))
                by_sm, by_mem = dict(zip(at, sms, strict=True)), dict(zip(at, mems, strict=True))
                sm_row, mem_row = list(map(by_sm.get, range(n))), list(map(by_mem.get, range(n)))
            per_pid_sm[str(pid)], per_pid_mem[str(pid)] = sm_row, mem_row
            owner = owner_of(model, node, pid)
            proc = model.gpu_process(node, pid)
            container = model.container(node, proc.container_id) if proc else None
            # the first sample's memory, replaced by the first larger one (None counting as 0)
            held = [m or 0 for m in mems]
            peak = max(held)
            vals = [v for v in sms if v is not None]
            procs[pid] = {"pid": pid, "name": proc.comm if proc else None,
                          "container": proc.container_id if proc else None,
                          "container_name": container.name if container else None,
                          "pod": (proc.pod_uid or (container.pod_uid if container else None)) if proc else None,
                          "used_memory_bytes": mems[held.index(peak)] if peak > held[0] else mems[0],
                          "sm_util_avg_pct": round(sum(vals) / len(vals), 1) if vals else None}
            used_by.setdefault(owner.subject.key(), owner.subject.to_json())
        out.append({
            "index": gpu.index, "uuid": uuid, "name": gpu.name, "node": node,
            "pci_bus_id": gpu.pci_bus_id, "memory_total_bytes": gpu.memory_total_bytes,
            "mig_enabled": gpu.mig_enabled, "mig_mode": gpu.mig_mode,
            "serial": gpu.serial, "vbios_version": gpu.vbios_version, "minor_number": gpu.minor_number,
            "allocated_to": allocated, "used_by": list(used_by.values()),
            "processes": [procs[p] for p in sorted(procs)],
            "series": {"t": t_axis, "gpu_util_pct": util, "memory_used_bytes": mem,
                       "temperature_c": temp, "power_w": power,
                       "process_sm_util_pct": per_pid_sm, "process_memory_bytes": per_pid_mem},
        })
    return out


def _ticks(paced: list[float], others: list[float]) -> tuple[list[float], dict[float, int]]:
    """One time base for readings taken on the same ticks: readings closer together than a quarter
    of the sampling interval (cgroup files and docker stats are read about 1 ms apart) fall on one
    tick, named by its earliest reading. ``paced`` holds one reading per tick (one source: its gaps
    give the interval); ``others`` may mix sources. Returns the axis and reading -> index."""
    gaps = [b - a for a, b in zip(paced, paced[1:], strict=False) if b > a]
    tol = min(0.25 * min(gaps), 0.5) if gaps else 0.5
    axis: list[float] = []
    pos: dict[float, int] = {}
    for t in sorted({*paced, *others}):
        if not axis or t - axis[-1] > tol:
            axis.append(t)
        pos[t] = len(axis) - 1
    return axis, pos


def _containers(model: Model) -> list[dict[str, Any]]:
    cpu: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for s in model.series(CpuSample):
        cpu[(s.node, s.container_id)].append(s)
    mem: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for m in model.series(MemorySample):
        mem[(m.node, m.container_id)].append(m)
    oom_count: dict[tuple[str, str], int] = defaultdict(int)
    for o in model.series(OomKill):
        if o.container_id and o.source == "kernel":
            oom_count[(o.node, o.container_id)] += 1
    out: list[dict[str, Any]] = []
    for (node, cid), c in sorted(model.containers.items(), key=lambda kv: (kv[0][0], kv[1].name, kv[0][1])):
        cs = sorted(cpu.get((node, cid), []), key=_BY_TIME)
        ms = sorted(mem.get((node, cid), []), key=_BY_TIME)
        t_axis, pos = _ticks([s.t for s in cs], [m.t for m in ms])
        ratio: list[float | None] = [None] * len(t_axis)
        for a, b in zip(cs, cs[1:], strict=False):
            dp = b.nr_periods - a.nr_periods
            if dp > 0 and b.nr_throttled >= a.nr_throttled:
                ratio[pos[b.t]] = round((b.nr_throttled - a.nr_throttled) / dp, 4)
            elif dp == 0 and b.nr_throttled == a.nr_throttled and c.cpu_quota_cores is not None:
                ratio[pos[b.t]] = 0.0  # under a quota, no CFS period elapsed: it did not run, nothing throttled
        mem_bytes: list[int | None] = [None] * len(t_axis)
        for m in ms:  # two readings of one tick (cgroup, docker stats): the higher one
            i = pos[m.t]
            mem_bytes[i] = max(m.memory_bytes, mem_bytes[i] or 0)
        peaks = [v for v in mem_bytes if v is not None]
        peaks += [o.usage_bytes for o in model.series(OomKill) if o.node == node and o.container_id == cid
                  and o.usage_bytes is not None and o.source in ("kernel", "docker")]
        if (node, cid) in model.memory_peaks:
            peaks.append(model.memory_peaks[(node, cid)])
        a = c.allocation
        out.append({
            "id": cid, "name": c.name, "node": node, "pod": c.pod_uid, "image": c.image,
            "state": c.state, "exit_code": c.exit_code, "oom_killed": c.oom_killed,
            "gpu_allocation": {"kind": a.kind, "explicit": a.explicit, "gpus": list(a.gpus),
                               "blanket_gpus": list(a.blanket_gpus), "source": a.source,
                               "detail": a.detail, "blanket_detail": a.blanket_detail,
                               **({"claims": list(a.claims)} if a.claims else {}),
                               **({"cdi_devices": list(a.cdi_devices)} if a.cdi_devices else {})},
            "cpu_quota_cores": c.cpu_quota_cores, "memory_limit_bytes": c.memory_limit_bytes,
            "memory_peak_bytes": max(peaks) if peaks else None,
            "oom_kills": max(oom_count.get((node, cid), 0), 1 if c.oom_killed else 0),
            "series": {"t": t_axis, "cpu_throttled_ratio": ratio, "memory_bytes": mem_bytes},
        })
    return out


def _pods(model: Model) -> list[dict[str, Any]]:
    out = []
    for uid, p in sorted(model.pods.items(), key=lambda kv: (kv[1].node, kv[1].namespace, kv[1].name)):
        oomed = sorted({o.k8s_container_name for o in model.series(OomKill)
                        if o.pod_uid == uid and o.source in ("kubernetes", "cri") and o.k8s_container_name})
        out.append({"uid": uid, "namespace": p.namespace, "name": p.name, "node": p.node,
                    "phase": p.phase, "containers": [cid for _, cid in p.container_ids if cid],
                    "container_names": [n for n, _ in p.container_ids],
                    "gpu_limit": p.gpu_limit() if p.gpu_limits_known else None,
                    "gpu_devices": sorted({d for _, ds in p.gpu_devices for d in ds}),
                    "oom_killed_containers": oomed})
    return out


_TIMELINE_MAX = 2000
_TIMELINE_SIGNALS = frozenset({"cuda-fault", "nccl-timeout", "nccl-abort", "nccl-error", "process-end"})


def _timeline(model: Model, findings: tuple[Finding, ...]) -> list[dict[str, Any]]:
    """Container starts/exits, OOM kills, Xids, CUDA OOM lines, the workloads' log signals (CUDA
    faults, NCCL timeouts and errors, process ends) and finding starts, in time order."""
    items: list[tuple[float, dict[str, Any]]] = []
    for (node, _), c in model.containers.items():
        subj = c.subject().to_json()
        name = label(model, c.subject())
        if c.started_at is not None:
            items.append((c.started_at, {"node": node, "kind": "container-start", "text": f"{cap(name)} started",
                                         "subject": subj, "finding": None}))
        if c.finished_at is not None:
            code = f" with exit code {c.exit_code}" if c.exit_code is not None else ""
            items.append((c.finished_at, {"node": node, "kind": "container-exit",
                                          "text": f"{cap(name)} exited{code}" + (" (OOM-killed)" if c.oom_killed else ""),
                                          "subject": subj, "finding": None}))
    for o in model.series(OomKill):
        if o.t is not None:
            who = model.container(o.node, o.container_id)
            where = (label(model, who.subject()) if who else
                     label(model, model.container_subject(o.node, o.container_id))
                     if o.container_id else "")
            text = f"OOM kill of {o.comm or 'a process'}" + (f" (pid {o.pid})" if o.pid else "") + \
                (f" in {where}" if where else "") + f" [{o.source}]"
            items.append((o.t, {"node": o.node, "kind": "oom-kill", "text": text,
                                "subject": who.subject().to_json() if who else None, "finding": None}))
    for x in model.series(XidEvent):
        if x.t is not None:
            gpu = model.gpus.get((x.node, x.gpu_uuid)) if x.gpu_uuid else None
            items.append((x.t, {"node": x.node, "kind": "xid", "text": f"Xid {x.code}: {x.text[:120]}",
                                "subject": gpu.subject().to_json() if gpu else None, "finding": None}))
    for co in model.series(CudaOom):
        if co.t is not None:
            who = model.container(co.node, co.container_id)
            items.append((co.t, {"node": co.node, "kind": "cuda-oom", "text": co.text[:160],
                                 "subject": who.subject().to_json() if who else None, "finding": None}))
    for s in model.series(LogSignal):
        # the workload's own words (CUDA OOMs are above): faults, NCCL timeouts and errors, process ends
        if s.signal.t is not None and s.signal.kind in _TIMELINE_SIGNALS:
            writer = model.container(s.node, s.container_id)
            pod = model.pods.get(s.pod_key) if writer is None and s.pod_key else None
            who_subject = writer.subject() if writer else (pod.subject() if pod else None)
            items.append((s.signal.t, {"node": s.node, "kind": "log-signal",
                                       "text": f"{s.signal.kind}: {split_context(s.evidence.excerpt).text[:160]}",
                                       "subject": who_subject.to_json() if who_subject else None, "finding": None}))
    for f in findings:
        if f.start is not None:
            items.append((f.start, {"node": f.node, "kind": "finding", "text": cap(f.headline or f.summary),
                                    "subject": None, "finding": f.key}))
    items.sort(key=lambda it: (it[0], it[1]["kind"] != "finding"))
    if len(items) > _TIMELINE_MAX:
        model.limit(f"timeline cut to its first {_TIMELINE_MAX} of {len(items)} entries")
        items = items[:_TIMELINE_MAX]
    return [{"time": iso(t), **entry} for t, entry in items]


def _unknown_containers(model: Model) -> list[dict[str, Any]]:
    """Container ids named by cgroup paths or the kernel log that no Docker or Kubernetes record describes."""
    seen: dict[tuple[str, str], str] = {}
    for p in model.processes.values():
        if p.container_id:
            seen.setdefault((p.node, p.container_id), f"named by /proc/{p.pid}/cgroup only")
    for s in model.series(CpuSample):
        seen.setdefault((s.node, s.container_id), "named by its cgroup path only")
    for o in model.series(OomKill):
        if o.container_id:
            seen.setdefault((o.node, o.container_id), "named by an OOM record's memory cgroup only")
    out = []
    for (node, cid), why in sorted(seen.items()):
        if (node, cid) in model.containers:
            continue
        named = model.event_names.get((node, cid))
        reason = (f"{why}: no Docker inspect record of it (it existed only between the capture's "
                  f"snapshots; Docker events name it {named})" if named else
                  f"{why}: no Docker or Kubernetes record of it in the bundle")
        out.append({"type": "container", "id": cid, "name": named, "node": node, "reason": reason})
    return out


def build_document(model: Model, result: ChainResult, ruled: list[dict[str, Any]],
                   cfg: AnalysisConfig, generated_at: float | None = None,
                   incidents: Sequence[Incident] = (), window: Window | None = None) -> dict[str, Any]:
    """The whole analysis document, JSON-able, in a stable order."""
    incidents_json = [dict(_incident_json(i, model), _clean=not i.significant) for i in incidents]
    verdict = _top_verdict(incidents_json, _verdict_json(dict(result.verdict)))
    for i in incidents_json:
        del i["_clean"]
    chain = [dict(c, time=iso(c["time"])) for c in result.chain]  # type: ignore[arg-type]
    ruled_json = [dict(r, evidence=[e.to_json() for e in r.get("evidence", [])]) for r in ruled]
    unattributed: list[dict[str, Any]] = []
    # each PID's first sample (the earliest; of equal times the first read), in (node, PID) order:
    # one pass, not a sort of every process sample
    first: dict[tuple[str, int], ProcessGpuSample] = {}
    for s in model.series(ProcessGpuSample):
        seen = first.get((s.node, s.pid))
        if seen is None or s.t < seen.t:
            first[(s.node, s.pid)] = s
    for key in sorted(first):
        s = first[key]
        owner = owner_of(model, s.node, s.pid)
        if owner.attributed:
            continue
        proc = model.gpu_process(s.node, s.pid)
        if proc is not None:
            reason = proc.unresolved_reason or f"cgroup {proc.cgroup_path} is not a container's"
        elif s.node in model.pid_mismatch_nodes:
            reason = "NVML's PIDs are not this capture's /proc PIDs (another PID namespace)"
        elif (s.node, s.pid) in model.pids_absent_at_nvml:
            reason = f"PID {s.pid} was not in /proc when NVML listed it (exited, or another PID namespace)"
        else:
            reason = f"no /proc/{s.pid} in the bundle"
        unattributed.append({"type": "process", "id": str(s.pid), "name": proc.comm if proc else None,
                             "node": s.node, "reason": reason, "gpu": s.gpu_uuid})
    unattributed.extend(_unknown_containers(model))
    bundles = list(model.bundles)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "tool_version": __version__,
        "generated_at": iso(generated_at if generated_at is not None else datetime.now(UTC).timestamp()),
        "bundle": bundles[0] if bundles else None,
        "bundles": bundles,
        "verdict": verdict,
        "window": window.to_json() if window is not None else None,
        "incidents": incidents_json,
        "findings": [_finding_json(f, model) for f in result.findings],
        "chain": chain,
        "timeline": _timeline(model, result.findings),
        "ruled_out": ruled_json,
        "limitations": list(model.limitations),
        "collectors": list(model.collectors),
        "gpus": _gpus(model),
        "containers": _containers(model),
        "pods": _pods(model),
        "nodes": [{"host": n.host, "bundles": list(n.bundles), "clock_offset_s": n.clock_offset_s,
                   "clock_uncertainty_s": n.clock_uncertainty_s, "clock_reference": n.clock_reference,
                   "captured_start": iso(n.start), "captured_end": iso(n.end), **_facts(n.facts),
                   **({"history_step_s": n.history_step_s} if n.history_step_s is not None else {})}
                  for _, n in sorted(model.nodes.items())],
        "unattributed": unattributed,
        "thresholds": cfg.to_json(),
    }
