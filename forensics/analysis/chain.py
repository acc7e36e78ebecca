"""The evidence chain: findings in time order, cause -> effect links, the verdict, what was ruled out.

Links are drawn only between kinds that can cause one another (``CAUSES``, from each kind's
declaration), when the effect starts after the cause began (within ``chain_link_window_s`` of its
end) and before anything contradicted the cause (``Finding.contradicted_at``: a GPU NVML read
after a record said it was lost), and the two share the entity the harm travelled through: the
same GPU, or the cause's victim being the effect's subject. The impact line words each harm, and ``ruled_out`` each confounder
not found, as the kind's declaration says (:mod:`forensics.analysis.kinds`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from forensics.analysis.findings import Finding, Role, Subject, severity_rank
from forensics.analysis.kinds import Harm, RuledOutCheck
from forensics.analysis.model import Model
from forensics.analysis.naming import cap, collapse_pods, fmt_time, label, name_of
from forensics.analysis.rules import CAUSES, SPECS
from forensics.thresholds import AnalysisConfig

__all__ = ["CAUSES", "ChainResult", "build_chain", "is_significant", "next_step", "ruled_out", "verdict_of"]

_HARM = {k.id: k.harm_wording for k in SPECS if k.harm_wording is not None}
_KIND = {k.id: k for k in SPECS}
_RULED_OUT = sorted(((k.id, k.not_found) for k in SPECS if k.not_found is not None), key=lambda kc: kc[1].rank)
# How far before the cause's start an effect may begin (sampling jitter).
_SLACK_S = 5.0

_STATES_A_TIME = re.compile(r"\b\d\d:\d\d:\d\dZ\b")  # fmt_time's clock time


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
    if cause.contradicted_at is not None and effect.start >= cause.contradicted_at:
        return False  # the subject's own state said otherwise before the effect began
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
                                                                  key=lambda x: int(x[1:]))),
                     next_step=f.next_step or next_step(f, model))
             for f in ordered]

    chain: list[dict[str, object]] = []
    for f in final:
        if f.severity == "info":
            continue
        chain.append({"finding": f.key, "time": f.start, "text": cap(f.headline or f.summary),
                      "leads_to": list(f.cause_keys)})

    return ChainResult(tuple(final), chain, verdict_of(final, model))


def is_significant(f: Finding) -> bool:
    """Severity medium or worse: what a verdict is made of."""
    return severity_rank(f.severity) <= severity_rank("medium")


def verdict_of(findings: Sequence[Finding], model: Model | None = None) -> dict[str, object]:
    """The verdict over ``findings`` (ids and causes assigned; a whole analysis, or one incident):
    the root cause's finding and its effects in one sentence, culprits, victims, impact, span."""
    final = list(findings)
    caused = {e for f in final for e in f.cause_keys}
    significant = [f for f in final if is_significant(f)]
    by_id = {f.key: f for f in final}
    clean = not any(f.subjects_with("culprit") or f.subjects_with("victim") for f in significant) and not any(
        severity_rank(f.severity) <= severity_rank("high") for f in final)
    if clean:
        headline = "No contention, misallocation or fault found" + (
            f" ({len(final)} minor observation(s))" if final else "")
        return {
            "headline": headline, "clean": True,
            "severity": min((f.severity for f in final), key=severity_rank) if final else None,
            "culprits": [], "victims": [], "impact": "", "start": None, "end": None,
        }

    # Root causes: significant findings nothing else caused, most severe (then earliest) first.
    roots = sorted((f for f in significant if f.key not in caused),
                   key=lambda f: (not f.cause_keys, not f.subjects_with("culprit"),
                                  severity_rank(f.severity), _order_key(f)))
    root = roots[0] if roots else (significant or sorted(final, key=lambda f: severity_rank(f.severity)))[0]
    effects = [by_id[eid] for eid in root.cause_keys if eid in by_id]
    root_culprits = {s.key() for s in root.subjects_with("culprit")}
    # An effect of the same culprit continues the root's sentence with its numbers:
    # "container notebook, which had no GPU allocation, took GPU 0 (allocated to trainer): 92% of its compute; ..."
    joined = next((e for e in effects if root.lead and e.follow and root_culprits
                   and {s.key() for s in e.subjects_with("culprit")} == root_culprits), None)
    clauses = [f"{root.lead}: {joined.follow}" if joined is not None else (root.headline or root.summary)]
    for e in effects:
        if e is joined:
            continue
        sentence = e.headline or e.summary
        delay = ""
        # an effect whose sentence says when it happened ("stopped at 14:00:07Z") needs no "N s later"
        if (e.start is not None and root.start is not None and e.start - root.start >= 1.0
                and not _STATES_A_TIME.search(sentence)):
            delay = f" {e.start - root.start:.0f} s later"
        clauses.append(sentence + delay)
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
        headline = _oom_count_headline(ooms)
    impact_parts = []
    for v in victims[:4]:
        harms = sorted((f for f in (significant or [root]) if v.key() in {s.key() for s in f.subjects_with("victim")}),
                       key=lambda f: int(f.key[1:]) if f.key[1:].isdigit() else 0)
        phrases = list(dict.fromkeys(_harm(f, model, v) for f in harms))
        impact_parts.append(f"{_name(model, v, long=False)}: {', '.join(phrases)}")
    spanned = significant or [root]
    starts = [f.start for f in spanned if f.start is not None]
    ends = [f.end if f.end is not None else f.start for f in spanned if (f.end or f.start) is not None]
    return {
        "headline": headline, "clean": False,
        "severity": min((f.severity for f in final), key=severity_rank),
        "culprits": culprits, "victims": victims,
        "impact": "; ".join(impact_parts),
        "start": min(starts) if starts else None,
        "end": max(e for e in ends if e is not None) if ends else None,
    }


