"""What a container or pod was *given*, as the analyzer sees it: explicit versus blanket grants.

Docker: rebuilt from the raw members (``docker/containers/<id>/inspect.json``,
``docker/images/<hex>/inspect.json``, ``docker/info.json``) with the Docker engineer's parser
:func:`forensics.parsing.gpu_allocation.allocation_from_inspect`, then classified: an operator's
``--gpus``/DeviceRequests, CDI device, device node or specific ``-e NVIDIA_VISIBLE_DEVICES`` is
*explicit*; ``NVIDIA_VISIBLE_DEVICES=all`` (from the image or the environment), an image's grant
under the default nvidia runtime, and privileged mode are *blanket* grants that bypass the
operator's intent.
Kubernetes: the pod spec's ``nvidia.com/gpu`` limit and the kubelet pod-resources device ids.
CRI (containerd, CRI-O): the OCI runtime spec's device nodes, device cgroup rules, CDI devices and
``NVIDIA_VISIBLE_DEVICES`` (forensics.parsing.oci_allocation), classified as Docker's grants are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from forensics.analysis.findings import Evidence
from forensics.analysis.model import Gpu, GpuAllocation
from forensics.parsing.gpu_allocation import ContainerAllocation, GpuGrant, GpuRef

__all__ = ["classify_docker_allocation", "kubernetes_allocation", "minor_read", "names_node_gpus", "resolve_device_ids",
           "resolve_refs"]

# GrantSource.document -> Evidence (the loader knows the member paths)
EvidenceFor = Callable[[str, str, str], Evidence]


def resolve_device_ids(ids: Sequence[str], gpus: Sequence[Gpu]) -> tuple[str, ...]:
    """Map device ids (``0``, ``GPU-<uuid>``, ``MIG-<uuid>``, ``GPU-<uuid>::2``, ``nvidia0`` (minor 0),
    ``all``) to UUIDs.

    Unknown ids are kept verbatim so that they are never silently dropped.
    """
    out: dict[str, None] = {}
    for raw in ids:
        for token in str(raw).split(","):
            tok = token.strip()
            if "=" in tok:  # CDI: nvidia.com/gpu=0
                tok = tok.split("=", 1)[1]
            if not tok or tok.lower() in ("none", "void"):
                continue
            if tok.lower() == "all":
                for g in gpus:
                    out.setdefault(g.uuid, None)
                continue
            if "::" in tok:  # time-slicing replica GPU-<uuid>::N
                tok = tok.split("::", 1)[0]
            if "/" in tok and not tok.upper().startswith("MIG-"):  # GKE nvidia0/vgpu1 (not MIG-GPU-<uuid>/1/0)
                tok = tok.split("/", 1)[0]
            if tok.isascii() and tok.isdigit():
                match = [g.uuid for g in gpus if g.index == int(tok)]
                out.setdefault(match[0] if match else f"index {tok}", None)
                continue
            if tok.startswith("nvidia") and tok[6:].isascii() and tok[6:].isdigit():
                # GKE's device file name: /dev/nvidiaN is the GPU of minor number N, which only a
                # minor number NVML read names (the NVML index is no stand-in)
                match = [g.uuid for g in gpus if g.minor_number == int(tok[6:])]
                out.setdefault(match[0] if match else tok, None)
                continue
            match = [g.uuid for g in gpus if g.uuid.lower() == tok.lower()]
            out.setdefault(match[0] if match else tok, None)
    return tuple(out)


def resolve_refs(refs: Sequence[GpuRef], scope: str, gpus: Sequence[Gpu]) -> tuple[str, ...]:
    """GPU UUIDs named by a grant's refs (scope ``all``: every GPU of the node)."""
    if scope == "all":
        return tuple(g.uuid for g in sorted(gpus, key=lambda g: g.index))
    out: dict[str, None] = {}
    for ref in refs:
        if ref.kind == "minor":
            # only a minor number NVML read names the GPU: /dev/nvidiaN's N is not the NVML index
            match = [g.uuid for g in gpus if g.minor_number == int(ref.id)]
            out.setdefault(match[0] if match else f"minor {ref.id}", None)
        elif ref.kind == "mig-index":
            gpu_index = ref.id.split(":", 1)[0]
            match = [g.uuid for g in gpus if g.index == int(gpu_index)]
            out.setdefault(match[0] if match else f"mig {ref.id}", None)
        else:
            for u in resolve_device_ids([ref.id], gpus):
                out.setdefault(u, None)
    return tuple(out)


def names_node_gpus(uuids: Sequence[str], gpus: Sequence[Gpu]) -> bool:
    """Whether every device a grant resolved to is a GPU of the node (or a MIG device, which the
    process samples name): an id that matched none (an index NVML does not list, a form not
    understood, kept verbatim by :func:`resolve_device_ids`) says the grant's GPUs are unknown.
    Before any GPU of the node is read (the ring's pass, a ring without NVML devices) a UUID
    names its GPU itself, and anything else names none."""
    if not gpus:
        return all(u.upper().startswith(("GPU-", "MIG-")) for u in uuids)
    known = {g.uuid for g in gpus}
    return all(u in known or u.upper().startswith("MIG-") for u in uuids)


