"""What the prometheus collector asks for: the exporters' series, how a node is matched, the step.

The series, each under the name its exporter gives it:

- dcgm-exporter (GPU Operator, ``:9400/metrics``): ``DCGM_FI_DEV_GPU_UTIL``, ``DCGM_FI_DEV_FB_USED``,
  ``DCGM_FI_DEV_FB_FREE``, ``DCGM_FI_PROF_SM_ACTIVE``, ``DCGM_FI_DEV_XID_ERRORS`` (a gauge: the last
  Xid seen), ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` and its newer name
  ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``, ``DCGM_FI_DEV_GPU_TEMP``, ``DCGM_FI_DEV_POWER_USAGE``; labels
  ``gpu``, ``UUID``, ``Hostname``, ``pod``/``namespace``/``container`` (``exported_*`` when the
  scrape did not honour the exporter's labels);
- cAdvisor in the kubelet: ``container_cpu_cfs_periods_total``,
  ``container_cpu_cfs_throttled_periods_total``, ``container_memory_working_set_bytes``,
  ``container_spec_memory_limit_bytes``, ``container_oom_events_total``;
- node-exporter: ``node_pressure_cpu_waiting_seconds_total`` and the memory and io
  ``..._waiting_seconds_total`` / ``..._stalled_seconds_total``;
- kube-state-metrics: ``kube_pod_info`` (which pods ran on the node), ``kube_pod_container_info``
  (container ids), ``kube_pod_container_resource_limits{resource="nvidia_com_gpu"}``,
  ``kube_pod_container_status_last_terminated_reason``, ``kube_pod_container_status_restarts_total``.

Matching ``--node``: exporters name the node in different labels, so a series belongs to the node
when any of these holds (the first four exactly, ``instance`` also with a ``:port``):
``node`` (prometheus-operator's kubelet and kube-state-metrics' own label), ``Hostname``
(dcgm-exporter, from its ``NODE_NAME``), ``kubernetes_node`` and ``nodename`` (common relabelings),
``instance`` (Prometheus' Kubernetes node discovery names the target by node; kube-prometheus
relabels node-exporter's instance to the node). kube-state-metrics' container series carry no node
label: they are asked for ``and on(namespace, pod) kube_pod_info{node="..."}`` -- the pods that
were on the node at each step. An ``instance`` that is only an IP address cannot be matched and
those series are recorded as absent.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = [
    "AUTO_STEPS_S",
    "MAX_POINTS",
    "METRICS",
    "NODE_LABELS",
    "MetricSpec",
    "choose_step",
    "discovery_matches",
    "node_matchers",
    "promql_string",
    "query_for",
]


@dataclass(frozen=True)
class MetricSpec:
    """One series family the collector asks for.

    ``match``: ``node`` (selected by the node labels), ``pods`` (kube-state-metrics container
    series: joined to ``kube_pod_info`` of the node). ``selector``: extra label matchers.
    """

    name: str
    exporter: str
    match: str = "node"
    selector: str = ""
    alias_of: str = ""  # an older/newer name of the same field


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("DCGM_FI_DEV_GPU_UTIL", "dcgm-exporter"),
    MetricSpec("DCGM_FI_DEV_FB_USED", "dcgm-exporter"),
    MetricSpec("DCGM_FI_DEV_FB_FREE", "dcgm-exporter"),
    MetricSpec("DCGM_FI_PROF_SM_ACTIVE", "dcgm-exporter"),
    MetricSpec("DCGM_FI_DEV_XID_ERRORS", "dcgm-exporter"),
    MetricSpec("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "dcgm-exporter"),
    MetricSpec("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "dcgm-exporter", alias_of="DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
    MetricSpec("DCGM_FI_DEV_GPU_TEMP", "dcgm-exporter"),
    MetricSpec("DCGM_FI_DEV_POWER_USAGE", "dcgm-exporter"),
    MetricSpec("container_cpu_cfs_periods_total", "cadvisor"),
    MetricSpec("container_cpu_cfs_throttled_periods_total", "cadvisor"),
    MetricSpec("container_memory_working_set_bytes", "cadvisor"),
    MetricSpec("container_spec_memory_limit_bytes", "cadvisor"),
    MetricSpec("container_oom_events_total", "cadvisor"),
    MetricSpec("node_pressure_cpu_waiting_seconds_total", "node-exporter"),
    MetricSpec("node_pressure_memory_waiting_seconds_total", "node-exporter"),
    MetricSpec("node_pressure_memory_stalled_seconds_total", "node-exporter"),
    MetricSpec("node_pressure_io_waiting_seconds_total", "node-exporter"),
    MetricSpec("node_pressure_io_stalled_seconds_total", "node-exporter"),
    MetricSpec("kube_pod_info", "kube-state-metrics"),
    MetricSpec("kube_pod_container_resource_limits", "kube-state-metrics", selector='resource="nvidia_com_gpu"'),
    MetricSpec("kube_pod_container_info", "kube-state-metrics", match="pods"),
    MetricSpec("kube_pod_container_status_last_terminated_reason", "kube-state-metrics", match="pods"),
    MetricSpec("kube_pod_container_status_restarts_total", "kube-state-metrics", match="pods"),
)

# the labels that name a node, in the order they are tried (see the module docstring)
NODE_LABELS: tuple[str, ...] = ("node", "Hostname", "kubernetes_node", "nodename", "instance")

# Prometheus refuses more than 11,000 points per series; the auto step keeps a window near 2,000
MAX_POINTS = 11_000
_AUTO_POINTS = 2_000
AUTO_STEPS_S: tuple[int, ...] = (15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)


def promql_string(value: str) -> str:
    """A PromQL double-quoted string literal for ``value``."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def node_matchers(node: str) -> dict[str, str]:
    """label -> PromQL matcher (``label="node"``, or ``instance=~"node(:port)?"``) for each node label."""
    out = {label: f"{label}={promql_string(node)}" for label in NODE_LABELS if label != "instance"}
    out["instance"] = f"instance=~{promql_string(re.escape(node) + '(:[0-9]+)?')}"
    return out


