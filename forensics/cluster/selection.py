"""``cluster capture``: which nodes to capture, and each node's capture pod.

Nodes are chosen one way: ``--nodes`` (names), ``--pods-of NAMESPACE/SELECTOR`` (the nodes those
pods are scheduled on), ``--selector`` (node labels), or by default the GPU nodes (the DaemonSet's
own ``nodeSelector``) and every node running a capture pod. A node's capture pod is its newest
Running one.
"""

from __future__ import annotations

import re
from typing import Any

from forensics.cluster.kube import APIError, Kube
from forensics.cluster.options import ClusterCaptureOptions
from forensics.errors import ClusterError, UsageError

__all__ = ["GPU_NODE_SELECTOR", "capture_pods_by_node", "check_options", "choose_nodes", "pick_pod"]

GPU_NODE_SELECTOR = "nvidia.com/gpu.present=true"
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def check_options(opts: ClusterCaptureOptions) -> None:
    chosen = [x for x in (opts.nodes, opts.selector, opts.pods_of) if x]
    if len(chosen) > 1:
        raise UsageError("choose nodes one way: --nodes, --selector or --pods-of")
    for node in opts.nodes:
        if len(node) > 253 or not _DNS_SUBDOMAIN.match(node):
            raise UsageError(f"--nodes: not a node name: {node!r}")
    if opts.pods_of is not None:
        ns, sep, sel = opts.pods_of.partition("/")
        if not sep or not ns or not sel:
            raise UsageError(f"--pods-of expects NAMESPACE/LABEL-SELECTOR, e.g. ml/app=trainer; got {opts.pods_of!r}")
    if opts.parallel < 1:
        raise UsageError("--parallel must be at least 1")


def _listing(kube: Kube, path: str, query: dict[str, str], what: str) -> list[dict[str, Any]]:
    try:
        return kube.list_items(path, query)
    except APIError as exc:
        raise ClusterError(f"cannot list {what}: {exc}") from None


def choose_nodes(kube: Kube, opts: ClusterCaptureOptions, capture_pods: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The node names to capture, sorted."""
    if opts.nodes:
        return sorted(dict.fromkeys(opts.nodes))
    if opts.pods_of:
        ns, _, sel = opts.pods_of.partition("/")
        pods = _listing(kube, f"/api/v1/namespaces/{ns}/pods", {"labelSelector": sel},
                        f"pods {sel!r} in namespace {ns}")
        nodes = {p.get("spec", {}).get("nodeName") for p in pods}
        found = sorted(n for n in nodes if isinstance(n, str) and n)
        if not found:
            raise ClusterError(f"--pods-of {opts.pods_of}: no scheduled pod matches"
                               + (f" ({len(pods)} pending)" if pods else ""))
        return found
    # --selector, or by default the GPU nodes (the DaemonSet's own nodeSelector) and any node
    # running a capture pod: a GPU node without one is a row of the summary, not left out
    sel = opts.selector or GPU_NODE_SELECTOR
    items = _listing(kube, "/api/v1/nodes", {"labelSelector": sel}, f"nodes {sel!r}")
    chosen = {str(n["metadata"]["name"]) for n in items if isinstance(n.get("metadata"), dict)}
    if not opts.selector:
        chosen |= set(capture_pods)
    if not chosen:
        raise ClusterError(f"no node matches the label selector {sel!r}")
    return sorted(chosen)


def capture_pods_by_node(kube: Kube, opts: ClusterCaptureOptions) -> dict[str, list[dict[str, Any]]]:
    pods = _listing(kube, f"/api/v1/namespaces/{opts.namespace}/pods", {"labelSelector": opts.pod_selector},
                    f"capture pods in namespace {opts.namespace}")
    by_node: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        node = pod.get("spec", {}).get("nodeName")
        if isinstance(node, str) and node:
            by_node.setdefault(node, []).append(pod)
    return by_node


def pick_pod(pods: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """(a Running pod's name, or None and why none)."""
    running = [p for p in pods if p.get("status", {}).get("phase") == "Running"
               and not p.get("metadata", {}).get("deletionTimestamp")]
    if running:
        running.sort(key=lambda p: str(p["metadata"].get("creationTimestamp", "")), reverse=True)
        return str(running[0]["metadata"]["name"]), None
    if pods:
        states = ", ".join(f"{p['metadata']['name']} is {p.get('status', {}).get('phase', 'unknown')}" for p in pods)
        return None, f"no Running capture pod ({states})"
    return None, None
