"""The prometheus collector: exporter history (dcgm-exporter, cAdvisor, node-exporter,
kube-state-metrics) for this node from a Prometheus HTTP API; see collector.py."""

from forensics.collectors.prometheus.collector import COLLECTOR, PrometheusCollector

__all__ = ["COLLECTOR", "PrometheusCollector"]
