"""What a pod's container was granted in Kubernetes, in every form, as one list of grants.

The forms (mechanisms of :class:`forensics.parsing.gpu_allocation.GpuGrant`, documented there):
``device-plugin`` (a ``nvidia.com/gpu`` / ``nvidia.com/mig-*`` limit, its devices from the
kubelet's pod-resources ``devices``), ``renamed-resource`` (a limit on another GPU resource the node
advertises, e.g. ``nvidia.com/gpu.shared``, or on any ``nvidia.com/`` resource when the node's
capacity was not read, as in a ring's history, which holds no node object; its devices from
pod-resources or from the device plugin's ``NVIDIA_VISIBLE_DEVICES`` in the container's process
environment), ``dra-claim`` (a
ResourceClaim the container uses, resolved through its allocation results and the driver's
ResourceSlice, or through the kubelet's pod-resources ``dynamic_resources``) and
``extended-resource-dra`` (a ``nvidia.com/gpu`` limit the scheduler served from a DRA claim,
``status.extendedResourceClaimStatus``). Each grant cites the members and JSON pointers it was
read from. :func:`kubernetes_grants_allocation` turns the list into the container's
:class:`~forensics.analysis.model.GpuAllocation`; a grant whose devices the evidence does not name
makes the allocation ``devices_known`` false (granted; which GPU is not judged).

A claim is found by the pod's namespace and claim name; one whose ``status.reservedFor`` names
consumers and not this pod (deleted and recreated under the name, or another pod's) is not the
pod's evidence: its allocation and sharing are never read as the pod's, and the pod's grant through
it is of unknown devices, saying for whom the claim is reserved. A name the bundle holds twice (the
flight recorder keeps a deleted claim after the live one of the same name) is the pod's claim only
through the one reserved for it; when none is, the grant is of unknown devices.

``NVIDIA_VISIBLE_DEVICES=void`` (what a CDI spec puts in a DRA container's environment) is never
read as "no grant": a claim's grant stands on the claim.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from forensics.analysis.allocation import minor_read, names_node_gpus, resolve_refs
from forensics.analysis.findings import Evidence
from forensics.analysis.model import Gpu, GpuAllocation, ShareContract
from forensics.errors import ParseError
from forensics.parsing.dra import (
    Claim,
    ClaimRef,
    SliceDevice,
    claim_of_pod,
    minor_of_device_name,
)
from forensics.parsing.gpu_allocation import (
    GpuGrant,
    GpuRef,
    GrantSource,
    compact_json,
    json_pointer,
    parse_visible_devices,
)
from forensics.parsing.quantity import quantity_count

__all__ = [
    "DynamicResource",
    "KubeGrantInputs",
    "PluginDevices",
    "claim_share_contract",
    "container_grants",
    "dynamic_resources",
    "kubernetes_grants_allocation",
    "merge_allocations",
    "plugin_devices",
    "with_gpu_indexes",
]

DEFAULT_GPU = "nvidia.com/gpu"
_MIG_INDEX_RE = re.compile(r"^[0-9]+:[0-9]+$")
MIG_PREFIX = "nvidia.com/mig-"
PODS = "kubernetes/pods.json"
PODRESOURCES = "kubernetes/podresources/list.json"
CLAIMS = "kubernetes/resourceclaims.json"
SLICES = "kubernetes/resourceslices.json"

EvidenceFor = Callable[[str, str, str], Evidence]


@dataclass(frozen=True)
class PluginDevices:
    """A pod-resources ``devices`` entry of one container: resource, device ids, where."""

    resource: str
    ids: tuple[str, ...]
    pointer: str
    excerpt: str


@dataclass(frozen=True)
class DynamicResource:
    """A pod-resources ``dynamic_resources`` claim resource of one container."""

    claim_namespace: str
    claim_name: str
    driver: str
    pool: str
    device: str
    cdi_devices: tuple[str, ...]
    pointer: str
    excerpt: str


@dataclass
class KubeGrantInputs:
    """What the node's documents say about grants, read once per bundle."""

    advertised: Mapping[str, int]  # GPU resources in the node's status.capacity
    plugin: Mapping[tuple[str, str, str], list[PluginDevices]]  # (ns, pod, container)
    dynamic: Mapping[tuple[str, str, str], list[DynamicResource]]
    podresources_present: bool
    claims: Mapping[tuple[str, str], tuple[Claim, ...]]  # every claim of each name (forensics.parsing.dra)
    claims_present: bool
    slices: Mapping[tuple[str, str, str], SliceDevice]
    # container id -> (NVIDIA_VISIBLE_DEVICES of one of its processes, its evidence)
    process_env: Mapping[str, tuple[str, Evidence]] = field(default_factory=dict)
    # whether the node's status.capacity was read: without it (a ring's history holds no node object)
    # a limit on another nvidia.com/ resource may be a renamed GPU resource, and is taken for one
    capacity_read: bool = True
    node_gpus: int = 0  # the GPUs NVML listed on the node (a resource advertised more often is replicas)

    def replicated(self, resource: str) -> bool:
        """Whether a renamed resource is shared by design: the node advertises more of it than it
        has GPUs (time-slicing or MPS replicas, a memory-sharing plugin's units); without the
        node's capacity, not known, so taken as shared (never judged an exclusive grant)."""
        if not self.capacity_read:
            return True
        return self.advertised.get(resource, 0) > self.node_gpus > 0


