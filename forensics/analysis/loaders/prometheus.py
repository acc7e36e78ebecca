"""Prometheus history (``prometheus/query_range/*.json``) mapped onto the model, at the query's step.

Each series is read where its exporter put it:

- dcgm-exporter -> :class:`Gpu` (by ``UUID``; ``gpu`` index, ``pci_bus_id``, ``modelName``, FB used +
  free as the total) and :class:`GpuSample` (``DCGM_FI_DEV_GPU_UTIL``, ``FB_USED``, the throttle /
  clocks-event reasons bitmask, temperature, power), plus one :class:`ExporterAttribution` per step
  (the pod dcgm-exporter named for the GPU, or none; ``exported_pod`` etc. win over ``pod`` when the
  scrape renamed them). ``DCGM_FI_DEV_XID_ERRORS`` is the last Xid seen: each change to a non-zero
  value is an :class:`XidEvent` at the step that first shows it;
- cAdvisor -> :class:`CpuSample` (``container_cpu_cfs_periods_total`` / ``..._throttled_periods_total``),
  :class:`MemorySample` (working set, spec limit) and an :class:`OomKill` at each step where
  ``container_oom_events_total`` rose; the container id and pod UID come from the ``id`` label (the
  cgroup path), as /proc/<pid>/cgroup would give them;
- node-exporter -> host :class:`PsiSample` from the pressure counters (the stall share of each step,
  ``from_counters``);
- kube-state-metrics -> :class:`Pod` (``kube_pod_info``; GPU limits from
  ``kube_pod_container_resource_limits{resource="nvidia_com_gpu"}``; devices: the GPUs dcgm-exporter
  named the pod on), :class:`Container` (``kube_pod_container_info``'s ``container_id``) and an
  :class:`OomKill` when ``kube_pod_container_status_last_terminated_reason`` says ``OOMKilled``.

What the live collectors saw wins: an entity already in the model is not replaced, and GPU samples
inside the span NVML sampled that GPU are left out (the finer series is kept). NaN and infinite
values are skipped; a gap in a series (its exporter was gone: Prometheus answers nothing once the
5-minute look-back has passed, which is how a stale marker shows) is left a gap, and a counter
step across a gap longer than ten steps is not counted. Evidence: the member and the JSON pointer
``/data/result/<series>/values/<point>`` of the ``[time, "value"]`` pair.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from forensics.analysis.events import OomKill, XidEvent
from forensics.analysis.findings import Evidence, EvidenceRef
from forensics.analysis.loaders.common import Loader, as_dict, as_str
from forensics.analysis.loaders.state import LoadState
from forensics.analysis.model import Container, Gpu, GpuAllocation, Model, Pod
from forensics.analysis.samples import (
    DCGM_EXPORTER,
    CpuSample,
    ExporterAttribution,
    GpuSample,
    MemorySample,
    PsiSample,
)
from forensics.analysis.source import Source
from forensics.errors import ParseError
from forensics.parsing.attribution import attribute_path
from forensics.specs.prometheus import PREFIX, QUERIES, TARGET, query_member
from forensics.specs.roles import (
    CGROUP_COUNTERS,
    CONTAINER_RUNTIME,
    GPU_DEVICES,
    KERNEL_LOG,
    ORCHESTRATOR,
    PROCESS_TABLE,
)

__all__ = ["LOADER", "load_prometheus"]

_MIB = 1 << 20
_GAP_STEPS = 10
_POD_LABELS = ("pod", "namespace", "container")


class _Series:
    """One series of a query_range answer: labels, finite (t, value, point index) and its pointer base."""

    __slots__ = ("index", "labels", "member", "points")

    def __init__(self, member: str, index: int, labels: dict[str, str], points: list[tuple[float, float, int]]) -> None:
        self.member, self.index, self.labels, self.points = member, index, labels, points

    def ref(self, src: Source, j: int, pair: Any) -> EvidenceRef:
        return EvidenceRef(src.name, self.member, 0, pair, (), f"/data/result/{self.index}/values/{j}")

    def label_evidence(self, src: Source) -> Evidence:
        return src.ev_pointer(self.member, f"/data/result/{self.index}/metric")


# how much of each answer the loader needs: every point, the labels and the last point, or nothing
_LABELS_ONLY = frozenset({"kube_pod_info", "kube_pod_container_info", "kube_pod_container_status_last_terminated_reason",
                          "container_spec_memory_limit_bytes", "kube_pod_container_resource_limits"})
_UNUSED = frozenset({"kube_pod_container_status_restarts_total"})


def _read(src: Source, member: str, skipped: list[int], labels_only: bool = False) -> list[_Series]:
    """The series of one answer; with ``labels_only`` just the first and the largest finite point."""
    doc = src.json(member)
    result = as_dict(as_dict(doc).get("data")).get("result")
    out: list[_Series] = []
    isfinite = math.isfinite
    for i, s in enumerate(result if isinstance(result, list) else []):
        if not isinstance(s, dict) or not isinstance(s.get("values"), list):
            continue
        labels = {k: v for k, v in as_dict(s.get("metric")).items() if isinstance(v, str)}
        values = s["values"]
        try:
            pts = [(float(p[0]), float(p[1]), j) for j, p in enumerate(values)]
        except (TypeError, ValueError, IndexError, KeyError):
            pts = []
            for j, p in enumerate(values):
                try:
                    pts.append((float(p[0]), float(p[1]), j))
                except (TypeError, ValueError, IndexError, KeyError):
                    skipped[0] += 1
        finite = [p for p in pts if isfinite(p[1]) and isfinite(p[0])]
        skipped[0] += len(pts) - len(finite)
        if labels_only and finite:
            finite = [finite[0], max(finite, key=lambda p: p[1])]
        out.append(_Series(member, i, labels, finite))
    return out


def _pod_of(labels: dict[str, str], exported: bool = False) -> tuple[str, str, str] | None:
    """(namespace, pod, container) dcgm-exporter named, or None.

    With ``exported`` (some series of the answer carry ``exported_pod``: the scrape did not honour
    the exporter's labels), only ``exported_*`` count: ``pod`` then names the exporter's own pod. A
    ``pod`` that is the exporter itself (``dcgm-exporter`` in its name) is no attribution either.
    """
    if exported or any(f"exported_{k}" in labels for k in _POD_LABELS):
        ns, pod, container = (labels.get(f"exported_{k}", "") for k in ("namespace", "pod", "container"))
    else:
        ns, pod, container = (labels.get(k, "") for k in ("namespace", "pod", "container"))
    if not pod or "dcgm-exporter" in pod:
        return None
    return ns, pod, container


def _exported(dcgm: list[_Series]) -> bool:
    return any("exported_pod" in s.labels for s in dcgm)


def load_prometheus(src: Source, model: Model, node: str, loading: LoadState) -> None:
    """Map the bundle's Prometheus answers onto ``model`` for ``node`` (see the module docstring)."""
    index = src.json(QUERIES)
    if not isinstance(index, dict):
        return
    target = as_dict(src.json(TARGET))
    step = target.get("step_s")
    step_s = float(step) if isinstance(step, int | float) and step > 0 else 60.0
    info = model.node(node)
    info.history_step_s = step_s if info.history_step_s is None else min(info.history_step_s, step_s)
    members: dict[str, str] = {}
    for q in index.get("queries") or []:
        if isinstance(q, dict) and q.get("status") in ("ok", "partial") and src.has(as_str(q.get("member"))):
            members[as_str(q.get("metric"))] = as_str(q.get("member"))
    skipped = [0]
    series = {metric: _read(src, member, skipped, metric in _LABELS_ONLY)
              for metric, member in members.items() if metric not in _UNUSED}
    if skipped[0]:
        model.limit(f"{src.name}: {skipped[0]} Prometheus points were NaN, infinite or unreadable and were skipped")
    pods = _load_pods(src, model, node, series)
    _load_gpus(src, model, node, series, step_s, pods)
    _load_containers(src, model, node, series, step_s, pods)
    _load_pressure(src, model, node, series, step_s)
    info.members_used.setdefault("prometheus", src.ref(QUERIES, 0, None).member)  # ring/... over the ring view


# -- kube-state-metrics --------------------------------------------------------------------------
def _load_pods(src: Source, model: Model, node: str, series: dict[str, list[_Series]]) -> dict[tuple[str, str], str]:
    """Pods from kube_pod_info; returns (namespace, name) -> UID for every pod of the node."""
    uids: dict[tuple[str, str], str] = {}
    first: dict[str, _Series] = {}
    for s in series.get("kube_pod_info", []):
        ns, name, uid = s.labels.get("namespace", ""), s.labels.get("pod", ""), s.labels.get("uid", "")
        if ns and name and uid and s.labels.get("node") in (node, None):
            uids[(ns, name)] = uid
            first.setdefault(uid, s)
    limits: dict[str, list[tuple[str, int]]] = defaultdict(list)
    limit_ev: dict[str, Evidence] = {}
    for s in series.get("kube_pod_container_resource_limits", []):
        if s.labels.get("resource") != "nvidia_com_gpu" or not s.points:
            continue
        uid = s.labels.get("uid") or uids.get((s.labels.get("namespace", ""), s.labels.get("pod", "")), "")
        if uid:
            limits[uid].append((s.labels.get("container", ""), int(max(p[1] for p in s.points))))
            limit_ev.setdefault(uid, s.label_evidence(src))
    cids: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for s in series.get("kube_pod_container_info", []):
        cid = s.labels.get("container_id", "").rsplit("://", 1)[-1]
        uid = s.labels.get("uid") or uids.get((s.labels.get("namespace", ""), s.labels.get("pod", "")), "")
        if uid and len(cid) == 64:
            cids[uid].append((s.labels.get("container", ""), cid))
    devices: dict[tuple[str, str], set[str]] = defaultdict(set)
    dcgm = series.get("DCGM_FI_DEV_GPU_UTIL", [])
    for s in dcgm:
        named = _pod_of(s.labels, _exported(dcgm))
        if named and s.labels.get("UUID"):
            devices[(named[0], named[1])].add(s.labels["UUID"])
    for (ns, name), uid in sorted(uids.items()):
        if uid in model.pods:
            continue
        ev = [first[uid].label_evidence(src)] + ([limit_ev[uid]] if uid in limit_ev else [])
        gpus = tuple(sorted(devices.get((ns, name), ())))
        model.pods[uid] = Pod(node=node, uid=uid, namespace=ns, name=name, phase="Unknown",
                              container_ids=tuple(sorted(cids.get(uid, []))),
                              gpu_limits=tuple(sorted(limits.get(uid, []))),
                              gpu_devices=(("", gpus),) if gpus else (), evidence=tuple(ev))
    for s in series.get("kube_pod_container_status_last_terminated_reason", []):
        if s.labels.get("reason") != "OOMKilled" or not s.points:
            continue
        uid = s.labels.get("uid") or uids.get((s.labels.get("namespace", ""), s.labels.get("pod", "")), "")
        t = s.points[0][0]
        oom_cid = next((c for n, c in cids.get(uid, []) if n == s.labels.get("container")), None)
        model.add(OomKill(node=node, t=t, pid=None, comm=None, container_id=oom_cid, pod_uid=uid or None,
                                  global_oom=False, usage_bytes=None, limit_bytes=None, task_memcg=None,
                                  source="prometheus", evidence=(s.label_evidence(src),),
                                  k8s_container_name=s.labels.get("container")))
    return uids


# -- dcgm-exporter -------------------------------------------------------------------------------
_GPU_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": "util",
    "DCGM_FI_DEV_FB_USED": "used",
    "DCGM_FI_DEV_FB_FREE": "free",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "reasons",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "reasons",
    "DCGM_FI_DEV_GPU_TEMP": "temp",
    "DCGM_FI_DEV_POWER_USAGE": "power",
}


