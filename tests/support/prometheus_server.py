"""A real Prometheus for tests and benchmarks, loaded with exporter history written as OpenMetrics.

Debian's ``prometheus`` package provides ``/usr/bin/prometheus`` and ``/usr/bin/promtool``; when
they are missing and we are root, :func:`ensure_prometheus` installs the package with
``apt-get install --no-install-recommends prometheus`` (without ``--no-install-recommends`` it pulls
in node-exporter; the packaged services do not start in a container, and nothing here uses them).

How history gets in (the only way to have "the hour that matters" on demand):

1. the scenario generators below write series with the exporters' real metric names and label sets
   (dcgm-exporter's default counters, cAdvisor as the kubelet serves it, node-exporter's pressure
   collector, kube-state-metrics' pod metrics) as an OpenMetrics text file ending in ``# EOF``,
   with sample timestamps relative to now;
2. ``promtool tsdb create-blocks-from openmetrics FILE DATA`` turns it into TSDB blocks (cut at 2 h
   boundaries; out-of-order samples are dropped silently, so every series is written in time
   order);
3. ``prometheus --storage.tsdb.path=DATA --web.listen-address=127.0.0.1:PORT`` starts on loopback
   with a config that scrapes nothing; it reads the blocks at start (blocks added later would
   appear only at the next reload), and ``/-/ready`` answers in about 0.1 s.

:func:`start_prometheus` returns a :class:`PrometheusServer`; :func:`stop_prometheus` stops it by
its PID and removes its directory. ``prometheus_factory`` is a pytest fixture that starts one
server per call and stops them all at the end of the test. When no Prometheus can be had the
fixture skips, except under ``CI=true``, where it fails.

Label conventions the generators follow (and that the collector's node matching is tested on):

- dcgm-exporter (``job="nvidia-dcgm-exporter"``, ``instance`` = the exporter pod's ``IP:9400``):
  ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname`` (the node, from the
  exporter's ``NODE_NAME``), ``DCGM_FI_DRIVER_VERSION``, and ``container``/``namespace``/``pod`` of
  the pod the kubelet's pod-resources API says holds the GPU (empty when none does). With
  ``exported=True`` the scrape is modelled without ``honor_labels``: those three become
  ``exported_container``/``exported_namespace``/``exported_pod`` and ``pod``/``namespace`` name the
  exporter's own pod, as prometheus-operator's default ServiceMonitor leaves them.
- cAdvisor through the kubelet (``job="kubelet"``, ``metrics_path="/metrics/cadvisor"``, ``node``
  and ``instance`` = the node name): ``id`` (the cgroup path), ``name`` (the runtime's container
  id), ``image``, ``container``, ``pod``, ``namespace``; a pod-level series with ``container=""``.
- node-exporter (``job="node-exporter"``, ``instance`` = the node name, as kube-prometheus relabels it).
- kube-state-metrics (``job="kube-state-metrics"``, ``instance`` = its own pod): ``namespace``,
  ``pod``, ``uid``, ``container``; ``node`` only on ``kube_pod_info`` and the resource metrics.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.private_daemon import die_with_us

__all__ = [
    "Family",
    "NodeScenario",
    "PrometheusServer",
    "PrometheusUnavailable",
    "Series",
    "ensure_prometheus",
    "misbehaving_prometheus",
    "prometheus_factory",
    "scenario_bench",
    "scenario_nan_and_stale",
    "scenario_oom_killed_pod",
    "scenario_throttled_pod",
    "scenario_unlabelled_gpu_pod",
    "scenario_xid_step",
    "start_prometheus",
    "stop_prometheus",
    "write_openmetrics",
]

PROMETHEUS = os.environ.get("GPUFORENSICS_PROMETHEUS", "/usr/bin/prometheus")
PROMTOOL = os.environ.get("GPUFORENSICS_PROMTOOL", "/usr/bin/promtool")
_START_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 15.0
SCRAPE_S = 15.0


class PrometheusUnavailable(RuntimeError):
    """No Prometheus could be installed or started; the message says why."""


# -----------------------------------------------------------------------------------------
# OpenMetrics


@dataclass
class Series:
    """One series: the sample name (``..._total`` for counters), its labels and (unix s, value) points."""

    name: str
    labels: dict[str, str]
    points: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class Family:
    """A metric family: ``# TYPE name type`` then its series (a counter's samples end in ``_total``)."""

    name: str
    type: str  # "gauge" or "counter"
    help: str
    series: list[Series] = field(default_factory=list)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v)) if v != int(v) or abs(v) >= 1e15 else str(int(v))


