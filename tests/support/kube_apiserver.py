"""A loopback Kubernetes API server (127.0.0.1, random port, one thread) for the real client.

It speaks the real paths, query parameters and JSON of the API server for what the kubernetes
collector reads, serving the objects of a :class:`~tests.support.kube_objects.ClusterState`:

- ``GET /api/v1/nodes``, ``/api/v1/nodes/{name}``
- ``GET /api/v1/pods``, ``/api/v1/namespaces/{ns}/pods`` (``fieldSelector`` on ``spec.nodeName``,
  ``metadata.name``, ``metadata.namespace``, ``status.phase``; ``labelSelector``)
- ``GET /api/v1/events``, ``/api/v1/namespaces/{ns}/events`` (``fieldSelector`` on
  ``involvedObject.*``, ``reason``, ``type``, ``source``)
- ``GET /apis/metrics.k8s.io/v1beta1/{pods,nodes}``, namespaced pods, one node (404 when
  ``metrics_available`` is False, like a cluster without metrics-server)
- ``GET /api/v1/namespaces/{ns}/pods/{name}/log`` (``text/plain``: ``container``, ``previous``,
  ``timestamps``, ``sinceSeconds``, ``sinceTime``, ``tailLines``, ``limitBytes`` as the kubelet
  reads them) over the lines given to :meth:`KubeAPIServer.set_pod_log`; RBAC resource
  ``pods/log``;
- ``GET /api/v1/namespaces/{ns}/secrets[...]`` exists too, so a test can prove it is never asked;
- ``GET /api/v1/namespaces/{ns}/pods/{name}/exec`` upgraded to a WebSocket speaking the
  v5/v4 channel protocols, each command run as a real child on the pod's simulated node
  (``exec_runtime``: :class:`tests.support.kube_exec.ExecRuntime`); 400 for a pod not running;
- ``POST/GET /apis/batch/v1/namespaces/{ns}/jobs``, ``GET/DELETE .../jobs/{name}`` with a
  simulated Job controller: each Job gets one pod (``job-name`` labels, ``nodeName`` from its
  template), ``Pending`` then ``Running`` after ``job_pod_delay_s``; ``DELETE`` removes the pods
  only with ``propagationPolicy=Background|Foreground`` (the API's default for Jobs orphans them);
- ``GET /api/v1/events?watch=true`` (and namespaced): a chunked stream of watch events
  (``{"type": "ADDED"|"MODIFIED", "object": Event}`` a line) for the changes made through
  :meth:`KubeAPIServer.add_event` after ``resourceVersion`` (an event list's own
  ``metadata.resourceVersion`` is the newest), filtered by ``fieldSelector``, ended after
  ``timeoutSeconds``; a ``resourceVersion`` older than ``compacted_rv`` gets the API server's
  ``ERROR`` event (410 ``Expired``); :meth:`KubeAPIServer.end_watches` ends the open streams, and
  ``unavailable`` answers every request 503 (an API server restarting);
- ``GET /apis/resource.k8s.io`` (APIGroup discovery: the versions ``state.dra.versions`` offers,
  the first preferred), ``/apis/resource.k8s.io/{v}`` (APIResourceList), and in each offered version
  ``resourceslices`` (``fieldSelector`` ``spec.nodeName``, ``spec.driver``), ``deviceclasses``
  (list, get) and ``resourceclaims`` (all namespaces, namespaced list and get), each object shaped
  as that version serves it (v1beta1: a device's attributes under ``basic``); objects and their
  upstream sources: tests/support/dra_objects.py. ``state.dra`` None: the group is not served (404);
  RBAC resources ``resourceslices.resource.k8s.io`` etc. for ``forbidden``;
- ``limit``/``continue`` pagination with opaque continue tokens; unknown field selectors -> 400;
  errors are ``Status`` objects (403 ``Forbidden`` naming the user, verb and resource; 404; 409).

``forbidden`` (a set of resources such as ``{"events"}``, ``{"pods.metrics.k8s.io"}``,
``{"pods/exec"}``, ``{"jobs"}``; ``"pods/exec:NAME"`` for one pod, as a Role with
``resourceNames`` would) makes those answer 403; ``hang`` (a set of resources, or ``{"*"}``) makes them never answer until
``stop()``. ``latency_s`` adds a delay per request. ``server_time_s`` sums the time spent in
handlers, ``requests`` records ``(method, path, query)``. ``on_request(method, path, query)``, when
set, runs in the handler before the request is answered (a test changes the cluster, or the
simulated GPUs, at a known point of the client's sequence of calls).

Usage::

    with KubeAPIServer(gpu_node_scenario()) as api:
        write_kubeconfig(tmp_path / "kubeconfig", api.url)
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from forensics.parsing.timestamps import parse_iso_unix
from tests.support.dra_objects import DraState, to_version
from tests.support.kube_exec import ExecRuntime
from tests.support.kube_objects import ClusterState, _rv, _uid, gpu_node_scenario, iso

__all__ = ["KubeAPIServer", "write_kubeconfig"]

SA_USER = "system:serviceaccount:gpuforensics:gpuforensics"

_FIELDS: dict[str, dict[str, Callable[[dict[str, Any]], Any]]] = {
    "pods": {
        "metadata.name": lambda o: o["metadata"]["name"],
        "metadata.namespace": lambda o: o["metadata"]["namespace"],
        "spec.nodeName": lambda o: o["spec"].get("nodeName", ""),
        "spec.restartPolicy": lambda o: o["spec"].get("restartPolicy", ""),
        "spec.schedulerName": lambda o: o["spec"].get("schedulerName", ""),
        "spec.serviceAccountName": lambda o: o["spec"].get("serviceAccountName", ""),
        "status.phase": lambda o: o["status"].get("phase", ""),
        "status.podIP": lambda o: o["status"].get("podIP", ""),
        "status.nominatedNodeName": lambda o: o["status"].get("nominatedNodeName", ""),
    },
    "nodes": {
        "metadata.name": lambda o: o["metadata"]["name"],
        "spec.unschedulable": lambda o: str(o["spec"].get("unschedulable", False)).lower(),
    },
    "events": {
        "metadata.name": lambda o: o["metadata"]["name"],
        "metadata.namespace": lambda o: o["metadata"]["namespace"],
        "involvedObject.kind": lambda o: o["involvedObject"].get("kind", ""),
        "involvedObject.namespace": lambda o: o["involvedObject"].get("namespace", ""),
        "involvedObject.name": lambda o: o["involvedObject"].get("name", ""),
        "involvedObject.uid": lambda o: o["involvedObject"].get("uid", ""),
        "involvedObject.apiVersion": lambda o: o["involvedObject"].get("apiVersion", ""),
        "involvedObject.resourceVersion": lambda o: o["involvedObject"].get("resourceVersion", ""),
        "involvedObject.fieldPath": lambda o: o["involvedObject"].get("fieldPath", ""),
        "reason": lambda o: o.get("reason", ""),
        "reportingComponent": lambda o: o.get("reportingComponent", ""),
        "source": lambda o: o.get("source", {}).get("component", ""),
        "type": lambda o: o.get("type", ""),
    },
}
_FIELDS["pods.metrics.k8s.io"] = {"metadata.name": _FIELDS["pods"]["metadata.name"],
                                  "metadata.namespace": _FIELDS["pods"]["metadata.namespace"]}
_FIELDS["nodes.metrics.k8s.io"] = {"metadata.name": _FIELDS["nodes"]["metadata.name"]}
_FIELDS["jobs"] = {"metadata.name": lambda o: o["metadata"]["name"],
                   "metadata.namespace": lambda o: o["metadata"]["namespace"]}
_FIELDS["secrets"] = {"metadata.name": lambda o: o["metadata"]["name"],
                      "metadata.namespace": lambda o: o["metadata"]["namespace"]}

_FIELDS["resourceslices.resource.k8s.io"] = {
    "metadata.name": lambda o: o["metadata"]["name"],
    "spec.nodeName": lambda o: o["spec"].get("nodeName", ""),
    "spec.driver": lambda o: o["spec"].get("driver", ""),
}
_FIELDS["resourceclaims.resource.k8s.io"] = {"metadata.name": lambda o: o["metadata"]["name"],
                                             "metadata.namespace": lambda o: o["metadata"]["namespace"]}
_FIELDS["deviceclasses.resource.k8s.io"] = {"metadata.name": lambda o: o["metadata"]["name"]}

_KINDS = {
    "pods": ("v1", "PodList", "Pod"),
    "nodes": ("v1", "NodeList", "Node"),
    "events": ("v1", "EventList", "Event"),
    "secrets": ("v1", "SecretList", "Secret"),
    "jobs": ("batch/v1", "JobList", "Job"),
    "pods.metrics.k8s.io": ("metrics.k8s.io/v1beta1", "PodMetricsList", "PodMetrics"),
    "nodes.metrics.k8s.io": ("metrics.k8s.io/v1beta1", "NodeMetricsList", "NodeMetrics"),
    # the version is the one asked for (_dra_route sets it)
    "resourceslices.resource.k8s.io": ("resource.k8s.io/v1", "ResourceSliceList", "ResourceSlice"),
    "resourceclaims.resource.k8s.io": ("resource.k8s.io/v1", "ResourceClaimList", "ResourceClaim"),
    "deviceclasses.resource.k8s.io": ("resource.k8s.io/v1", "DeviceClassList", "DeviceClass"),
}


class _HTTPError(Exception):
    def __init__(self, code: int, status: dict[str, Any]) -> None:
        super().__init__(code)
        self.code = code
        self.status = status


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> _HTTPError:
    body: dict[str, Any] = {"apiVersion": "v1", "code": code, "kind": "Status", "message": message,
                            "metadata": {}, "reason": reason, "status": "Failure"}
    if details:
        body["details"] = details
    return _HTTPError(code, body)


def _parse_field_selector(resource: str, selector: str) -> list[tuple[str, str, str]]:
    terms = []
    for raw in filter(None, (t.strip() for t in selector.split(","))):
        for op in ("!=", "==", "="):
            if op in raw:
                key, _, value = raw.partition(op)
                break
        else:
            raise _status(400, "BadRequest", f'invalid selector: \'{selector}\'; can\'t understand \'{raw}\'')
        if key not in _FIELDS.get(resource, {}):
            raise _status(400, "BadRequest", f'"{key}" is not a known field selector: only "{", ".join(sorted(_FIELDS.get(resource, {})))}"')
        terms.append((key, "!=" if op == "!=" else "=", value))
    return terms


def _parse_label_selector(selector: str) -> list[tuple[str, str, list[str]]]:
    terms: list[tuple[str, str, list[str]]] = []
    depth, cur, parts = 0, "", []
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    for raw in filter(None, (p.strip() for p in parts)):
        if " notin " in raw or " in " in raw:
            op = "notin" if " notin " in raw else "in"
            key, _, values = raw.partition(f" {op} ")
            terms.append((key.strip(), op, [v.strip() for v in values.strip().strip("()").split(",")]))
        elif "!=" in raw:
            key, _, value = raw.partition("!=")
            terms.append((key.strip(), "notin", [value.strip()]))
        elif "=" in raw:
            key, _, value = raw.replace("==", "=").partition("=")
            terms.append((key.strip(), "in", [value.strip()]))
        elif raw.startswith("!"):
            terms.append((raw[1:].strip(), "!exists", []))
        else:
            terms.append((raw, "exists", []))
    return terms


def _label_match(labels: dict[str, str], terms: list[tuple[str, str, list[str]]]) -> bool:
    for key, op, values in terms:
        if op == "exists" and key not in labels:
            return False
        if op == "!exists" and key in labels:
            return False
        if op == "in" and labels.get(key) not in values:
            return False
        if op == "notin" and key in labels and labels[key] in values:
            return False
    return True


class KubeAPIServer:
    """The loopback API server; ``state`` may be replaced or mutated at any time."""

    def __init__(
        self,
        state: ClusterState | None = None,
        forbidden: Iterable[str] = (),
        hang: Iterable[str] = (),
        latency_s: float = 0.0,
        user: str = SA_USER,
        exec_runtime: ExecRuntime | None = None,
        job_pod_delay_s: float = 0.3,
    ) -> None:
        self.state = state if state is not None else gpu_node_scenario()
        self.forbidden = set(forbidden)
        self.hang = set(hang)
        self.latency_s = latency_s
        self.user = user
        self.exec_runtime = exec_runtime
        self.job_pod_delay_s = job_pod_delay_s
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.bodies: list[bytes] = []  # of POST requests, in order
        self.server_time_s = 0.0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._continues: dict[str, int] = {}
        self._changed = threading.Condition(self._lock)
        self.event_changes: list[tuple[int, str, dict[str, Any]]] = []  # (resourceVersion, type, Event)
        self.compacted_rv = 0  # a watch from an older resourceVersion is answered 410 Expired
        self.watches = 0  # watch streams opened
        self.open_watches = 0  # and not ended yet
        self.unavailable = False  # every request answered 503, as an API server restarting
        self._watch_epoch = 0
        self.pod_logs: dict[tuple[str, str, str, bool], list[tuple[int, str]]] = {}
        self.on_request: Callable[[str, str, dict[str, str]], None] | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> KubeAPIServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # as Go's net/http does: no Nagle, or every response waits for a delayed ACK
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

            def do_GET(self) -> None:  # noqa: N802
                server._handle(self)

            def do_POST(self) -> None:  # noqa: N802
                server._handle(self)

            do_PUT = do_PATCH = do_DELETE = do_POST  # noqa: N815

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="kube-apiserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self.exec_runtime is not None:
            self.exec_runtime.stop()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> KubeAPIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def set_objects(self, **objects: Any) -> None:
        """Replace some of what is served: ``nodes=``, ``pods=``, ``events=``, ``pod_metrics=``,
        ``node_metrics=``, ``secrets=``, ``jobs=`` (lists of objects as built by tests/support/kube_objects.py),
        ``metrics_available=``. Takes effect on the next request."""
        with self._lock:
            for name, value in objects.items():
                if not hasattr(self.state, name):
                    raise TypeError(f"unknown object list {name!r}")
                setattr(self.state, name, value)

    def set_pod_log(self, ns: str, pod: str, container: str, lines: Iterable[tuple[float, str]],
                    previous: bool = False) -> None:
        """What the kubelet holds for one container (``previous``: its last terminated instance):
        ``(unix time, line)`` pairs, oldest first. Replaces what was there."""
        with self._lock:
            self.pod_logs[(ns, pod, container, previous)] = [(_ns(t), text) for t, text in lines]

    def append_pod_log(self, ns: str, pod: str, container: str, t: float, text: str) -> None:
        """One more line of a log still being written."""
        with self._lock:
            self.pod_logs.setdefault((ns, pod, container, False), []).append((_ns(t), text))

    def add_event(self, event: dict[str, Any]) -> dict[str, Any]:
        """An Event created (or, same ``metadata.uid``, updated) now: it gets a new
        ``resourceVersion``, is served by lists and streamed to the watches. Returns it."""
        with self._changed:
            event["metadata"]["resourceVersion"] = _rv()
            uid = event["metadata"]["uid"]
            old = [i for i, e in enumerate(self.state.events) if e["metadata"]["uid"] == uid]
            if old:
                self.state.events[old[0]] = event
            else:
                self.state.events.append(event)
            self.event_changes.append((int(event["metadata"]["resourceVersion"]), "MODIFIED" if old else "ADDED",
                                       copy.deepcopy(event)))
            self._changed.notify_all()
        return event

    def end_watches(self) -> None:
        """End every open watch stream (as an API server going away does)."""
        with self._changed:
            self._watch_epoch += 1
            self._changed.notify_all()

    def paths_requested(self) -> list[str]:
        return [p for _, p, _ in self.requests]

    # -- request handling -----------------------------------------------------------------------
    def _handle(self, req: BaseHTTPRequestHandler) -> None:
        t0 = time.perf_counter()
        parts = urlsplit(req.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        path = unquote(parts.path)
        with self._lock:
            self.requests.append((req.command, path, query))
        if self.on_request is not None:
            self.on_request(req.command, path, query)
        code, body, resource, content_type = 200, b"", "", "application/json"
        try:
            segs = path.strip("/").split("/")
            if len(segs) == 7 and segs[:3] == ["api", "v1", "namespaces"] and segs[4] == "pods" and segs[6] == "exec":
                self._exec(req, segs[3], segs[5], parse_qs(parts.query, keep_blank_values=True))
                return
            if self.unavailable:
                raise _status(503, "ServiceUnavailable", "the server is currently unable to handle the request")
            is_jobs = segs[:3] == ["apis", "batch", "v1"]
            if req.command != "GET" and not (is_jobs and req.command in ("POST", "DELETE")):
                raise _status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
            payload = req.rfile.read(int(req.headers.get("Content-Length") or 0)) if req.command == "POST" else b""
            if payload:
                with self._lock:
                    self.bodies.append(payload)
            resource, handler = self._route(path) if not is_jobs else self._jobs_route(req.command, segs, payload)
            if resource in self.hang or "*" in self.hang:
                self._stopping.wait(3600)
                req.close_connection = True
                return
            if self.latency_s:
                time.sleep(self.latency_s)
            self._authorize(resource, path, req.command)
            if query.get("watch", "").lower() in ("true", "1"):
                if resource != "events" or (len(segs) != 3 and len(segs) != 5):
                    raise _status(405, "MethodNotAllowed", "watch is served for event lists only by this server")
                self._watch(req, segs[3] if len(segs) == 5 else None, query)
                return
            code, obj = 200, handler(query)
            if req.command == "POST":
                code = 201
            if isinstance(obj, bytes):
                body, content_type = obj, "text/plain"
            else:
                body = json.dumps(obj, separators=(",", ":")).encode()
        except _HTTPError as err:
            code, body = err.code, json.dumps(err.status, separators=(",", ":")).encode()
        try:
            self._respond(req, code, body, content_type)
        finally:
            with self._lock:
                self.server_time_s += time.perf_counter() - t0

    def _respond(self, req: BaseHTTPRequestHandler, code: int, body: bytes,
                 content_type: str = "application/json") -> None:
        try:
            req.send_response(code)
            req.send_header("Content-Type", content_type)
            req.send_header("Audit-Id", f"{len(self.requests):08d}-0000-4000-8000-000000000000")
            req.send_header("Cache-Control", "no-cache, private")
            req.send_header("X-Kubernetes-Pf-Flowschema-Uid", "2a1f5a3c-8c4e-4d6f-9e1b-7f0a9b8c6d5e")
            req.send_header("Content-Length", str(len(body)))
            req.end_headers()
            req.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _authorize(self, resource: str, path: str, method: str = "GET") -> None:
        if resource not in self.forbidden:
            return
        if resource == "pods/log":
            segs = path.strip("/").split("/")
            raise _status(403, "Forbidden", f'pods "{segs[5]}" is forbidden: User "{self.user}" cannot get resource '
                                            f'"pods/log" in API group "" in the namespace "{segs[3]}"',
                          {"name": segs[5], "kind": "pods"})
        plural, _, group = resource.partition(".")
        if resource == "jobs":
            group = "batch"
        segs = path.strip("/").split("/")
        ns = segs[segs.index("namespaces") + 1] if "namespaces" in segs else None
        named = (segs[-2] == plural) if len(segs) >= 2 else False
        verb = {"POST": "create", "DELETE": "delete"}.get(method, "get" if named else "list")
        scope = f'in the namespace "{ns}"' if ns else "at the cluster scope"
        raise _status(403, "Forbidden",
                      f'{resource}{"" if not named else " " + chr(34) + segs[-1] + chr(34)} is forbidden: User "{self.user}" cannot {verb} resource "{plural}" in API group "{group}" {scope}',
                      {"kind": plural, **({"name": segs[-1]} if named else {})})

    # -- exec ---------------------------------------------------------------------------------
    def _exec(self, req: BaseHTTPRequestHandler, ns: str, name: str, query: dict[str, list[str]]) -> None:
        """The pods/exec subresource: authorize (``create`` on ``pods/exec``, as API servers
        since 1.35 check for the WebSocket upgrade), find the pod, hand over to the runtime."""
        try:
            if req.command not in ("GET", "POST"):
                raise _status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
            if "pods/exec" in self.forbidden or f"pods/exec:{name}" in self.forbidden:
                raise _status(403, "Forbidden",
                              f'pods "{name}" is forbidden: User "{self.user}" cannot create resource "pods/exec" in API group "" in the namespace "{ns}"',
                              {"name": name, "kind": "pods"})
            with self._lock:
                pod = next((p for p in self.state.pods if p["metadata"]["name"] == name
                            and p["metadata"].get("namespace") == ns), None)
            if pod is None:
                raise _status(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
            if pod["status"].get("phase") != "Running":
                container = (query.get("container") or [pod["spec"]["containers"][0]["name"]])[0]
                raise _status(400, "BadRequest", f'unable to upgrade connection: container not found ("{container}")')
            if self.exec_runtime is None:
                raise _status(500, "InternalError", "exec is not simulated by this server (no exec_runtime)")
        except _HTTPError as err:
            self._respond(req, err.code, json.dumps(err.status, separators=(",", ":")).encode())
            return
        self.exec_runtime.serve(req, pod, query)

    # -- jobs and their controller --------------------------------------------------------------
    def _jobs_route(self, method: str, segs: list[str], payload: bytes) -> tuple[str, Callable[[dict[str, str]], Any]]:
        rest = segs[3:]
        if len(rest) < 3 or rest[0] != "namespaces" or rest[2] != "jobs" or len(rest) > 4:
            raise _status(404, "NotFound", "the server could not find the requested resource")
        ns = rest[1]
        if len(rest) == 3:
            if method == "POST":
                return "jobs", lambda q: self._create_job(ns, payload)
            return "jobs", lambda q: self._list("jobs", self.state.jobs, ns, q)
        name = rest[3]
        if method == "DELETE":
            return "jobs", lambda q: self._delete_job(ns, name, q)
        return "jobs", lambda q: self._get("jobs", self.state.jobs, ns, name)

    def _create_job(self, ns: str, payload: bytes) -> dict[str, Any]:
        try:
            job = json.loads(payload)
        except ValueError:
            raise _status(400, "BadRequest", "the object provided is unrecognized (not JSON)") from None
        if not isinstance(job, dict) or job.get("kind") != "Job" or job.get("apiVersion") != "batch/v1":
            raise _status(400, "BadRequest", "the object provided is not a batch/v1 Job")
        meta = job.setdefault("metadata", {})
        name = meta.get("name")
        if meta.get("namespace", ns) != ns:
            raise _status(400, "BadRequest", "the namespace of the provided object does not match the namespace sent on the request")
        template = (job.get("spec") or {}).get("template") or {}
        if not name or not (template.get("spec") or {}).get("containers"):
            raise _status(422, "Invalid", "Job.batch is invalid: metadata.name and spec.template.spec.containers are required")
        with self._lock:
            if any(j["metadata"]["name"] == name and j["metadata"]["namespace"] == ns for j in self.state.jobs):
                raise _status(409, "AlreadyExists", f'jobs.batch "{name}" already exists',
                              {"name": name, "group": "batch", "kind": "jobs"})
            now = datetime.now(UTC)
            uid = _uid("job", ns, name, str(time.time_ns()))
            meta.update(namespace=ns, uid=uid, resourceVersion=_rv(), creationTimestamp=iso(now), generation=1)
            job["status"] = {}
            stored = {k: v for k, v in job.items() if k not in ("kind", "apiVersion")}
            self.state.jobs.append(stored)
            pod_labels = {**(template.get("metadata") or {}).get("labels", {}),
                          "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                          "controller-uid": uid, "job-name": name}
            suffix = hashlib.sha256(uid.encode()).hexdigest()[:5]
            pod = {"metadata": {"name": f"{name}-{suffix}", "generateName": f"{name}-", "namespace": ns,
                                "labels": pod_labels, "uid": _uid("pod", ns, name, suffix), "resourceVersion": _rv(),
                                "creationTimestamp": iso(now),
                                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
                                                     "controller": True, "blockOwnerDeletion": True}]},
                   "spec": copy.deepcopy(template["spec"]),
                   "status": {"phase": "Pending", "qosClass": "Burstable",
                              "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": iso(now)}]}}
            self.state.pods.append(pod)

        def run() -> None:
            if self._stopping.wait(self.job_pod_delay_s):
                return
            with self._lock:
                started = iso(datetime.now(UTC))
                pod["status"].update(phase="Running", startTime=started, containerStatuses=[
                    {"name": c["name"], "image": c.get("image", ""), "ready": True, "started": True, "restartCount": 0,
                     "state": {"running": {"startedAt": started}}} for c in pod["spec"]["containers"]])
                stored["status"] = {"active": 1, "ready": 1, "startTime": started}

        threading.Thread(target=run, daemon=True, name=f"job-{name}").start()
        return {"kind": "Job", "apiVersion": "batch/v1", **stored}

    def _delete_job(self, ns: str, name: str, q: dict[str, str]) -> dict[str, Any]:
        with self._lock:
            job = next((j for j in self.state.jobs if j["metadata"]["name"] == name and j["metadata"]["namespace"] == ns), None)
            if job is None:
                raise _status(404, "NotFound", f'jobs.batch "{name}" not found', {"name": name, "group": "batch", "kind": "jobs"})
            self.state.jobs.remove(job)
            if q.get("propagationPolicy") in ("Background", "Foreground"):
                uid = job["metadata"]["uid"]
                self.state.pods = [p for p in self.state.pods
                                   if not any(o.get("uid") == uid for o in p["metadata"].get("ownerReferences", []))]
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": "batch", "kind": "jobs", "uid": job["metadata"]["uid"]}}

    def _route(self, path: str) -> tuple[str, Callable[[dict[str, str]], Any]]:
        segs = path.strip("/").split("/")
        st = self.state
        if path == "/version":
            return "", lambda q: {"major": "1", "minor": "31", "gitVersion": "v1.31.2", "platform": "linux/amd64", "goVersion": "go1.22.8", "compiler": "gc"}
        if path == "/api":
            return "", lambda q: {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]}
        if path == "/apis/metrics.k8s.io/v1beta1" and st.metrics_available:
            return "", lambda q: {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "metrics.k8s.io/v1beta1", "resources": [
                {"name": "nodes", "singularName": "", "namespaced": False, "kind": "NodeMetrics", "verbs": ["get", "list"]},
                {"name": "pods", "singularName": "", "namespaced": True, "kind": "PodMetrics", "verbs": ["get", "list"]}]}
        if segs[:2] == ["api", "v1"]:
            rest = segs[2:]
            ns = None
            if len(rest) >= 3 and rest[0] == "namespaces":
                ns, rest = rest[1], rest[2:]
            if ns is not None and len(rest) == 3 and rest[0] == "pods" and rest[2] == "log":
                return "pods/log", lambda q: self._pod_log(ns, rest[1], q)
            if rest and rest[0] in ("pods", "nodes", "events", "secrets") and len(rest) <= 2:
                resource = rest[0]
                items = {"pods": st.pods, "nodes": st.nodes, "events": st.events, "secrets": st.secrets}[resource]
                if resource == "nodes" and ns is not None:
                    raise _status(404, "NotFound", "the server could not find the requested resource")
                if len(rest) == 2:
                    return resource, lambda q: self._get(resource, items, ns, rest[1])
                return resource, lambda q: self._list(resource, items, ns, q)
        if segs[:2] == ["apis", "resource.k8s.io"] and st.dra is not None:
            return self._dra_route(segs[2:], st.dra)
        if segs[:3] == ["apis", "metrics.k8s.io", "v1beta1"] and st.metrics_available:
            rest = segs[3:]
            ns = None
            if len(rest) >= 3 and rest[0] == "namespaces":
                ns, rest = rest[1], rest[2:]
            if rest and rest[0] in ("pods", "nodes") and len(rest) <= 2:
                resource = rest[0] + ".metrics.k8s.io"
                items = st.pod_metrics if rest[0] == "pods" else st.node_metrics
                if len(rest) == 2:
                    return resource, lambda q: self._get(resource, items, ns, rest[1])
                return resource, lambda q: self._list(resource, items, ns, q)
        raise _status(404, "NotFound", "the server could not find the requested resource")

    def _dra_route(self, rest: list[str], dra: DraState) -> tuple[str, Callable[[dict[str, str]], Any]]:
        """``resource.k8s.io``: the group's discovery document, and in each offered version
        ResourceSlices and DeviceClasses (cluster-scoped) and ResourceClaims (namespaced), each
        object served as that version shapes it (tests/support/dra_objects.py ``to_version``)."""
        group = "resource.k8s.io"
        if not rest:
            versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in dra.versions]
            return "", lambda q: {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": versions,
                                  "preferredVersion": versions[0]}
        version, rest = rest[0], rest[1:]
        if version not in dra.versions:
            raise _status(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            return "", lambda q: {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}",
                                  "resources": [
                {"name": "deviceclasses", "singularName": "deviceclass", "namespaced": False, "kind": "DeviceClass",
                 "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]},
                {"name": "resourceclaims", "singularName": "resourceclaim", "namespaced": True, "kind": "ResourceClaim",
                 "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]},
                {"name": "resourceslices", "singularName": "resourceslice", "namespaced": False, "kind": "ResourceSlice",
                 "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]}]}
        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        lists = {"resourceslices": dra.slices, "resourceclaims": dra.claims, "deviceclasses": dra.device_classes}
        if not rest or rest[0] not in lists or len(rest) > 2 or (ns is not None and rest[0] != "resourceclaims"):
            raise _status(404, "NotFound", "the server could not find the requested resource")
        resource = f"{rest[0]}.{group}"
        items = [to_version(o, version) for o in lists[rest[0]]]

        def answer(q: dict[str, str]) -> dict[str, Any]:
            if len(rest) == 2:
                return self._get(resource, items, ns, rest[1])
            return {**self._list(resource, items, ns, q), "apiVersion": f"{group}/{version}"}
        return resource, answer

    def _get(self, resource: str, items: list[dict[str, Any]], ns: str | None, name: str) -> dict[str, Any]:
        api_version, _, kind = _KINDS[resource]
        for item in items:
            meta = item["metadata"]
            if meta["name"] == name and (ns is None or meta.get("namespace") == ns):
                return {"kind": kind, "apiVersion": api_version, **item}
        plural = resource.split(".")[0]
        raise _status(404, "NotFound", f'{resource} "{name}" not found', {"name": name, "kind": plural})

    def _pod_log(self, ns: str, name: str, q: dict[str, str]) -> bytes:
        """The kubelet's ``containerLogs``: select the container (and its previous instance), then
        ``sinceSeconds``/``sinceTime``, ``tailLines``, the ``timestamps`` prefix, and ``limitBytes``
        cutting the output after that many bytes (the oldest are kept, possibly mid-line)."""
        pod = self._get("pods", self.state.pods, ns, name)
        names = [c["name"] for c in pod["spec"].get("containers", [])]
        container = q.get("container", "")
        if not container:
            if len(names) != 1:
                raise _status(400, "BadRequest", f"a container name must be specified for pod {name}, "
                                                 f"choose one of: [{' '.join(names)}]")
            container = names[0]
        if container not in names:
            raise _status(400, "BadRequest", f"container {container} is not valid for pod {name}")
        previous = q.get("previous", "false").lower() in ("true", "1")
        with self._lock:
            lines = list(self.pod_logs.get((ns, name, container, previous), ()))
        if previous and (ns, name, container, True) not in self.pod_logs:
            raise _status(400, "BadRequest", f'previous terminated container "{container}" in pod "{name}" not found')
        since = _positive_int(q, "sinceSeconds")
        if since is not None:
            cut = round((time.time() - since) * 1e9)
            lines = [(t, x) for t, x in lines if t >= cut]
        elif q.get("sinceTime"):
            st = parse_iso_unix(q["sinceTime"])
            if st is None:
                raise _status(400, "BadRequest", f'sinceTime: Invalid value: "{q["sinceTime"]}"')
            lines = [(t, x) for t, x in lines if t >= round(st * 1e9)]
        tail = _positive_int(q, "tailLines")
        if tail is not None:
            lines = lines[max(0, len(lines) - tail):] if tail else []
        stamps = q.get("timestamps", "false").lower() in ("true", "1")
        out = b"".join(((_rfc3339nano(t) + " ") if stamps else "").encode() + x.encode("utf-8", "surrogateescape")
                       + b"\n" for t, x in lines)
        limit = _positive_int(q, "limitBytes")
        return out[:limit] if limit is not None else out

    def _watch(self, req: BaseHTTPRequestHandler, ns: str | None, q: dict[str, str]) -> None:
        """A watch on events: the changes after ``resourceVersion`` as a chunked JSON-lines stream."""
        fields = _parse_field_selector("events", q.get("fieldSelector", ""))
        timeout = float(_positive_int(q, "timeoutSeconds") or 1800)
        with self._lock:
            self.watches += 1
            self.open_watches += 1
            newest = max((c[0] for c in self.event_changes), default=0)
            epoch = self._watch_epoch
        since = int(q["resourceVersion"]) if q.get("resourceVersion", "").isdigit() else newest
        req.send_response(200)
        req.send_header("Content-Type", "application/json")
        req.send_header("Transfer-Encoding", "chunked")
        req.end_headers()

        def send(obj: dict[str, Any]) -> None:
            data = json.dumps(obj, separators=(",", ":")).encode() + b"\n"
            req.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            req.wfile.flush()

        end = time.monotonic() + timeout
        seen = 0
        try:
            if since < self.compacted_rv:
                send({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                                  "message": f"too old resource version: {since} ({self.compacted_rv})",
                                                  "reason": "Expired", "code": 410}})
            else:
                while not self._stopping.is_set() and time.monotonic() < end and self._watch_epoch == epoch:
                    with self._changed:
                        if seen >= len(self.event_changes):
                            self._changed.wait(min(0.2, max(0.0, end - time.monotonic())))
                        batch, seen = self.event_changes[seen:], len(self.event_changes)
                    for rv, kind, ev in batch:
                        if rv > since and (ns is None or ev["metadata"].get("namespace") == ns) \
                                and self._selected("events", ev, fields, []):
                            send({"type": kind, "object": {"kind": "Event", "apiVersion": "v1", **ev}})
            req.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with self._lock:
                self.open_watches -= 1
        req.close_connection = True

    @staticmethod
    def _selected(resource: str, item: dict[str, Any], fields: list[tuple[str, str, str]],
                  labels: list[tuple[str, str, list[str]]]) -> bool:
        getters = _FIELDS[resource]
        for key, op, value in fields:
            if (str(getters[key](item)) == value) != (op == "="):
                return False
        return _label_match(item["metadata"].get("labels", {}), labels)

    def _list(self, resource: str, items: list[dict[str, Any]], ns: str | None, q: dict[str, str]) -> dict[str, Any]:
        api_version, list_kind, _ = _KINDS[resource]
        fields = _parse_field_selector(resource, q.get("fieldSelector", ""))
        labels = _parse_label_selector(q.get("labelSelector", ""))
        selected = [item for item in items if (ns is None or item["metadata"].get("namespace") == ns)
                    and self._selected(resource, item, fields, labels)]
        start = 0
        token = q.get("continue")
        if token:
            try:
                start = json.loads(base64.urlsafe_b64decode(token.encode()))["start"]
            except (ValueError, KeyError, TypeError):
                raise _status(400, "BadRequest", "continue key is not valid: invalid continue token") from None
        limit = int(q.get("limit") or 0)
        page = selected[start:start + limit] if limit > 0 else selected[start:]
        metadata: dict[str, Any] = {"resourceVersion": str(184_500_000 + len(self.requests))}
        if resource == "events":  # a watch from here streams the changes after this list
            metadata["resourceVersion"] = str(max([0, *(int(e["metadata"]["resourceVersion"]) for e in items),
                                                   *(c[0] for c in self.event_changes)]))
        if limit > 0 and start + limit < len(selected):
            metadata["continue"] = base64.urlsafe_b64encode(json.dumps({"v": "meta.k8s.io/v1", "rv": 184500000, "start": start + limit}).encode()).decode()
            metadata["remainingItemCount"] = len(selected) - start - limit
        if resource.endswith(".metrics.k8s.io"):
            metadata = {}
        return {"apiVersion": api_version, "items": page, "kind": list_kind, "metadata": metadata}


def _ns(t: float) -> int:
    """Unix seconds -> nanoseconds, at the microsecond a float this size can hold."""
    whole = int(t)
    return whole * 1_000_000_000 + round((t - whole) * 1e6) * 1000


def _rfc3339nano(t_ns: int) -> str:
    """Go's ``time.RFC3339Nano`` in UTC: trailing zeros of the fraction dropped, none when zero."""
    sec, ns = divmod(t_ns, 1_000_000_000)
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
    frac = f"{ns:09d}".rstrip("0")
    return f"{base}.{frac}Z" if frac else f"{base}Z"


def _positive_int(q: dict[str, str], key: str) -> int | None:
    if key not in q:
        return None
    try:
        value = int(q[key])
    except ValueError:
        raise _status(400, "BadRequest", f'{key}: Invalid value: "{q[key]}": must be an integer') from None
    if value < (0 if key == "tailLines" else 1):
        raise _status(422, "Invalid", f"PodLogOptions.{key}: Invalid value: {value}: must be greater than "
                                      f"{'or equal to ' if key == 'tailLines' else ''}0")
    return value


def write_kubeconfig(path: str | Path, url: str, context: str = "loopback", namespace: str = "default",
                     token: str = "loopback-token-0123456789") -> Path:
    """Write a kubeconfig (cluster, user with a bearer token, context) pointing at ``url``."""
    path = Path(path)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": url}}],
        "users": [{"name": f"{context}-user", "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": f"{context}-user", "namespace": namespace}}],
        "current-context": context,
        "preferences": {},
    }
    path.write_text(json.dumps(config, indent=2))  # JSON is valid YAML
    path.chmod(0o600)
    return path