def _nvml_spans(model: Model, node: str) -> dict[str, tuple[float, float]]:
    spans: dict[str, tuple[float, float]] = {}
    for s in model.series(GpuSample):
        if s.node == node and not s.ref.member.startswith(f"{PREFIX}/"):
            lo, hi = spans.get(s.gpu_uuid, (s.t, s.t))
            spans[s.gpu_uuid] = (min(lo, s.t), max(hi, s.t))
    return spans


def _load_gpus(src: Source, model: Model, node: str, series: dict[str, list[_Series]], step_s: float,
               pods: dict[tuple[str, str], str]) -> None:
    values: dict[tuple[str, float], dict[str, float]] = defaultdict(dict)
    refs: dict[tuple[str, float], EvidenceRef] = {}
    labels_of: dict[str, _Series] = {}
    for metric, field in _GPU_FIELDS.items():
        for s in series.get(metric, []):
            uuid = s.labels.get("UUID")
            if not uuid:
                continue
            if metric == "DCGM_FI_DEV_GPU_UTIL":
                labels_of.setdefault(uuid, s)
            for t, v, j in s.points:
                values[(uuid, t)][field] = v
                if metric == "DCGM_FI_DEV_GPU_UTIL" or (uuid, t) not in refs:
                    refs[(uuid, t)] = s.ref(src, j, [_num(t), _text(v)])
    for uuid, s in labels_of.items():
        if (node, uuid) in model.gpus:
            continue
        index = s.labels.get("gpu", "")
        first = next((values[(uuid, t)] for t, _, _ in s.points if "used" in values[(uuid, t)]
                      and "free" in values[(uuid, t)]), None)
        total = int((first["used"] + first["free"]) * _MIB) if first else None
        model.gpus[(node, uuid)] = Gpu(node=node, index=int(index) if index.isdigit() else -1, uuid=uuid,
                                       name=s.labels.get("modelName", ""), pci_bus_id=s.labels.get("pci_bus_id"),
                                       memory_total_bytes=total, evidence=s.label_evidence(src))
    spans = _nvml_spans(model, node)
    add_gpu_sample = model.series(GpuSample).append  # once: per GPU per point
    for (uuid, t), f in sorted(values.items()):
        span = spans.get(uuid)
        if span is not None and span[0] <= t <= span[1]:
            continue
        gpu = model.gpus.get((node, uuid))
        used = int(f["used"] * _MIB) if "used" in f else None
        total = int((f["used"] + f["free"]) * _MIB) if "used" in f and "free" in f else (
            gpu.memory_total_bytes if gpu else None)
        add_gpu_sample(GpuSample(
            node=node, gpu_uuid=uuid, t=t, util_gpu_pct=f.get("util"), memory_used_bytes=used,
            memory_total_bytes=total, clocks_event_reasons=int(f["reasons"]) if "reasons" in f else None,
            temperature_c=f.get("temp"), power_w=f.get("power"), ref=refs[(uuid, t)], origin=DCGM_EXPORTER))
    dcgm = series.get("DCGM_FI_DEV_GPU_UTIL", [])
    add_attribution = model.series(ExporterAttribution).append
    for s in dcgm:
        uuid = s.labels.get("UUID")
        if not uuid:
            continue
        named = _pod_of(s.labels, _exported(dcgm))
        uid = pods.get((named[0], named[1])) if named else None
        for t, v, j in s.points:
            add_attribution(ExporterAttribution(
                node=node, gpu_uuid=uuid, t=t, util_pct=v, namespace=named[0] if named else None,
                pod=named[1] if named else None, container=named[2] if named else None, pod_uid=uid,
                ref=s.ref(src, j, [_num(t), _text(v)]), step_s=step_s))
    for s in series.get("DCGM_FI_DEV_XID_ERRORS", []):
        uuid = s.labels.get("UUID")
        prev: float | None = None
        prev_t: float | None = None
        for t, v, j in s.points:
            gap = prev_t is not None and t - prev_t > _GAP_STEPS * step_s
            if v and prev is not None and v != prev and not gap:
                model.add(XidEvent(
                    node=node, t=t, code=int(v), pci_bus_id=s.labels.get("pci_bus_id"), gpu_uuid=uuid, pid=None,
                    proc_name=None,
                    text=f"DCGM_FI_DEV_XID_ERRORS of GPU {s.labels.get('gpu', '?')} went from "
                         f"{_text(prev) if prev is not None else 'nothing'} to {_text(v)} within the {step_s:g} s "
                         "step before this time",
                    evidence=s.ref(src, j, [_num(t), _text(v)]).evidence))
            prev, prev_t = v, t