def _selector(name: str, *matchers: str) -> str:
    parts = [m for m in matchers if m]
    return f"{name}{{{','.join(parts)}}}" if parts else name


def query_for(spec: MetricSpec, node: str, labels: tuple[str, ...]) -> str:
    """The PromQL for ``spec`` on ``node``: one selector per node label it was found under, joined by ``or``.

    ``pods`` series: ``name and on(namespace, pod) kube_pod_info{<node label>}``.
    """
    matchers = node_matchers(node)
    if spec.match == "pods":
        pod_info = " or ".join(_selector("kube_pod_info", matchers[label]) for label in labels or ("node",))
        if len(labels) > 1:
            pod_info = f"({pod_info})"
        return f"{_selector(spec.name, spec.selector)} and on(namespace, pod) {pod_info}"
    return " or ".join(_selector(spec.name, matchers[label], spec.selector) for label in labels)


def discovery_matches(node: str) -> list[str]:
    """``match[]`` selectors for ``/api/v1/series``: every node-matched metric, under each node label."""
    names = "|".join(re.escape(s.name) for s in METRICS if s.match == "node")
    return [f"{{__name__=~{promql_string(names)},{m}}}" for m in node_matchers(node).values()]


def choose_step(window_s: float, setting_s: float | None = None) -> tuple[float, str]:
    """The query step for a window: ``setting_s`` if given (raised if it would pass 11,000 points),
    else the smallest of :data:`AUTO_STEPS_S` that keeps the window under about 2,000 points.

    Returns (step seconds, how it was chosen).
    """
    floor = window_s / (MAX_POINTS - 1)
    if setting_s is not None:
        if setting_s >= floor:
            return setting_s, "prometheus.step"
        fitted = float(math.ceil(floor))
        return fitted, f"prometheus.step={setting_s:g}s would pass {MAX_POINTS} points; raised to {fitted:g}s"
    for step in AUTO_STEPS_S:
        if window_s / step <= _AUTO_POINTS:
            return float(step), "auto"
    return float(math.ceil(window_s / _AUTO_POINTS)), "auto"