def write_openmetrics(path: Path, families: Iterable[Family]) -> Path:
    """Write ``families`` as OpenMetrics text (each series in time order), ending with ``# EOF``."""
    with open(path, "w", encoding="utf-8") as f:
        for fam in families:
            f.write(f"# HELP {fam.name} {fam.help}\n# TYPE {fam.name} {fam.type}\n")
            for s in fam.series:
                labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(s.labels.items()))
                head = f"{s.name}{{{labels}}}" if labels else s.name
                for t, v in sorted(s.points, key=lambda p: p[0]):
                    f.write(f"{head} {_number(v)} {t:.3f}\n")
        f.write("# EOF\n")
    return path


# -----------------------------------------------------------------------------------------
# the node and what ran on it


@dataclass
class GpuSpec:
    index: int
    uuid: str
    pci_bus_id: str


@dataclass
class PodSpec:
    namespace: str
    name: str
    uid: str
    container: str
    container_id: str  # 64 hex
    image: str
    gpu_limit: int = 0
    memory_limit_bytes: int = 8 << 30


@dataclass
class NodeScenario:
    """What a scenario put in Prometheus, so tests can check the collector and loader against it."""

    node: str
    start: float
    end: float
    gpus: list[GpuSpec]
    pods: list[PodSpec]
    families: list[Family]
    expect: dict[str, object] = field(default_factory=dict)

    def times(self, step: float = SCRAPE_S) -> list[float]:
        n = int((self.end - self.start) // step)
        return [self.start + i * step for i in range(n + 1)]


def _hex(seed: str, n: int = 64) -> str:
    import hashlib

    return hashlib.sha256(seed.encode()).hexdigest()[:n]


def _gpu(node: str, i: int) -> GpuSpec:
    h = _hex(f"{node}-gpu{i}", 32)
    return GpuSpec(i, f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}", f"00000000:{0x18 + i * 0x10:02X}:00.0")


def _pod(ns: str, name: str, container: str, gpu_limit: int = 0, image: str = "") -> PodSpec:
    uid = _hex(f"uid-{ns}/{name}", 32)
    uid = f"{uid[:8]}-{uid[8:12]}-{uid[12:16]}-{uid[16:20]}-{uid[20:]}"
    return PodSpec(ns, name, uid, container, _hex(f"cid-{ns}/{name}/{container}"),
                   image or f"registry.example/{container}:1", gpu_limit)


class _Builder:
    """Accumulates families in exporter order; values come from ``fn(t)`` per scrape."""

    def __init__(self, node: str, start: float, end: float, step: float = SCRAPE_S) -> None:
        self.node, self.start, self.end, self.step = node, start, end, step
        self.families: dict[str, Family] = {}
        n = int((end - start) // step)
        self.ts = [start + i * step for i in range(n + 1)]

    def add(self, family: str, mtype: str, help_: str, labels: dict[str, str],
            fn: Callable[[float], float | None], sample: str | None = None) -> None:
        fam = self.families.setdefault(family, Family(family, mtype, help_))
        name = sample or (f"{family}_total" if mtype == "counter" else family)
        pts = [(t, v) for t in self.ts if (v := fn(t)) is not None]
        fam.series.append(Series(name, dict(labels), pts))

    def counter(self, family: str, help_: str, labels: dict[str, str],
                rate: Callable[[float], float]) -> None:
        """A cumulative counter whose increase per second at t is ``rate(t)``."""
        total = 0.0
        values: dict[float, float] = {}
        for t in self.ts:
            values[t] = total
            total += rate(t) * self.step
        self.add(family, "counter", help_, labels, lambda t: values[t])


# dcgm-exporter default-counters.csv names used here (fields the issue asks for)
DCGM_FAMILIES = {
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
    "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
    "DCGM_FI_PROF_SM_ACTIVE": "The ratio of cycles an SM has at least 1 warp assigned (in %).",
    "DCGM_FI_DEV_XID_ERRORS": "Value of the last XID error encountered.",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "Throttling reasons bitmask.",
    "DCGM_FI_DEV_GPU_TEMP": "GPU temperature (in C).",
    "DCGM_FI_DEV_POWER_USAGE": "Power draw (in W).",
}
FB_TOTAL_MIB = 81559


def _dcgm_labels(node: str, gpu: GpuSpec, holder: PodSpec | None, exported: bool) -> dict[str, str]:
    labels = {"gpu": str(gpu.index), "UUID": gpu.uuid, "pci_bus_id": gpu.pci_bus_id,
              "device": f"nvidia{gpu.index}", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": node,
              "DCGM_FI_DRIVER_VERSION": "550.54.15", "job": "nvidia-dcgm-exporter",
              "instance": f"10.42.7.{11 + sum(map(ord, node)) % 200}:9400"}
    pod_labels = {"container": holder.container if holder else "",
                  "namespace": holder.namespace if holder else "",
                  "pod": holder.name if holder else ""}
    if exported:
        labels.update({f"exported_{k}": v for k, v in pod_labels.items()})
        labels.update({"namespace": "gpu-operator", "pod": f"nvidia-dcgm-exporter-{_hex(node, 5)}",
                       "container": "nvidia-dcgm-exporter"})
    else:
        labels.update(pod_labels)
    return {k: v for k, v in labels.items() if v != "" or k in ("container", "namespace", "pod")}


def _add_gpu(b: _Builder, gpu: GpuSpec, holder: PodSpec | None, util: Callable[[float], float],
             mem_mib: Callable[[float], float], xid: Callable[[float], float] = lambda t: 0.0,
             throttle: Callable[[float], float] = lambda t: 0.0, exported: bool = False) -> None:
    labels = _dcgm_labels(b.node, gpu, holder, exported)
    h = DCGM_FAMILIES
    b.add("DCGM_FI_DEV_GPU_UTIL", "gauge", h["DCGM_FI_DEV_GPU_UTIL"], labels, lambda t: round(util(t)))
    b.add("DCGM_FI_DEV_FB_USED", "gauge", h["DCGM_FI_DEV_FB_USED"], labels, lambda t: round(mem_mib(t)))
    b.add("DCGM_FI_DEV_FB_FREE", "gauge", h["DCGM_FI_DEV_FB_FREE"], labels,
          lambda t: FB_TOTAL_MIB - round(mem_mib(t)))
    b.add("DCGM_FI_PROF_SM_ACTIVE", "gauge", h["DCGM_FI_PROF_SM_ACTIVE"], labels,
          lambda t: round(util(t) / 100.0 * 0.93, 6))
    b.add("DCGM_FI_DEV_XID_ERRORS", "gauge", h["DCGM_FI_DEV_XID_ERRORS"], labels, xid)
    b.add("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", h["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"], labels,
          throttle)
    b.add("DCGM_FI_DEV_GPU_TEMP", "gauge", h["DCGM_FI_DEV_GPU_TEMP"], labels, lambda t: 34 + util(t) * 0.35)
    b.add("DCGM_FI_DEV_POWER_USAGE", "gauge", h["DCGM_FI_DEV_POWER_USAGE"], labels,
          lambda t: round(71.5 + util(t) * 5.9, 3))


def _cgroup_path(pod: PodSpec, container: bool = True) -> str:
    qos = "kubepods-burstable"
    base = f"/kubepods.slice/{qos}.slice/{qos}-pod{pod.uid.replace('-', '_')}.slice"
    return f"{base}/cri-containerd-{pod.container_id}.scope" if container else base


def _add_container(b: _Builder, pod: PodSpec, throttled_ratio: Callable[[float], float] = lambda t: 0.0,
                   working_set: Callable[[float], float] | None = None,
                   oom_at: float | None = None, cpus: float = 4.0) -> None:
    kubelet = {"job": "kubelet", "metrics_path": "/metrics/cadvisor", "node": b.node, "instance": b.node,
               "endpoint": "https-metrics", "service": "kube-prometheus-stack-kubelet"}
    labels = {**kubelet, "id": _cgroup_path(pod), "name": pod.container_id, "image": pod.image,
              "container": pod.container, "pod": pod.name, "namespace": pod.namespace}
    pod_level = {**kubelet, "id": _cgroup_path(pod, container=False), "pod": pod.name,
                 "namespace": pod.namespace, "container": ""}
    periods_per_s = 10.0  # 100 ms CFS period
    b.counter("container_cpu_cfs_periods", "Number of elapsed enforcement period intervals.", labels,
              lambda t: periods_per_s)
    b.counter("container_cpu_cfs_throttled_periods", "Number of throttled period intervals.", labels,
              lambda t: periods_per_s * throttled_ratio(t))
    b.counter("container_cpu_cfs_periods", "Number of elapsed enforcement period intervals.", pod_level,
              lambda t: periods_per_s)
    ws = working_set or (lambda t: 2.5 * (1 << 30))
    b.add("container_memory_working_set_bytes", "gauge", "Current working set in bytes.", labels,
          lambda t: float(int(ws(t))))
    b.add("container_spec_memory_limit_bytes", "gauge", "Memory limit for the container.", labels,
          lambda t: float(pod.memory_limit_bytes))
    b.add("container_oom_events", "counter", "Count of out of memory events observed for the container",
          labels, lambda t: 1.0 if oom_at is not None and t >= oom_at else 0.0,
          sample="container_oom_events_total")


def _add_node_pressure(b: _Builder, cpu_stall: Callable[[float], float] = lambda t: 0.002) -> None:
    labels = {"job": "node-exporter", "instance": b.node, "namespace": "monitoring",
              "pod": f"node-exporter-{_hex(b.node, 5)}", "container": "node-exporter"}
    b.counter("node_pressure_cpu_waiting_seconds", "Total time in seconds that processes have waited for CPU time",
              labels, cpu_stall)
    for res in ("memory", "io"):
        b.counter(f"node_pressure_{res}_waiting_seconds",
                  f"Total time in seconds that processes have waited for {res}", labels, lambda t: 0.001)
        b.counter(f"node_pressure_{res}_stalled_seconds",
                  f"Total time in seconds no process could make progress due to {res} congestion",
                  labels, lambda t: 0.0005)


def _add_ksm(b: _Builder, pods: Sequence[PodSpec], restarts: dict[str, Callable[[float], float]] | None = None,
             terminated: dict[str, tuple[float, str]] | None = None) -> None:
    ksm = {"job": "kube-state-metrics", "instance": "10.42.3.4:8080"}
    for pod in pods:
        base = {**ksm, "namespace": pod.namespace, "pod": pod.name, "uid": pod.uid}
        b.add("kube_pod_info", "gauge", "Information about pod.",
              {**base, "node": b.node, "host_ip": "10.0.7.21", "pod_ip": f"10.42.7.{sum(map(ord, pod.name)) % 250}",
               "created_by_kind": "StatefulSet", "created_by_name": pod.name.rsplit("-", 1)[0],
               "priority_class": "", "host_network": "false"}, lambda t: 1.0)
        cbase = {**base, "container": pod.container}
        b.add("kube_pod_container_info", "gauge", "Information about a container in a pod.",
              {**cbase, "image": pod.image, "image_spec": pod.image, "image_id": f"{pod.image}@sha256:{_hex(pod.image)}",
               "container_id": f"containerd://{pod.container_id}"}, lambda t: 1.0)
        if pod.gpu_limit:
            b.add("kube_pod_container_resource_limits", "gauge", "The number of requested limit resource by a container.",
                  {**cbase, "node": b.node, "resource": "nvidia_com_gpu", "unit": "integer"},
                  lambda t, n=pod.gpu_limit: float(n))
        b.add("kube_pod_container_resource_limits", "gauge", "The number of requested limit resource by a container.",
              {**cbase, "node": b.node, "resource": "memory", "unit": "byte"},
              lambda t, n=pod.memory_limit_bytes: float(n))
        rs = (restarts or {}).get(pod.name, lambda t: 0.0)
        b.add("kube_pod_container_status_restarts", "counter",
              "The number of container restarts per container.", cbase, rs,
              sample="kube_pod_container_status_restarts_total")
        if terminated and pod.name in terminated:
            at, reason = terminated[pod.name]
            b.add("kube_pod_container_status_last_terminated_reason", "gauge",
                  "Describes the last reason the container was in terminated state.",
                  {**cbase, "reason": reason}, lambda t, at=at: 1.0 if t >= at else None)


def _window(minutes: float, now: float | None) -> tuple[float, float]:
    end = math.floor((now if now is not None else time.time()) / SCRAPE_S) * SCRAPE_S - 60.0
    return end - minutes * 60.0, end


def _other_node(b: _Builder, pods: Sequence[PodSpec]) -> None:
    """A second node, gpu-08, whose series must never land in gpu-07's bundle."""
    other = _Builder("gpu-08", b.start, b.end)
    other.ts = b.ts
    busy = _pod("ml", "other-node-job-0", "job", gpu_limit=1)
    _add_gpu(other, _gpu("gpu-08", 0), busy, lambda t: 99.0, lambda t: 70000.0)
    _add_container(other, busy)
    _add_node_pressure(other, cpu_stall=lambda t: 0.9)
    _add_ksm(other, [busy])
    for name, fam in other.families.items():
        b.families.setdefault(name, Family(name, fam.type, fam.help)).series.extend(fam.series)


def _scenario(b: _Builder, gpus: list[GpuSpec], pods: list[PodSpec], expect: dict[str, object],
              distractor: bool = True) -> NodeScenario:
    if distractor:
        _other_node(b, pods)
    return NodeScenario(b.node, b.start, b.end, gpus, pods, list(b.families.values()), expect)


def scenario_unlabelled_gpu_pod(now: float | None = None, exported: bool = False,
                                minutes: float = 60.0) -> NodeScenario:
    """dcgm-exporter's blind spot: ``notebook`` (no ``nvidia.com/gpu`` limit) drives GPU 1 to 97%
    from 20 minutes into the window, and dcgm names no pod for GPU 1 (pod-resources never gave it
    out); ``trainer`` holds GPU 0 with a limit of 1 and dcgm names it."""
    start, end = _window(minutes, now)
    b = _Builder("gpu-07", start, end)
    gpus = [_gpu("gpu-07", 0), _gpu("gpu-07", 1)]
    trainer = _pod("ml", "trainer-0", "trainer", gpu_limit=1, image="nvcr.io/nvidia/pytorch:24.01-py3")
    notebook = _pod("research", "notebook-0", "notebook", image="jupyter/cuda-notebook:latest")
    onset = start + 20 * 60
    _add_gpu(b, gpus[0], trainer, lambda t: 95.0, lambda t: 61000.0, exported=exported)
    _add_gpu(b, gpus[1], None, lambda t: 97.0 if t >= onset else 0.0,
             lambda t: 52000.0 if t >= onset else 0.0, exported=exported)
    _add_container(b, trainer)
    _add_container(b, notebook)
    _add_node_pressure(b)
    _add_ksm(b, [trainer, notebook])
    return _scenario(b, gpus, [trainer, notebook],
                     {"blind_gpu": gpus[1].uuid, "onset": onset, "unlimited_pod": "research/notebook-0"})


def scenario_throttled_pod(now: float | None = None, minutes: float = 60.0) -> NodeScenario:
    """``loader-0`` is CPU-throttled in 80% of its CFS periods from 30 minutes into the window
    (it was at 1% before); ``trainer-0`` beside it is never throttled."""
    start, end = _window(minutes, now)
    b = _Builder("gpu-07", start, end)
    gpus = [_gpu("gpu-07", 0)]
    trainer = _pod("ml", "trainer-0", "trainer", gpu_limit=1)
    loader = _pod("ml", "loader-0", "loader")
    onset = start + 30 * 60
    _add_gpu(b, gpus[0], trainer, lambda t: 90.0 if t < onset else 35.0, lambda t: 40000.0)
    _add_container(b, trainer)
    _add_container(b, loader, throttled_ratio=lambda t: 0.8 if t >= onset else 0.01)
    _add_node_pressure(b, cpu_stall=lambda t: 0.35 if t >= onset else 0.002)
    _add_ksm(b, [trainer, loader])
    return _scenario(b, gpus, [trainer, loader], {"throttled_pod": "ml/loader-0", "onset": onset,
                                                  "ratio": 0.8})


def scenario_oom_killed_pod(now: float | None = None, minutes: float = 60.0) -> NodeScenario:
    """``etl-0``'s working set climbs to its 4 GiB limit and it is OOM-killed 40 minutes into the
    window: cAdvisor's ``container_oom_events_total`` steps 0 -> 1, kube-state-metrics' last
    terminated reason becomes ``OOMKilled`` and its restart count goes 0 -> 1."""
    start, end = _window(minutes, now)
    b = _Builder("gpu-07", start, end)
    gpus = [_gpu("gpu-07", 0)]
    trainer = _pod("ml", "trainer-0", "trainer", gpu_limit=1)
    etl = _pod("data", "etl-0", "etl")
    etl.memory_limit_bytes = 4 << 30
    kill = start + 40 * 60
    def ws(t: float) -> float:
        if t >= kill:
            return 0.4 * (1 << 30)
        return min(4 << 30, (1 << 30) + (t - start) / (kill - start) * (3 << 30))
    _add_gpu(b, gpus[0], trainer, lambda t: 80.0, lambda t: 30000.0)
    _add_container(b, trainer)
    _add_container(b, etl, working_set=ws, oom_at=kill)
    _add_node_pressure(b)
    _add_ksm(b, [trainer, etl], restarts={"etl-0": lambda t: 1.0 if t >= kill else 0.0},
             terminated={"etl-0": (kill, "OOMKilled")})
    return _scenario(b, gpus, [trainer, etl], {"oom_pod": "data/etl-0", "kill": kill})


def scenario_xid_step(now: float | None = None, minutes: float = 60.0, xid: int = 79) -> NodeScenario:
    """GPU 0's ``DCGM_FI_DEV_XID_ERRORS`` (the last Xid seen) goes 0 -> 79 25 minutes into the
    window, and its utilization drops to 0 (the GPU fell off the bus); GPU 1 stays healthy."""
    start, end = _window(minutes, now)
    b = _Builder("gpu-07", start, end)
    gpus = [_gpu("gpu-07", 0), _gpu("gpu-07", 1)]
    trainer = _pod("ml", "trainer-0", "trainer", gpu_limit=2)
    at = start + 25 * 60
    _add_gpu(b, gpus[0], trainer, lambda t: 0.0 if t >= at else 92.0, lambda t: 0.0 if t >= at else 50000.0,
             xid=lambda t: float(xid) if t >= at else 0.0)
    _add_gpu(b, gpus[1], trainer, lambda t: 92.0, lambda t: 50000.0)
    _add_container(b, trainer)
    _add_node_pressure(b)
    _add_ksm(b, [trainer])
    return _scenario(b, gpus, [trainer], {"xid_gpu": gpus[0].uuid, "xid": xid, "at": at})


def scenario_nan_and_stale(now: float | None = None, minutes: float = 60.0) -> NodeScenario:
    """GPU 0's utilization has NaN samples (dcgm-exporter reports a field it could not read so) and a
    20-minute gap (the exporter pod was gone: Prometheus returns nothing there once the 5-minute
    look-back runs out, which is what a stale marker looks like through the query API)."""
    start, end = _window(minutes, now)
    b = _Builder("gpu-07", start, end)
    gpus = [_gpu("gpu-07", 0)]
    trainer = _pod("ml", "trainer-0", "trainer", gpu_limit=1)
    gap = (start + 20 * 60, start + 40 * 60)
    nan_from = start + 10 * 60

    def util(t: float) -> float:
        return math.nan if nan_from <= t < nan_from + 120 else 70.0

    labels = _dcgm_labels(b.node, gpus[0], trainer, False)
    b.add("DCGM_FI_DEV_GPU_UTIL", "gauge", DCGM_FAMILIES["DCGM_FI_DEV_GPU_UTIL"], labels,
          lambda t: None if gap[0] <= t < gap[1] else util(t))
    b.add("DCGM_FI_DEV_FB_USED", "gauge", DCGM_FAMILIES["DCGM_FI_DEV_FB_USED"], labels,
          lambda t: None if gap[0] <= t < gap[1] else 30000.0)
    _add_container(b, trainer)
    _add_ksm(b, [trainer])
    return _scenario(b, gpus, [trainer], {"gap": gap, "nan_from": nan_from, "nan_samples": 8},
                     distractor=False)


def scenario_bench(now: float | None = None, gpus: int = 8, containers: int = 64,
                   minutes: float = 120.0) -> NodeScenario:
    """The benchmark's node: ``gpus`` GPUs each held by one pod, ``containers`` pods in all."""
    start, end = _window(minutes, now)
    b = _Builder("gpu-07", start, end)
    gs = [_gpu("gpu-07", i) for i in range(gpus)]
    pods = [_pod("ml", f"worker-{i}", "worker", gpu_limit=1 if i < gpus else 0) for i in range(containers)]
    for i, g in enumerate(gs):
        _add_gpu(b, g, pods[i], lambda t, i=i: 50 + 40 * math.sin(t / 600 + i), lambda t: 40000.0)
    for i, p in enumerate(pods):
        _add_container(b, p, throttled_ratio=lambda t, i=i: 0.02 * (i % 5))
    _add_node_pressure(b)
    _add_ksm(b, pods)
    return _scenario(b, gs, pods, {}, distractor=False)


# -----------------------------------------------------------------------------------------
# the server


@dataclass
class PrometheusServer:
    """A running Prometheus on loopback: ``url``, its PID and the directory holding its data."""

    url: str
    pid: int
    tmpdir: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    scenario: NodeScenario | None = None

    def query(self, path: str) -> bytes:
        with urllib.request.urlopen(self.url + path, timeout=10) as resp:  # noqa: S310 - loopback
            data: bytes = resp.read()
            return data


def ensure_prometheus() -> None:
    """Install Debian's ``prometheus`` (no recommends) when prometheus/promtool are missing and we may."""
    if os.path.exists(PROMETHEUS) and os.path.exists(PROMTOOL):
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise PrometheusUnavailable(f"{PROMETHEUS} not found (Debian: apt-get install --no-install-recommends prometheus)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for args in (["apt-get", "update", "-qq"],
                 ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "prometheus"]):
        proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode != 0 and args[1] == "install":
            raise PrometheusUnavailable(f"apt-get install prometheus failed: {proc.stderr.strip()[-400:]}")
    if not (os.path.exists(PROMETHEUS) and os.path.exists(PROMTOOL)):
        raise PrometheusUnavailable("the prometheus package did not provide prometheus and promtool")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def backfill(openmetrics: Path, data_dir: Path) -> None:
    """``promtool tsdb create-blocks-from openmetrics FILE DIR``; raises with promtool's own words."""
    proc = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(data_dir)],
                          capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        raise PrometheusUnavailable(f"promtool backfill failed: {(proc.stderr or proc.stdout).strip()[-600:]}")