# -- cAdvisor ------------------------------------------------------------------------------------
def _container_key(labels: dict[str, str]) -> tuple[str, str | None] | None:
    """(64-hex container id, pod UID) from cAdvisor's ``id`` (cgroup path); None for pod/system cgroups."""
    if not labels.get("container") or labels.get("container") == "POD":
        return None
    try:
        att = attribute_path(labels.get("id", ""))
    except ParseError:
        return None
    if att.container_id is None:
        name = labels.get("name", "")
        return (name, att.pod_uid) if len(name) == 64 else None
    return att.container_id, att.pod_uid


def _load_containers(src: Source, model: Model, node: str, series: dict[str, list[_Series]], step_s: float,
                     pods: dict[tuple[str, str], str]) -> None:
    by_uid = {uid: model.pods.get(uid) for uid in pods.values()}
    seen: dict[str, tuple[dict[str, str], str | None, _Series]] = {}
    for metric in ("container_cpu_cfs_periods_total", "container_cpu_cfs_throttled_periods_total",
                   "container_memory_working_set_bytes", "container_spec_memory_limit_bytes",
                   "container_oom_events_total"):
        for s in series.get(metric, []):
            key = _container_key(s.labels)
            if key is not None:
                uid = key[1] or pods.get((s.labels.get("namespace", ""), s.labels.get("pod", "")))
                seen.setdefault(key[0], (s.labels, uid, s))
    for uid, pod in by_uid.items():
        for name, cid in pod.container_ids if pod else ():
            if cid not in seen and pod is not None:
                seen[cid] = ({"container": name, "pod": pod.name, "namespace": pod.namespace}, uid, None)  # type: ignore[assignment]
    limits: dict[str, float] = {}
    for s in series.get("container_spec_memory_limit_bytes", []):
        key = _container_key(s.labels)
        if key and s.points and s.points[-1][1] > 0:
            limits[key[0]] = s.points[-1][1]  # labels-only read: the largest limit seen
    for cid, (labels, uid, s) in sorted(seen.items()):
        if (node, cid) in model.containers:
            continue
        pod = by_uid.get(uid) if uid else None
        model.containers[(node, cid)] = Container(
            node=node, id=cid, name=labels.get("container", ""), image=labels.get("image", ""), pod_uid=uid,
            state="unknown", exit_code=None, oom_killed=False, started_at=None, finished_at=None,
            allocation=_allocation(pod, labels.get("container", "")), cpu_quota_cores=None,
            memory_limit_bytes=int(limits[cid]) if cid in limits else None,
            evidence=(s.label_evidence(src),) if s is not None else (pod.evidence if pod else ()),
            k8s_container_name=labels.get("container"))
    periods: dict[str, dict[float, tuple[float, EvidenceRef]]] = defaultdict(dict)
    throttled: dict[str, dict[float, float]] = defaultdict(dict)
    for s in series.get("container_cpu_cfs_periods_total", []):
        key = _container_key(s.labels)
        if key:
            for t, v, j in s.points:
                periods[key[0]][t] = (v, s.ref(src, j, [_num(t), _text(v)]))
    for s in series.get("container_cpu_cfs_throttled_periods_total", []):
        key = _container_key(s.labels)
        if key:
            for t, v, _ in s.points:
                throttled[key[0]][t] = v
    add_cpu, add_memory = model.series(CpuSample).append, model.series(MemorySample).append  # per point
    for cid, by_t in periods.items():
        th = throttled.get(cid, {})
        for t, (v, ref) in sorted(by_t.items()):
            if t in th:
                add_cpu(CpuSample(node, cid, t, int(v), int(th[t]), None, ref))
    for s in series.get("container_memory_working_set_bytes", []):
        key = _container_key(s.labels)
        if key:
            for t, v, _ in s.points:
                add_memory(MemorySample(node, key[0], t, int(v), int(limits[key[0]]) if key[0] in limits else None))
    for s in series.get("container_oom_events_total", []):
        key = _container_key(s.labels)
        if not key:
            continue
        prev_t: float | None = None
        prev = None
        for t, v, j in s.points:
            if prev is not None and prev_t is not None and v > prev and t - prev_t <= _GAP_STEPS * step_s:
                pod = by_uid.get(key[1] or "") if key[1] else None
                model.add(OomKill(
                    node=node, t=t, pid=None, comm=None, container_id=key[0],
                    pod_uid=key[1] or (pod.uid if pod else None), global_oom=False,
                    usage_bytes=None, limit_bytes=int(limits[key[0]]) if key[0] in limits else None, task_memcg=s.labels.get("id"),
                    source="prometheus", evidence=(s.ref(src, j, [_num(t), _text(v)]).evidence, s.label_evidence(src)),
                    k8s_container_name=s.labels.get("container")))
            prev, prev_t = v, t


