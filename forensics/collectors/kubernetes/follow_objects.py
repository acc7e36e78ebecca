"""The pods of this node and their DRA objects for the flight recorder, kept at first sight: a
ResourceClaim is deleted with its pod, so a pod gone before any capture would otherwise lose its
grant and be judged ungranted from the ring's history (processes in the ring attributed to its
container, no claim to say which GPU it held).

Sources (the follower's :class:`~forensics.collectors.kubernetes.api.KubeAPI`, at each of its pod
lists, every ``replan_s``; the calls capture makes, so deploy/rbac.yaml covers them as they are):

- the follower's own ``GET /api/v1/pods?fieldSelector=spec.nodeName={node}`` (no call of its own);
- ``GET /apis/resource.k8s.io`` once per connection (the versions offered; v1, else v1beta2, else
  v1beta1, as :mod:`forensics.collectors.kubernetes.dra` reads them); not offered: no DRA here;
- ``GET /apis/resource.k8s.io/{v}/resourceslices?fieldSelector=spec.nodeName={node}``;
- ``GET /apis/resource.k8s.io/{v}/namespaces/{ns}/resourceclaims`` for the namespaces of the pods
  that use claims, the claims those pods name or that are reserved for them kept.

Written (write members, the ring's state: the latest copy is in every segment, and ``capture
--since`` carries it under ``ring/``), in the shapes capture writes, redacted as capture redacts:
``kubernetes/pods.json`` (a PodList), ``kubernetes/resourceclaims.json`` and
``kubernetes/resourceslices.json`` (Lists, ``apiVersion`` the version read). Each holds the objects
listed now and, after them, those seen before and gone since (their last version), so the analysis'
loaders read a deleted pod and its claim as if captured; each without ``metadata.managedFields``
(as ``kubectl get -o json`` shows it; no loader reads it). A member is written again only when an
object appears, changes (``resourceVersion``) or goes; the objects gone are bounded
(:data:`MAX_GONE` of each kind and :data:`MAX_GONE_BYTES` of their JSON, the oldest gone dropped
first), as the ring bounds its state (half a segment: a write member is copied at the top of every
segment). A restarted recorder starts from the ring's latest copies (:meth:`KubeObjectKeeper.resume`:
the state at the top of its newest segment), so the pods gone before the restart stay in the
members it writes.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

from forensics.bundle.redact_kubernetes import redact_object_metadata
from forensics.bundle.sink import dumps_json
from forensics.collect.context import CollectContext
from forensics.collectors.kubernetes.api import CallFailed, KubeAPI
from forensics.collectors.kubernetes.dra import GROUP, VERSIONS, claim_names
from forensics.collectors.kubernetes.redaction import redact_pod
from forensics.specs import kubernetes as kspec

__all__ = ["MAX_GONE", "MAX_GONE_BYTES", "KeptObjects", "KubeObjectKeeper"]

MAX_GONE = 200  # objects of one kind kept after they are gone, at most
MAX_GONE_BYTES = 512 << 10  # and their JSON at most this (the ring's state is half a segment in all)


def _key(obj: Any) -> tuple[str, str] | None:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("uid"), str):
        return None
    return meta["uid"], str(meta.get("resourceVersion") or "")


def _kept(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without ``metadata.managedFields`` (the server-side apply bookkeeping, as
    ``kubectl get -o json`` leaves it out: often half a pod's bytes, read by no loader)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


class KeptObjects:
    """One kind's objects by UID: those listed last, then those gone (their last version seen),
    the oldest gone dropped past :data:`MAX_GONE` objects or :data:`MAX_GONE_BYTES`."""

    def __init__(self) -> None:
        self.live: dict[str, dict[str, Any]] = {}
        self.gone: OrderedDict[str, tuple[dict[str, Any], int]] = OrderedDict()
        self.gone_bytes = 0
        self.versions: dict[str, str] = {}

    def update(self, listed: list[Any]) -> bool:
        """Take a fresh list; whether anything appeared, changed or went."""
        now: dict[str, dict[str, Any]] = {}
        changed = False
        for obj in listed:
            key = _key(obj)
            if key is None:
                continue
            uid, version = key
            now[uid] = _kept(obj)
            if self.versions.get(uid) != version:
                changed = True
            if uid in self.gone:  # back (a claim listed again after a failed list)
                self.gone_bytes -= self.gone.pop(uid)[1]
                changed = True
            self.versions[uid] = version
        for uid in self.live.keys() - now.keys():
            obj = self.live[uid]
            size = len(dumps_json(obj, indent=None))
            self.gone[uid] = (obj, size)
            self.gone_bytes += size
            changed = True
        while self.gone and (len(self.gone) > MAX_GONE or self.gone_bytes > MAX_GONE_BYTES):
            uid, (_, size) = self.gone.popitem(last=False)
            self.gone_bytes -= size
            self.versions.pop(uid, None)
        self.live = now
        return changed

    def items(self) -> list[dict[str, Any]]:
        return [*self.live.values(), *(obj for obj, _ in self.gone.values())]

    def resume(self, items: list[Any]) -> None:
        """Take what an earlier run wrote as gone (an object listed again becomes live again)."""
        for obj in items:
            key = _key(obj)
            if key is None or key[0] in self.live or key[0] in self.gone:
                continue
            size = len(dumps_json(obj, indent=None))
            self.gone[key[0]] = (obj, size)
            self.gone_bytes += size
        while self.gone and (len(self.gone) > MAX_GONE or self.gone_bytes > MAX_GONE_BYTES):
            self.gone_bytes -= self.gone.popitem(last=False)[1][1]


_MEMBERS = (kspec.PODS, kspec.RESOURCE_CLAIMS, kspec.RESOURCE_SLICES)


class KubeObjectKeeper:
    """Called by the event follower with each list of this node's pods (see the module docstring)."""

    def __init__(self) -> None:
        self.pods = KeptObjects()
        self.claims = KeptObjects()
        self.slices = KeptObjects()
        self.version: str | None = None  # the resource.k8s.io version read; "" none offered
        self.claim_uids_wanted: set[str] = set()

    def resume(self, ring_dir: str | None, now: float) -> int:
        """On start: the objects of the ring's latest copies of the three members (the state at the
        top of its newest segment), as gone until listed again; how many. A ring that cannot be
        read is no error: the recorder then starts from what it lists."""
        import json

        from forensics.errors import RingError
        from forensics.ring import RingReader, resolve_ring_dir

        root = resolve_ring_dir(ring_dir)
        if not root.is_dir():
            return 0
        latest: dict[str, bytes] = {}
        try:
            reader = RingReader(root)
            # the newest sealed segment (a stopped run's last) and the active one: the state at their top
            since = max((s.max_t for s in reader.segments() if s.sealed and s.max_t is not None), default=now)
            for rec in reader.records(since=min(since, now), members=_MEMBERS, keep_writes=True):
                if rec.op == "write" and rec.member in _MEMBERS:
                    latest[rec.member] = rec.data
        except (RingError, OSError):
            return 0
        found = 0
        for member, kept in ((kspec.PODS, self.pods), (kspec.RESOURCE_CLAIMS, self.claims),
                             (kspec.RESOURCE_SLICES, self.slices)):
            try:
                doc = json.loads(latest[member]) if member in latest else {}
            except ValueError:
                continue
            items = doc.get("items") if isinstance(doc, dict) else None
            if isinstance(items, list):
                kept.resume(items)
                found += len(items)
        return found

    def reconnected(self) -> None:
        """A new connection: the group's versions are asked again."""
        self.version = None

    def observe(self, ctx: CollectContext, api: KubeAPI, node: str, pods: list[Any]) -> None:
        """Record the pods listed, then the node's slices and the claims of its pods. A failed DRA
        call leaves that kind as it was (raised: the follower says the API server was lost)."""
        if self.pods.update(pods):
            items = [redact_pod(copy.deepcopy(p), ctx.redactor) for p in self.pods.items()]
            ctx.sink.write_json(kspec.PODS, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items})
        version = self._version(ctx, api)
        if not version:
            return
        base = f"/apis/{GROUP}/{version}"
        _, slices = api.list_all(f"{base}/resourceslices", {"fieldSelector": f"spec.nodeName={node}"})
        if self.slices.update(slices):
            self._write(ctx, kspec.RESOURCE_SLICES, version, "ResourceSliceList", self.slices)
        wanted = claim_names(pods)
        uids = {k[0] for k in map(_key, pods) if k is not None}
        kept: list[Any] = []
        for ns in sorted(wanted):
            _, items = api.list_all(f"{base}/namespaces/{ns}/resourceclaims")
            for item in items:
                meta = item.get("metadata") if isinstance(item, dict) else None
                status = item.get("status") if isinstance(item, dict) else None
                reserved = {r.get("uid") for r in ((status or {}).get("reservedFor") or []) if isinstance(r, dict)}
                if isinstance(meta, dict) and (meta.get("name") in wanted[ns] or reserved & uids):
                    kept.append(item)
        if self.claims.update(kept):
            self._write(ctx, kspec.RESOURCE_CLAIMS, version, "ResourceClaimList", self.claims)

    def _version(self, ctx: CollectContext, api: KubeAPI) -> str:
        if self.version is None:
            try:
                group = api.get_json(f"/apis/{GROUP}")
            except CallFailed as exc:
                if exc.kind != "not-found":
                    raise
                self.version = ""
                ctx.note(f"{GROUP} not served (no Dynamic Resource Allocation): no claims recorded")
                return ""
            offered = {v.get("version") for v in group.get("versions") or [] if isinstance(v, dict)}
            self.version = next((v for v in VERSIONS if v in offered), "")
            if self.version:
                ctx.note(f"recording this node's ResourceSlices and its pods' ResourceClaims ({GROUP}/{self.version})")
        return self.version

    @staticmethod
    def _write(ctx: CollectContext, member: str, version: str, kind: str, kept: KeptObjects) -> None:
        items = [copy.deepcopy(o) for o in kept.items()]
        if ctx.redactor.enabled:
            for item in items:
                redact_object_metadata(item.get("metadata"), ctx.redactor)
        ctx.sink.write_json(member, {"apiVersion": f"{GROUP}/{version}", "kind": kind, "metadata": {}, "items": items})