def start_prometheus(scenario: NodeScenario | None = None, families: Sequence[Family] = (),
                     tmp_parent: str | None = None, timeout_s: float = _START_TIMEOUT_S,
                     scrape: Sequence[str] = (), scrape_interval_s: float = 1.0) -> PrometheusServer:
    """Backfill the scenario's (or the given) families, start Prometheus on loopback, wait for /-/ready.
    ``scrape``: ``HOST:PORT`` targets it scrapes (job ``gpuforensics``, every ``scrape_interval_s``)."""
    ensure_prometheus()
    tmp = Path(tempfile.mkdtemp(prefix="gfprom-", dir=tmp_parent))
    try:
        data = tmp / "data"
        data.mkdir()
        fams = list(scenario.families if scenario else families)
        if fams:
            backfill(write_openmetrics(tmp / "history.om.txt", fams), data)
        if scrape:
            targets = ", ".join(f'"{t}"' for t in scrape)
            jobs = (f"\n  - job_name: gpuforensics\n    scrape_interval: {scrape_interval_s:g}s\n"
                    f"    scrape_timeout: {scrape_interval_s:g}s\n    honor_labels: true\n"
                    f"    static_configs:\n      - targets: [{targets}]\n")
        else:
            jobs = " []\n"
        (tmp / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\nscrape_configs:" + jobs)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    errors: list[str] = []
    for _attempt in range(3):
        port = _free_port()
        log = open(tmp / "prometheus.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(
                [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
                 f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=30d",
                 "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=die_with_us())
        finally:
            log.close()
        server = PrometheusServer(f"http://127.0.0.1:{port}", proc.pid, tmp, proc, scenario)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                with contextlib.suppress(OSError):
                    with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as resp:  # noqa: S310
                        if resp.status == 200:
                            return server
                time.sleep(0.05)
        except BaseException:  # interrupted (pytest SIGTERMed): nothing is left behind
            stop_prometheus(server)
            raise
        errors.append(f"port {port}: {'exited ' + str(proc.returncode) if proc.poll() is not None else 'not ready'}; "
                      f"log: {(tmp / 'prometheus.log').read_text(errors='replace')[-400:]}")
        _terminate(proc)
    shutil.rmtree(tmp, ignore_errors=True)
    raise PrometheusUnavailable("prometheus did not start: " + " | ".join(errors))


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the one PID we started, wait, then SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def stop_prometheus(server: PrometheusServer) -> None:
    """Stop the server by its PID and remove its directory."""
    if server.proc is not None:
        _terminate(server.proc)
    shutil.rmtree(server.tmpdir, ignore_errors=True)


# -----------------------------------------------------------------------------------------
# a Prometheus that misbehaves (what a real one cannot be made to do on demand)


@contextlib.contextmanager
def misbehaving_prometheus(mode: str, huge_bytes: int = 50 * 1000 * 1000) -> Iterator[str]:
    """A loopback HTTP server answering every request badly; yields its URL.

    ``mode``: ``hang`` (accepts, never answers, until the test ends), ``401`` / ``403`` (Prometheus'
    JSON error envelope with that status), ``redirect`` (302 to a login page), ``huge`` (a 200 whose
    body is a well-formed query_range answer of ``huge_bytes`` bytes; buildinfo answers normally),
    ``not-json`` (a 200 HTML page).
    """
    import http.server
    import json
    import threading

    release = threading.Event()
    huge_body = _huge_answer(huge_bytes) if mode == "huge" else b""
    requests: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, code: int, body: bytes, ctype: str = "application/json",
                  headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            requests.append(self.path + " auth=" + ("yes" if self.headers.get("Authorization") else "no"))
            if mode == "hang":
                release.wait(60)
                return
            if mode in ("401", "403"):
                err = {"status": "error", "errorType": "unauthorized" if mode == "401" else "forbidden",
                       "error": "authentication required" if mode == "401" else "access denied"}
                self._send(int(mode), json.dumps(err).encode())
                return
            if mode == "redirect":
                self._send(302, b"", "text/html", {"Location": "https://sso.example/login?next=/prometheus"})
                return
            if mode == "not-json":
                self._send(200, b"<html><body>Grafana</body></html>", "text/html")
                return
            if self.path.startswith("/api/v1/status/buildinfo"):
                self._send(200, b'{"status":"success","data":{"version":"2.42.0"}}')
            elif self.path.startswith("/api/v1/series"):
                series = [{"__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": "gpu-07", "gpu": "0"}]
                self._send(200, json.dumps({"status": "success", "data": series}).encode())
            else:
                self._send(200, huge_body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        yield url
    finally:
        release.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def _huge_answer(n: int) -> bytes:
    """A valid query_range matrix answer of at least ``n`` bytes."""
    head = b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL"},"values":['
    point = b'[1700000000.000,"97"],'
    count = max(1, (n - len(head)) // len(point) + 1)
    return head + point * (count - 1) + b'[1700000000.000,"97"]]}]}}'


try:  # the fixture only exists under pytest
    import pytest
except ImportError:  # pragma: no cover - scripts outside pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:
    @pytest.fixture
    def prometheus_factory() -> Iterator[Callable[..., PrometheusServer]]:
        """``start(scenario)`` -> a running :class:`PrometheusServer`; all stopped at test end."""
        from tests.support.env import need

        started: list[PrometheusServer] = []

        def start(scenario: NodeScenario | None = None, families: Sequence[Family] = (),
                  scrape: Sequence[str] = ()) -> PrometheusServer:
            try:
                server = start_prometheus(scenario, families, scrape=scrape)
            except PrometheusUnavailable as exc:
                need(False, str(exc))
                raise
            started.append(server)
            return server

        try:
            yield start
        finally:
            for s in started:
                stop_prometheus(s)