def _allocation(pod: Pod | None, container: str) -> GpuAllocation:
    if pod is None:
        return GpuAllocation("unknown", False, (), "", "allocation not in the bundle", devices_known=False)
    limit = sum(n for c, n in pod.gpu_limits if c in (container, ""))
    gpus = tuple(g for _, ids in pod.gpu_devices for g in ids)
    if limit:
        return GpuAllocation("kubernetes", True, gpus, query_member("kube_pod_container_resource_limits"),
                             f"nvidia.com/gpu limit {limit} (kube-state-metrics); devices as dcgm-exporter named them",
                             evidence=pod.evidence, devices_known=bool(gpus))
    return GpuAllocation("none", False, (), query_member("kube_pod_info"),
                         "no nvidia.com/gpu limit (kube-state-metrics)", evidence=pod.evidence)


# -- node-exporter -------------------------------------------------------------------------------
_PRESSURE = (("cpu", "node_pressure_cpu_waiting_seconds_total", None),
             ("memory", "node_pressure_memory_waiting_seconds_total", "node_pressure_memory_stalled_seconds_total"),
             ("io", "node_pressure_io_waiting_seconds_total", "node_pressure_io_stalled_seconds_total"))


def _load_pressure(src: Source, model: Model, node: str, series: dict[str, list[_Series]], step_s: float) -> None:
    add_psi = model.series(PsiSample).append  # per point
    for resource, some_metric, full_metric in _PRESSURE:
        some = series.get(some_metric, [])
        if not some:
            continue
        s = some[0]
        full = {t: v for t, v, _ in (series.get(full_metric, [])[0].points if full_metric and series.get(full_metric) else [])}
        for (t0, v0, _), (t1, v1, j1) in zip(s.points, s.points[1:], strict=False):
            dt = t1 - t0
            if dt <= 0 or dt > _GAP_STEPS * step_s or v1 < v0:
                continue
            some_pct = min(100.0, (v1 - v0) / dt * 100.0)
            full_pct = None
            if t0 in full and t1 in full and full[t1] >= full[t0]:
                full_pct = min(100.0, (full[t1] - full[t0]) / dt * 100.0)
            add_psi(PsiSample(node, "host", resource, t1, round(some_pct, 3),
                                               None if full_pct is None else round(full_pct, 3),
                                               s.ref(src, j1, [_num(t1), _text(v1)]), from_counters=True))


def _num(t: float) -> float | int:
    return int(t) if t == int(t) else t


def _text(v: float) -> str:
    return str(int(v)) if v == int(v) and abs(v) < 1e15 else repr(v)


# Last: what the live collectors saw wins (their GPUs, pods, containers and NVML's sampled spans): after
# every source of the roles it stands in for.
LOADER = Loader("prometheus", load_prometheus, needs=(GPU_DEVICES, PROCESS_TABLE, CONTAINER_RUNTIME, ORCHESTRATOR,
                                                     CGROUP_COUNTERS, KERNEL_LOG))