def _oom_count_headline(ooms: Sequence[Finding]) -> str:
    """Many kills (a leaking job restarted again and again, a node under memory pressure): the
    count and the latest say more than the first one alone."""
    latest = max(ooms, key=lambda f: f.start if f.start is not None else -math.inf)
    kills = sum(int(k) if isinstance(k := f.metric("kills"), int) else 1 for f in ooms)
    times = [f.start for f in ooms if f.start is not None]
    span_text = f" from {fmt_time(min(times))} to {fmt_time(max(times))}" if times else ""
    return cap(f"{kills} OOM kills in {len(ooms)} containers or pods{span_text}; "
               f"the latest: {latest.headline or latest.summary}")


def _name(model: Model | None, s: Subject, long: bool = True) -> str:
    return label(model, s, long=long) if model is not None else name_of(s)


def _context(f: Finding, model: Model | None, victim: Subject | None = None) -> Harm:
    """What the kind's wordings know of ``f``: its time (``victim``'s own time when the finding
    gives it one), its culprits', victims' and GPU's names."""
    def names(role: Role) -> str:
        subjects = list(f.subjects_with(role))
        if model is not None:
            subjects = collapse_pods(model, subjects)
        return ", ".join(_name(model, s, long=False) for s in subjects)

    own = next((s.time for s in f.subjects if victim is not None and s.key() == victim.key()
                and s.time is not None), None)
    gpu = next((s.name for s in f.subjects if s.type == "gpu"), "its GPU")
    return Harm(fmt_time(own if own is not None else f.start), names("culprit") or "another process", gpu,
                names("victim") or "the affected workload", victim)


def _harm(f: Finding, model: Model | None = None, victim: Subject | None = None) -> str:
    """What a finding did to its victim, in a few words with the numbers (its kind's harm wording);
    at the victim's own time when the finding gives it one."""
    context = _context(f, model, victim)
    wording = _HARM.get(f.kind)
    if wording is None:
        return f"{f.kind} from {context.when}"
    return wording(f, context)


def next_step(f: Finding, model: Model | None = None) -> str:
    """The one-line next step for ``f``, as its kind's declaration words it."""
    kind = _KIND.get(f.kind)
    return kind.step(f, _context(f, model)) if kind is not None else ""


def ruled_out(model: Model, findings: list[Finding], cfg: AnalysisConfig) -> list[dict[str, object]]:
    """Confounders checked and not found, with the evidence examined (only where the source exists):
    per node, each kind's ruled-out check in rank order."""
    found = frozenset(f.kind for f in findings)
    out: list[dict[str, object]] = []
    for node, info in sorted(model.nodes.items()):
        check = RuledOutCheck(model, node, info, found, tuple(findings), cfg)
        for kind, not_found in _RULED_OUT:
            said = not_found.check(check)
            if said is not None:
                statement, evidence = said
                out.append({"kind": kind, "node": node, "statement": statement, "evidence": evidence})
    return out
