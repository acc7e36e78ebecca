"""Dynamic Resource Allocation (``resource.k8s.io``): which device a pod's claim was allocated, pure.

Reads the documents the kubernetes collector writes (``kubernetes/resourceclaims.json``,
``kubernetes/resourceslices.json``: List objects as the API server sent them, one item each) and
the pod (``kubernetes/pods.json``), and never talks to the API server. Shapes, as
``k8s.io/api/resource/v1`` defines them (v1beta2 the same; v1beta1 differs where noted):

- a pod names its claims in ``spec.resourceClaims[]`` (``name`` and ``resourceClaimName``, or a
  ``resourceClaimTemplateName`` whose generated claim's name is in
  ``status.resourceClaimStatuses[]``); a container uses them in ``resources.claims[]`` (``name``,
  optional ``request``: only that request's devices);
- an extended resource served by DRA (a ``nvidia.com/gpu`` limit matched to a DeviceClass's
  ``extendedResourceName``): ``status.extendedResourceClaimStatus`` names the generated claim
  (``resourceClaimName``) and, per container, the claim request of each resource
  (``requestMappings[]``: ``containerName``, ``resourceName``, ``requestName``);
- a claim's allocation: ``status.allocation.devices.results[]`` (``request``, ``driver``, ``pool``,
  ``device``), its configuration ``status.allocation.devices.config[]`` (``requests``; ``opaque``:
  ``driver`` and the driver's ``parameters``, for NVIDIA's driver a ``GpuConfig`` whose
  ``sharing.strategy`` is ``TimeSlicing`` or ``MPS`` with ``mpsConfig``), and the pods it is
  reserved for, ``status.reservedFor[]`` (``resource: pods``, ``name``, ``uid``; any other
  consumer its own ``resource``): a claim reserved for consumers that are not a pod is not that
  pod's evidence, whatever its name (:meth:`Claim.reserved_for_another`);
- the device itself: the driver's ResourceSlice ``spec.devices[]`` (``name``, ``attributes``: each
  a one-key object such as ``{"string": "GPU-..."}``; v1beta1 puts them under ``basic``). NVIDIA's
  ``gpu.nvidia.com`` names a GPU ``gpu-<minor>`` (the device minor number, not the NVML index) and
  a MIG device ``gpu-<minor>-mig-<profile id>-<start>-<size>``, with the attributes ``uuid``,
  ``type`` (``gpu``, ``mig``), and for MIG ``parentUUID`` and ``profile``.

Every result carries the RFC 6901 pointer into its document and a compact JSON excerpt, for the
grant's citation. Malformed entries are skipped (a claim is evidence about one pod; one broken
item never hides the others).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from forensics.errors import ParseError
from forensics.parsing.gpu_allocation import compact_json, json_pointer
from forensics.parsing.quantity import quantity_bytes

__all__ = [
    "Claim",
    "ClaimConsumer",
    "ClaimDevice",
    "ClaimRef",
    "ClaimSharing",
    "SliceDevice",
    "claim_of_pod",
    "claims_by_name",
    "minor_of_device_name",
    "pod_claim_refs",
    "slice_devices",
]

_GPU_NAME_RE = re.compile(r"^gpu-(?P<minor>[0-9]+)(?:-mig-.*)?$")


@dataclass(frozen=True)
class SliceDevice:
    """One device a driver's ResourceSlice publishes (``driver``/``pool``/``name`` identify it)."""

    driver: str
    pool: str
    name: str
    uuid: str | None
    parent_uuid: str | None
    profile: str | None
    type: str | None
    pointer: str  # into resourceslices.json
    excerpt: str


@dataclass(frozen=True)
class ClaimDevice:
    """One allocation result of a claim."""

    request: str
    driver: str
    pool: str
    device: str
    pointer: str  # into resourceclaims.json
    excerpt: str


