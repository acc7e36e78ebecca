"""The evidence chain: findings in time order, cause -> effect links, the verdict, what was ruled out.

Links are drawn only between kinds that can cause one another (``CAUSES``), when the effect starts
after the cause began (within ``chain_link_window_s`` of its end) and the two share the entity the
harm travelled through: the same GPU, or the cause's victim being the effect's subject.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from forensics.analysis.findings import Evidence, Finding, Subject, severity_rank
from forensics.analysis.model import Model, NodeInfo
from forensics.analysis.rules.common import cap, collapse_pods, fmt_time, label, name_of
from forensics.analysis.thresholds import AnalysisConfig

__all__ = ["CAUSES", "ChainResult", "build_chain", "ruled_out"]

CAUSES: dict[str, frozenset[str]] = {
    "unallocated-gpu-use": frozenset({"gpu-compute-hog", "gpu-memory-pressure", "oom-kill", "gpu-xid-fault"}),
    "overlapping-gpu-allocation": frozenset({"gpu-compute-hog", "gpu-memory-pressure", "oom-kill"}),
    "unattributed-gpu-process": frozenset({"gpu-compute-hog", "gpu-memory-pressure"}),
    "gpu-compute-hog": frozenset({"oom-kill"}),
    "gpu-memory-pressure": frozenset({"oom-kill", "gpu-xid-fault"}),
    "pressure-stall": frozenset({"oom-kill"}),
    "gpu-clock-throttle": frozenset(),
    "cpu-throttling": frozenset(),
    "oom-kill": frozenset(),
    "gpu-xid-fault": frozenset(),
}
# How far before the cause's start an effect may begin (sampling jitter).
_SLACK_S = 5.0


@dataclass(frozen=True)
class ChainResult:
    findings: tuple[Finding, ...]  # ids assigned (key = "F<n>"), cause_keys filled
    chain: list[dict[str, object]]
    verdict: dict[str, object]


def _order_key(f: Finding) -> tuple[float, int, str, str]:
    return (f.start if f.start is not None else math.inf, severity_rank(f.severity), f.kind, f.key)


def _shares_path(cause: Finding, effect: Finding) -> bool:
    gpus_c = {s.key() for s in cause.subjects if s.type == "gpu"}
    gpus_e = {s.key() for s in effect.subjects if s.type == "gpu"}
    if gpus_c & gpus_e and cause.kind != "pressure-stall":
        # Through a GPU: the effect's culprit must be the cause's culprit, or its victims the cause's.
        c_culprits = {s.key() for s in cause.subjects_with("culprit")}
        e_culprits = {s.key() for s in effect.subjects_with("culprit")}
        if not e_culprits or c_culprits & e_culprits or not c_culprits:
            return True
    victims_c = {s.key() for s in cause.subjects_with("victim")}
    if victims_c & {s.key() for s in effect.subjects if s.role == "victim"}:
        return True
    if cause.kind == "pressure-stall" and effect.kind == "oom-kill" and cause.node == effect.node:
        res = cause.metric("resource")
        if res == "memory":
            scope = {s.key() for s in cause.subjects}
            return any(s.type == "host" for s in cause.subjects) or bool(scope & {s.key() for s in effect.subjects})
    return False


def _linked(cause: Finding, effect: Finding, cfg: AnalysisConfig) -> bool:
    if effect.kind not in CAUSES.get(cause.kind, frozenset()) or cause.node != effect.node:
        return False
    if cause.start is None or effect.start is None:
        return False
    cause_end = cause.end if cause.end is not None else cause.start
    if not (cause.start - _SLACK_S <= effect.start <= cause_end + cfg.chain_link_window_s):
        return False
    return _shares_path(cause, effect)


def _distinct(subjects: list[Subject]) -> list[Subject]:
    seen: dict[tuple[str, str, str], Subject] = {}
    for s in subjects:
        seen.setdefault(s.key(), s)
    return list(seen.values())


_OOM_SUMMARY_MIN = 3  # OOM-kill findings from which the verdict counts them rather than naming one


def build_chain(findings: list[Finding], cfg: AnalysisConfig, model: Model | None = None) -> ChainResult:
    """Order findings, assign ids F1.., link causes, and write the verdict (naming pods and
    removed containers as the model knows them, when given)."""
    # Keys must be unique before linking (two rules could, in theory, produce the same key).
    uniq: list[Finding] = []
    seen_keys: set[str] = set()
    for i, f in enumerate(sorted(findings, key=_order_key)):
        uniq.append(f if f.key and f.key not in seen_keys else replace(f, key=f"{f.key}#{i}"))
        seen_keys.add(uniq[-1].key)
    effects_of = {f.key: [g.key for g in uniq if g is not f and _linked(f, g, cfg)] for f in uniq}
    # Time order; at equal times a cause comes before its effects.
    ordered = sorted(uniq, key=lambda f: (f.start if f.start is not None else math.inf,
                                          0 if effects_of[f.key] else 1, severity_rank(f.severity),
                                          f.kind, f.key))
    ids = {f.key: f"F{i}" for i, f in enumerate(ordered, 1)}
    final = [replace(f, key=ids[f.key], cause_keys=tuple(sorted((ids[k] for k in effects_of[f.key]),
                                                                  key=lambda x: int(x[1:]))))
             for f in ordered]
    caused = {e for f in final for e in f.cause_keys}

    chain: list[dict[str, object]] = []
    for f in final:
        if f.severity == "info":
            continue
        chain.append({"finding": f.key, "time": f.start, "text": cap(f.headline or f.summary),
                      "leads_to": list(f.cause_keys)})

    significant = [f for f in final if severity_rank(f.severity) <= severity_rank("medium")]
    by_id = {f.key: f for f in final}
    clean = not any(f.subjects_with("culprit") or f.subjects_with("victim") for f in significant) and not any(
        severity_rank(f.severity) <= severity_rank("high") for f in final)
    if clean:
        headline = "No contention, misallocation or fault found" + (
            f" ({len(final)} minor observation(s))" if final else "")
        verdict: dict[str, object] = {
            "headline": headline, "clean": True,
            "severity": min((f.severity for f in final), key=severity_rank) if final else None,
            "culprits": [], "victims": [], "impact": "", "start": None, "end": None,
        }
        return ChainResult(tuple(final), chain, verdict)

    # Root causes: significant findings nothing else caused, most severe (then earliest) first.
    roots = sorted((f for f in significant if f.key not in caused),
                   key=lambda f: (not f.cause_keys, not f.subjects_with("culprit"),
                                  severity_rank(f.severity), _order_key(f)))
    root = roots[0] if roots else significant[0]
    effects = [by_id[eid] for eid in root.cause_keys]
    root_culprits = {s.key() for s in root.subjects_with("culprit")}
    # An effect of the same culprit continues the root's sentence with its numbers:
    # "container notebook, which had no GPU allocation, took GPU 0 (allocated to trainer): 92% of its compute; ..."
    joined = next((e for e in effects if root.lead and e.follow and root_culprits
                   and {s.key() for s in e.subjects_with("culprit")} == root_culprits), None)
    clauses = [f"{root.lead}: {joined.follow}" if joined is not None else (root.headline or root.summary)]
    for e in effects:
        if e is joined:
            continue
        delay = ""
        if e.start is not None and root.start is not None and e.start - root.start >= 1.0:
            delay = f" {e.start - root.start:.0f} s later"
        clauses.append((e.headline or e.summary) + delay)
    # Culprits and victims: those of the root's chain first, then by severity; a container whose
    # pod is listed is represented by its pod.
    in_chain = [root, *effects]
    ranked = in_chain + sorted((f for f in significant if f not in in_chain),
                               key=lambda f: (severity_rank(f.severity), _order_key(f)))
    culprits = _distinct([s for f in ranked for s in f.subjects_with("culprit")])
    victims = _distinct([s for f in ranked for s in f.subjects_with("victim")])
    if model is not None:
        culprits, victims = collapse_pods(model, culprits), collapse_pods(model, victims)
    headline = cap("; ".join(clauses))
    ooms = [f for f in significant if f.kind == "oom-kill"]
    if root.kind == "oom-kill" and len(ooms) >= _OOM_SUMMARY_MIN:
        # many kills (a leaking job restarted again and again, a node under memory pressure):
        # the count and the latest say more than the first one alone
        latest = max(ooms, key=lambda f: f.start if f.start is not None else -math.inf)
        kills = sum(int(k) if isinstance(k := f.metric("kills"), int) else 1 for f in ooms)
        times = [f.start for f in ooms if f.start is not None]
        span_text = f" from {fmt_time(min(times))} to {fmt_time(max(times))}" if times else ""
        headline = cap(f"{kills} OOM kills in {len(ooms)} containers or pods{span_text}; "
                       f"the latest: {latest.headline or latest.summary}")
    impact_parts = []
    for v in victims[:4]:
        harms = sorted((f for f in significant if v.key() in {s.key() for s in f.subjects_with("victim")}),
                       key=lambda f: int(f.key[1:]) if f.key[1:].isdigit() else 0)
        phrases = list(dict.fromkeys(_harm(f, model) for f in harms))
        impact_parts.append(f"{_name(model, v, long=False)}: {', '.join(phrases)}")
    starts = [f.start for f in significant if f.start is not None]
    ends = [f.end if f.end is not None else f.start for f in significant if (f.end or f.start) is not None]
    verdict = {
        "headline": headline, "clean": False,
        "severity": min((f.severity for f in final), key=severity_rank),
        "culprits": culprits, "victims": victims,
        "impact": "; ".join(impact_parts),
        "start": min(starts) if starts else None,
        "end": max(e for e in ends if e is not None) if ends else None,
    }
    return ChainResult(tuple(final), chain, verdict)


def _name(model: Model | None, s: Subject, long: bool = True) -> str:
    return label(model, s, long=long) if model is not None else name_of(s)


def _harm(f: Finding, model: Model | None = None) -> str:
    """What a finding did to its victim, in a few words with the numbers."""
    when = fmt_time(f.start)
    culprit_subjects = list(f.subjects_with("culprit"))
    if model is not None:
        culprit_subjects = collapse_pods(model, culprit_subjects)
    culprits = ", ".join(_name(model, s, long=False) for s in culprit_subjects) or "another process"
    gpu = next((s.name for s in f.subjects if s.type == "gpu"), "its GPU")
    if f.kind == "gpu-compute-hog":
        return f"starved of {gpu} compute by {culprits} from {when} (its SM share {f.metric('victim_sm_share_pct')}%)"
    if f.kind == "unallocated-gpu-use":
        return f"{gpu}, allocated to it, used by {culprits} from {when}"
    if f.kind == "overlapping-gpu-allocation":
        return f"{gpu} also allocated to {culprits}"
    if f.kind == "oom-kill":
        return f"OOM-killed at {when}"
    if f.kind == "gpu-memory-pressure":
        return f"hit {gpu} memory exhaustion at {when}"
    if f.kind == "cpu-throttling":
        ratio = f.metric("throttled_ratio")
        pct = f"{float(ratio) * 100:.0f}%" if isinstance(ratio, int | float) else "many"
        return f"CPU-throttled in {pct} of its periods" + (" while its GPU idled" if f.metric("gpu_idle") else "")
    if f.kind == "gpu-xid-fault":
        return f"hit by Xid {f.metric('xid')} on {gpu} at {when}"
    if f.kind == "pressure-stall":
        return f"stalled on {f.metric('resource')} pressure from {when}"
    return f"{f.kind} from {when}"


def ruled_out(model: Model, findings: list[Finding], cfg: AnalysisConfig) -> list[dict[str, object]]:
    """Confounders checked and not found, with the evidence examined (only where the source exists)."""
    kinds = {f.kind for f in findings}
    out: list[dict[str, object]] = []
    for node, info in sorted(model.nodes.items()):
        bundle = info.bundles[0] if info.bundles else ""
        def ev(family: str, excerpt: str, info: NodeInfo = info, bundle: str = bundle) -> list[Evidence]:
            member = info.members_used.get(family)
            return [Evidence(bundle, member, "", excerpt)] if member else []
        n_gpu_samples = sum(1 for s in model.gpu_samples if s.node == node)
        watched = info.xid_watch_gpus
        if "gpu-xid-fault" not in kinds and (model.has_source(node, "kernel") or watched):
            parts: list[str] = []
            evidence: list[Evidence] = []
            if model.has_source(node, "kernel"):
                parts.append(f"no Xid error in the kernel log of {node} ({info.kernel_records} records"
                             + ("; an empty log window proves little on its own)" if not info.kernel_records else ")"))
                evidence += ev("kernel", f"{info.kernel_records} records, no 'NVRM: Xid'")
            if watched and info.xid_watch_evidence is not None:
                parts.append(f"no XidCriticalError event from NVML on the {watched} GPU(s) it watched "
                             "during the sampling window")
                evidence.append(info.xid_watch_evidence)
            out.append({"kind": "gpu-xid-fault", "node": node, "statement": "; ".join(parts),
                        "evidence": evidence})
        if "gpu-clock-throttle" not in kinds and any(
                s.node == node and s.clocks_event_reasons is not None for s in model.gpu_samples):
            out.append({"kind": "gpu-clock-throttle", "node": node,
                        "statement": f"no thermal, power or hardware clock slowdown on any GPU of {node} "
                                     f"({n_gpu_samples} samples)",
                        "evidence": ev("nvml", f"{n_gpu_samples} samples, no slowdown reason bits")})
        if "oom-kill" not in kinds and model.has_source(node, "kernel"):
            out.append({"kind": "oom-kill", "node": node,
                        "statement": f"no OOM kill (container or host) in the kernel log of {node}",
                        "evidence": ev("kernel", "no 'invoked oom-killer' / 'Killed process' record")})
        elif model.has_source(node, "kernel") and not any(
                f.kind == "oom-kill" and f.node == node and f.metric("global") for f in findings):
            out.append({"kind": "oom-kill", "node": node,
                        "statement": f"no host-wide (global) OOM on {node}: the OOM kills were memory-cgroup limits",
                        "evidence": ev("kernel", "no 'Out of memory: Killed process' record")})
        if "gpu-memory-pressure" not in kinds and n_gpu_samples:
            out.append({"kind": "gpu-memory-pressure", "node": node,
                        "statement": f"GPU memory stayed below {cfg.gpu_memory_pressure_ratio * 100:.0f}% "
                                     f"on every GPU of {node}",
                        "evidence": ev("nvml", f"{n_gpu_samples} samples")})
        n_cpu = sum(1 for s in model.cpu_samples if s.node == node)
        if "cpu-throttling" not in kinds and n_cpu:
            out.append({"kind": "cpu-throttling", "node": node,
                        "statement": f"no container CPU-throttled in {cfg.cpu_throttled_ratio * 100:.0f}% "
                                     f"or more of its periods on {node}",
                        "evidence": ev("cgroups", f"{n_cpu} cpu.stat readings")})
        n_psi = info.psi_readings
        if "pressure-stall" not in kinds and n_psi:
            out.append({"kind": "pressure-stall", "node": node,
                        "statement": f"no CPU, memory or IO pressure stall on {node} "
                                     f"(PSI some avg10 below {cfg.psi_some_avg10_pct:g}%)",
                        "evidence": ev("psi", f"{n_psi} PSI readings")})
        n_proc = sum(1 for s in model.proc_samples if s.node == node)
        if (not kinds & {"unallocated-gpu-use", "unattributed-gpu-process"} and n_proc
                and model.has_source(node, "procfs")
                and (model.has_source(node, "docker") or model.has_source(node, "kubernetes"))):
            out.append({"kind": "unallocated-gpu-use", "node": node,
                        "statement": f"every GPU process on {node} ran in a container allocated that GPU",
                        "evidence": ev("nvml", f"{n_proc} process samples")})
    return out