def _is_gpu_resource(name: str, advertised: Mapping[str, int]) -> bool:
    return name == DEFAULT_GPU or name.startswith(MIG_PREFIX) or name in advertised


def _limits(spec: Mapping[str, Any]) -> dict[str, int]:
    res = spec.get("resources")
    limits = res.get("limits") if isinstance(res, Mapping) else None
    out: dict[str, int] = {}
    for name, value in (limits.items() if isinstance(limits, Mapping) else ()):
        # NVIDIA's resources, and another vendor's that name a GPU (judged against the node's
        # capacity by _is_gpu_resource)
        if isinstance(name, str) and (name.startswith("nvidia.com/") or ("/" in name and "gpu" in name.lower())):
            try:
                n = quantity_count(value)
            except ParseError:
                continue
            if n > 0:
                out[name] = n
    return out


def _plugin_refs(ids: Sequence[str]) -> tuple[GpuRef, ...]:
    out = []
    for raw in ids:
        tok = raw.split("::", 1)[0]
        kind = "mig-uuid" if tok.startswith("MIG-") else "uuid" if tok.startswith("GPU-") else (
            "index" if tok.isascii() and tok.isdigit() else
            "mig-index" if _MIG_INDEX_RE.match(tok) else "unknown")  # deviceIDStrategy=index: 0:1
        out.append(GpuRef(tok, kind))
    return tuple(dict.fromkeys(out))


def _dra_ref(driver: str, pool: str, device: str, slices: Mapping[tuple[str, str, str], SliceDevice]
             ) -> tuple[GpuRef | None, SliceDevice | None]:
    sd = slices.get((driver, pool, device))
    if sd is not None and sd.uuid:
        return GpuRef(sd.uuid, "mig-uuid" if sd.uuid.startswith("MIG-") else "uuid"), sd
    minor = minor_of_device_name(device) if driver == "gpu.nvidia.com" else None
    if minor is not None:
        return GpuRef(str(minor), "minor"), sd
    return None, sd


def _is_gpu_device(driver: str, sd: SliceDevice | None) -> bool:
    """Whether a claim's device is a GPU: its slice gives it a GPU or MIG UUID; without a slice,
    or with a slice that gives no UUID, its driver is a GPU driver (NVIDIA's ``gpu.nvidia.com``,
    or ``gpu`` in the name). A NIC's, an IMEX channel's (``compute-domain.nvidia.com``) or any
    other device grants no GPU."""
    if sd is not None and sd.uuid:
        return sd.uuid.startswith(("GPU-", "MIG-"))
    return driver == "gpu.nvidia.com" or "gpu" in driver.split(".", 1)[0]


def _dra_reason(claim: str, driver: str, device: str, sd: SliceDevice | None) -> str:
    extra = f" ({sd.profile})" if sd is not None and sd.profile else ""
    return f"claim {claim}: {driver} {device}{extra}"


def _own_claim(inputs: KubeGrantInputs, namespace: str, name: str, pod_uid: str) -> Claim | None:
    """The claim of that name that is this pod's evidence (:func:`~forensics.parsing.dra.claim_of_pod`)."""
    return claim_of_pod(inputs.claims.get((namespace, name), ()), pod_uid)


