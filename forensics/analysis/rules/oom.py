"""``oom-kill``: memcg and global OOM kills, Docker OOM events/states, Kubernetes OOMKilled statuses.

Sources: kernel log (``oom-kill:constraint=...,task_memcg=...,pid=...`` and ``Killed process``),
Docker events (action ``oom``) and inspect ``State.OOMKilled``, pod
``status.containerStatuses[].lastState.terminated.reason == "OOMKilled"``. Records of one kill
from several sources (same container or PID within ``_MERGE_S`` seconds) become one finding.
"""

from __future__ import annotations

from dataclasses import replace

from forensics.analysis.events import OomKill
from forensics.analysis.findings import Evidence, Finding, Subject, severity_rank
from forensics.analysis.kinds import FindingKind, Harm, RuledOutCheck
from forensics.analysis.model import Model
from forensics.analysis.naming import fmt_bytes, fmt_time, label, with_pod
from forensics.analysis.rules.common import dedupe_evidence, dedupe_subjects
from forensics.specs.roles import KERNEL_LOG
from forensics.thresholds import AnalysisConfig

__all__ = ["OOM_KILL", "oom_kill"]

OOM_KILL = FindingKind("oom-kill", severity="high", needs=(), rank=70)

_MERGE_S = 120.0
_SOURCE_ORDER = {"kernel": 0, "docker": 1, "cri": 2, "kubernetes": 3, "prometheus": 4}


def _who(model: Model, o: OomKill) -> Subject | None:
    c = model.container(o.node, o.container_id)
    if c is not None:
        return c.subject()
    if o.container_id:
        return model.container_subject(o.node, o.container_id)
    if o.pod_uid and o.pod_uid in model.pods:
        return model.pods[o.pod_uid].subject()
    return None


def _same(model: Model, a: OomKill, b: OomKill) -> bool:
    if a.node != b.node:
        return False
    if a.t is not None and b.t is not None and abs(a.t - b.t) > _MERGE_S:
        return False
    wa, wb = _who(model, a), _who(model, b)
    if wa is not None and wb is not None:
        return wa.key() == wb.key()
    if a.pid is not None and b.pid is not None:
        return a.pid == b.pid
    return False


