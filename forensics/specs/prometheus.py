"""``prometheus``: this node's exporter history (dcgm-exporter, cAdvisor, node-exporter,
kube-state-metrics) from a Prometheus HTTP API (members ``prometheus/*``).

Optional: without a URL (``--prometheus URL`` or ``--set prometheus.url=URL``) the source is not
configured, never run, and its absence costs the analysis nothing. A Prometheus that was asked and
did not answer is a limitation like any other source's.
"""

from __future__ import annotations

from dataclasses import dataclass

from forensics.specs.base import Absence, Excuse, SourceSpec, StandIn, setting

__all__ = ["BUILDINFO", "PREFIX", "QUERIES", "QUERY_RANGE", "SERIES", "SPEC", "TARGET", "PrometheusSettings",
           "query_member"]

PREFIX = "prometheus"
TARGET = "prometheus/target.json"
BUILDINFO = "prometheus/buildinfo.json"
SERIES = "prometheus/series.json"
QUERIES = "prometheus/queries.json"
QUERY_RANGE = "prometheus/query_range"


def query_member(metric: str) -> str:
    """The member holding ``/api/v1/query_range``'s verbatim answer for one metric."""
    return f"{QUERY_RANGE}/{metric}.json"


@dataclass(frozen=True)
class PrometheusSettings:
    url: str | None = setting("url", "Prometheus base URL, same as --prometheus", None, shown="none: not configured")
    token_file: str | None = setting("path", "bearer token file for Prometheus, same as --prometheus-token-file",
                                     None, shown="none")
    ca_file: str | None = setting("path", "CA bundle for an https Prometheus, same as --prometheus-ca", None,
                                  shown="none")
    step: float | None = setting("duration", "query_range step, e.g. 15s or 1m", None,
                                 shown="the smallest of 15s, 30s, 1m, ... keeping the window under 2000 points")
    call_timeout_s: float = setting("positive-seconds", "deadline of each Prometheus API call", 10.0)
    max_response_bytes: int = setting("positive-int", "largest Prometheus answer kept", 16 << 20)


SPEC = SourceSpec(
    name="prometheus", order=70, collector="forensics.collectors.prometheus.collector",
    settings=PrometheusSettings, configured_by="url", remote=True,
    absence=Absence("no Prometheus history: the exporters' series of the window are missing", (
        Excuse(frozenset({None, "skipped"}), "not configured or not selected: nothing was asked"),)),
    stand_in_label="Prometheus history",
    stands_in=(
        StandIn("nvml", "GPU utilization, memory, clocks and Xid (no processes)"),
        StandIn("cgroups", "CFS throttling and host pressure"),
        StandIn("kernel", "OOM events (cAdvisor, kube-state-metrics) and the last Xid (dcgm-exporter)"),
        StandIn("docker", "container ids and images (cAdvisor, kube-state-metrics)"),
    ),
)