def minor_read(ref: GpuRef, gpus: Sequence[Gpu]) -> bool:
    """False for a device-node ref (``/dev/nvidiaN``) that no GPU's read minor number matches."""
    return ref.kind != "minor" or any(g.minor_number == int(ref.id) for g in gpus)


def _is_explicit(grant: GpuGrant) -> bool:
    if grant.mechanism in ("device-request", "cdi", "device-node"):
        return grant.origin == "operator"
    if grant.mechanism == "device-cgroup":  # a runtime's device cgroup rules (CRI): all is blanket
        return grant.origin == "operator" and grant.scope == "devices"
    if grant.mechanism == "nvidia-runtime-env":
        return grant.origin == "operator" and grant.scope == "devices"
    return False  # privileged and anything new: blanket


def classify_docker_allocation(alloc: ContainerAllocation, gpus: Sequence[Gpu], evidence_for: EvidenceFor,
                               source: str = "docker inspect",
                               none_at: tuple[str, str] = ("container-inspect", "/HostConfig/DeviceRequests"),
                               ) -> GpuAllocation:
    """Split a container's effective grants into explicit and blanket GPU sets, with evidence.

    ``source`` names the record (``docker inspect``; ``runtime spec`` for a CRI container's
    allocation from forensics.parsing.oci_allocation), ``none_at`` the document and pointer cited
    when nothing was granted."""
    explicit: dict[str, None] = {}
    blanket: dict[str, None] = {}
    ex_ev: list[Evidence] = []
    bl_ev: list[Evidence] = []
    ex_reasons: list[str] = []
    bl_reasons: list[str] = []
    ex_kinds: list[str] = []
    bl_kinds: list[str] = []
    cdi_names: dict[str, None] = {}
    devices_known = True
    for grant in alloc.grants:
        if not grant.effective or grant.scope == "none":
            continue
        uuids = resolve_refs(grant.devices, grant.scope, gpus)
        if _is_explicit(grant) and grant.scope != "all" and (
                not grant.devices_known or not all(minor_read(r, gpus) for r in grant.devices)
                or not names_node_gpus(uuids, gpus)):
            # a grant that does not name its GPUs, a device node whose GPU no read minor number
            # names, a device id no GPU of the node matches: never judged
            devices_known = False
        evs = [evidence_for(s.document, s.pointer, s.excerpt) for s in grant.sources]
        if _is_explicit(grant):
            for u in uuids:
                explicit.setdefault(u, None)
            ex_ev.extend(evs)
            ex_reasons.append(grant.reason)
            ex_kinds.append(grant.mechanism)
            cdi_names.update(dict.fromkeys(grant.cdi_names))
        else:
            for u in uuids:
                blanket.setdefault(u, None)
            bl_ev.extend(evs)
            bl_reasons.append(grant.reason)
            bl_kinds.append("privileged" if grant.mechanism == "privileged" else "env")
    blanket_only = tuple(u for u in blanket if u not in explicit)
    if ex_kinds:  # (an explicit grant of GPUs it does not name has no UUIDs: devices_known false)
        kind = "env" if ex_kinds[0] == "nvidia-runtime-env" else ex_kinds[0]
        return GpuAllocation(kind, True, tuple(explicit), source, "; ".join(ex_reasons),
                             tuple(ex_ev), blanket_only, "; ".join(bl_reasons), tuple(bl_ev),
                             cdi_devices=tuple(cdi_names), devices_known=devices_known)
    if blanket:
        return GpuAllocation(bl_kinds[0], False, (), source, "no explicit GPU grant",
                             (), blanket_only, "; ".join(bl_reasons), tuple(bl_ev))
    none_ev = (evidence_for(none_at[0], none_at[1], ""),)
    return GpuAllocation("none", False, (), source, "no GPU requested", none_ev)


def kubernetes_allocation(limit: int, device_ids: Sequence[str] | None, gpus: Sequence[Gpu],
                          evidence: tuple[Evidence, ...], podresources_present: bool) -> GpuAllocation:
    """The grant of one pod container: its ``nvidia.com/gpu`` limit and pod-resources devices."""
    if limit <= 0 and not device_ids:
        return GpuAllocation("none", False, (), "pod spec", "pod with no nvidia.com/gpu limit", evidence)
    if device_ids:
        uuids = resolve_device_ids(device_ids, gpus)
        return GpuAllocation("kubernetes", True, uuids, "pod-resources",
                             f"nvidia.com/gpu devices {','.join(device_ids)}", evidence,
                             devices_known=names_node_gpus(uuids, gpus),
                             time_sliced=any("::" in d for d in device_ids))
    why = "no pod-resources entry" if podresources_present else "no pod-resources data"
    return GpuAllocation("kubernetes", True, (), "pod spec",
                         f"nvidia.com/gpu: {limit} (devices unknown: {why})", evidence,
                         devices_known=False)
