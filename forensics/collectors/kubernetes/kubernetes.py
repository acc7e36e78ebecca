"""The kubernetes collector: this node, its pods, their events and metrics, as the API sent them.

Sources (API server, through the kubernetes client; see kube/api.py for the seam):

- ``GET /api/v1/nodes/{node}`` -> ``kubernetes/node.json`` (verbatim bytes): capacity and
  allocatable ``nvidia.com/gpu`` and MIG resources, GPU labels, conditions, taints;
- ``GET /api/v1/pods?fieldSelector=spec.nodeName={node}`` -> ``kubernetes/pods.json`` (the PodList,
  env values and last-applied env values redacted), and the derived ``kubernetes/pods-index.json``;
- ``GET /api/v1/namespaces/{ns}/events`` for the pods' namespaces and ``default`` ->
  ``kubernetes/events.json``: events about those pods or the node within the look-back window;
- ``GET /apis/metrics.k8s.io/v1beta1/nodes/{node}`` and ``.../namespaces/{ns}/pods`` ->
  ``kubernetes/metrics.json`` when metrics-server serves them;
- every request made -> ``kubernetes/requests.json``.

The node is ``--node``, else ``NODE_NAME`` (the DaemonSet sets it from ``spec.nodeName``), else
this host's name matched against the Nodes. Secrets are never read. A 403 on one resource is
recorded and the rest collected (status partial); an unreachable API server costs one call
timeout and makes the collector ``unavailable``. Publishes ``pod_uids`` and ``container_ids``.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict
from datetime import timedelta
from typing import Any

from forensics.capture.context import CollectContext
from forensics.collectors.kubernetes.events import select_events
from forensics.collectors.kubernetes.redaction import redact_events, redact_node, redact_pod_list
from forensics.errors import ParseError, SourcePermissionDenied, SourceUnavailable
from forensics.parsing.podindex import build_pods_index
from forensics.specs import kubernetes as kspec
from forensics.specs.kubernetes import SPEC

__all__ = ["COLLECTOR", "KubernetesCollector"]

METRICS_GROUP, METRICS_VERSION = "metrics.k8s.io", "v1beta1"
# events are listed per namespace unless the node's pods span more namespaces than this
MAX_EVENT_NAMESPACES = 20


class KubernetesCollector:
    """``kubernetes``: this node, its pods, their events and metrics, as the API server sent them.

    See the module docstring. ``call_timeout_s`` bounds each call, ``budget_s`` all of them.
    """

    name = SPEC.name
    order = SPEC.order
    timeout_s = 45.0

    def __init__(self, call_timeout_s: float | None = None, connect_timeout_s: float = 3.0,
                 budget_s: float | None = None) -> None:
        # None: the spec's default; ``--set kubernetes.*`` wins over both
        self.call_timeout_s = call_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.budget_s = budget_s

    # ------------------------------------------------------------------------------------------
    def snapshot(self, ctx: CollectContext) -> None:
        from forensics.collectors.kubernetes.api import CallFailed, KubeAPI, load_config

        opts = ctx.options
        settings = SPEC.read_settings(opts.extra, call_timeout_s=self.call_timeout_s, budget_s=self.budget_s)
        call_timeout = settings.call_timeout_s
        deadline = min(time.monotonic() + settings.budget_s, ctx.deadline - 1.0)

        loaded = load_config(opts.kubeconfig, opts.kube_context)
        api = KubeAPI(loaded, deadline, call_timeout, self.connect_timeout_s)
        ctx.note(f"API server {api.server} ({loaded.source})")
        failures: dict[str, CallFailed] = {}
        try:
            node_name = self._node_name(ctx, api)
            ctx.note(f"node {node_name}")

            # -- the Node ---------------------------------------------------------------------
            try:
                raw = api.get(f"/api/v1/nodes/{node_name}")
                ctx.sink.write_bytes(kspec.NODE, redact_node(raw, ctx.redactor))
            except CallFailed as exc:
                if exc.kind == "unreachable" or (exc.kind == "timed-out" and not api.log[:-1]):
                    raise SourceUnavailable(f"Kubernetes API server {api.server} {exc}") from None
                if exc.kind == "not-found":
                    raise SourceUnavailable(f"node {node_name!r} is not a Node of this cluster") from None
                failures["node"] = exc
                ctx.partial(str(exc))

            # -- the node's pods --------------------------------------------------------------
            pod_list: dict[str, Any] | None = None
            selector = f"spec.nodeName={node_name}"
            try:
                last, items = api.list_all("/api/v1/pods", {"fieldSelector": selector})
                pod_list = {"apiVersion": last.get("apiVersion", "v1"),
                            "kind": last.get("kind", "PodList"),
                            "metadata": last.get("metadata", {}), "items": items}
                pod_list["metadata"].pop("continue", None)
            except CallFailed as exc:
                failures["pods"] = exc
                ctx.partial(str(exc))
            pod_uids: list[str] = []
            namespaces: list[str] = []
            pod_names: set[tuple[str, str]] = set()
            if pod_list is not None:
                redact_pod_list(pod_list, ctx.redactor)
                ctx.sink.write_json(kspec.PODS, pod_list)
                try:
                    index = build_pods_index(pod_list, node_name)
                except ParseError as exc:
                    ctx.partial(f"pods-index.json not derived: {exc}")
                else:
                    ctx.sink.write_json(kspec.PODS_INDEX, index)
                    pod_uids = [p["uid"] for p in index["pods"]]
                    pod_names = {(p["namespace"], p["name"]) for p in index["pods"]}
                    namespaces = sorted({ns for ns, _ in pod_names})
                    ctx.note(f"{len(pod_uids)} pods, {len(index['gpu_pods'])} with GPU limits, "
                             f"{len(index['oom_killed'])} OOMKilled, {len(index['evicted'])} evicted")

            # -- events -----------------------------------------------------------------------
            since = opts.since or (opts.capture_start - timedelta(seconds=opts.lookback_s))
            self._events(ctx, api, node_name, pod_uids, namespaces, since, failures)

            # -- metrics.k8s.io ---------------------------------------------------------------
            self._metrics(ctx, api, node_name, namespaces, pod_names, failures)
        finally:
            ctx.sink.write_json(kspec.REQUESTS,
                                {"server": api.server, "config": loaded.source,
                                 "requests": [asdict(r) for r in api.log]})
            api.close()
        if failures and all(f.kind in ("forbidden", "unauthorized") for f in failures.values()) \
                and {"node", "pods", "events"} <= set(failures):
            raise SourcePermissionDenied(
                "permission denied: " + "; ".join(str(f) for f in failures.values()))

    # ------------------------------------------------------------------------------------------
    def _node_name(self, ctx: CollectContext, api: Any) -> str:
        from forensics.collectors.kubernetes.api import CallFailed

        name = ctx.options.node_name or os.environ.get("NODE_NAME")
        if name:
            return name
        host = socket.gethostname()
        candidates = [host] + ([host.split(".")[0]] if "." in host else [])
        for candidate in candidates:
            for query in ({"fieldSelector": f"metadata.name={candidate}"},
                          {"labelSelector": f"kubernetes.io/hostname={candidate}"}):
                try:
                    obj = api.get_json("/api/v1/nodes", query)
                except CallFailed as exc:
                    if exc.kind in ("unreachable", "timed-out"):
                        raise SourceUnavailable(f"Kubernetes API server {api.server} {exc}") from None
                    raise SourceUnavailable(
                        f"cannot find this host's Node ({exc}); pass --node or set NODE_NAME"
                    ) from None
                items = obj.get("items") or []
                if len(items) == 1 and isinstance(items[0], dict):
                    return str(items[0]["metadata"]["name"])
        raise SourceUnavailable(
            f"no Node named or labelled {host!r} in the cluster; pass --node or set NODE_NAME")

    def _events(self, ctx: CollectContext, api: Any, node_name: str, pod_uids: list[str],
                namespaces: list[str], since: Any, failures: dict[str, Any]) -> None:
        from forensics.collectors.kubernetes.api import CallFailed

        scopes: list[str | None]
        if len(namespaces) + 1 > MAX_EVENT_NAMESPACES:
            scopes = [None]
        else:
            scopes = [*sorted(set(namespaces) | {"default"})]
        kept: list[dict[str, Any]] = []
        listed = 0
        errors: list[str] = []
        for ns in scopes:
            try:
                path = "/api/v1/events" if ns is None else f"/api/v1/namespaces/{ns}/events"
                _, items = api.list_all(path)
            except CallFailed as exc:
                errors.append(str(exc))
                failures.setdefault("events", exc)
                if exc.kind in ("timed-out", "budget"):
                    break  # a server that hangs on one namespace hangs on the next
                continue
            listed += len(items)
            try:
                kept.extend(select_events(items, node_name, set(pod_uids), since))
            except ParseError as exc:
                ctx.partial(f"events in {ns or 'all namespaces'} not understood: {exc}")
        if errors:
            ctx.partial(_summary("events", errors, len(scopes)))
        if len(errors) == len(scopes) or (errors and not listed):
            return
        ctx.sink.write_json(kspec.EVENTS, {
            "apiVersion": "v1", "kind": "EventList", "metadata": {},
            "items": redact_events(kept, ctx.redactor),
            "selection": {"node": node_name, "since": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
                          "namespaces": [s for s in scopes if s is not None] or ["*"],
                          "listed": listed, "kept": len(kept)},
        })
        ctx.note(f"{len(kept)} of {listed} events kept (this node's pods and the node)")

    def _metrics(self, ctx: CollectContext, api: Any, node_name: str, namespaces: list[str],
                 pod_names: set[tuple[str, str]], failures: dict[str, Any]) -> None:
        from forensics.collectors.kubernetes.api import CallFailed

        doc: dict[str, Any] = {"node": None, "pods": None}
        path = f"/apis/{METRICS_GROUP}/{METRICS_VERSION}"
        try:
            raw = api.get(f"{path}/nodes/{node_name}")
            doc["node"] = json.loads(raw)
        except CallFailed as exc:
            if exc.kind == "not-found":
                ctx.note(f"metrics.k8s.io not served ({exc}); no metrics.json")
                return
            ctx.partial(str(exc))
        except ValueError as exc:
            ctx.partial(f"node metrics not JSON: {exc}")
        items: list[Any] = []
        pods_ok = False
        errors: list[str] = []
        for ns in namespaces:
            try:
                raw = api.get(f"{path}/namespaces/{ns}/pods")
                page = json.loads(raw)
            except CallFailed as exc:
                errors.append(str(exc))
                failures.setdefault("metrics", exc)
                if exc.kind in ("timed-out", "budget"):
                    break
                continue
            except ValueError as exc:
                ctx.partial(f"pod metrics in {ns} not JSON: {exc}")
                continue
            pods_ok = True
            for item in page.get("items") or []:
                meta = item.get("metadata", {}) if isinstance(item, dict) else {}
                if (meta.get("namespace"), meta.get("name")) in pod_names:
                    items.append(item)
        if errors:
            ctx.partial(_summary("pod metrics", errors, len(namespaces)))
        if pods_ok:
            doc["pods"] = {"apiVersion": f"{METRICS_GROUP}/{METRICS_VERSION}",
                           "kind": "PodMetricsList", "metadata": {}, "items": items}
        if doc["node"] is not None or doc["pods"] is not None:
            ctx.sink.write_json(kspec.METRICS, doc)


def _summary(what: str, errors: list[str], scopes: int) -> str:
    """One partial reason for a resource listed in several namespaces."""
    if len(errors) == 1:
        return errors[0]
    return f"{what}: {len(errors)} of {scopes} requests failed; first: {errors[0]}"


COLLECTOR = KubernetesCollector()