def _claim_grants(ref: ClaimRef, inputs: KubeGrantInputs, dynamic: list[DynamicResource],
                  used_dynamic: set[int], pod_uid: str) -> list[GpuGrant]:
    """The grants of one claim reference: from the claim's allocation, else pod-resources (the
    kubelet's own record of this pod's devices). A claim reserved for other consumers grants
    devices unknown: its allocation is someone else's."""
    mech = "extended-resource-dra" if ref.form == "extended-resource" else "dra-claim"
    ref_src = GrantSource(PODS, ref.pointer, compact_json(ref.resource or ref.pod_claim))
    key = f"{ref.namespace}/{ref.claim}" if ref.claim else f"{ref.namespace}/(claim {ref.pod_claim} not generated)"
    named_all = inputs.claims.get((ref.namespace, ref.claim), ()) if ref.claim else ()
    named = named_all[0] if named_all else None
    claim = _own_claim(inputs, ref.namespace, ref.claim, pod_uid) if ref.claim else None
    grants: list[GpuGrant] = []
    if claim is not None and claim.devices:
        sharing = [s for s in claim.sharing if not s.requests or ref.request is None or ref.request in s.requests]
        for res in claim.devices:
            if ref.request is not None and res.request != ref.request and not res.request.startswith(ref.request + "/"):
                continue
            gref, sd = _dra_ref(res.driver, res.pool, res.device, inputs.slices)
            if not _is_gpu_device(res.driver, sd):
                continue
            sources = [ref_src, GrantSource(CLAIMS, res.pointer, res.excerpt)]
            if sd is not None:
                sources.append(GrantSource(SLICES, sd.pointer, sd.excerpt))
            sources.extend(GrantSource(CLAIMS, s.pointer, s.excerpt) for s in sharing)
            reason = _dra_reason(key, res.driver, res.device, sd)
            if sharing:
                reason += f", shared by {sharing[0].detail}"
            grants.append(GpuGrant(mech, "devices", (gref,) if gref else (), "operator", True, reason,
                                   tuple(sources), claim=key, devices_known=gref is not None,
                                   shared=bool(sharing)))
        return grants
    listed = False  # the kubelet listed this claim's devices (a GPU's or not)
    for i, dr in enumerate(dynamic):
        if ref.claim is not None and (dr.claim_namespace, dr.claim_name) == (ref.namespace, ref.claim):
            used_dynamic.add(i)
            listed = True
            if _is_gpu_device(dr.driver, inputs.slices.get((dr.driver, dr.pool, dr.device))):
                grants.append(_dynamic_grant(dr, inputs, pod_uid, mech, ref_src))
    if listed or (claim is not None and claim.allocated):
        return grants
    cited: tuple[GrantSource, ...] = (ref_src,)
    if len(named_all) > 1 and claim is None:  # deleted and recreated: none names this pod
        why = f"{len(named_all)} claims of that name in the bundle (one deleted and recreated), none reserved for this pod"
        cited = (ref_src, *(GrantSource(CLAIMS, c.pointer, compact_json({"uid": c.uid})) for c in named_all))
    elif named is not None and claim is None:  # reserved for other consumers
        why = (f"the claim of that name is reserved for {', '.join(str(c) for c in named.consumers)}, "
               "not this pod")
        cited = (ref_src, GrantSource(CLAIMS, named.reserved_pointer, named.reserved_excerpt))
    else:
        why = ("its claim is not in the bundle" if not inputs.claims_present or claim is None
               else "its claim has no allocation")
    return [GpuGrant(mech, "devices", (), "operator", True, f"claim {key} (devices unknown: {why})",
                     cited, claim=key, devices_known=False)]


def _dynamic_grant(dr: DynamicResource, inputs: KubeGrantInputs, pod_uid: str, mech: str = "dra-claim",
                   extra: GrantSource | None = None) -> GpuGrant:
    key = f"{dr.claim_namespace}/{dr.claim_name}"
    gref, sd = _dra_ref(dr.driver, dr.pool, dr.device, inputs.slices)
    sources = [*((extra,) if extra else ()), GrantSource(PODRESOURCES, dr.pointer, dr.excerpt)]
    if sd is not None:
        sources.append(GrantSource(SLICES, sd.pointer, sd.excerpt))
    claim = _own_claim(inputs, dr.claim_namespace, dr.claim_name, pod_uid)
    shared = bool(claim and claim.sharing)
    return GpuGrant(mech, "devices", (gref,) if gref else (), "operator", True,
                    _dra_reason(key, dr.driver, dr.device, sd) + " (the kubelet's pod-resources)",
                    tuple(sources), claim=key, devices_known=gref is not None, shared=shared)


