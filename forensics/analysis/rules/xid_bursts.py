"""Xid records grouped the way the driver raises them: per GPU, in bursts, each burst's cause with
the consequences chained to it; and how a finding names the GPU and the processes the records cite.

Shared by ``gpu-xid-fault`` (:mod:`.gpu_xid`) and ``gpu-lost`` (:mod:`.gpu_lost`). Records are grouped
per GPU (its UUID, else its PCI address: records of different addresses are never merged); the Xids of
one GPU less than ``xid_burst_window_s`` apart are a burst, whose first Xid is the cause and whose
later Xids that the catalog says an earlier one causes (45 after any, 63/64 after memory errors, 154
summarising the others, ...) are consequences chained to it. Each PID a finding names is given its
own record's time (``subjects[].time``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from forensics.analysis.events import XidEvent
from forensics.analysis.findings import Role, Subject
from forensics.analysis.model import Model
from forensics.analysis.naming import fmt_time, gpu_label, with_pod
from forensics.parsing.pci import pci_bus_key
from forensics.parsing.xid_catalog import caused_by
from forensics.specs.ring import folded
from forensics.specs.roles import GPU_DEVICES
from forensics.thresholds import AnalysisConfig

__all__ = ["FELL_OFF_BUS", "Cause", "consequence_text", "gpu_name", "gpu_where", "pid_phrase", "record_pids",
           "running_on", "xid_causes"]

FELL_OFF_BUS = 79
# "Xid 154 GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)" (catalog, Xid 154)
_XID154 = re.compile(r"to (0x[0-9a-fA-F]+) \(([^)]{1,60})\)")


def _gpu_key(x: XidEvent) -> str:
    if x.gpu_uuid:
        return x.gpu_uuid
    return f"pci:{pci_bus_key(x.pci_bus_id)}" if x.pci_bus_id else "unknown"


def _merge_xids(xids: list[XidEvent]) -> list[list[XidEvent]]:
    """Kernel and NVML records of the same Xid (same node, GPU, code, within 5 s) are one event."""
    groups: list[list[XidEvent]] = []
    last: dict[tuple[str, str, int], list[XidEvent]] = {}
    for x in sorted(xids, key=lambda x: (x.node, x.t if x.t is not None else float("-inf"))):
        k = (x.node, _gpu_key(x), x.code)
        g = last.get(k)
        if g is not None and x.evidence.member != g[-1].evidence.member and (
                x.t is None or g[0].t is None or abs(x.t - g[0].t) <= 5):
            g.append(x)
            continue
        g = [x]
        last[k] = g
        groups.append(g)
    return groups


@dataclass
class Cause:
    """The first Xid of a burst (or one the catalog does not link to an earlier one), its repeats in
    the burst and the consequences the driver raised because of it."""

    node: str
    gpu: str
    code: int
    events: list[list[XidEvent]]
    consequences: list[tuple[list[XidEvent], str]] = field(default_factory=list)  # (event, link source)

    @property
    def t(self) -> float | None:
        return self.events[0][0].t


def xid_causes(model: Model, cfg: AnalysisConfig) -> list[Cause]:
    by_gpu: dict[tuple[str, str], list[list[XidEvent]]] = defaultdict(list)
    for g in _merge_xids(model.series(XidEvent)):
        by_gpu[(g[0].node, _gpu_key(g[0]))].append(g)
    out: list[Cause] = []
    for (node, gpu), groups in sorted(by_gpu.items()):
        groups.sort(key=lambda g: g[0].t if g[0].t is not None else float("-inf"))
        burst: list[Cause] = []
        prev_t: float | None = None
        for g in groups:
            t = g[0].t
            if not burst or t is None or prev_t is None or t - prev_t > cfg.xid_burst_window_s:
                burst = []
            prev_t = t if t is not None else prev_t
            seen = {c.code for c in burst} | {x[0].code for c in burst for x, _ in c.consequences}
            code = g[0].code
            same = next((c for c in burst if c.code == code), None)
            link = caused_by(code, seen) if burst else None
            if same is not None:
                same.events.append(g)
            elif link is not None:
                owner = next((c for c in burst if link.cause is None or c.code in link.cause
                              or any(x[0].code in link.cause for x, _ in c.consequences)), burst[0])
                owner.consequences.append((g, link.source))
            else:
                cause = Cause(node, gpu, code, [g])
                burst.append(cause)
                out.append(cause)
    return out


def gpu_name(model: Model, node: str, gpu: str) -> str | None:
    g = model.gpus.get((node, gpu))
    return g.name if g else None


_ADDRESS = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?")


def gpu_where(model: Model, node: str, gpu: str, pci: str | None, text: str = "") -> tuple[str, Subject, bool]:
    """How a sentence names the GPU, its subject, and whether NVML enumerated it in this capture.
    A GPU NVML did not enumerate is its PCI address, as the record wrote it (``text``)."""
    g = model.gpus.get((node, gpu))
    if g is not None:
        where = gpu_label(model, node, gpu) + (f" (PCI {g.pci_bus_id})" if g.pci_bus_id else "")
        return where, g.subject(), True
    if gpu.startswith("index:"):
        index = gpu[6:]
        return (f"GPU {index} (lost before NVML gave its UUID)", Subject("gpu", f"GPU {index}", f"GPU {index}", node),
                False)
    address = pci or (gpu[4:] if gpu.startswith("pci:") else gpu)
    written = next((m.group(0) for m in _ADDRESS.finditer(text)
                    if pci is None or pci_bus_key(m.group(0)).split(".")[0] == pci_bus_key(pci).split(".")[0]), address)
    subject = Subject("gpu", written if not gpu.startswith("GPU-") else gpu, f"GPU at PCI {address}", node)
    if model.has_role(node, GPU_DEVICES) and model.node_gpus(node):
        return (f"the GPU at PCI {address}, which NVML did not enumerate in this capture "
                "(it vanished, or is hidden from this capture)", subject, False)
    info = model.nodes.get(node)
    if info is not None and folded("nvml/") in info.history_held and model.node_gpus(node):
        return (f"the GPU at PCI {address}, which NVML did not enumerate in the flight recorder's history "
                "(no NVML in this capture)", subject, False)
    return f"the GPU at PCI {address} (NVML not in the bundle: which GPU it is is unknown)", subject, False


def record_pids(model: Model, node: str, gpu: str, events: list[list[XidEvent]], role: Role,
                 enumerated: bool) -> list[Subject]:
    """The PIDs the records name, each at its own first record's time. A PID is joined to its
    container/pod only when NVML saw it on this same GPU; otherwise it is named as the driver logged it."""
    first: dict[int, tuple[float | None, str | None]] = {}
    for g in events:
        for e in g:
            if e.pid is not None and e.pid not in first:
                first[e.pid] = (e.t, e.proc_name)
    on_gpu = {ps.pid for ps in model.proc_samples_by_gpu().get((node, gpu), [])} if enumerated else set()
    out: list[Subject] = []
    for pid, (t, name) in sorted(first.items(), key=lambda kv: (kv[1][0] or 0.0, kv[0])):
        if pid in on_gpu:
            owner = model.joins.owner(node, pid, name)
            out.extend(s.at(t) for s in with_pod(model, owner.subject.with_role(role)))
        else:
            out.append(Subject("process", str(pid), name or "?", node, role, t))
    return out


def running_on(model: Model, node: str, gpu: str, t: float | None, enumerated: bool,
               gpu_instances: frozenset[int] = frozenset()) -> list[Subject]:
    """Whoever ran on the GPU around ``t`` (30 s before to 5 s after), harmed by a device fault;
    on a MIG GPU whose Xid names its GPU instances (``GPU-I:05``), only who ran on those instances."""
    if t is None or not enumerated:
        return []
    out: list[Subject] = []
    for pid in sorted({ps.pid for ps in model.proc_samples_by_gpu().get((node, gpu), []) if t - 30 <= ps.t <= t + 5
                       and (not gpu_instances or ps.gpu_instance_id in gpu_instances)}):
        out.extend(s.at(t) for s in with_pod(model, model.joins.owner(node, pid).subject.with_role("victim")))
    return out


def pid_phrase(subjects: list[Subject]) -> str:
    procs = [s for s in subjects if s.type == "process"]
    if not procs:
        return ""
    parts = [f"{s.id}" + (f" ({s.name})" if s.name and s.name != "?" else "") + f" at {fmt_time(s.time)}"
             for s in procs[:4]]
    more = f" and {len(procs) - 4} more" if len(procs) > 4 else ""
    return f", process{'es' if len(procs) > 1 else ''} {', '.join(parts)}{more} as the driver logged"


def _recovery_from_154(events: list[list[XidEvent]]) -> str | None:
    for g in events:
        for e in g:
            found = _XID154.search(e.text)
            if e.code == 154 and found:
                return f"{found.group(2)} ({found.group(1)})"
    return None


def consequence_text(causes: list[Cause]) -> tuple[str, str, str | None]:
    """('Xid 45 (2x), Xid 154 (1x)', 'links', recovery action from an Xid 154 among them) of the causes."""
    counts: dict[int, int] = defaultdict(int)
    links: dict[int, str] = {}
    for g, source in (x for cause in causes for x in cause.consequences):
        counts[g[0].code] += 1
        links[g[0].code] = source
    text = ", ".join(f"Xid {c} ({n}x)" for c, n in sorted(counts.items()))
    link_text = "; ".join(f"Xid {c}: {src}" for c, src in sorted(links.items()))
    return text, link_text, _recovery_from_154([g for cause in causes for g, _ in cause.consequences])

