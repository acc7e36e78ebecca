"""Cluster capture: every GPU node of an incident captured through the Kubernetes API.

::

    run.py      choose nodes, find capture pods (or create Jobs), run them concurrently, the
                summary (stderr table and DIR/cluster.json)
    stream.py   one exec stream: channel protocol, stdout to disk, exit status
    kube.py     the client seam: kubeconfig as kubectl finds it, JSON requests, the exec
                WebSocket; client errors mapped to APIError here only
    jobspec.py  the Job of ``--job`` (deploy/job.yaml's pod spec)
    layout.py   reading an output directory back (``analyze DIR``)

Nothing here holds a bundle in memory: stdout goes to disk as it arrives and ``verify`` streams.
"""

from forensics.cluster.layout import bundles_in_directory, expand_bundle_arguments
from forensics.cluster.run import (
    CLUSTER_JSON,
    STATUSES,
    ClusterCaptureOptions,
    ClusterResult,
    NodeResult,
    format_table,
    run_cluster_capture,
)

__all__ = [
    "CLUSTER_JSON",
    "STATUSES",
    "ClusterCaptureOptions",
    "ClusterResult",
    "NodeResult",
    "bundles_in_directory",
    "expand_bundle_arguments",
    "format_table",
    "run_cluster_capture",
]