def container_grants(inputs: KubeGrantInputs, namespace: str, pod: str, container: Mapping[str, Any],
                     spec_pointer: str, claim_refs: Sequence[ClaimRef],
                     container_ids: Sequence[str] = (), *, pod_uid: str) -> list[GpuGrant]:
    """Every GPU grant of one pod container (``container``: its pod spec entry at ``spec_pointer``;
    ``pod_uid`` the pod's, matched against a claim's ``status.reservedFor``)."""
    name = str(container.get("name"))
    limits = _limits(container)
    plugin = inputs.plugin.get((namespace, pod, name), [])
    dynamic = inputs.dynamic.get((namespace, pod, name), [])
    ext_resources = {r.resource for r in claim_refs if r.form == "extended-resource"}
    grants: list[GpuGrant] = []
    used_plugin: set[int] = set()
    limits_src = GrantSource(PODS, f"{spec_pointer}/resources/limits", compact_json(limits))
    for resource, count in sorted(limits.items()):
        if resource in ext_resources:
            continue
        # not advertised by the node, or the node's capacity not read: then it may be a renamed GPU
        # resource, and a pod that holds one is never judged ungranted for want of the node object
        unsure = not _is_gpu_resource(resource, inputs.advertised)
        if unsure and inputs.capacity_read:
            continue
        note = " (the node's capacity was not read: taken for a GPU resource)" if unsure else ""
        default = resource == DEFAULT_GPU or resource.startswith(MIG_PREFIX)
        mech = "device-plugin" if default else "renamed-resource"
        held = [(i, p) for i, p in enumerate(plugin) if p.resource == resource]
        if held:
            ids = [x for _, p in held for x in p.ids]
            used_plugin.update(i for i, _ in held)
            sources = (limits_src, *(GrantSource(PODRESOURCES, p.pointer, p.excerpt) for _, p in held))
            grants.append(GpuGrant(mech, "devices", _plugin_refs(ids), "operator", True,
                                   f"{resource} devices {','.join(ids)}{note}", sources,
                                   shared=any("::" in x for x in ids) or (not default and inputs.replicated(resource))))
            continue
        env = next((inputs.process_env[c] for c in container_ids if c in inputs.process_env), None)
        if not default and env is not None:
            scope, refs = parse_visible_devices(env[0])
            if scope == "devices" and refs:
                grants.append(GpuGrant(
                    mech, "devices", refs, "operator", True,
                    f"{resource}: {count}, NVIDIA_VISIBLE_DEVICES={env[0]} set by the device plugin{note}",
                    (limits_src, GrantSource(env[1].member, env[1].locator, env[1].excerpt)),
                    shared=inputs.replicated(resource)))
                continue
        why = "no pod-resources entry" if inputs.podresources_present else "no pod-resources data"
        grants.append(GpuGrant(mech, "devices", (), "operator", True,
                               f"{resource}: {count} (devices unknown: {why}){note}", (limits_src,),
                               devices_known=False))
    # a GPU-like device the kubelet assigned for a resource with no limit read above
    for i, p in enumerate(plugin):
        if i in used_plugin or not p.ids:
            continue
        if not (_is_gpu_resource(p.resource, inputs.advertised)
                or all(x.split("::", 1)[0].startswith(("GPU-", "MIG-")) for x in p.ids)):
            continue
        grants.append(GpuGrant("device-plugin" if p.resource == DEFAULT_GPU else "renamed-resource", "devices",
                               _plugin_refs(p.ids), "operator", True, f"{p.resource} devices {','.join(p.ids)}",
                               (GrantSource(PODRESOURCES, p.pointer, p.excerpt),),
                               shared=any("::" in x for x in p.ids)))
    used_dynamic: set[int] = set()
    for ref in claim_refs:
        grants.extend(_claim_grants(ref, inputs, dynamic, used_dynamic, pod_uid))
    for i, dr in enumerate(dynamic):
        if i not in used_dynamic and not any(g.claim == f"{dr.claim_namespace}/{dr.claim_name}" for g in grants) \
                and _is_gpu_device(dr.driver, inputs.slices.get((dr.driver, dr.pool, dr.device))):
            grants.append(_dynamic_grant(dr, inputs, pod_uid))
    return grants


def _short(uuid: str) -> str:
    return uuid[:8] + "..." if len(uuid) > 11 else uuid