@dataclass(frozen=True)
class ClaimSharing:
    """A driver configuration of the claim that shares its GPU on purpose (NVIDIA ``GpuConfig``)."""

    strategy: str  # TimeSlicing | MPS
    detail: str  # e.g. "MPS (defaultActiveThreadPercentage 50, defaultPinnedDeviceMemoryLimit 8Gi)"
    requests: tuple[str, ...]  # empty: every request of the claim
    sm_limit_pct: float | None
    memory_limit_bytes: int | None
    pointer: str
    excerpt: str


@dataclass(frozen=True)
class ClaimConsumer:
    """One entry of a claim's ``status.reservedFor`` (``resource`` is ``pods`` for a pod)."""

    resource: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.resource}/{self.name} (uid {self.uid})"


@dataclass(frozen=True)
class Claim:
    """A ResourceClaim as its status allocates it; ``consumers`` its ``status.reservedFor``
    (``reserved_pointer``/``reserved_excerpt`` cite it; empty: the claim names no consumer)."""

    namespace: str
    name: str
    uid: str
    pointer: str  # /items/N
    allocated: bool
    devices: tuple[ClaimDevice, ...]
    sharing: tuple[ClaimSharing, ...]
    consumers: tuple[ClaimConsumer, ...] = ()
    reserved_pointer: str = ""
    reserved_excerpt: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def reserved_for(self) -> tuple[str, ...]:
        """The UIDs of the pods the claim is reserved for."""
        return tuple(c.uid for c in self.consumers if c.resource == "pods")

    def reserved_for_another(self, pod_uid: str | None) -> bool:
        """Whether the claim names its consumers and the pod ``pod_uid`` is not one of them: then
        the claim found under the pod's claim name (one deleted and recreated, another's) is not
        the pod's evidence. An empty ``reservedFor`` (a bundle read mid-allocation) says nothing."""
        return bool(self.consumers) and (not pod_uid or pod_uid not in self.reserved_for)


@dataclass(frozen=True)
class ClaimRef:
    """A container's use of a claim: ``request`` None means every request of the claim.
    ``form`` is ``claim`` (``resources.claims``) or ``extended-resource`` (a resource limit served
    by DRA); ``pointer`` points into pods.json at the reference, ``resource`` names the extended
    resource."""

    namespace: str
    claim: str | None  # None: a template whose claim was not generated yet (no status)
    pod_claim: str  # the pod's own name for it (spec.resourceClaims[].name)
    request: str | None
    form: str
    pointer: str
    resource: str | None = None


