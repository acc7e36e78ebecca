"""Rules about block IO and the network: ``io-stall``, ``network-saturation``, ``network-errors``.

Sources: cgroup v2 ``io.stat``/``io.max``/``io.pressure``, v1 ``blkio.throttle.io_service_bytes``
and ``blkio.throttle.{read,write}_bps_device`` (cgroups collector); ``/proc/net/dev`` with each
interface's ``speed`` and ``operstate``, InfiniBand ``counters/*``, ``rate`` and ``state``, and each
container namespace's ``/proc/<pid>/net/dev`` (net collector); NVML utilisation of the GPUs a
container holds (``nvmlDeviceGetUtilizationRates``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from forensics.analysis.findings import Evidence, Finding, Severity, Subject
from forensics.analysis.kinds import FindingKind, Harm, RuledOutCheck
from forensics.analysis.model import Model
from forensics.analysis.naming import fmt_bytes, fmt_time, gpu_label, gpu_subject, label, with_pod
from forensics.analysis.rules.common import dedupe_evidence, dedupe_subjects
from forensics.analysis.samples import IoSample, NetSample, PsiSample
from forensics.specs.roles import CGROUP_COUNTERS, GPU_DEVICES, NET_COUNTERS
from forensics.thresholds import AnalysisConfig

__all__ = ["IO_STALL", "NETWORK_ERRORS", "NETWORK_SATURATION", "io_stall", "network_errors", "network_saturation"]

IO_STALL = FindingKind("io-stall", severity="medium", needs=(CGROUP_COUNTERS, GPU_DEVICES), rank=65)
NETWORK_SATURATION = FindingKind("network-saturation", severity="medium", needs=(NET_COUNTERS,), rank=102)
NETWORK_ERRORS = FindingKind("network-errors", severity="medium", needs=(NET_COUNTERS,), rank=104)

_ERRORS = ("rx_errors", "tx_errors", "rx_fifo_errors", "rx_frame_errors", "tx_carrier_errors", "symbol_error",
           "port_rcv_errors", "link_error_recovery")
_DROPS = ("rx_dropped", "tx_dropped", "port_xmit_discards")
_UP_STATES = frozenset({"up", "unknown", "ACTIVE"})  # lo and many virtual links say "unknown"


def _host(node: str) -> Subject:
    return Subject("host", node, node, node)


def _rate(rate: float) -> str:
    return f"{fmt_bytes(rate)}/s"


# -- io-stall ---------------------------------------------------------------------------------

def _io_intervals(samples: list[IoSample], limits: dict[str, dict[str, int | None]], ratio: float
                  ) -> list[tuple[IoSample, IoSample, str, str, float, int]]:
    """Intervals where a device's read or write rate reached ``ratio`` of its limit:
    (a, b, device, "read"|"write", rate, limit)."""
    pinned = []
    for a, b in zip(samples, samples[1:], strict=False):
        dt = b.t - a.t
        if dt <= 0:
            continue
        for device, (rb, wb) in b.devices.items():
            before = a.devices.get(device)
            lim = limits.get(device)
            if before is None or lim is None:
                continue
            for op, now, then, key in (("read", rb, before[0], "rbps"), ("write", wb, before[1], "wbps")):
                cap = lim.get(key)
                if cap and now >= then and (now - then) / dt >= ratio * cap:
                    pinned.append((a, b, device, op, (now - then) / dt, cap))
    return pinned


def _gpu_drop(model: Model, node: str, cid: str, windows: list[tuple[float, float]], cfg: AnalysisConfig
              ) -> list[tuple[str, float, float | None]]:
    """The container's GPUs whose utilisation during ``windows`` was idle or fell: (uuid, during, outside)."""
    out = []
    samples = IO_STALL.gpu_samples(model)
    for uuid in sorted(model.joins.gpus_used_by(node, "container", cid)):
        during: list[float] = []
        outside: list[float] = []
        for g in samples.get((node, uuid), []):
            if g.util_gpu_pct is None:
                continue
            (during if any(a <= g.t <= b for a, b in windows) else outside).append(g.util_gpu_pct)
        if not during:
            continue
        d = sum(during) / len(during)
        o = sum(outside) / len(outside) if outside else None
        if d <= cfg.gpu_idle_util_pct or (o is not None and o - d >= cfg.io_stall_gpu_drop_pct):
            out.append((uuid, d, o))
    return out