def _gpu_text(uuid: str, gpus: Sequence[Gpu]) -> str:
    """``GPU 0, GPU-8a74...`` (a MIG device: its own UUID after its GPU's index)."""
    for g in gpus:
        if g.uuid == uuid:
            return f"GPU {g.index}, {_short(uuid)}"
    return _short(uuid)


def with_gpu_indexes(alloc: GpuAllocation, gpus: Sequence[Gpu]) -> GpuAllocation:
    """The allocation with its GPUs named by index in its detail (``(GPU-8550...)`` becomes
    ``(GPU 0, GPU-8550...)``) where they were written before the node's GPUs were read: the ring's
    history is loaded first, and a ring without NVML devices names a claim's GPU by UUID alone."""
    detail = alloc.detail
    for uuid in alloc.gpus:
        short, text = _short(uuid), _gpu_text(uuid, gpus)
        if text != short:
            detail = detail.replace(f"({short}", f"({text}").replace(f"; {short}", f"; {text}")
    return alloc if detail == alloc.detail else replace(alloc, detail=detail)


def kubernetes_grants_allocation(grants: Sequence[GpuGrant], gpus: Sequence[Gpu],
                                 evidence_for: EvidenceFor,
                                 none_evidence: tuple[Evidence, ...] = ()) -> GpuAllocation:
    """A pod container's allocation from its grants: the union of their GPUs, ``dra`` when a claim
    granted any, devices unknown when any grant does not name its GPUs."""
    if not grants:
        return GpuAllocation("none", False, (), "pod spec", "pod with no nvidia.com/gpu limit", none_evidence)
    uuids: dict[str, None] = {}
    reasons: list[str] = []
    evidence: list[Evidence] = []
    known = True
    for g in grants:
        # a driver's gpu-N is the device minor N: with no GPU whose minor NVML read as N, which GPU
        # it is goes unjudged (the NVML index is no stand-in: the driver's probe order can differ)
        resolvable = g.devices_known and all(minor_read(r, gpus) for r in g.devices)
        mine = resolve_refs(g.devices, g.scope, gpus) if resolvable else ()
        if not names_node_gpus(mine, gpus):  # a device id no GPU of the node matches: unknown
            resolvable = False
        known = known and resolvable
        for u in mine:
            uuids.setdefault(u, None)
        reason = g.reason
        if g.claim is not None and mine:
            reason = f"{reason} ({'; '.join(_gpu_text(u, gpus) for u in mine)})"
        reasons.append(reason)
        evidence.extend(evidence_for(s.document, s.pointer, s.excerpt) for s in g.sources)
    claims = tuple(dict.fromkeys(g.claim for g in grants if g.claim is not None))
    kind = "dra" if claims else "kubernetes"
    docs = {s.document for g in grants for s in g.sources}
    source = ("resource claim" if CLAIMS in docs else "pod-resources" if PODRESOURCES in docs else "pod spec")
    return GpuAllocation(kind, True, tuple(uuids), source, "; ".join(dict.fromkeys(reasons)),
                         tuple(dict.fromkeys(evidence)),
                         devices_known=known, time_sliced=any(g.shared for g in grants), claims=claims)


def claim_share_contract(node: str, alloc: GpuAllocation, claims: Mapping[tuple[str, str], tuple[Claim, ...]],
                         evidence_for: EvidenceFor, pod_uid: str) -> ShareContract | None:
    """The sharing contract of a container whose claim shares its GPU on purpose (NVIDIA's
    ``GpuConfig`` ``TimeSlicing`` or ``MPS`` in the claim's allocation config): MPS limits are
    its share (``gpu-share-exceeded`` judges them); ``container_id`` is left for the caller. A
    claim reserved for other consumers than the pod ``pod_uid`` is not its contract."""
    for key in alloc.claims:
        ns, _, name = key.partition("/")
        claim = claim_of_pod(claims.get((ns, name), ()), pod_uid)
        if claim is None or not claim.sharing:
            continue
        sh = claim.sharing[0]
        return ShareContract(node, "", "mps" if sh.strategy == "MPS" else "time-slicing", f"claim {key}",
                             alloc.gpus, 1, None, sh.memory_limit_bytes, sh.sm_limit_pct,
                             f"claim {key}: {sh.detail}", (evidence_for(CLAIMS, sh.pointer, sh.excerpt),))
    return None


