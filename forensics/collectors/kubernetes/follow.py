"""Kubernetes events for the flight recorder: the Events about this node and its pods, followed
as the API server streams them, so an eviction or a node OOM from before a capture is still on
record after the API server has dropped the Event (its TTL is an hour by default).

Sources (the kubernetes client through :class:`~forensics.collectors.kubernetes.api.KubeAPI`):

- ``GET /api/v1/pods?fieldSelector=spec.nodeName={node}`` every ``replan_s``: this node's pod
  UIDs and their namespaces; the pods themselves, with their ResourceClaims and the node's
  ResourceSlices, kept in the ring at first sight and on change
  (:mod:`forensics.collectors.kubernetes.follow_objects`: a claim is deleted with its pod);
- per namespace of those pods, ``GET /api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.kind=Pod``
  listed once, then watched from the list's ``resourceVersion`` (``watch=true``,
  ``allowWatchBookmarks``, ``timeoutSeconds``); all namespaces at once (``/api/v1/events``) past
  :data:`~forensics.collectors.kubernetes.kubernetes.MAX_EVENT_NAMESPACES`, as capture does;
- ``GET /api/v1/events?fieldSelector=involvedObject.kind=Node,involvedObject.name={node}``, listed
  then watched the same way.

Each Event kept (:func:`~forensics.collectors.kubernetes.events.select_events`: a pod of this node
by UID, a pod event from this node's kubelet, or the Node) is one line of ``kubernetes/events.jsonl``:
the object exactly as in the items of capture's ``kubernetes/events.json`` (redacted the same way),
once per ``(uid, resourceVersion)``, so a repeated event (``count`` raised) is a new line.

Resuming: a watch's ``resourceVersion`` outlives neither the API server's watch cache (minutes) nor
a restart of this process, so the ring itself is the cursor. On start the follower reads the
ring's ``kubernetes/events.jsonl`` records of the last ten minutes (the last hour when those hold
none): the ``(uid, resourceVersion)`` pairs it holds, and the wall time of the newest. A listed
event already in the ring, or older than that time (less ``RESUME_SKEW_S``), is not written
again. A ``410 Gone`` (the version expired) lists again, with the same rule. A lost API server is
retried with a backoff and one ``recorder/events.jsonl`` line of kind ``gap`` (source
``kubernetes``) says from when to when. Runs in threads of the recorder's kubernetes sampler.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from typing import Any

from forensics.bundle.format import iso_from_unix
from forensics.collect.context import CollectContext, Tick
from forensics.collectors.kubernetes.api import CallFailed, KubeAPI, load_config
from forensics.collectors.kubernetes.events import event_time, select_events
from forensics.collectors.kubernetes.follow_objects import KubeObjectKeeper
from forensics.collectors.kubernetes.kubernetes import MAX_EVENT_NAMESPACES, KubernetesCollector
from forensics.collectors.kubernetes.redaction import redact_events
from forensics.errors import ParseError, RingError, SourceUnavailable
from forensics.kube import CAPTURE_ORDER, find_config
from forensics.ring import RingReader, resolve_ring_dir
from forensics.specs import kubernetes as kspec
from forensics.specs import ring as ring_spec
from forensics.specs.ring import RECORDER_EVENTS

__all__ = ["KubeEventFollower", "configured", "ring_cursor"]

RESUME_WINDOWS_S = (600.0, 3600.0)
RESUME_SKEW_S = 60.0  # the API server's clock against this node's, and a second-precision lastTimestamp
_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
_NODE_SCOPE = "node"
_ALL_PODS = "*"


def configured(kubeconfig: str | None) -> bool:
    """Whether there is a Kubernetes configuration to load (``load_config``'s order), without
    importing the client: on a host outside any cluster the recorder's kubernetes source costs
    one stat per restart, not an import."""
    return find_config(kubeconfig, CAPTURE_ORDER) is not None


def ring_cursor(ring_dir: str | None, now: float) -> tuple[set[tuple[str, str]], float | None]:
    """What the ring already holds of ``kubernetes/events.jsonl``: the ``(uid, resourceVersion)``
    pairs of the newest records, and the wall time of the newest (None: none in the last hour)."""
    import json

    root = resolve_ring_dir(ring_dir)
    if not root.is_dir():
        return set(), None
    for window in RESUME_WINDOWS_S:
        keys: set[tuple[str, str]] = set()
        newest: float | None = None
        try:
            for rec in RingReader(root).records(since=now - window, members=(kspec.EVENTS_FOLLOWED,)):
                newest = rec.t if newest is None else max(newest, rec.t)
                for line in rec.data.splitlines():
                    try:
                        key = _key(json.loads(line))
                    except ValueError:
                        continue
                    if key is not None:
                        keys.add(key)
        except (RingError, OSError):
            return set(), None
        if newest is not None:
            return keys, newest
    return set(), None


def _key(event: Any) -> tuple[str, str] | None:
    meta = event.get("metadata") if isinstance(event, dict) else None
    if not isinstance(meta, dict):
        return None
    uid, rv = meta.get("uid"), meta.get("resourceVersion")
    return (uid, rv) if isinstance(uid, str) and isinstance(rv, str) else None


class KubeEventFollower:
    """``start`` once (fails as ``SourceUnavailable`` without a configuration), then ``sample``
    every tick (nothing: the threads write as events come)."""

    name = "kubernetes"
    replan_s = 30.0  # this node's pods listed again
    connect_backoff_s = 5.0  # no API server or no Node yet: tried again after this, doubling
    connect_backoff_max_s = 300.0
    watch_timeout_s = 290  # timeoutSeconds of each watch: the server ends it, it is watched again

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self._scope_stops: dict[str, threading.Event] = {}
        self.seen: set[tuple[str, str]] = set()
        self.resume_t: float | None = None
        self.pod_uids: set[str] = set()
        self.node = ""
        self.unmatched: deque[dict[str, Any]] = deque(maxlen=1000)  # pod events of pods not yet listed
        self.lost_at: float | None = None
        self.lost_why = ""
        self.api: KubeAPI | None = None
        self.objects = KubeObjectKeeper()  # the pods and their claims, kept at first sight
        self.objects_failed = ""

    # -- the driver's interface ------------------------------------------------------------
    def start(self, ctx: CollectContext) -> None:
        """Without a configuration: ``SourceUnavailable`` (the recorder asks again later, at the
        cost of a ``stat``). With one, the rest happens in a thread that keeps trying with a
        backoff up to ``connect_backoff_max_s``: the client import alone costs about half a CPU
        second, too much to pay again every time the recorder restarts an unavailable source."""
        if not configured(ctx.options.kubeconfig):
            raise SourceUnavailable("no Kubernetes configuration (not in a cluster; no --kubeconfig, "
                                    "KUBECONFIG or ~/.kube/config): no Kubernetes events recorded")
        thread = threading.Thread(target=self._supervise, args=(ctx,), name="kube-events", daemon=True)
        thread.start()

    def _connect(self, ctx: CollectContext) -> None:
        """The configuration, this host's Node, the resume cursor, the first pod list."""
        if self.api is not None:  # an earlier attempt that failed at the pod list
            self.api.close()
            self.api = None
        opts = ctx.options
        settings = kspec.SPEC.read_settings(opts.extra)
        loaded = load_config(opts.kubeconfig, opts.kube_context)
        api = KubeAPI(loaded, math.inf, settings.call_timeout_s)
        try:
            self.node = KubernetesCollector()._node_name(ctx, api)
        except BaseException:
            api.close()
            raise
        self.api = api
        self.objects.reconnected()
        ring_dir = ring_spec.SPEC.read_settings(opts.extra).dir
        self.seen, self.resume_t = ring_cursor(ring_dir, time.time())
        if not self.objects.pods.items():  # the first connection of this run
            self.objects.resume(ring_dir, time.time())
        self._plan(ctx)
        ctx.note(f"following Kubernetes events of node {self.node} on {api.server} ({loaded.source})"
                 + (f"; resuming after {iso_from_unix(self.resume_t)}" if self.resume_t else ""))

    def sample(self, ctx: CollectContext, tick: Tick) -> None:
        """Nothing to read per tick: the watch threads write as events come."""
        if self.api is not None and len(self.api.log) > 1000:
            del self.api.log[:-100]  # the request log is capture's evidence, not the recorder's

    def stop(self) -> None:
        self._stop.set()
        if self.api is not None:
            self.api.close()

    # -- the pods of this node, and which scopes to watch ------------------------------------
    def _plan(self, ctx: CollectContext) -> None:
        assert self.api is not None
        _, items = self.api.list_all("/api/v1/pods", {"fieldSelector": f"spec.nodeName={self.node}"})
        uids: set[str] = set()
        namespaces: set[str] = set()
        for pod in items:
            meta = pod.get("metadata") if isinstance(pod, dict) else None
            if isinstance(meta, dict) and isinstance(meta.get("uid"), str):
                uids.add(meta["uid"])
                if isinstance(meta.get("namespace"), str):
                    namespaces.add(meta["namespace"])
        self._observe(ctx, items)
        with self._lock:
            self.pod_uids |= uids  # pods gone since keep their events' UIDs: their events are ours
            if len(self.pod_uids) > 50_000:
                self.pod_uids = uids
            waiting = list(self.unmatched)
            self.unmatched.clear()
        for ev in waiting:
            self._keep(ctx, ev, listed=False, retry=False)
        scopes = {_NODE_SCOPE} | (namespaces if len(namespaces) <= MAX_EVENT_NAMESPACES else {_ALL_PODS})
        for scope in scopes - set(self._threads):
            stop = threading.Event()
            self._scope_stops[scope] = stop
            t = threading.Thread(target=self._follow, args=(ctx, scope, stop), name=f"kube-events-{scope}", daemon=True)
            self._threads[scope] = t
            t.start()
        for scope in set(self._threads) - scopes:  # a namespace none of the node's pods is in any more
            self._scope_stops.pop(scope).set()
            del self._threads[scope]

    def _observe(self, ctx: CollectContext, pods: list[Any]) -> None:
        """The pods listed and their DRA objects into the ring (follow_objects); a DRA call that
        fails (a 403 where the role lacks resource.k8s.io) is said once and does not stop the events."""
        assert self.api is not None
        try:
            self.objects.observe(ctx, self.api, self.node, pods)
        except CallFailed as exc:
            if str(exc) != self.objects_failed:
                self.objects_failed = str(exc)
                ctx.note(f"Kubernetes claims and slices not recorded this time: {exc}")
            return
        self.objects_failed = ""

    def _supervise(self, ctx: CollectContext) -> None:
        wait, said = self.connect_backoff_s, ""
        while self.api is None or not self._threads:
            try:
                self._connect(ctx)
                break
            except Exception as exc:  # noqa: BLE001 - SourceUnavailable, CallFailed, or a bug: said, retried
                why = str(exc) if isinstance(exc, SourceUnavailable | CallFailed) else f"{type(exc).__name__}: {exc}"
                if why != said:  # said once per reason, not per attempt
                    said = why
                    ctx.note(f"Kubernetes events not followed yet: {said}; trying again (at most every "
                             f"{self.connect_backoff_max_s:g} s)")
            if self._stop.wait(wait):
                return
            wait = min(wait * 2, self.connect_backoff_max_s)
        while not self._stop.wait(self.replan_s):
            try:
                self._plan(ctx)
                self._alive(ctx)
            except CallFailed as exc:
                self._lost(str(exc))

    # -- one scope: list, then watch from the list's version ---------------------------------
    def _request(self, scope: str) -> tuple[str, str]:
        if scope == _NODE_SCOPE:
            return "/api/v1/events", f"involvedObject.kind=Node,involvedObject.name={self.node}"
        path = "/api/v1/events" if scope == _ALL_PODS else f"/api/v1/namespaces/{scope}/events"
        return path, "involvedObject.kind=Pod"

    def _follow(self, ctx: CollectContext, scope: str, stop: threading.Event) -> None:
        assert self.api is not None
        path, selector = self._request(scope)
        version: str | None = None
        attempt = 0
        failed_at = 0.0
        while not (stop.is_set() or self._stop.is_set()):
            try:
                if version is None:
                    last, items = self.api.list_all(path, {"fieldSelector": selector})
                    meta = last.get("metadata")
                    version = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
                    for ev in items:
                        self._keep(ctx, ev, listed=True)
                    self._alive(ctx)
                    attempt = 0
                query = {"fieldSelector": selector, "allowWatchBookmarks": "true",
                         "timeoutSeconds": str(self.watch_timeout_s)}
                if version:
                    query["resourceVersion"] = version
                opened = time.monotonic()
                for change in self.api.watch(path, query, idle_timeout_s=self.watch_timeout_s + 30.0):
                    if stop.is_set() or self._stop.is_set():
                        return
                    kind, obj = change.get("type"), change.get("object")
                    if kind == "ERROR":  # 410 Gone: the version left the watch cache
                        version = None
                        break
                    meta = obj.get("metadata") if isinstance(obj, dict) else None
                    if isinstance(meta, dict) and isinstance(meta.get("resourceVersion"), str):
                        version = meta["resourceVersion"]
                    if kind in ("ADDED", "MODIFIED"):
                        self._keep(ctx, obj, listed=False)
                attempt = 0
                if time.monotonic() - opened < 1.0 and stop.wait(1.0):  # a server (or proxy) ending
                    return  # every stream at once is not asked again in a busy loop
            except CallFailed as exc:
                version = None  # what came meanwhile: listed again
                if exc.kind == "gone":
                    continue
                if attempt == 0:  # one failure alone (a kept-alive connection the server had closed) is
                    attempt, failed_at = 1, time.time()  # tried again at once; a second one is an outage
                    continue
                self._lost(str(exc), failed_at)
                if stop.wait(_BACKOFF_S[min(attempt - 1, len(_BACKOFF_S) - 1)]):
                    return
                attempt += 1
            except Exception as exc:  # noqa: BLE001 - anything else must not end this scope unseen
                version = None  # (its thread stays in the plan, so it would never be started again)
                self._lost(f"events of {scope}: {type(exc).__name__}: {exc}", time.time())
                if stop.wait(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)]):
                    return
                attempt += 1

    def _keep(self, ctx: CollectContext, ev: Any, listed: bool, retry: bool = True) -> None:
        """Write ``ev`` once when it is about this node or its pods (a pod event of a pod not yet
        known is looked at again after the next pod list: the namespaces watched hold other
        nodes' pods too, so an unknown pod does not make the list come sooner)."""
        key = _key(ev)
        if key is None:
            return
        with self._lock:
            if key in self.seen:
                return
            try:
                ours = bool(select_events([ev], self.node, self.pod_uids, None))
                when = event_time(ev)
            except ParseError:
                return
            if not ours:
                involved = ev.get("involvedObject")
                if retry and isinstance(involved, dict) and involved.get("kind") == "Pod":
                    self.unmatched.append(ev)
                return
            if listed and self.resume_t is not None and when is not None \
                    and when.timestamp() < self.resume_t - RESUME_SKEW_S:
                return  # before what the ring holds: recorded by an earlier run (or by none)
            self.seen.add(key)
            if len(self.seen) > 100_000:
                self.seen = {key}
        ctx.sink.append_jsonl(kspec.EVENTS_FOLLOWED, redact_events([ev], ctx.redactor)[0])

    # -- outages ----------------------------------------------------------------------------
    def _lost(self, why: str, since: float | None = None) -> None:
        with self._lock:
            if self.lost_at is None:
                self.lost_at, self.lost_why = since or time.time(), why

    def _alive(self, ctx: CollectContext) -> None:
        with self._lock:
            lost_at, why = self.lost_at, self.lost_why
            self.lost_at = None
        if lost_at is not None:
            now = time.time()
            ctx.sink.append_jsonl(RECORDER_EVENTS, {
                "kind": "gap", "source": "kubernetes", "from": lost_at, "to": now,
                "from_time": iso_from_unix(lost_at), "to_time": iso_from_unix(now),
                "reason": f"Kubernetes API server lost ({why[:300]}); its events were listed again"})
