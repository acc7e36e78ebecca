"""Rules about sharing one GPU: ``gpu-compute-hog`` and ``gpu-memory-pressure``.

Sources: NVML per-process SM utilization (nvmlDeviceGetProcessUtilization), per-process memory
(nvmlDeviceGetComputeRunningProcesses ``usedGpuMemory``), device memory (nvmlDeviceGetMemoryInfo),
CUDA out-of-memory lines from container logs, container exit state (docker inspect ``State``).
"""

from __future__ import annotations

from collections import defaultdict
from functools import reduce
from itertools import chain
from operator import add
from typing import cast

from forensics.analysis.events import CudaOom
from forensics.analysis.findings import Evidence, Finding, Severity, Subject
from forensics.analysis.kinds import FindingKind, Harm, RuledOutCheck
from forensics.analysis.model import Model
from forensics.analysis.naming import fmt_bytes, fmt_time, gpu_label, gpu_subject, label, with_pod
from forensics.analysis.process_index import PidColumns
from forensics.analysis.rules.common import dedupe_evidence, dedupe_subjects
from forensics.analysis.samples import ProcessGpuSample
from forensics.specs.roles import GPU_DEVICES, PROCESS_TABLE
from forensics.thresholds import AnalysisConfig

__all__ = ["GPU_COMPUTE_HOG", "GPU_MEMORY_PRESSURE", "gpu_compute_hog", "gpu_memory_pressure"]

GPU_COMPUTE_HOG = FindingKind("gpu-compute-hog", severity="medium", needs=(GPU_DEVICES, PROCESS_TABLE), rank=40,
                              causes=("oom-kill",))
GPU_MEMORY_PRESSURE = FindingKind("gpu-memory-pressure", severity="low", needs=(GPU_DEVICES,), rank=50,
                                  causes=("oom-kill", "gpu-xid-fault"))

# (victim, its SM share while contested, its mean SM before the hog came, during, contested ticks)
_Victim = tuple[Subject, float, float | None, float | None, list[float]]


# per group of ticks with the same owners present: (those owners, the ticks, per owner its summed
# SM% over them, the SM% of all of them summed)
_Group = tuple[frozenset[int], list[float], dict[int, float], float]


def _owners(model: Model, node: str, pids: dict[int, list[ProcessGpuSample]]) -> tuple[
        list[Subject], dict[Subject, list[ProcessGpuSample]], list[int]]:
    """The GPU's owners numbered in the order their first PID is met (PIDs by first sample, then
    PID), each owner's samples (its PIDs' in that order, one after another) and each PID's owner."""
    per_owner: dict[Subject, list[ProcessGpuSample]] = {}
    owners: dict[Subject, int] = {}
    owner_of_pid: list[int] = []
    for pid, ss in pids.items():
        subj = model.joins.owner(node, pid).subject
        got = per_owner.get(subj)
        per_owner[subj] = ss if got is None else got + ss  # (the view's lists are not changed)
        owner_of_pid.append(owners.setdefault(subj, len(owners)))
    return list(owners), per_owner, owner_of_pid


def _groups(pids: dict[int, list[ProcessGpuSample]], columns: dict[int, PidColumns],
            owner_of_pid: list[int]) -> list[_Group]:
    """The ticks that carry SM data grouped by which owners were present (owners come and go
    rarely, so pair sums are taken over a handful of groups instead of every tick), in the order
    of their first tick; each group's ticks in the order met walking the PIDs' samples, its sums
    added up in that order (tick by tick, the owners of a tick in order of their number).

    Samples of one tick share its ``t`` (the NVML line's), so ``t`` itself is the tick key."""
    if len(set(owner_of_pid)) == len(owner_of_pid):  # one PID per owner: by columns, no per-sample table
        cols = [columns[pid] for pid in pids]
        if all(c.distinct for c in cols):  # (else a PID read twice on one tick: summed per tick below)
            return _groups_by_column([(c.t, c.sm_util_pct) for c in cols])
    ticks: dict[float, dict[int, float]] = defaultdict(dict)
    has_sm: set[float] = set()
    for o, ss in zip(owner_of_pid, pids.values(), strict=True):
        for s in ss:
            row = ticks[s.t]
            sm = s.sm_util_pct
            if sm is not None:
                has_sm.add(s.t)
                row[o] = row.get(o, 0.0) + sm
            elif o not in row:
                row[o] = 0.0
    by_members: dict[frozenset[int], list[float]] = defaultdict(list)
    for t, row in ticks.items():
        if t in has_sm:
            by_members[frozenset(row)].append(t)
    out: list[_Group] = []
    for members, ts in by_members.items():
        sums = dict.fromkeys(members, 0.0)
        total = 0.0
        for t in ts:
            for o, v in ticks[t].items():
                sums[o] += v
                total += v
        out.append((members, ts, sums, total))
    return out


