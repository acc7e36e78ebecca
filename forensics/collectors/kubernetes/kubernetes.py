"""The kubernetes collector: this node, its pods, their events and metrics, as the API sent them.

Sources (API server, through the kubernetes client; see kube/api.py for the seam):

- ``GET /api/v1/nodes/{node}`` -> ``kubernetes/node.json`` (verbatim bytes): capacity and
  allocatable ``nvidia.com/gpu`` and MIG resources, GPU labels, conditions, taints;
- ``GET /api/v1/pods?fieldSelector=spec.nodeName={node}`` -> ``kubernetes/pods.json`` (the PodList,
  env values and last-applied env values redacted), and the derived ``kubernetes/pods-index.json``;
- ``resource.k8s.io`` (Dynamic Resource Allocation): the node's ResourceSlices, the ResourceClaims
  its pods use or that are reserved for them, their DeviceClasses, in the version the server offers
  (forensics/collectors/kubernetes/dra.py) -> ``kubernetes/resource{slices,claims}.json``,
  ``kubernetes/deviceclasses.json``, ``kubernetes/resource-api.json``;
- ``GET /api/v1/namespaces/{ns}/events`` for the pods' namespaces and ``default`` ->
  ``kubernetes/events.json``: events about those pods or the node within the look-back window;
- ``GET /apis/metrics.k8s.io/v1beta1/nodes/{node}`` and ``.../namespaces/{ns}/pods`` ->
  ``kubernetes/metrics.json`` when metrics-server serves them;
- ``GET /api/v1/namespaces/{ns}/pods/{name}/log?container=&timestamps=true&sinceSeconds=&tailLines=``
  (``previous=true`` too for a container that restarted) for containers that touched a GPU, were
  OOM-killed, restarted or failed -> ``kubernetes/logs/<ns>/<pod>/<container>[.previous].log``
  (the newest ``logs.max_bytes``, redacted) and ``kubernetes/logs/index.json``;
- every request made -> ``kubernetes/requests.json``, and the API server's clock against this
  host's from their ``Date`` headers and round trips -> ``kubernetes/clock.json``;
- with ``--duration``, at the end of the window: ``GET /api/v1/nodes/{node}`` again ->
  ``kubernetes/node-end.json`` (redacted as ``node.json``), its request -> ``kubernetes/requests-end.json``
  (did allocatable recover, or fall, during the window?).

The node is ``--node``, else ``NODE_NAME`` (the DaemonSet sets it from ``spec.nodeName``), else
this host's name matched against the Nodes. Secrets are never read. A 403 on one resource is
recorded and the rest collected (status partial); an unreachable API server costs one call
timeout and makes the collector ``unavailable``. Publishes the node's name (``kube_node``) for
the end-of-window read.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from forensics.collect.context import CollectContext
from forensics.collectors.kubernetes.dra import collect_dra
from forensics.collectors.kubernetes.events import select_events
from forensics.collectors.kubernetes.redaction import redact_events, redact_node, redact_pod_list
from forensics.errors import ParseError, SourcePermissionDenied, SourceUnavailable
from forensics.parsing.clock import estimate_offset
from forensics.parsing.logsignals.line import newest_lines
from forensics.parsing.podindex import build_pods_index
from forensics.specs import kubernetes as kspec
from forensics.specs.hints import GPU_PIDS, KUBE_NODE
from forensics.specs.kubernetes import SPEC
from forensics.specs.logs import LOGS

__all__ = ["COLLECTOR", "KubernetesCollector"]

METRICS_GROUP, METRICS_VERSION = "metrics.k8s.io", "v1beta1"
# events are listed per namespace unless the node's pods span more namespaces than this
MAX_EVENT_NAMESPACES = 20
MAX_POD_LOGS = 200  # container logs asked for (GPU ones first)
_GUARD_FACTOR = 4  # limitBytes: this many times logs.max_bytes (a memory guard, not the cap)


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
                KUBE_NODE.publish(ctx, [node_name])
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
            index: dict[str, Any] | None = None
            if pod_list is not None:
                redact_pod_list(pod_list, ctx.redactor)
                ctx.sink.write_json(kspec.PODS, pod_list)
                try:
                    index = build_pods_index(pod_list, node_name)
                except ParseError as exc:
                    index = None
                    ctx.partial(f"pods-index.json not derived: {exc}")
                else:
                    ctx.sink.write_json(kspec.PODS_INDEX, index)
                    pod_uids = [p["uid"] for p in index["pods"]]
                    pod_names = {(p["namespace"], p["name"]) for p in index["pods"]}
                    namespaces = sorted({ns for ns, _ in pod_names})
                    ctx.note(f"{len(pod_uids)} pods, {len(index['gpu_pods'])} with GPU limits, "
                             f"{len(index['oom_killed'])} OOMKilled, {len(index['evicted'])} evicted")

            # -- resource.k8s.io: the node's slices, its pods' claims, their device classes ------
            if pod_list is not None:
                collect_dra(ctx, api, node_name, pod_list["items"], set(pod_uids), failures)

            # -- events -----------------------------------------------------------------------
            since = opts.since or (opts.capture_start - timedelta(seconds=opts.lookback_s))
            self._events(ctx, api, node_name, pod_uids, namespaces, since, failures)

            # -- metrics.k8s.io ---------------------------------------------------------------
            self._metrics(ctx, api, node_name, namespaces, pod_names, failures)

            # -- the workloads' own logs ------------------------------------------------------
            if index is not None and settings.logs_tail > 0:
                holders = gpu_holders(pod_list["items"] if pod_list else [], index,
                                      _gpu_process_containers(GPU_PIDS.read(ctx), index))
                self._pod_logs(ctx, api, index, since, settings.logs_tail, failures, holders)
        finally:
            ctx.sink.write_json(kspec.REQUESTS,
                                {"server": api.server, "config": loaded.source,
                                 "requests": [asdict(r) for r in api.log]})
            _write_clock(ctx, api)
            api.close()
        if failures and all(f.kind in ("forbidden", "unauthorized") for f in failures.values()) \
                and {"node", "pods", "events"} <= set(failures):
            raise SourcePermissionDenied(
                "permission denied: " + "; ".join(str(f) for f in failures.values()))

    # ------------------------------------------------------------------------------------------
    def end_sampling(self, ctx: CollectContext) -> None:
        """At the end of the window (the runner calls it once the window's time is up):
        ``GET /api/v1/nodes/{node}`` again -> ``kubernetes/node-end.json``, redacted as the first
        read, and that request -> ``kubernetes/requests-end.json``. Allocatable GPUs the device
        plugin marked unhealthy may have come back, or fallen, since the snapshot. Nothing when the
        snapshot did not read the Node; a failed read is a partial reason and no member."""
        from forensics.collectors.kubernetes.api import CallFailed, KubeAPI, load_config

        names = KUBE_NODE.read(ctx)
        if not names:
            return
        opts = ctx.options
        settings = SPEC.read_settings(opts.extra, call_timeout_s=self.call_timeout_s, budget_s=self.budget_s)
        loaded = load_config(opts.kubeconfig, opts.kube_context)
        api = KubeAPI(loaded, ctx.deadline - 1.0, settings.call_timeout_s, self.connect_timeout_s)
        try:
            raw = api.get(f"/api/v1/nodes/{names[0]}")
            ctx.sink.write_bytes(kspec.NODE_END, redact_node(raw, ctx.redactor))
        except CallFailed as exc:
            ctx.partial(f"end of window: node not read again: {exc}")
        finally:
            ctx.sink.write_json(kspec.REQUESTS_END,
                                {"server": api.server, "config": loaded.source,
                                 "requests": [asdict(r) for r in api.log]})
            api.close()

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


    def _pod_logs(self, ctx: CollectContext, api: Any, index: dict[str, Any], since: datetime,
                  tail_lines: int, failures: dict[str, Any],
                  holders: dict[tuple[str, str, str], str] | None = None) -> None:
        """``GET /api/v1/namespaces/{ns}/pods/{name}/log?container=&timestamps=true&sinceSeconds=
        &tailLines=&limitBytes=`` (and ``previous=true`` for a container that restarted) for the
        containers :func:`log_targets` picks; the newest ``logs.max_bytes`` kept, redacted.

        ``limitBytes`` keeps the *oldest* bytes of what the kubelet selected, so it is only a
        memory guard (``_GUARD_FACTOR`` times the cap); an answer that reaches it is asked again
        with fewer ``tailLines``, worked out from the line length of the first answer."""
        from forensics.collectors.kubernetes.api import CallFailed

        max_bytes = LOGS.read_settings(ctx.options.extra).max_bytes
        guard = max(_GUARD_FACTOR * max_bytes, 1 << 20)
        since_s = max(1, math.ceil(time.time() - since.timestamp()))
        entries: list[dict[str, Any]] = []
        targets = log_targets(index, holders)
        if len(targets) > MAX_POD_LOGS:
            ctx.note(f"pod logs: {len(targets)} containers qualify; the first {MAX_POD_LOGS} taken")
        for namespace, pod, container, previous, why in targets[:MAX_POD_LOGS]:
            member = kspec.pod_log_member(namespace, pod, container, previous)
            entry: dict[str, Any] = {"namespace": namespace, "pod": pod, "container": container,
                                     "previous": previous, "why": why, "member": None, "error": None}
            entries.append(entry)
            query = {"container": container, "timestamps": "true", "sinceSeconds": str(since_s),
                     "tailLines": str(tail_lines), "limitBytes": str(guard)}
            if previous:
                query["previous"] = "true"
            path = f"/api/v1/namespaces/{namespace}/pods/{pod}/log"
            try:
                data = api.get(path, query)
                if len(data) >= guard:
                    lines = max(1, data.count(b"\n"))
                    fewer = max(1, min(tail_lines - 1, lines * max_bytes // len(data)))
                    entry["tail_lines_retry"] = fewer
                    data = api.get(path, dict(query, tailLines=str(fewer)))
            except CallFailed as exc:
                entry["error"] = str(exc)
                if exc.kind == "http-error":
                    continue  # 400: a container still waiting, a previous instance rotated away
                failures.setdefault("pods/log", exc)
                ctx.partial(f"pod log {namespace}/{pod}/{container}: {exc}")
                if exc.kind in ("timed-out", "budget", "unreachable"):
                    break
                continue
            kept, dropped = newest_lines(data, max_bytes)
            entry.update(member=member, received_bytes=len(data), kept_bytes=len(kept),
                         dropped_oldest_bytes=dropped, limit_reached=len(data) >= guard)
            # a cut mid-line may fall inside a token: its part left at that edge is redacted too
            cut_start = dropped > 0 and data[dropped - 1:dropped] != b"\n"
            cut_end = len(data) >= guard and not data.endswith(b"\n")
            ctx.sink.write_text(member, ctx.redactor.text(kept.decode("utf-8", "replace"), "logs",
                                                          cut_start=cut_start, cut_end=cut_end))
        ctx.sink.write_json(kspec.LOGS_INDEX, {
            "since": since.strftime("%Y-%m-%dT%H:%M:%SZ"), "since_seconds": since_s, "tail_lines": tail_lines,
            "max_bytes": max_bytes, "limit_bytes": guard, "containers": entries})
        taken = sum(1 for e in entries if e["member"])
        ctx.note(f"{taken} of {len(entries)} pod container logs taken")


def _gpu_process_containers(pids: list[int], index: dict[str, Any], proc_root: str = "/proc") -> set[str]:
    """Ids of the pods' containers whose processes are on a GPU (NVML's PIDs, this host's PID
    namespace): the container id as ``/proc/<pid>/cgroup`` names it (at most 4 KiB read a PID)."""
    known = [cid for cid in (index.get("container_ids") or {}) if isinstance(cid, str) and len(cid) >= 12]
    out: set[str] = set()
    for pid in pids[:1024]:
        try:
            with open(f"{proc_root}/{int(pid)}/cgroup", "rb") as f:
                text = f.read(4096).decode("utf-8", "replace")
        except (OSError, ValueError):
            continue
        out.update(cid for cid in known if cid in text)
    return out


def gpu_holders(pods: list[Any], index: dict[str, Any], on_gpu: set[str]) -> dict[tuple[str, str, str], str]:
    """(namespace, pod, container) -> why it holds a GPU, in every grant form the index does not
    count (a DRA claim in ``resources.claims`` or served as an extended resource, a limit on another
    ``nvidia.com/`` resource such as ``nvidia.com/gpu.shared``), and each container whose process
    is on a GPU (``on_gpu``: container ids), whatever its spec says."""
    out: dict[tuple[str, str, str], str] = {}
    for pod in pods:
        if not isinstance(pod, dict):
            continue
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        ns, name = str(meta.get("namespace")), str(meta.get("name"))
        for c in spec.get("containers") or []:
            if not isinstance(c, dict):
                continue
            res = c.get("resources") or {}
            if res.get("claims"):
                out[(ns, name, str(c.get("name")))] = "DRA claim"
            elif any(isinstance(k, str) and k.startswith("nvidia.com/") for k in (res.get("limits") or {})):
                out[(ns, name, str(c.get("name")))] = "GPU limit"
        ext = status.get("extendedResourceClaimStatus") or {}
        for m in ext.get("requestMappings") or [] if isinstance(ext, dict) else []:
            if isinstance(m, dict):
                out[(ns, name, str(m.get("containerName")))] = "DRA claim"
    for cid, where in (index.get("container_ids") or {}).items():
        if cid in on_gpu and isinstance(where, dict):
            ns, _, name = str(where.get("pod")).partition("/")
            out.setdefault((ns, name, str(where.get("container"))), "process on a GPU")
    return out


def log_targets(index: dict[str, Any], holders: dict[tuple[str, str, str], str] | None = None,
                ) -> list[tuple[str, str, str, bool, str]]:
    """(namespace, pod, container, previous, why) for every container of the pods index that
    touched a GPU (a GPU or MIG limit, ``NVIDIA_VISIBLE_DEVICES`` set, or in ``holders``: a DRA
    claim, a renamed GPU resource, a process on a GPU), was OOM-killed, restarted or ended with a
    non-zero exit; its previous instance too when it restarted. GPU ones first."""
    out: list[tuple[int, tuple[str, str, str, bool, str]]] = []
    for pod in index.get("pods") or []:
        if not isinstance(pod, dict):
            continue
        for c in pod.get("containers") or []:
            if not isinstance(c, dict) or c.get("kind") != "container":
                continue
            why: list[str] = []
            if c.get("gpu_limit_count") or c.get("mig_limits"):
                why.append("GPU limit")
            elif c.get("nvidia_visible_devices") not in (None, "", "void", "none"):
                why.append("NVIDIA_VISIBLE_DEVICES")
            elif (holders or {}).get((str(pod.get("namespace")), str(pod.get("name")), str(c.get("name")))):
                why.append((holders or {})[(str(pod.get("namespace")), str(pod.get("name")), str(c.get("name")))])
            if c.get("oom_killed"):
                why.append("OOMKilled")
            restarts = c.get("restart_count") or 0
            if restarts:
                why.append(f"{restarts} restart(s)")
            if c.get("state") == "terminated" and c.get("state_exit_code") not in (None, 0):
                why.append(f"exited {c.get('state_exit_code')}")
            if not why:
                continue
            ns, name, cname = str(pod.get("namespace")), str(pod.get("name")), str(c.get("name"))
            rank = 0 if why[0] in ("GPU limit", "NVIDIA_VISIBLE_DEVICES", "DRA claim", "process on a GPU") else 1
            reason = ", ".join(why)
            out.append((rank, (ns, name, cname, False, reason)))
            if restarts or c.get("last_terminated_reason"):
                out.append((rank, (ns, name, cname, True, reason)))
    return [t for _, t in sorted(out, key=lambda x: x[0])]


def _write_clock(ctx: CollectContext, api: Any) -> None:
    """``kubernetes/clock.json``: this host's clock against the API server's, from the ``Date``
    header and round trip of every answered call (:mod:`forensics.parsing.clock`)."""
    calls = [(r.server_date, r.sent_unix, r.received_unix) for r in api.log if r.server_date]
    estimate = estimate_offset(calls)
    if estimate is None:
        return
    ctx.sink.write_json(kspec.CLOCK, {
        "reference": f"Kubernetes API server {api.server}", "method": "HTTP Date header and round trip",
        "offset_s": estimate.offset_s, "uncertainty_s": estimate.uncertainty_s,
        "samples": estimate.samples, "consistent": estimate.consistent,
        "best_round_trip_s": estimate.best_round_trip_s})


def _summary(what: str, errors: list[str], scopes: int) -> str:
    """One partial reason for a resource listed in several namespaces."""
    if len(errors) == 1:
        return errors[0]
    return f"{what}: {len(errors)} of {scopes} requests failed; first: {errors[0]}"


COLLECTOR = KubernetesCollector()