def merge_allocations(allocs: Sequence[GpuAllocation], evidence: tuple[Evidence, ...]) -> GpuAllocation:
    """A pod's allocation as a whole, from its containers': the union of their GPUs; devices
    unknown when any explicit grant's are; ``dra`` when a claim granted any."""
    explicit = [a for a in allocs if a.explicit]
    if not explicit:
        return GpuAllocation("none", False, (), "pod spec", "pod with no nvidia.com/gpu limit", evidence)
    gpus = tuple(dict.fromkeys(u for a in explicit for u in a.gpus))
    claims = tuple(dict.fromkeys(c for a in explicit for c in a.claims))
    return GpuAllocation("dra" if claims else "kubernetes", True, gpus, explicit[0].source,
                         "; ".join(dict.fromkeys(a.detail for a in explicit)),
                         tuple(dict.fromkeys(e for a in explicit for e in a.evidence)),
                         devices_known=all(a.devices_known for a in explicit),
                         time_sliced=all(a.time_sliced for a in explicit), claims=claims)


def dynamic_resources(doc: Any) -> dict[tuple[str, str, str], list[DynamicResource]]:
    """(namespace, pod, container) -> its ``dynamic_resources`` from the pod-resources ``List``
    (the collector's JSON: snake_case field names, or the protobuf JSON mapping's camelCase)."""
    def get(obj: Any, *names: str) -> Any:
        if isinstance(obj, Mapping):
            for n in names:
                if n in obj:
                    return obj[n]
        return None

    def items(obj: Any, name: str) -> list[Any]:  # a list, or nothing (one broken entry hides no other)
        value = get(obj, name)
        return value if isinstance(value, list) else []

    out: dict[tuple[str, str, str], list[DynamicResource]] = {}
    top = "pod_resources" if isinstance(get(doc, "pod_resources"), list) else "podResources"
    for i, p in enumerate(items(doc, top)):
        for j, c in enumerate(items(p, "containers")):
            dyn_key = "dynamic_resources" if isinstance(get(c, "dynamic_resources"), list) else "dynamicResources"
            for k, d in enumerate(items(c, dyn_key)):
                ns, claim = get(d, "claim_namespace", "claimNamespace"), get(d, "claim_name", "claimName")
                if not isinstance(ns, str) or not isinstance(claim, str):
                    continue
                cr_key = "claim_resources" if isinstance(get(d, "claim_resources"), list) else "claimResources"
                for m, r in enumerate(items(d, cr_key)):
                    driver = get(r, "driver_name", "driverName")
                    pool = get(r, "pool_name", "poolName")
                    device = get(r, "device_name", "deviceName")
                    if not all(isinstance(v, str) and v for v in (driver, pool, device)):
                        continue
                    cdi_list = get(r, "cdi_devices", "cdiDevices")
                    cdi = tuple(str(get(x, "name")) for x in (cdi_list if isinstance(cdi_list, list) else [])
                                if isinstance(get(x, "name"), str))
                    out.setdefault((str(get(p, "namespace")), str(get(p, "name")), str(get(c, "name"))), []).append(
                        DynamicResource(ns, claim, str(driver), str(pool), str(device), cdi,
                                        json_pointer(top, i, "containers", j, dyn_key, k, cr_key, m),
                                        compact_json(r)))
    return out


def plugin_devices(doc: Any) -> dict[tuple[str, str, str], list[PluginDevices]]:
    """(namespace, pod, container) -> its pod-resources ``devices`` entries (every resource)."""
    out: dict[tuple[str, str, str], list[PluginDevices]] = {}
    if not isinstance(doc, Mapping):
        return out
    top = "pod_resources" if isinstance(doc.get("pod_resources"), list) else "podResources"
    pods = doc.get(top)
    for i, p in enumerate(pods if isinstance(pods, list) else []):
        if not isinstance(p, Mapping):
            continue
        containers = p.get("containers")
        for j, c in enumerate(containers if isinstance(containers, list) else []):
            if not isinstance(c, Mapping):
                continue
            devices = c.get("devices")
            for k, d in enumerate(devices if isinstance(devices, list) else []):
                if not isinstance(d, Mapping):
                    continue
                res = d.get("resource_name", d.get("resourceName"))
                ids = d.get("device_ids", d.get("deviceIds")) or []
                if not isinstance(res, str) or not isinstance(ids, list):
                    continue
                out.setdefault((str(p.get("namespace")), str(p.get("name")), str(c.get("name"))), []).append(
                    PluginDevices(res, tuple(str(x) for x in ids if isinstance(x, str)),
                                  json_pointer(top, i, "containers", j, "devices", k), compact_json(d)))
    return out
