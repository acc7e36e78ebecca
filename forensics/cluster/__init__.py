"""Cluster capture: every GPU node of an incident captured through the Kubernetes API.

::

    run.py      choose nodes, find capture pods (or create Jobs), run them concurrently, the
                summary (stderr table and DIR/cluster.json)
    stream.py   one exec stream: channel protocol, stdout to disk, exit status
    kube.py     the client, over the shared seam forensics.kube: kubeconfig as kubectl finds
                it, JSON requests, the exec WebSocket; client errors worded here only (APIError)
    jobspec.py  the Job of ``--job`` (deploy/job.yaml's pod spec)
    options.py  what to capture where (ClusterCaptureOptions), read by run.py and selection.py
    selection.py  the nodes and each node's capture pod

The output directory's layout (``cluster.json``; ``analyze DIR`` reads it back) is
forensics.bundle.cluster_dir, so the analysis never imports cluster capture.

Nothing here holds a bundle in memory: stdout goes to disk as it arrives and ``verify`` streams.
"""

from forensics.cluster.options import ClusterCaptureOptions
from forensics.cluster.run import (
    CLUSTER_JSON,
    STATUSES,
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
    "format_table",
    "run_cluster_capture",
]
