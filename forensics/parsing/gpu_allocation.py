"""What GPUs a Docker container was *given*, and why: the allocation model (a CRI container's, from
the OCI runtime spec its runtime reports, is built by :mod:`forensics.parsing.oci_allocation`).

Pure: it reads the Engine API's JSON (``GET /containers/{id}/json``, ``GET /images/{id}/json``,
``GET /info``) as captured in ``docker/containers/<id>/inspect.json``,
``docker/images/<hex>/inspect.json`` and ``docker/info.json``, and never talks to Docker. The
capture writes its result to ``docker/allocations.json``; the analyzer may rebuild it from the raw
members with the same function.

Grant mechanisms, each recorded with the JSON pointer it came from and its origin
(``operator``, ``image`` or ``engine-default-runtime``):

- ``device-request``: ``/HostConfig/DeviceRequests/N`` (``docker run --gpus``). ``Count`` -1 means
  every GPU, ``Count`` N the GPUs with indices 0..N-1 (so two ``--gpus 2`` containers share the
  same two), ``DeviceIDs`` indices or UUIDs. Driver ``cdi`` carries CDI names instead.
- ``cdi``: CDI device names such as ``nvidia.com/gpu=0`` (a ``cdi`` device request: ``docker run
  --device`` on Engine 28.2+, or ``PathOnHost`` of ``/HostConfig/Devices``): the GPU the node's CDI
  specs say the name is (:mod:`forensics.parsing.cdi_grants`), else NVIDIA's naming; a name of
  another NVIDIA GPU kind the specs lack is a grant of GPUs it does not name (never judged).
- ``nvidia-runtime-env``: ``/HostConfig/Runtime`` is the nvidia runtime (given by the operator, or
  filled in by the engine from its default runtime) and ``NVIDIA_VISIBLE_DEVICES`` in
  ``/Config/Env`` (``all``, ``none``, ``void``, indices, ``GPU-`` UUIDs, ``MIG-`` ids, ``i:j``).
  The variable is attributed to the image when the image's own ``Config.Env`` has the same entry.
  With no variable, a legacy CUDA image (``CUDA_VERSION`` set, ``NVIDIA_REQUIRE_CUDA`` unset) gets
  every GPU, as nvidia-container-toolkit does. Without the nvidia runtime the variable is recorded
  but not effective.
- ``device-node``: ``/dev/nvidia<N>`` in ``/HostConfig/Devices`` (N is the device minor number).
- ``privileged``: ``/HostConfig/Privileged`` true: every ``/dev/nvidia*`` node is visible.

Kubernetes grant mechanisms (built by :mod:`forensics.analysis.allocation_kubernetes` from the
bundle's ``kubernetes/`` members; their ``GrantSource.document`` is the member's own path, the
pointer a JSON pointer into it):

- ``device-plugin``: a ``nvidia.com/gpu`` or ``nvidia.com/mig-<profile>`` limit
  (``kubernetes/pods.json``), its devices from the kubelet's pod-resources ``devices``
  (``kubernetes/podresources/list.json``); without that list the devices are unknown
  (``devices_known`` false: granted, but which GPU is not judged).
- ``renamed-resource``: a limit on another GPU resource the node advertises in its
  ``status.capacity`` (``kubernetes/node.json``), such as ``nvidia.com/gpu.shared`` (the device
  plugin's ``renameByDefault`` or its ``resources`` config), or another vendor's that names a GPU
  (``aliyun.com/gpu-mem``); shared when the node advertises more of it than it has GPUs; devices
  from pod-resources, else from
  the device plugin's ``NVIDIA_VISIBLE_DEVICES`` in the container's process environment
  (``proc/<pid>/environ``), else unknown. Replicas ``GPU-<uuid>::N`` share by design.
- ``dra-claim``: a ResourceClaim the container uses (``resources.claims`` -> the pod's
  ``spec.resourceClaims``), its devices the claim's ``status.allocation.devices.results[]``
  (``kubernetes/resourceclaims.json``) resolved to GPU or MIG UUIDs by the driver's ResourceSlice
  (``kubernetes/resourceslices.json``), or, without the claim, the kubelet's pod-resources
  ``dynamic_resources``; ``gpu-N`` with no slice is the GPU of device minor N. ``claim`` names
  the claim (``namespace/name``).
- ``extended-resource-dra``: a ``nvidia.com/gpu`` limit served by DRA
  (``status.extendedResourceClaimStatus`` of the pod names the generated claim and request).

Every grant is ``origin`` operator; a Kubernetes grant is explicit. New forms are new
``mechanism`` values with the same fields: a grant always cites where it was read.

Why this module is long: it is the one grant model every runtime's forms share (the types, and
Docker's finders that first defined them); the Kubernetes forms are built elsewhere from these
types, as are podman's (:mod:`~forensics.parsing.libpod_allocation`), CRI's
(:mod:`~forensics.parsing.oci_allocation`) and the CDI specs' (:mod:`~forensics.parsing.cdi_grants`).

Caveat recorded in every nvidia-runtime grant: the engine writes its default runtime into
``HostConfig.Runtime`` at creation, so ``--runtime nvidia`` given explicitly on a host whose
default is nvidia cannot be told from the default; it is attributed to the engine default.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from forensics.errors import ParseError
from forensics.parsing.cdi_spec import nvidia_cdi_token

__all__ = [
    "CdiGrants",
    "ContainerAllocation",
    "GpuGrant",
    "GpuRef",
    "GrantSource",
    "allocation_from_inspect",
    "allocations_document",
    "cdi_grant",
    "gpu_cdi_kind",
    "nvidia_cdi_grant",
    "compact_json",
    "is_nvidia_runtime",
    "json_array",
    "json_object",
    "json_pointer",
    "parse_cdi_name",
    "parse_visible_devices",
]

Scope = Literal["all", "devices", "none"]
Origin = Literal["operator", "image", "engine-default-runtime"]

_INDEX_RE = re.compile(r"^[0-9]+$")
_MIG_INDEX_RE = re.compile(r"^[0-9]+:[0-9]+$")
_UUID_RE = re.compile(r"^GPU-[0-9A-Fa-f-]+$")
_MIG_RE = re.compile(r"^MIG-[A-Za-z0-9/-]+$")
_NODE_RE = re.compile(r"^/dev/nvidia([0-9]+)$")
_CDI_RE = re.compile(r"^(?P<kind>[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)=(?P<name>.+)$")
# runtime.nvidia.com/gpu: the NVIDIA runtime's jit-cdi mode, whose spec is made in memory (no file)
_NVIDIA_CDI_KINDS = frozenset({"nvidia.com/gpu", "nvidia.com/mig", "runtime.nvidia.com/gpu"})


@dataclass(frozen=True)
class GpuRef:
    """One GPU as the grant names it: ``kind`` is index, uuid, mig-uuid, mig-index, minor or unknown."""

    id: str
    kind: str

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "kind": self.kind}


@dataclass(frozen=True)
class GrantSource:
    """Where a grant was read: ``document`` (container-inspect, image-inspect, engine-info; a
    Kubernetes grant names the bundle member, e.g. ``kubernetes/resourceclaims.json``), an RFC 6901
    JSON ``pointer`` into it, a compact JSON ``excerpt`` of the value there, and who
    put that value there (``origin``)."""

    document: str
    pointer: str
    excerpt: str
    origin: Origin = "operator"

    def to_json(self) -> dict[str, str]:
        return {"document": self.document, "pointer": self.pointer, "excerpt": self.excerpt,
                "origin": self.origin}


@dataclass(frozen=True)
class GpuGrant:
    """One way the container may reach GPUs."""

    mechanism: str
    scope: Scope
    devices: tuple[GpuRef, ...]
    origin: Origin
    effective: bool
    reason: str
    sources: tuple[GrantSource, ...]
    capabilities: tuple[str, ...] = ()
    claim: str | None = None  # dra-claim, extended-resource-dra: the ResourceClaim, namespace/name
    devices_known: bool = True  # false: a grant of GPUs the evidence does not name (never judged)
    shared: bool = False  # shared on purpose (time-slicing replicas, a claim's sharing strategy)
    cdi_names: tuple[str, ...] = ()  # the CDI device names of a cdi grant (nvidia.com/gpu=0)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mechanism": self.mechanism,
            "scope": self.scope,
            "devices": [d.to_json() for d in self.devices],
            "origin": self.origin,
            "effective": self.effective,
            "reason": self.reason,
            "sources": [s.to_json() for s in self.sources],
            "capabilities": list(self.capabilities),
        }
        if self.claim is not None:
            out["claim"] = self.claim
        if not self.devices_known:
            out["devices_known"] = False
        if self.shared:
            out["shared"] = True
        if self.cdi_names:
            out["cdi_names"] = list(self.cdi_names)
        return out


@dataclass(frozen=True)
class ContainerAllocation:
    """The union of a container's effective grants: ``scope`` all, devices (``devices``) or none."""

    container_id: str
    name: str
    image_id: str
    runtime: str | None
    engine_default_runtime: str | None
    scope: Scope
    devices: tuple[GpuRef, ...]
    origins: tuple[Origin, ...]
    grants: tuple[GpuGrant, ...]
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "container_id": self.container_id,
            "name": self.name,
            "image_id": self.image_id,
            "runtime": self.runtime,
            "engine_default_runtime": self.engine_default_runtime,
            "scope": self.scope,
            "devices": [d.to_json() for d in self.devices],
            "origins": list(self.origins),
            "grants": [g.to_json() for g in self.grants],
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------------------------
# small helpers


