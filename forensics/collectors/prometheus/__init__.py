"""The ``prometheus`` source: exporter history (dcgm-exporter, cAdvisor, node-exporter,
kube-state-metrics) for this node from a Prometheus HTTP API: the collector (collector.py), what it
asks for (catalogue.py) and the HTTP seam (client.py). Declared in :mod:`forensics.specs.prometheus`.
"""