@OOM_KILL.rule
def oom_kill(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """One finding per OOM kill (merged across sources), the killed container/pod/process as victim."""
    groups: list[list[OomKill]] = []
    for o in sorted(model.series(OomKill), key=lambda o: (o.t is None, o.t or 0.0, _SOURCE_ORDER.get(o.source, 9))):
        for g in groups:
            if any(_same(model, o, x) for x in g):
                g.append(o)
                break
        else:
            groups.append([o])
    findings: list[Finding] = []
    for g in groups:
        g.sort(key=lambda o: _SOURCE_ORDER.get(o.source, 9))
        main = g[0]
        node = main.node
        who = next((w for w in (_who(model, o) for o in g) if w is not None), None)
        pid = next((o.pid for o in g if o.pid is not None), None)
        comm = next((o.comm for o in g if o.comm), None)
        usage = next((o.usage_bytes for o in g if o.usage_bytes is not None), None)
        limit = next((o.limit_bytes for o in g if o.limit_bytes is not None), None)
        t = next((o.t for o in g if o.t is not None), None)
        global_oom = any(o.global_oom for o in g)
        subjects: list[Subject] = []
        if who is not None:
            subjects.extend(with_pod(model, who.with_role("victim")))
        if pid is not None:
            proc = model.processes.get((node, pid))
            subjects.append(Subject("process", str(pid), comm or (proc.comm if proc else "?"), node,
                                    "victim" if who is None else "witness"))
        if global_oom:
            subjects.append(Subject("host", node, node, node, "victim"))
        if not subjects:
            continue
        what = f"process {pid} ({comm})" if pid is not None else "a process"
        whose = f" of {label(model, who)}" if who is not None else ""
        scope = "host-wide (global) OOM" if global_oom else "OOM"
        summary = f"{scope} killed {what}{whose} at {fmt_time(t)}"
        if usage is not None and limit is not None:
            summary += f": memory usage {fmt_bytes(usage)} against a limit of {fmt_bytes(limit)}"
        elif usage is not None:
            summary += f": memory usage {fmt_bytes(usage)}"
        sources = sorted({o.source for o in g}, key=lambda s: _SOURCE_ORDER.get(s, 9))
        summary += f" (seen in: {', '.join(sources)})"
        base = 0.95 if "kernel" in sources or len(sources) > 1 else 0.8
        findings.append(Finding(
            kind=OOM_KILL.id, severity="critical" if global_oom else OOM_KILL.severity,
            confidence=OOM_KILL.confidence(model, node, base, cfg),
            summary=summary, start=t, end=t, node=node,
            subjects=dedupe_subjects(subjects),
            evidence=dedupe_evidence(e for o in g for e in o.evidence),
            metrics=(("pid", pid), ("usage_bytes", usage), ("limit_bytes", limit),
                     ("global", global_oom), ("sources", ",".join(sources))),
            key=f"oom:{node}:{who.id if who else pid}:{t}",
            headline=f"{label(model, who) if who else what} was OOM-killed"
                     + (f" ({fmt_bytes(usage)} of {fmt_bytes(limit)})" if usage is not None and limit is not None else ""),
        ))
    return _collapse_repeats(model, findings)


@OOM_KILL.harm
def _oom_harm(f: Finding, h: Harm) -> str:
    return f"OOM-killed at {h.when}"


@OOM_KILL.next_step
def _oom_step(f: Finding, h: Harm) -> str:
    if f.metric("global"):
        return ("find what filled the host's memory (the kernel log's task list) and set memory limits on "
                "its containers, or add memory to the node")
    if any(s.type in ("container", "pod") for s in f.subjects):
        return f"raise {h.victims}'s memory limit or find its leak (it used what it was given)"
    return f"find why {h.victims} outgrew its memory cgroup (its limit, or a leak)"


@OOM_KILL.ruled_out(rank=30)
def _no_oom(c: RuledOutCheck) -> tuple[str, list[Evidence]] | None:
    """No OOM kill at all, or (with memcg kills) none host-wide."""
    if not c.model.has_role(c.node, KERNEL_LOG):
        return None
    if OOM_KILL.id not in c.found:
        return (f"no OOM kill (container or host) in the kernel log of {c.node}",
                c.evidence("kernel", "no 'invoked oom-killer' / 'Killed process' record"))
    if not any(f.kind == OOM_KILL.id and f.node == c.node and f.metric("global") for f in c.findings):
        return (f"no host-wide (global) OOM on {c.node}: the OOM kills were memory-cgroup limits",
                c.evidence("kernel", "no 'Out of memory: Killed process' record"))
    return None


_MAX_REPEAT_EVIDENCE = 8
_MAX_REPEAT_PROCESSES = 5


def _collapse_repeats(model: Model, findings: list[Finding]) -> list[Finding]:
    """Several kills of one container or pod (a crash-looping job, a leaking worker pool) become
    one finding that counts them, cites the first and the last, and spans the whole period:
    twenty identical findings hide the rest of the report."""
    by_victim: dict[tuple[str, tuple[str, str]], list[Finding]] = {}
    order: list[tuple[str, tuple[str, str]]] = []
    singles: list[Finding] = []
    for f in findings:
        victim = next((s for s in f.subjects if s.role == "victim" and s.type in ("container", "pod")), None)
        if victim is None:
            singles.append(f)
            continue
        k = (f.node, (victim.type, victim.id))
        if k not in by_victim:
            by_victim[k] = []
            order.append(k)
        by_victim[k].append(f)
    out = list(singles)
    for k in order:
        group = sorted(by_victim[k], key=lambda f: (f.start is None, f.start or 0.0))
        if len(group) == 1:
            out.append(group[0])
            continue
        first, last = group[0], group[-1]
        victim = next(s for s in first.subjects if s.role == "victim" and s.type in ("container", "pod"))
        n = len(group)
        starts = [f.start for f in group if f.start is not None]
        ends = [f.end for f in group if f.end is not None]
        # each killed process with its own kill's time, never the first kill's
        pids = [f"{f.metric('pid')} at {fmt_time(f.start)}" for f in group if f.metric("pid") is not None]
        keep_evidence = list(first.evidence) + list(last.evidence)
        subjects = [s for s in first.subjects if s.type != "process"]
        procs = [s.at(f.start) for f in group for s in f.subjects if s.type == "process"]
        subjects += procs[:_MAX_REPEAT_PROCESSES]
        if any(s.type == "host" for f in group for s in f.subjects):
            subjects += [s for f in group for s in f.subjects if s.type == "host"][:1]
        name = label(model, victim)
        summary = (f"{n} OOM kills of {name} between {fmt_time(min(starts) if starts else None)} and "
                   f"{fmt_time(max(ends) if ends else None)} (PIDs {', '.join(pids[:10])}"
                   f"{', ...' if len(pids) > 10 else ''}); the last: {last.summary}")
        worst = min((f.severity for f in group), key=severity_rank)
        out.append(replace(
            last, severity=worst, confidence=max(f.confidence for f in group), summary=summary,
            start=min(starts) if starts else None, end=max(ends) if ends else None,
            subjects=dedupe_subjects(subjects),
            evidence=dedupe_evidence(keep_evidence[:_MAX_REPEAT_EVIDENCE]),
            metrics=(*last.metrics, ("kills", n)),
            key=f"oom:{first.node}:{victim.id}:{first.start}",
            headline=f"{name} was OOM-killed {n} times",
        ))
    return sorted(out, key=lambda f: (f.start is None, f.start or 0.0))