def _groups_by_column(cols: list[tuple[list[float], list[float | None]]]) -> list[_Group]:
    """:func:`_groups` when owner ``o`` is the one PID ``cols[o]`` (its ticks, distinct and in
    time order, and its SM% there): the same groups, ticks and sums, taken per owner in C."""
    ts0 = cols[0][0] if cols else []
    if all(ts == ts0 and None not in sms for ts, sms in cols):  # every owner on every tick, with SM
        rows = [sms for _, sms in cols]  # (one group: its ticks in the first PID's order, which is time)
        sums = {o: reduce(add, row, 0.0) for o, row in enumerate(rows)}
        total = reduce(add, chain.from_iterable(zip(*rows, strict=True)), 0.0)
        return [(frozenset(range(len(cols))), list(ts0), sums, total)] if ts0 else []
    order: list[float] = []  # every tick, in the order met walking the PIDs' samples
    seen: set[float] = set()
    has_sm: set[float] = set()
    values: list[dict[float, float]] = []
    tick_sets: list[set[float]] = []
    for ts, sms in cols:
        mine = set(ts)
        new = mine - seen
        if new:
            order.extend(sorted(new))
            seen |= new
        tick_sets.append(mine)
        if None in sms:
            has_sm.update(t for t, v in zip(ts, sms, strict=True) if v is not None)
            values.append(dict(zip(ts, [0.0 if v is None else v for v in sms], strict=True)))
        else:
            has_sm.update(ts)
            values.append(dict(zip(ts, cast("list[float]", sms), strict=True)))
    # which owners were present at each tick with SM data: the ticks split owner by owner
    parts: list[tuple[set[float], list[int]]] = [(has_sm, [])] if has_sm else []
    for o, mine in enumerate(tick_sets):
        split: list[tuple[set[float], list[int]]] = []
        for ts_set, members in parts:
            inside = ts_set & mine
            if inside:
                split.append((inside, [*members, o]))
            if len(inside) < len(ts_set):
                split.append((ts_set - mine, members))
        parts = split
    part_of: dict[float, int] = {}
    for k, (ts_set, _) in enumerate(parts):
        part_of.update(dict.fromkeys(ts_set, k))
    ticks_of: dict[int, list[float]] = {}
    for t in order:  # per tick, not per sample
        k = part_of.get(t, -1)
        if k >= 0:
            ticks_of.setdefault(k, []).append(t)
    out: list[_Group] = []
    for k, ts in ticks_of.items():
        members = parts[k][1]
        rows = [list(map(values[o].__getitem__, ts)) for o in members]
        sums = {o: reduce(add, row, 0.0) for o, row in zip(members, rows, strict=True)}
        total = reduce(add, chain.from_iterable(zip(*rows, strict=True)), 0.0)
        out.append((frozenset(members), ts, sums, total))
    return out