def _d(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _s(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _attr(attrs: Mapping[str, Any], name: str) -> str | None:
    """A string attribute; a qualified name (``gpu.nvidia.com/uuid``) matches its short form."""
    for key, value in attrs.items():
        if isinstance(key, str) and (key == name or key.rsplit("/", 1)[-1] == name):
            v = _d(value)
            s = v.get("string", v.get("stringValue"))
            if isinstance(s, str):
                return s
    return None


def minor_of_device_name(name: str) -> int | None:
    """NVIDIA's ``gpu-3`` or ``gpu-3-mig-9-4-2`` -> 3 (the GPU's device minor number)."""
    m = _GPU_NAME_RE.match(name)
    return int(m["minor"]) if m else None


def _slice_rank(item: Mapping[str, Any], spec: Mapping[str, Any]) -> tuple[int, int]:
    """How new a slice is: its pool's ``generation`` (a driver that changes its devices, a MIG
    reconfiguration, bumps it in every slice of the pool; consumers are to take the highest), then
    its ``resourceVersion`` where numeric (etcd's revision), -1 where either is missing."""
    gen = _d(spec.get("pool")).get("generation")
    rv = _s(_d(item.get("metadata")).get("resourceVersion"))
    return (gen if isinstance(gen, int) and not isinstance(gen, bool) else -1,
            int(rv) if rv is not None and rv.isdigit() else -1)


def slice_devices(doc: Any) -> dict[tuple[str, str, str], SliceDevice]:
    """(driver, pool, device name) -> the device, from a ResourceSliceList (v1, v1beta2, v1beta1).

    A name in several slices (the recorder keeps slices gone since, after the live ones: a MIG
    reconfiguration leaves the old slice's ``gpu-0`` with another UUID) is the newest slice's
    (:func:`_slice_rank`), the first listed among equals: a stale UUID would make a pod on its
    real GPU look unallocated."""
    out: dict[tuple[str, str, str], SliceDevice] = {}
    ranks: dict[tuple[str, str, str], tuple[int, int]] = {}
    for i, item in enumerate(_l(_d(doc).get("items"))):
        spec = _d(_d(item).get("spec"))
        driver, pool = _s(spec.get("driver")), _s(_d(spec.get("pool")).get("name"))
        if driver is None or pool is None:
            continue
        rank = _slice_rank(_d(item), spec)
        for j, dev in enumerate(_l(spec.get("devices"))):
            dev = _d(dev)
            name = _s(dev.get("name"))
            if name is None:
                continue
            key = (driver, pool, name)
            if key in ranks and ranks[key] >= rank:
                continue
            ranks[key] = rank
            attrs = _d(dev.get("attributes")) or _d(_d(dev.get("basic")).get("attributes"))
            out[key] = SliceDevice(
                driver, pool, name, _attr(attrs, "uuid"), _attr(attrs, "parentUUID"), _attr(attrs, "profile"),
                _attr(attrs, "type"), json_pointer("items", i, "spec", "devices", j), compact_json(dev))
    return out


def _sharing(config: Any, pointer: str) -> ClaimSharing | None:
    c = _d(config)
    opaque = _d(c.get("opaque"))
    params = _d(opaque.get("parameters"))
    sharing = _d(params.get("sharing"))
    strategy = _s(sharing.get("strategy"))
    if strategy not in ("TimeSlicing", "MPS"):
        return None
    requests = tuple(r for r in _l(c.get("requests")) if isinstance(r, str))
    sm: float | None = None
    mem: int | None = None
    if strategy == "MPS":
        mps = _d(sharing.get("mpsConfig"))
        parts = []
        pct = mps.get("defaultActiveThreadPercentage")
        if isinstance(pct, int | float) and not isinstance(pct, bool):
            sm = float(pct)
            parts.append(f"defaultActiveThreadPercentage {pct}")
        limit = mps.get("defaultPinnedDeviceMemoryLimit")
        if isinstance(limit, str | int) and not isinstance(limit, bool):
            try:
                mem = quantity_bytes(limit)
            except ParseError:
                mem = None
            parts.append(f"defaultPinnedDeviceMemoryLimit {limit}")
        detail = "MPS" + (f" ({', '.join(parts)})" if parts else "")
    else:
        interval = _s(_d(sharing.get("timeSlicingConfig")).get("interval"))
        detail = "TimeSlicing" + (f" (interval {interval})" if interval else "")
    return ClaimSharing(strategy, detail, requests, sm, mem, pointer, compact_json(c))


def claims_by_name(doc: Any) -> dict[tuple[str, str], tuple[Claim, ...]]:
    """(namespace, name) -> the claims of that name, in the ResourceClaimList's order (the flight
    recorder's list holds a claim deleted and recreated under one name twice: the live one, then
    the gone one; :func:`claim_of_pod` picks a pod's)."""
    out: dict[tuple[str, str], tuple[Claim, ...]] = {}
    for i, item in enumerate(_l(_d(doc).get("items"))):
        meta = _d(_d(item).get("metadata"))
        ns, name = _s(meta.get("namespace")), _s(meta.get("name"))
        if ns is None or name is None:
            continue
        status = _d(_d(item).get("status"))
        allocation = _d(status.get("allocation"))
        devices = _d(allocation.get("devices"))
        results: list[ClaimDevice] = []
        for j, r in enumerate(_l(devices.get("results"))):
            r = _d(r)
            vals = [_s(r.get(k)) for k in ("request", "driver", "pool", "device")]
            if any(v is None for v in vals[1:]):
                continue
            results.append(ClaimDevice(vals[0] or "", vals[1] or "", vals[2] or "", vals[3] or "",
                                       json_pointer("items", i, "status", "allocation", "devices", "results", j),
                                       compact_json(r)))
        sharing = []
        for k, config in enumerate(_l(devices.get("config"))):
            sh = _sharing(config, json_pointer("items", i, "status", "allocation", "devices", "config", k))
            if sh is not None:
                sharing.append(sh)
        reserved = status.get("reservedFor")
        consumers = tuple(ClaimConsumer(_s(_d(r).get("resource")) or "", _s(_d(r).get("name")) or "",
                                        _s(_d(r).get("uid")) or "")
                          for r in _l(reserved) if _s(_d(r).get("uid")))
        claim = Claim(ns, name, _s(meta.get("uid")) or "", json_pointer("items", i), bool(allocation),
                      tuple(results), tuple(sharing), consumers,
                      json_pointer("items", i, "status", "reservedFor") if consumers else "",
                      compact_json(reserved) if consumers else "")
        out[(ns, name)] = (*out.get((ns, name), ()), claim)
    return out


def claim_of_pod(candidates: tuple[Claim, ...], pod_uid: str | None) -> Claim | None:
    """The pod's claim among the claims of one name: the one reserved for it; else the only one,
    when it is not reserved for another. None when none is the pod's evidence: reserved for
    others only, or several (one deleted and recreated) of which none names the pod."""
    mine = [c for c in candidates if pod_uid and pod_uid in c.reserved_for]
    if mine:
        return mine[0]
    if len(candidates) == 1 and not candidates[0].reserved_for_another(pod_uid):
        return candidates[0]
    return None


def pod_claim_refs(pod: Any, pod_pointer: str) -> dict[str, list[ClaimRef]]:
    """Container name -> the claims it uses (``resources.claims``, and extended resources DRA serves)."""
    p = _d(pod)
    ns = _s(_d(p.get("metadata")).get("namespace")) or ""
    spec, status = _d(p.get("spec")), _d(p.get("status"))
    generated = {_s(_d(s).get("name")): _s(_d(s).get("resourceClaimName"))
                 for s in _l(status.get("resourceClaimStatuses"))}
    pod_claims: dict[str, str | None] = {}
    for rc in _l(spec.get("resourceClaims")):
        rc = _d(rc)
        name = _s(rc.get("name"))
        if name is None:
            continue
        pod_claims[name] = _s(rc.get("resourceClaimName")) or generated.get(name)
    out: dict[str, list[ClaimRef]] = {}
    for field in ("initContainers", "containers"):
        for j, c in enumerate(_l(spec.get(field))):
            c = _d(c)
            cname = _s(c.get("name"))
            if cname is None:
                continue
            for k, use in enumerate(_l(_d(c.get("resources")).get("claims"))):
                use = _d(use)
                pc = _s(use.get("name"))
                if pc is None or pc not in pod_claims:
                    continue
                out.setdefault(cname, []).append(ClaimRef(
                    ns, pod_claims[pc], pc, _s(use.get("request")) or None, "claim",
                    f"{pod_pointer}{json_pointer('spec', field, j, 'resources', 'claims', k)}"))
    ext = _d(status.get("extendedResourceClaimStatus"))
    ext_claim = _s(ext.get("resourceClaimName"))
    for m, mapping in enumerate(_l(ext.get("requestMappings"))):
        mapping = _d(mapping)
        cname, req = _s(mapping.get("containerName")), _s(mapping.get("requestName"))
        if cname is None or req is None or ext_claim is None:
            continue
        out.setdefault(cname, []).append(ClaimRef(
            ns, ext_claim, ext_claim, req, "extended-resource",
            f"{pod_pointer}{json_pointer('status', 'extendedResourceClaimStatus', 'requestMappings', m)}",
            _s(mapping.get("resourceName"))))
    return out