def json_pointer(*parts: str | int) -> str:
    """RFC 6901 pointer from path parts (``~`` -> ``~0``, ``/`` -> ``~1``)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def compact_json(value: Any) -> str:
    """The compact, key-sorted JSON of a value: the excerpt a grant source quotes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def json_object(value: Any, what: str, *, optional: bool = True) -> Mapping[str, Any]:
    """``value`` as a JSON object ({} for None when ``optional``), else ParseError naming ``what``."""
    if value is None and optional:
        return {}
    if not isinstance(value, Mapping):
        raise ParseError(f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


def json_array(value: Any, what: str) -> Sequence[Any]:
    """``value`` as a JSON array (empty for None), else ParseError naming ``what``."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ParseError(f"{what}: expected a JSON array, got {type(value).__name__}")
    return value


def _str(value: Any, what: str, *, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ParseError(f"{what}: expected a string, got {type(value).__name__}")
    return value


def _str_list(value: Any, what: str) -> tuple[str, ...]:
    items = json_array(value, what)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise ParseError(f"{what}/{i}: expected a string, got {type(item).__name__}")
    return tuple(items)


def _classify(token: str) -> GpuRef:
    if _INDEX_RE.match(token):
        return GpuRef(token, "index")
    if _MIG_INDEX_RE.match(token):
        return GpuRef(token, "mig-index")
    if _UUID_RE.match(token):
        return GpuRef(token, "uuid")
    if _MIG_RE.match(token):
        return GpuRef(token, "mig-uuid")
    return GpuRef(token, "unknown")


def parse_visible_devices(value: str) -> tuple[Scope, tuple[GpuRef, ...]]:
    """Meaning of an ``NVIDIA_VISIBLE_DEVICES`` value, as nvidia-container-toolkit reads it.

    ``all`` -> every GPU; ``none`` (driver libraries only), ``void`` and empty -> no GPU;
    otherwise a comma-separated list of indices, ``GPU-`` UUIDs, ``MIG-`` ids or ``i:j`` MIG indices.
    """
    if not isinstance(value, str):
        raise ParseError(f"NVIDIA_VISIBLE_DEVICES: expected a string, got {type(value).__name__}")
    v = value.strip()
    if v == "all":
        return "all", ()
    if v in ("", "none", "void"):
        return "none", ()
    tokens = [t.strip() for t in v.split(",") if t.strip()]
    if "all" in tokens:
        return "all", ()
    return ("devices", tuple(_classify(t) for t in tokens)) if tokens else ("none", ())


def parse_cdi_name(name: str) -> tuple[str, str] | None:
    """``nvidia.com/gpu=0`` -> (``nvidia.com/gpu``, ``0``); None when it is not a CDI name."""
    if not isinstance(name, str):
        raise ParseError(f"CDI device name: expected a string, got {type(name).__name__}")
    m = _CDI_RE.match(name)
    return (m["kind"], m["name"]) if m else None


def is_nvidia_runtime(name: str | None, engine_info: Mapping[str, Any] | None) -> bool:
    """True when runtime ``name`` is NVIDIA's: named ``nvidia*`` or its path (``/info`` Runtimes) is."""
    if not name:
        return False
    if "nvidia" in name.lower():
        return True
    runtimes = (engine_info or {}).get("Runtimes")
    if isinstance(runtimes, Mapping):
        entry = runtimes.get(name)
        if isinstance(entry, Mapping):
            path = entry.get("path") or entry.get("Path")
            if isinstance(path, str) and "nvidia" in path.rsplit("/", 1)[-1].lower():
                return True
    return False


def _env_map(env: Sequence[str]) -> dict[str, tuple[int, str]]:
    """NAME -> (index in the list, value); the last occurrence wins, as in the runtime."""
    out: dict[str, tuple[int, str]] = {}
    for i, item in enumerate(env):
        name, sep, value = item.partition("=")
        if sep:
            out[name] = (i, value)
    return out


# --------------------------------------------------------------------------------------------
# the grant finders


class CdiGrants(Protocol):
    """Reads CDI device names through the node's CDI spec files (:mod:`forensics.parsing.cdi_grants`)."""

    def device(self, kind: str, name: str, source: GrantSource) -> GpuGrant | None: ...

    def gpus_request(self, grant: GpuGrant, engine_info: Mapping[str, Any] | None) -> GpuGrant: ...


def cdi_grant(kind: str, dev: str, source: GrantSource, cdi: CdiGrants | None = None) -> GpuGrant | None:
    """The grant of CDI device ``kind=dev`` requested where ``source`` says (None: not a GPU):
    through the node's specs when given, else by NVIDIA's naming."""
    return cdi.device(kind, dev, source) if cdi is not None else nvidia_cdi_grant(kind, dev, source)


def gpu_cdi_kind(kind: str) -> bool:
    """Whether a CDI kind (``vendor/class``) names NVIDIA GPUs: a class ``gpu`` or ``mig``, or a
    vendor with a ``gpu`` label (a DRA driver's per-claim ``k8s.gpu.nvidia.com/claim``); an IMEX
    channel's ``k8s.compute-domain.nvidia.com`` or a NIC's kind does not."""
    vendor, _, cls = kind.partition("/")
    return "nvidia" in vendor.split(".") and (cls in ("gpu", "mig") or "gpu" in vendor.split("."))


def nvidia_cdi_grant(kind: str, dev: str, source: GrantSource, why: str = "") -> GpuGrant | None:
    """An NVIDIA CDI name read as ``nvidia-ctk`` names devices (``0``, ``GPU-<uuid>``, ``gpu0``,
    ``mig1:0``, ``all``); another kind that names NVIDIA GPUs (:func:`gpu_cdi_kind`) is a grant
    of GPUs the name does not say (``devices_known`` false: never judged); None for any other
    kind. ``why`` is added to the reason."""
    if kind not in _NVIDIA_CDI_KINDS:
        if not gpu_cdi_kind(kind):
            return None
        return GpuGrant("cdi", "devices", (), "operator", True,
                        f"CDI device {kind}={dev} (a GPU kind whose devices only its spec names){why}",
                        (source,), cdi_names=(f"{kind}={dev}",), devices_known=False)
    qualified, token = f"{kind}={dev}", nvidia_cdi_token(dev)
    if token == "all":
        return GpuGrant("cdi", "all", (), "operator", True, f"CDI device {qualified} names every GPU{why}",
                        (source,), cdi_names=(qualified,))
    return GpuGrant("cdi", "devices", (_classify(token),), "operator", True, f"CDI device {qualified}{why}",
                    (source,), cdi_names=(qualified,))


def _device_request_grants(host: Mapping[str, Any], cdi: CdiGrants | None = None) -> list[GpuGrant]:
    grants: list[GpuGrant] = []
    for i, req_any in enumerate(json_array(host.get("DeviceRequests"), "/HostConfig/DeviceRequests")):
        where = f"/HostConfig/DeviceRequests/{i}"
        req = json_object(req_any, where, optional=False)
        driver = _str(req.get("Driver"), where + "/Driver") or ""
        count = req.get("Count", 0)
        if count is None:
            count = 0
        if isinstance(count, bool) or not isinstance(count, int):
            raise ParseError(f"{where}/Count: expected an integer")
        ids = _str_list(req.get("DeviceIDs"), where + "/DeviceIDs")
        caps: list[str] = []
        for j, cap_set in enumerate(json_array(req.get("Capabilities"), where + "/Capabilities")):
            caps.extend(_str_list(cap_set, f"{where}/Capabilities/{j}"))
        src = GrantSource("container-inspect", json_pointer("HostConfig", "DeviceRequests", i),
                          compact_json(req))
        if driver == "cdi":
            for dev_id in ids:
                parsed = parse_cdi_name(dev_id)
                if parsed is not None:
                    g = cdi_grant(parsed[0], parsed[1], src, cdi)
                    if g is not None:
                        grants.append(g)
            continue
        if driver not in ("", "nvidia") or (driver == "" and "gpu" not in caps):
            continue
        cap_t = tuple(dict.fromkeys(caps))
        if count == -1:
            grants.append(GpuGrant("device-request", "all", (), "operator", True,
                                   "--gpus all: DeviceRequests Count -1 asks for every GPU",
                                   (src,), cap_t))
        elif ids:
            grants.append(GpuGrant("device-request", "devices", tuple(_classify(d) for d in ids),
                                   "operator", True,
                                   f"--gpus device={','.join(ids)}: DeviceRequests DeviceIDs",
                                   (src,), cap_t))
        elif count > 0:
            refs = tuple(GpuRef(str(n), "index") for n in range(count))
            grants.append(GpuGrant("device-request", "devices", refs, "operator", True,
                                   f"--gpus {count}: DeviceRequests Count {count} means GPU "
                                   f"indices 0..{count - 1} (shared with any other Count request)",
                                   (src,), cap_t))
        else:
            grants.append(GpuGrant("device-request", "none", (), "operator", True,
                                   "DeviceRequests entry with neither Count nor DeviceIDs",
                                   (src,), cap_t))
    return grants


def _device_node_grants(host: Mapping[str, Any], cdi: CdiGrants | None = None) -> list[GpuGrant]:
    grants: list[GpuGrant] = []
    for i, dev_any in enumerate(json_array(host.get("Devices"), "/HostConfig/Devices")):
        where = f"/HostConfig/Devices/{i}"
        dev = json_object(dev_any, where, optional=False)
        on_host = _str(dev.get("PathOnHost"), where + "/PathOnHost") or ""
        src = GrantSource("container-inspect", json_pointer("HostConfig", "Devices", i),
                          compact_json(dev))
        parsed = parse_cdi_name(on_host) if not on_host.startswith("/") else None
        if parsed is not None:
            g = cdi_grant(parsed[0], parsed[1], src, cdi)
            if g is not None:
                grants.append(g)
            continue
        m = _NODE_RE.match(on_host)
        if m:
            grants.append(GpuGrant("device-node", "devices", (GpuRef(m.group(1), "minor"),),
                                   "operator", True,
                                   f"device node {on_host} mapped in (minor {m.group(1)})", (src,)))
    return grants


def _runtime_env_grant(container: Mapping[str, Any], image: Mapping[str, Any] | None,
                       runtime: str | None, default_runtime: str | None,
                       engine_info: Mapping[str, Any] | None) -> GpuGrant | None:
    config = json_object(container.get("Config"), "/Config")
    env = _str_list(config.get("Env"), "/Config/Env")
    env_by_name = _env_map(env)
    image_env: dict[str, tuple[int, str]] = {}
    if image is not None:
        image_config = json_object(image.get("Config"), "image /Config")
        image_env = _env_map(_str_list(image_config.get("Env"), "image /Config/Env"))

    nvidia = is_nvidia_runtime(runtime, engine_info)
    sources: list[GrantSource] = []
    runtime_origin: Origin = "operator"
    if runtime:
        if default_runtime is not None and runtime == default_runtime:
            runtime_origin = "engine-default-runtime"
        sources.append(GrantSource("container-inspect", "/HostConfig/Runtime", compact_json(runtime),
                                   runtime_origin))
        if runtime_origin == "engine-default-runtime":
            sources.append(GrantSource("engine-info", "/DefaultRuntime", compact_json(default_runtime),
                                       runtime_origin))
    runtime_why = (
        f"runtime {runtime} (the engine's default runtime)"
        if runtime_origin == "engine-default-runtime" else f"runtime {runtime} (given at creation)"
    )

    if "NVIDIA_VISIBLE_DEVICES" in env_by_name:
        idx, value = env_by_name["NVIDIA_VISIBLE_DEVICES"]
        entry = f"NVIDIA_VISIBLE_DEVICES={value}"
        in_image = image_env.get("NVIDIA_VISIBLE_DEVICES")
        env_origin: Origin = "operator"
        if in_image is not None and in_image[1] == value:
            env_origin = "image"
        sources.append(GrantSource("container-inspect", json_pointer("Config", "Env", idx),
                                   compact_json(entry), env_origin))
        if env_origin == "image" and in_image is not None:
            sources.append(GrantSource("image-inspect", json_pointer("Config", "Env", in_image[0]),
                                       compact_json(entry), "image"))
        scope, refs = parse_visible_devices(value)
        who = "the image's ENV" if env_origin == "image" else "the container's environment"
        if not nvidia:
            return GpuGrant("nvidia-runtime-env", scope, refs, env_origin, False,
                            f"{entry} from {who}, but runtime {runtime or '(none)'} is not "
                            "NVIDIA's: no effect", tuple(sources))
        return GpuGrant("nvidia-runtime-env", scope, refs, env_origin, True,
                        f"{entry} from {who} under {runtime_why}", tuple(sources))

    if not nvidia:
        return None
    cuda = env_by_name.get("CUDA_VERSION")
    if cuda is not None and "NVIDIA_REQUIRE_CUDA" not in env_by_name:
        legacy_origin: Origin = "image" if "CUDA_VERSION" in image_env else "operator"
        sources.append(GrantSource("container-inspect", json_pointer("Config", "Env", cuda[0]),
                                   compact_json(f"CUDA_VERSION={cuda[1]}"), legacy_origin))
        return GpuGrant("nvidia-runtime-env", "all", (), legacy_origin, True,
                        f"legacy CUDA image (CUDA_VERSION set, no NVIDIA_VISIBLE_DEVICES or "
                        f"NVIDIA_REQUIRE_CUDA) under {runtime_why}: every GPU", tuple(sources))
    return GpuGrant("nvidia-runtime-env", "none", (), runtime_origin, True,
                    f"{runtime_why} without NVIDIA_VISIBLE_DEVICES: no GPU", tuple(sources))


# --------------------------------------------------------------------------------------------
# the model


def allocation_from_inspect(container: Any, image: Any = None,
                            engine_info: Any = None, cdi: CdiGrants | None = None,
                            extra_grants: Sequence[GpuGrant] = ()) -> ContainerAllocation:
    """Build a container's allocation model from its inspect JSON, its image's and ``/info``
    (``cdi``: the node's CDI spec files, which say which GPU a CDI device name is; ``extra_grants``:
    grants another record of the engine holds, podman's libpod inspect).

    Raises ParseError (only) when the documents do not have the Engine API's shape.
    """
    c = json_object(container, "container inspect", optional=False)
    img = None if image is None else json_object(image, "image inspect", optional=False)
    info = None if engine_info is None else json_object(engine_info, "engine info", optional=False)
    cid = _str(c.get("Id"), "/Id", optional=False) or ""
    name = (_str(c.get("Name"), "/Name") or "").lstrip("/")
    image_id = _str(c.get("Image"), "/Image") or ""
    host = json_object(c.get("HostConfig"), "/HostConfig")
    runtime = _str(host.get("Runtime"), "/HostConfig/Runtime")
    default_runtime = _str(info.get("DefaultRuntime"), "info /DefaultRuntime") if info else None
    notes: list[str] = []
    if not runtime:
        runtime = default_runtime
        if runtime:
            notes.append(f"HostConfig.Runtime empty: the engine default ({runtime}) applies")

    grants: list[GpuGrant] = []
    grants.extend(cdi.gpus_request(g, info) if cdi else g for g in _device_request_grants(host, cdi))
    env_grant = _runtime_env_grant(c, img, runtime, default_runtime, info)
    if env_grant is not None:
        grants.append(env_grant)
        if env_grant.effective and any(s.document == "engine-info" for s in env_grant.sources):
            notes.append("the engine records its default runtime in HostConfig.Runtime at "
                         "creation: an explicit --runtime with the same name looks the same")
    grants.extend(_device_node_grants(host, cdi))
    grants.extend(extra_grants)
    privileged = host.get("Privileged")
    if privileged is not None and not isinstance(privileged, bool):
        raise ParseError("/HostConfig/Privileged: expected a boolean")
    if privileged:
        grants.append(GpuGrant(
            "privileged", "all", (), "operator", True,
            "privileged: every /dev/nvidia* node on the host is visible in the container",
            (GrantSource("container-inspect", "/HostConfig/Privileged", "true"),)))
    if img is None:
        notes.append("image inspect missing: image and operator grants cannot be told apart")

    effective = [g for g in grants if g.effective]
    scope: Scope
    devices: tuple[GpuRef, ...] = ()
    if any(g.scope == "all" for g in effective):
        scope = "all"
        contributing = [g for g in effective if g.scope == "all"]
    else:
        seen: dict[tuple[str, str], GpuRef] = {}
        for g in effective:
            for d in g.devices:
                seen.setdefault((d.kind, d.id), d)
        devices = tuple(seen.values())
        scope = "devices" if devices else "none"
        contributing = [g for g in effective if g.devices]
    origins = tuple(dict.fromkeys(
        o for g in contributing for o in (g.origin, *(s.origin for s in g.sources))))
    return ContainerAllocation(cid, name, image_id, runtime, default_runtime, scope, devices,
                               origins, tuple(grants), tuple(notes))


def allocations_document(allocations: Sequence[ContainerAllocation]) -> dict[str, Any]:
    """The ``docker/allocations.json`` document: format tag and one entry per container, by id."""
    return {
        "format": "gpuforensics-docker-allocations",
        "version": 1,
        "containers": [a.to_json() for a in sorted(allocations, key=lambda a: a.container_id)],
    }