@IO_STALL.rule
def io_stall(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """A container waiting on block IO (its read/write rate pinned at its io.max/blkio limit, or its
    own ``io.pressure`` at the PSI threshold) while the GPU it holds idles or drops: data-loader
    starvation. Pinned at the limit with its GPU busy (or none known) is low; PSI alone with a busy
    GPU is left to ``pressure-stall``."""
    findings: list[Finding] = []
    series: dict[tuple[str, str], list[IoSample]] = defaultdict(list)
    for s in model.series(IoSample):
        series[(s.node, s.container_id)].append(s)
    psi: dict[tuple[str, str], list[PsiSample]] = defaultdict(list)
    for p in model.series(PsiSample):
        if p.resource == "io" and p.scope != "host" and p.some_avg10_pct >= cfg.psi_some_avg10_pct:
            psi[(p.node, p.scope)].append(p)
    for node, cid in sorted(set(series) | set(psi)):
        samples = sorted(series.get((node, cid), []), key=lambda s: s.t)
        limits, limit_ev = model.io_limits.get((node, cid), ({}, None))
        pinned = _io_intervals(samples, limits, cfg.io_limit_pinned_ratio)
        stalls = sorted(psi.get((node, cid), []), key=lambda p: p.t)
        windows = [(a.t, b.t) for a, b, *_ in pinned] + [(p.t - 1.0, p.t) for p in stalls]
        if not windows:
            continue
        dropped = _gpu_drop(model, node, cid, windows, cfg)
        if not pinned and not dropped:
            continue
        c = model.container(node, cid)
        subj = c.subject() if c is not None else model.container_subject(node, cid)
        start, end = min(w[0] for w in windows), max(w[1] for w in windows)
        parts = []
        if pinned:
            worst = max(pinned, key=lambda p: p[4] / p[5])
            ops = sorted({p[3] for p in pinned})
            parts.append(f"its {'/'.join(ops)} rate sat at its IO limit on device {worst[2]} "
                         f"({_rate(worst[4])} against {_rate(worst[5])}) in {len(pinned)} sampling intervals")
        if stalls:
            peak = max(stalls, key=lambda p: p.some_avg10_pct)
            parts.append(f"its IO pressure (PSI some) peaked at {peak.some_avg10_pct:.0f}% at {fmt_time(peak.t)}")
        summary = f"{label(model, subj)} waited on block IO: " + "; ".join(parts)
        if dropped:
            summary += "; meanwhile its " + ", ".join(
                f"{gpu_label(model, node, u)} averaged {d:.0f}% utilization"
                + (f" (against {o:.0f}% outside the stall)" if o is not None else "") for u, d, o in dropped
            ) + ": the GPU was starved by its data loader"
        severity: Severity = IO_STALL.severity if dropped else "low"
        ev: list[Evidence] = []
        if pinned:
            ev += [worst[0].evidence, worst[1].evidence]
            if limit_ev is not None:
                ev.append(limit_ev)
        if stalls:
            ev.append(max(stalls, key=lambda p: p.some_avg10_pct).evidence)
        subjects = [*with_pod(model, subj.with_role("victim")), *[gpu_subject(model, node, u) for u, _, _ in dropped]]
        findings.append(Finding(
            kind=IO_STALL.id, severity=severity, confidence=IO_STALL.confidence(model, node, 0.85, cfg),
            summary=summary, start=start, end=end, node=node,
            subjects=dedupe_subjects(subjects), evidence=dedupe_evidence(ev),
            metrics=(("pinned_intervals", len(pinned)), ("psi_readings_over", len(stalls)),
                     ("gpu_starved", bool(dropped)),
                     ("gpu_util_pct_during", round(min(d for _, d, _ in dropped), 1) if dropped else None)),
            key=f"io-stall:{node}:{cid}",
            headline=f"{label(model, subj)} waited on block IO" + (" while its GPU starved" if dropped else ""),
        ))
    return findings


@IO_STALL.harm
def _io_harm(f: Finding, h: Harm) -> str:
    return "waited on block IO" + (f" while {h.gpu} starved" if f.metric("gpu_starved") else "") + f" from {h.when}"


@IO_STALL.next_step
def _io_step(f: Finding, h: Harm) -> str:
    return (f"raise {h.victims}'s IO limit (docker --device-read-bps, io.max) or feed it from faster storage "
            "(local NVMe, page cache, more prefetching data-loader workers)")


@IO_STALL.ruled_out(rank=55)
def _no_io_stall(c: RuledOutCheck) -> tuple[str, list[Evidence]] | None:
    n = sum(1 for s in c.model.series(IoSample) if s.node == c.node)
    if IO_STALL.id in c.found or n < 2:
        return None
    return (f"no container's block IO pinned at its io.max/blkio limit, nor stalled on IO with its GPU idling, "
            f"on {c.node}", c.evidence("cgroups", f"{n} io.stat / blkio readings"))


# -- network ----------------------------------------------------------------------------------

def _series(model: Model, kinds: Iterable[str]) -> dict[tuple[str, str, str], list[NetSample]]:
    wanted = set(kinds)
    out: dict[tuple[str, str, str], list[NetSample]] = defaultdict(list)
    for s in model.series(NetSample):
        if s.kind in wanted:
            out[(s.node, s.kind, s.name)].append(s)
    for samples in out.values():
        samples.sort(key=lambda s: s.t)
    return out


def _what(kind: str, name: str) -> str:
    return f"InfiniBand port {name}" if kind == "ib" else f"interface {name}"


def _delta(a: NetSample, b: NetSample, counter: str) -> int | None:
    x, y = a.counters.get(counter), b.counters.get(counter)
    return y - x if x is not None and y is not None and y >= x else None


def _dominant(model: Model, node: str, start: float, end: float, link_bytes: int
              ) -> list[tuple[str, int]]:
    """Containers whose namespace moved at least a tenth of the link's bytes in [start, end]."""
    moved: dict[str, int] = defaultdict(int)
    for (n, _, _), samples in _series(model, ("netns",)).items():
        if n != node:
            continue
        inside = [s for s in samples if start <= s.t <= end and s.container_id]
        for a, b in zip(inside, inside[1:], strict=False):
            total = sum(d for d in (_delta(a, b, "rx_bytes"), _delta(a, b, "tx_bytes")) if d)
            moved[b.container_id or ""] += total
    ranked = sorted(moved.items(), key=lambda kv: -kv[1])
    return [(cid, n) for cid, n in ranked if link_bytes and n >= link_bytes / 10][:5]


@NETWORK_SATURATION.rule
def network_saturation(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """A NIC or InfiniBand port whose rx or tx rate reached ``net_saturation_ratio`` of its link
    rate in several sampling intervals, or an IB port whose ``port_xmit_wait`` rose in several
    (the port had data to send and no credits): the link is the bottleneck. Names the containers
    whose namespaces moved most of the bytes (IB/RDMA traffic bypasses them)."""
    findings: list[Finding] = []
    for (node, kind, name), samples in sorted(_series(model, ("nic", "ib")).items()):
        hot: list[tuple[NetSample, NetSample, float]] = []
        waits: list[tuple[NetSample, NetSample, int]] = []
        for a, b in zip(samples, samples[1:], strict=False):
            dt = b.t - a.t
            if dt <= 0:
                continue
            link = b.link_bytes_per_s
            rates = [d / dt for d in (_delta(a, b, "rx_bytes"), _delta(a, b, "tx_bytes")) if d is not None]
            if link and rates and max(rates) >= cfg.net_saturation_ratio * link:
                hot.append((a, b, max(rates) / link))
            w = _delta(a, b, "port_xmit_wait")
            if w:
                waits.append((a, b, w))
        if len(hot) < cfg.net_saturation_min_intervals and len(waits) < cfg.net_saturation_min_intervals:
            continue
        spans = [(a.t, b.t) for a, b, _ in hot] + [(a.t, b.t) for a, b, _ in waits]
        start, end = min(s for s, _ in spans), max(e for _, e in spans)
        parts = []
        if len(hot) >= cfg.net_saturation_min_intervals:
            peak = max(hot, key=lambda h: h[2])
            parts.append(f"ran at {peak[2] * 100:.0f}% of its {_rate(peak[1].link_bytes_per_s or 0)} link rate "
                         f"at {fmt_time(peak[1].t)}; {len(hot)} of {len(samples) - 1} intervals at or above "
                         f"{cfg.net_saturation_ratio * 100:.0f}%")
        if len(waits) >= cfg.net_saturation_min_intervals:
            parts.append(f"port_xmit_wait rose by {sum(w for _, _, w in waits)} in {len(waits)} intervals "
                         "(data waiting for link credits: congestion)")
        link_bytes = 0
        inside = [s for s in samples if start - 1e-6 <= s.t <= end + 1e-6]
        if len(inside) >= 2:
            link_bytes = sum(d for d in (_delta(inside[0], inside[-1], "rx_bytes"),
                                         _delta(inside[0], inside[-1], "tx_bytes")) if d)
        dominant = _dominant(model, node, start, end, link_bytes) if kind == "nic" else []
        subjects: list[Subject] = [_host(node).with_role("victim")]
        summary = f"{_what(kind, name)} on {node} was saturated: " + "; ".join(parts)
        if dominant:
            names = []
            for cid, moved in dominant:
                c = model.container(node, cid)
                subj = c.subject() if c is not None else model.container_subject(node, cid)
                subjects += with_pod(model, subj.with_role("culprit"))
                names.append(f"{label(model, subj)} ({fmt_bytes(moved)})")
            summary += "; the traffic came mostly from " + ", ".join(names)
        ev = [x.evidence for x in (max(hot, key=lambda h: h[2])[:2] if hot else waits[0][:2])]
        findings.append(Finding(
            kind=NETWORK_SATURATION.id, severity=NETWORK_SATURATION.severity,
            confidence=NETWORK_SATURATION.confidence(model, node, 0.85, cfg),
            summary=summary, start=start, end=end, node=node,
            subjects=dedupe_subjects(subjects), evidence=dedupe_evidence(ev),
            metrics=(("link", name), ("link_kind", kind), ("saturated_intervals", len(hot)),
                     ("xmit_wait_intervals", len(waits)),
                     ("utilisation_peak", round(max(h[2] for h in hot), 3) if hot else None)),
            key=f"net-saturation:{node}:{kind}:{name}",
            headline=f"{_what(kind, name)} on {node} was saturated",
        ))
    return findings


@NETWORK_SATURATION.harm
def _saturation_harm(f: Finding, h: Harm) -> str:
    return f"{f.metric('link')} saturated from {h.when}"


@NETWORK_SATURATION.next_step
def _saturation_step(f: Finding, h: Harm) -> str:
    if f.metric("link_kind") == "ib":
        return ("check the fabric for congestion on this port (perfquery, switch counters) and spread "
                "NCCL traffic over more rails (NCCL_IB_HCA)")
    return f"rate-limit or move {h.culprits if h.culprits != 'another process' else 'the heaviest sender'} " \
           "or give the node a faster link"


@NETWORK_SATURATION.ruled_out(rank=62)
def _no_saturation(c: RuledOutCheck) -> tuple[str, list[Evidence]] | None:
    links = {(s.kind, s.name) for s in c.model.series(NetSample)
             if s.node == c.node and s.kind in ("nic", "ib") and s.link_bytes_per_s}
    n = sum(1 for s in c.model.series(NetSample) if s.node == c.node and s.kind in ("nic", "ib"))
    if NETWORK_SATURATION.id in c.found or not links or n < 2 * len(links):
        return None
    return (f"no NIC or InfiniBand port ran at {c.cfg.net_saturation_ratio * 100:.0f}% of its link rate, and no "
            f"port_xmit_wait rose, on {c.node}", c.evidence("net", f"{len(links)} links with a known rate, "
                                                                  f"{n} readings"))


@NETWORK_ERRORS.rule
def network_errors(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """A NIC or InfiniBand port whose error, drop, symbol-error or link-down counters rose during
    the window, or whose state left up/ACTIVE (a flapping link: a classic cause of NCCL timeouts)."""
    findings: list[Finding] = []
    for (node, kind, name), samples in sorted(_series(model, ("nic", "ib")).items()):
        if len(samples) < 2:
            continue
        first, last = samples[0], samples[-1]
        errors = {k: d for k in _ERRORS if (d := _delta(first, last, k))}
        drops = {k: d for k in _DROPS if (d := _delta(first, last, k))}
        downs = _delta(first, last, "link_downed") or 0
        states = [s for s in samples if s.state is not None]
        down_states = [s for s in states if s.state not in _UP_STATES]
        flapped = bool(down_states) and any(s.state in _UP_STATES for s in states)
        if sum(errors.values()) < cfg.net_errors_min:
            errors = {}
        if sum(drops.values()) < cfg.net_drops_min:
            drops = {}
        if not (errors or drops or downs or flapped):
            continue
        parts = []
        if downs:
            parts.append(f"link_downed rose by {downs}")
        if flapped:
            parts.append(f"its state was {down_states[0].state} at {fmt_time(down_states[0].t)}")
        if errors:
            parts.append(", ".join(f"{k} +{v}" for k, v in errors.items()))
        if drops:
            parts.append(", ".join(f"{k} +{v}" for k, v in drops.items()))
        severity: Severity = "high" if downs or flapped else ("medium" if errors else "low")
        changed = [s for s in samples[1:] if any(_delta(first, s, k) for k in (*errors, *drops, "link_downed"))]
        start = (down_states[0].t if flapped else None) or (changed[0].t if changed else first.t)
        ev = [first.evidence, (down_states[0] if flapped else changed[0] if changed else last).evidence, last.evidence]
        findings.append(Finding(
            kind=NETWORK_ERRORS.id, severity=severity, confidence=NETWORK_ERRORS.confidence(model, node, 0.85, cfg),
            summary=f"{_what(kind, name)} on {node} showed link faults between {fmt_time(first.t)} and "
                    f"{fmt_time(last.t)}: " + "; ".join(parts),
            start=start, end=last.t, node=node,
            subjects=(_host(node).with_role("victim"),), evidence=dedupe_evidence(ev),
            metrics=(("link", name), ("link_kind", kind), ("errors", sum(errors.values())),
                     ("drops", sum(drops.values())), ("link_downed", downs), ("flapped", flapped)),
            key=f"net-errors:{node}:{kind}:{name}",
            headline=f"{_what(kind, name)} on {node} " + ("went down" if downs or flapped else "had errors"),
        ))
    return findings


@NETWORK_ERRORS.harm
def _errors_harm(f: Finding, h: Harm) -> str:
    return f"{f.metric('link')} " + ("went down" if f.metric("link_downed") or f.metric("flapped") else
                                     "had errors") + f" from {h.when}"


@NETWORK_ERRORS.next_step
def _errors_step(f: Finding, h: Harm) -> str:
    if f.metric("link_kind") == "ib":
        return "check the port's cable and transceiver (ibdiagnet, mlxlink) and the switch port's error counters"
    return "check the interface's cable, transceiver and switch port (ethtool -S, ip -s link)"


@NETWORK_ERRORS.ruled_out(rank=64)
def _no_errors(c: RuledOutCheck) -> tuple[str, list[Evidence]] | None:
    links = {(s.kind, s.name) for s in c.model.series(NetSample) if s.node == c.node and s.kind in ("nic", "ib")}
    n = sum(1 for s in c.model.series(NetSample) if s.node == c.node and s.kind in ("nic", "ib"))
    if NETWORK_ERRORS.id in c.found or not links or n < 2 * len(links):
        return None
    return (f"no error, drop, symbol-error or link-down counter rose and no link went down on {c.node}",
            c.evidence("net", f"{len(links)} links, {n} readings"))