@GPU_COMPUTE_HOG.rule
def gpu_compute_hog(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """One owner holds most of a shared GPU's SM time while another owner present on it is starved."""
    findings: list[Finding] = []
    for (node, uuid), pids in sorted(model.proc_samples_by_pid().items()):
        subject_of, per_owner, owner_of_pid = _owners(model, node, pids)
        if len(per_owner) < 2:
            continue
        stats = _groups(pids, model.proc_columns()[(node, uuid)], owner_of_pid)
        if not stats:
            continue
        owner = model.joins.owner
        granted = [owner(node, per_owner[o][0].pid).allocation.grants(uuid, per_owner[o][0].mig_uuid)
                   for o in subject_of]
        best: tuple[float, Subject, list[_Victim]] | None = None
        for h in range(len(subject_of)):
            victims: list[_Victim] = []
            hog_total = 0.0
            all_total = 0.0
            hog_owns = granted[h]
            for o in range(len(subject_of)):
                if o == h:
                    continue
                if hog_owns and not granted[o]:
                    continue  # the GPU's own job outpacing an intruder is not a harm to the intruder
                sel = [g for g in stats if h in g[0] and o in g[0]]
                n_both = sum(len(g[1]) for g in sel)
                if n_both < cfg.gpu_hog_min_samples:
                    continue
                tot = sum(g[3] for g in sel)
                if tot <= 0:
                    continue
                h_sum = sum(g[2][h] for g in sel)
                o_sum = sum(g[2][o] for g in sel)
                if h_sum / tot >= cfg.gpu_hog_share_ratio and o_sum / tot <= cfg.gpu_starved_share_ratio:
                    before_groups = [g for g in stats if o in g[0] and h not in g[0]]
                    n_before = sum(len(g[1]) for g in before_groups)
                    before = sum(g[2][o] for g in before_groups) / n_before if n_before else None
                    both = sorted(t for g in sel for t in g[1])
                    victims.append((subject_of[o], o_sum / tot, before, o_sum / n_both, both))
                    hog_total += h_sum
                    all_total += tot
            if victims and all_total > 0:
                share = hog_total / all_total
                if best is None or share > best[0]:
                    best = (share, subject_of[h], victims)
        if best is None:
            continue
        share, hog, victims = best
        gl = gpu_label(model, node, uuid)
        all_ticks = sorted({t for v in victims for t in v[4]})
        start, end = all_ticks[0], all_ticks[-1]
        parts = []
        falls = []
        confirmed_drop = False
        hog_name = label(model, hog, long=False)
        for other, o_share, before, during, _ in victims:
            other_name = label(model, other, long=False)
            text = f"{other_name} got {o_share * 100:.0f}% (SM {during or 0:.0f}% on average)"
            if before is not None:
                text += f", down from SM {before:.0f}% before {hog_name} arrived"
                falls.append(f"{other_name} fell from {before:.0f}% to {during or 0:.0f}% SM")
                if during is not None and before >= 2 * max(during, 1.0):
                    confirmed_drop = True
            else:
                falls.append(f"{other_name} got {during or 0:.0f}% SM")
            parts.append(text)
        summary = (f"{label(model, hog)} held {share * 100:.0f}% of {gl}'s SM time over {end - start:.0f} s "
                   f"({len(all_ticks)} samples) while " + "; ".join(parts))
        follow = f"{share * 100:.0f}% of its compute; " + "; ".join(falls)
        headline = (f"{label(model, hog, long=False) if model.joins.pod_of(hog) else label(model, hog)} took "
                    f"{share * 100:.0f}% of {gl}'s compute; " + "; ".join(falls))
        hog_alloc = owner(node, per_owner[hog][0].pid).allocation
        victim_explicit = any(
            (va := owner(node, per_owner[v[0]][0].pid).allocation).explicit and uuid in va.gpus
            for v in victims)
        severity: Severity = ("high" if victim_explicit and uuid not in hog_alloc.gpus
                              else GPU_COMPUTE_HOG.severity)
        ev: list[Evidence] = []
        tick_set = set(all_ticks)
        hog_s = [s for s in per_owner[hog] if s.t in tick_set]
        if hog_s:
            ev.append(max(hog_s, key=lambda s: s.sm_util_pct or 0).evidence)
        for other, *_ in victims:
            vs = [s for s in per_owner[other] if s.t in tick_set]
            if vs:
                ev.append(min(vs, key=lambda s: s.sm_util_pct or 0).evidence)
            before_s = [s for s in per_owner[other] if s.t < start]
            if before_s:
                ev.append(before_s[-1].evidence)
        base = 0.9 if confirmed_drop else 0.7
        subjects = [*with_pod(model, hog.with_role("culprit")),
                    *[s for v in victims for s in with_pod(model, v[0].with_role("victim"))],
                    gpu_subject(model, node, uuid)]
        findings.append(Finding(
            kind=GPU_COMPUTE_HOG.id, severity=severity,
            confidence=GPU_COMPUTE_HOG.confidence(model, node, base, cfg),
            summary=summary, start=start, end=end, node=node,
            subjects=dedupe_subjects(subjects), evidence=dedupe_evidence(ev),
            metrics=(("gpu", gl), ("hog_sm_share_pct", round(share * 100, 1)),
                     ("victim_sm_share_pct", round(min(v[1] for v in victims) * 100, 1)),
                     ("samples", len(all_ticks))),
            key=f"hog:{node}:{uuid}",
            headline=headline, follow=follow,
        ))
    return findings


@GPU_COMPUTE_HOG.harm
def _hog_harm(f: Finding, h: Harm) -> str:
    return (f"starved of {h.gpu} compute by {h.culprits} from {h.when} "
            f"(its SM share {f.metric('victim_sm_share_pct')}%)")


@GPU_MEMORY_PRESSURE.rule
def gpu_memory_pressure(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """GPU memory at or above ``gpu_memory_pressure_ratio`` of total: who holds it, who suffered."""
    findings: list[Finding] = []
    owner = model.joins.owner
    for (node, uuid), gsamples in sorted(GPU_MEMORY_PRESSURE.gpu_samples(model).items()):
        gpu = model.gpus.get((node, uuid))
        hot = []
        for s in gsamples:
            total = s.memory_total_bytes or (gpu.memory_total_bytes if gpu else None)
            if total and s.memory_used_bytes is not None and s.memory_used_bytes / total >= cfg.gpu_memory_pressure_ratio:
                hot.append((s, s.memory_used_bytes / total, total))
        if not hot:
            continue
        start, end = hot[0][0].t, hot[-1][0].t
        peak, peak_ratio, total = max(hot, key=lambda h: h[1])
        proc_by_gpu = model.proc_samples_by_gpu()  # (asked only here: made on first use, a sort)
        # Holders: per owner, the largest memory seen during the pressure window.
        holders: dict[Subject, tuple[int, ProcessGpuSample]] = {}
        for ps in proc_by_gpu.get((node, uuid), []):
            if start - 1 <= ps.t <= end + 1 and ps.used_memory_bytes:
                subj = owner(node, ps.pid).subject
                cur = holders.get(subj)
                if cur is None or ps.used_memory_bytes > cur[0]:
                    holders[subj] = (ps.used_memory_bytes, ps)
        ranked = sorted(holders.items(), key=lambda kv: -kv[1][0])
        # Victims: CUDA OOM messages of owners on this GPU, or their containers dying non-zero then.
        owners_on = {owner(node, ps.pid).subject for ps in proc_by_gpu.get((node, uuid), [])}
        victims: list[tuple[Subject, Evidence, str, float | None]] = []
        for oom in model.series(CudaOom):
            c = model.container(node, oom.container_id)
            if oom.node == node and c is not None and c.subject() in owners_on:
                if oom.t is None or start - 60 <= oom.t <= end + cfg.chain_link_window_s:
                    victims.append((c.subject(), oom.evidence, "hit a CUDA out-of-memory error", oom.t))
        victim_keys = {v[0].key() for v in victims}
        for subj in owners_on:
            c = model.container(node, subj.id) if subj.type == "container" else None
            if (c is not None and subj.key() not in victim_keys and c.exit_code not in (None, 0)
                    and c.finished_at is not None and start - 5 <= c.finished_at <= end + 60):
                victims.append((subj, c.evidence[0] if c.evidence else peak.evidence,
                                f"exited with code {c.exit_code}", c.finished_at))
        gl = gpu_label(model, node, uuid)
        holder_text = ", ".join(f"{label(model, s, long=False)} {fmt_bytes(m)}" for s, (m, _) in ranked[:3]) or "holders unknown"
        summary = (f"{gl} memory reached {peak_ratio * 100:.0f}% ({fmt_bytes(peak.memory_used_bytes)} of "
                   f"{fmt_bytes(total)}) at {fmt_time(peak.t)}; held by {holder_text}")
        if victims:
            summary += "; " + "; ".join(f"{label(model, v[0], long=False)}: {v[2]} at {fmt_time(v[3])}" for v in victims)
        victim_set = {v[0].key() for v in victims}
        culprits: list[Subject] = []
        if ranked and (victims or len(ranked) > 1):
            top, (top_mem, top_sample) = ranked[0]
            top_owns = owner(node, top_sample.pid).allocation.grants(uuid, top_sample.mig_uuid)
            victims_own = any(owner(node, p.pid).allocation.grants(uuid, p.mig_uuid)
                              for s_, (_, p) in ranked if s_.key() in victim_set)
            # The GPU's own (explicitly granted) job filling its memory is not to blame unless
            # another job with a grant of that GPU suffered from it.
            if (top.key() not in victim_set and top_mem >= 0.5 * sum(m for _, (m, _) in ranked)
                    and (not top_owns or victims_own)):
                culprits.append(top)
        subjects = ([x for c in culprits for x in with_pod(model, c.with_role("culprit"))]
                    + [x for v in victims for x in with_pod(model, v[0].with_role("victim"))]
                    + [x for s, _ in ranked[:3] for x in with_pod(model, s.with_role("witness"))]
                    + [gpu_subject(model, node, uuid)])
        mseverity: Severity = "high" if victims else ("medium" if len(ranked) > 1 else GPU_MEMORY_PRESSURE.severity)
        ev = [peak.evidence, *[p.evidence for _, (_, p) in ranked[:3]], *[v[1] for v in victims]]
        findings.append(Finding(
            kind=GPU_MEMORY_PRESSURE.id, severity=mseverity,
            confidence=GPU_MEMORY_PRESSURE.confidence(model, node, 0.9, cfg),
            summary=summary, start=start, end=end, node=node,
            subjects=dedupe_subjects(subjects), evidence=dedupe_evidence(ev),
            metrics=(("gpu", gl), ("peak_memory_used_bytes", peak.memory_used_bytes),
                     ("memory_total_bytes", total), ("peak_ratio", round(peak_ratio, 3)),
                     ("samples_over_threshold", len(hot))),
            key=f"gpumem:{node}:{uuid}",
            headline=(f"{gl} memory {peak_ratio * 100:.0f}% full" + (
                ", " + "; ".join(f"{label(model, v[0], long=False)} {v[2]}" for v in victims) if victims else "")),
        ))
    return findings


@GPU_COMPUTE_HOG.next_step
def _hog_step(f: Finding, h: Harm) -> str:
    return (f"move {h.culprits} off {h.gpu}, or share the GPU on purpose (MIG, MPS limits, time-slicing), "
            f"so {h.victims} gets its compute back")


@GPU_MEMORY_PRESSURE.next_step
def _memory_step(f: Finding, h: Harm) -> str:
    return (f"reduce what {h.culprits} hold on {h.gpu} (batch size, the framework's caching allocator) "
            "or give the jobs separate GPUs")


@GPU_MEMORY_PRESSURE.harm
def _memory_harm(f: Finding, h: Harm) -> str:
    return f"hit {h.gpu} memory exhaustion at {h.when}"


@GPU_MEMORY_PRESSURE.ruled_out(rank=40)
def _memory_below_threshold(c: RuledOutCheck) -> tuple[str, list[Evidence]] | None:
    n_gpu_samples = GPU_MEMORY_PRESSURE.judged_on(c.model, c.node)
    if GPU_MEMORY_PRESSURE.id in c.found or not n_gpu_samples:
        return None
    return (f"GPU memory stayed below {c.cfg.gpu_memory_pressure_ratio * 100:.0f}% on every GPU of {c.node}",
            c.evidence("nvml", f"{n_gpu_samples} samples"))
