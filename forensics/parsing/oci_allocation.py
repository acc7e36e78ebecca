"""What GPUs a CRI container was *given*, read from the runtime's own record: the allocation model
of :mod:`forensics.parsing.gpu_allocation`, built from a ``ContainerStatus(verbose=true)`` answer.

Pure: it reads the verbose ``info`` JSON containerd and CRI-O return (``cri/containers/<id>.json``,
``info.info``, parsed), never the runtime. That JSON holds the OCI runtime spec the container was
started with (``runtimeSpec``) and the kubelet's ``ContainerConfig`` (``config``). Sources of a
grant, each with a JSON pointer into that parsed JSON (document ``runtime-info``):

- ``device-node``: ``/runtimeSpec/linux/devices/N``, a character device ``/dev/nvidia<M>`` or major
  195 minor M < 254 (a device plugin's grant, or a CDI spec's edits): GPU minor M;
- ``device-cgroup``: ``/runtimeSpec/linux/resources/devices``, the device cgroup rules, evaluated
  in order as the kernel's device controller does (a later rule overrides an earlier one): an
  allow rule for ``c 195:M`` grants minor M; one for every minor of major 195, or for every
  device (``a``, or no type and no major), grants every GPU (the shape of a privileged container);
- ``cdi``: ``/config/CDI_devices/N`` (``nvidia.com/gpu=0``) and ``cdi.k8s.io/*`` annotations of
  ``/runtimeSpec/annotations``, each name read as Docker's are (:func:`~forensics.parsing.
  gpu_allocation.cdi_grant`: through the node's CDI specs, else NVIDIA's naming);
- ``nvidia-runtime-env``: ``NVIDIA_VISIBLE_DEVICES`` in ``/runtimeSpec/process/env`` (the last
  entry wins). From the kubelet (``/config/envs``, the pod spec) it is the operator's; otherwise
  the image's. Effective only under NVIDIA's runtime (``runtimeType``, ``runtimeOptions``
  ``binary_name``, the sandbox's runtime handler) or with its OCI hook in ``/runtimeSpec/hooks``;
  otherwise recorded as without effect;
- ``privileged``: ``/config/linux/security_context/privileged`` true.

Device nodes and cgroup rules a device plugin wrote are the kubelet's grant (origin
``operator``); blanket grants (``all``) are classified as such by the analysis.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from forensics.parsing.gpu_allocation import (
    CdiGrants,
    ContainerAllocation,
    GpuGrant,
    GpuRef,
    GrantSource,
    Origin,
    Scope,
    cdi_grant,
    compact_json,
    json_array,
    json_object,
    json_pointer,
    parse_cdi_name,
    parse_visible_devices,
)

__all__ = ["RUNTIME_INFO", "allocation_from_runtime_info", "verbose_info"]

RUNTIME_INFO = "runtime-info"  # GrantSource.document: the parsed verbose info JSON
NVIDIA_MAJOR = 195
_CONTROL_MINORS = frozenset({254, 255})  # nvidia-modeset, nvidiactl: not GPUs
_CDI_ANNOTATION = "cdi.k8s.io/"


def _source(value: Any, *parts: str | int, origin: Origin = "operator") -> GrantSource:
    return GrantSource(RUNTIME_INFO, json_pointer(*parts), compact_json(value), origin)


def verbose_info(status: Any) -> dict[str, Any]:
    """The parsed JSON document a verbose ``ContainerStatus``/``PodSandboxStatus`` answer holds in
    ``info["info"]`` (containerd's and CRI-O's), or {} when there is none or it is not a JSON object."""
    raw = (status.get("info") or {}).get("info") if isinstance(status, dict) else None
    if not isinstance(raw, str):
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _gpu_minor(dev: Mapping[str, Any]) -> int | None:
    path = dev.get("path")
    major, minor = _int(dev.get("major")), _int(dev.get("minor"))
    if dev.get("type") not in (None, "c"):
        return None
    if major == NVIDIA_MAJOR and minor is not None:
        return None if minor in _CONTROL_MINORS else minor
    if isinstance(path, str) and path.startswith("/dev/nvidia") and path[11:].isascii() and path[11:].isdigit():
        return int(path[11:])
    return None


def _device_node_grants(linux: Mapping[str, Any]) -> list[GpuGrant]:
    grants = []
    for i, dev in enumerate(json_array(linux.get("devices"), "/runtimeSpec/linux/devices")):
        minor = _gpu_minor(json_object(dev, f"/runtimeSpec/linux/devices/{i}"))
        if minor is not None:
            grants.append(GpuGrant("device-node", "devices", (GpuRef(str(minor), "minor"),), "operator", True,
                                   f"OCI linux.devices: {dev.get('path') or 'device'} (195:{minor}) in the container",
                                   (_source(dev, "runtimeSpec", "linux", "devices", i),)))
    return grants


def _cgroup_rule_grant(linux: Mapping[str, Any]) -> GpuGrant | None:
    """The device cgroup rules, in order: which GPU minors (or all) the container may open."""
    rules = json_array(json_object(linux.get("resources"), "/runtimeSpec/linux/resources").get("devices"),
                  "/runtimeSpec/linux/resources/devices")
    everything = False
    minors: dict[int, int] = {}  # minor -> index of the rule that allowed it
    everything_at: int | None = None
    for i, raw in enumerate(rules):
        rule = json_object(raw, f"/runtimeSpec/linux/resources/devices/{i}")
        allow = rule.get("allow") is True
        kind = rule.get("type") or "a"
        major, minor = _int(rule.get("major")), _int(rule.get("minor"))
        if kind not in ("a", "c") or (major not in (None, -1, NVIDIA_MAJOR)):
            continue
        if kind == "a" or major in (None, -1) or minor in (None, -1):  # every GPU minor
            everything, everything_at = allow, (i if allow else None)
            if not allow:
                minors.clear()
            continue
        access = rule.get("access")
        if minor is None or minor in _CONTROL_MINORS or (
                allow and isinstance(access, str) and not set(access) & {"r", "w"}):
            continue
        if allow:
            minors[minor] = i
        else:
            minors.pop(minor, None)
    pointer = ("runtimeSpec", "linux", "resources", "devices")
    if everything and everything_at is not None:
        rule = rules[everything_at]
        return GpuGrant("device-cgroup", "all", (), "operator", True,
                        "device cgroup rule allows every NVIDIA device (major 195, any minor)",
                        (_source(rule, *pointer, everything_at),))
    if not minors:
        return None
    refs = tuple(GpuRef(str(m), "minor") for m in sorted(minors))
    return GpuGrant("device-cgroup", "devices", refs, "operator", True,
                    "device cgroup rules allow " + ", ".join(f"c 195:{m}" for m in sorted(minors)),
                    tuple(_source(rules[i], *pointer, i) for _, i in sorted(minors.items())))


def _cdi_grants(config: Mapping[str, Any], spec: Mapping[str, Any], cdi: CdiGrants | None) -> list[GpuGrant]:
    found: list[tuple[str, GrantSource]] = []
    for i, dev in enumerate(json_array(config.get("CDI_devices") or config.get("cdi_devices"), "/config/CDI_devices")):
        name = dev.get("name") if isinstance(dev, Mapping) else None
        if isinstance(name, str):
            key = "CDI_devices" if "CDI_devices" in config else "cdi_devices"
            found.append((name, _source(dev, "config", key, i)))
    for key, value in json_object(spec.get("annotations"), "/runtimeSpec/annotations").items():
        if key.startswith(_CDI_ANNOTATION) and isinstance(value, str):
            for name in value.split(","):
                found.append((name.strip(), _source(value, "runtimeSpec", "annotations", key)))
    grants = []
    for name, src in found:
        parsed = parse_cdi_name(name)
        if parsed is None:
            continue
        grant = cdi_grant(parsed[0], parsed[1], src, cdi)  # the node's specs, else NVIDIA's naming
        if grant is not None:
            grants.append(grant)
    return grants


def _is_nvidia(info: Mapping[str, Any], spec: Mapping[str, Any], handler: str | None) -> str | None:
    """Why the container ran under NVIDIA's runtime or hook, or None."""
    options = json_object(info.get("runtimeOptions"), "/runtimeOptions")
    for what, value in (("runtime handler", handler), ("runtimeType", info.get("runtimeType")),
                        ("runtimeOptions binary_name", options.get("binary_name") or options.get("BinaryName"))):
        if isinstance(value, str) and "nvidia" in value.rsplit("/", 1)[-1].lower():
            return f"{what} {value}"
    for stage, hooks in json_object(spec.get("hooks"), "/runtimeSpec/hooks").items():
        for hook in hooks if isinstance(hooks, list) else []:
            path = hook.get("path") if isinstance(hook, Mapping) else None
            if isinstance(path, str) and "nvidia" in path.rsplit("/", 1)[-1].lower():
                return f"OCI {stage} hook {path}"
    return None


def _env_grant(info: Mapping[str, Any], config: Mapping[str, Any], spec: Mapping[str, Any],
               handler: str | None) -> GpuGrant | None:
    env = json_array(json_object(spec.get("process"), "/runtimeSpec/process").get("env"), "/runtimeSpec/process/env")
    last: tuple[int, str] | None = None
    for i, item in enumerate(env):
        if isinstance(item, str) and item.startswith("NVIDIA_VISIBLE_DEVICES="):
            last = (i, item.split("=", 1)[1])
    if last is None:
        return None
    index, value = last
    entry = f"NVIDIA_VISIBLE_DEVICES={value}"
    from_kubelet = [j for j, kv in enumerate(json_array(config.get("envs"), "/config/envs"))
                    if isinstance(kv, Mapping) and kv.get("key") == "NVIDIA_VISIBLE_DEVICES"]
    origin: Origin = "operator" if from_kubelet else "image"
    who = "the pod spec's env" if from_kubelet else "the image's ENV"
    sources = [_source(entry, "runtimeSpec", "process", "env", index, origin=origin)]
    if from_kubelet:
        sources.append(_source(config["envs"][from_kubelet[-1]], "config", "envs", from_kubelet[-1]))
    scope, refs = parse_visible_devices(value)
    nvidia = _is_nvidia(info, spec, handler)
    if nvidia is None:
        return GpuGrant("nvidia-runtime-env", scope, refs, origin, False,
                        f"{entry} from {who}, but neither NVIDIA's runtime nor its hook ran the container: "
                        "no effect", tuple(sources))
    return GpuGrant("nvidia-runtime-env", scope, refs, origin, True, f"{entry} from {who} under {nvidia}",
                    tuple(sources))


def allocation_from_runtime_info(container_id: str, name: str, image: str, info: Any,
                                 runtime_handler: str | None = None,
                                 cdi: CdiGrants | None = None) -> ContainerAllocation:
    """A CRI container's allocation from its verbose ``ContainerStatus`` info (parsed JSON).

    ``runtime_handler`` is the sandbox's (``RunPodSandbox``'s, from the pod's RuntimeClass);
    ``cdi`` the node's CDI spec files, which say which GPU a CDI device name is.
    Raises ParseError (only) when the info does not have the runtime's shape.
    """
    doc = json_object(info, "verbose info")
    spec = json_object(doc.get("runtimeSpec"), "/runtimeSpec")
    config = json_object(doc.get("config"), "/config")
    linux = json_object(spec.get("linux"), "/runtimeSpec/linux")
    grants: list[GpuGrant] = []
    grants.extend(_cdi_grants(config, spec, cdi))
    env_grant = _env_grant(doc, config, spec, runtime_handler)
    if env_grant is not None:
        grants.append(env_grant)
    grants.extend(_device_node_grants(linux))
    rule_grant = _cgroup_rule_grant(linux)
    if rule_grant is not None:
        grants.append(rule_grant)
    privileged = json_object(json_object(config.get("linux"), "/config/linux").get("security_context"),
                       "/config/linux/security_context").get("privileged")
    if privileged is True:
        grants.append(GpuGrant("privileged", "all", (), "operator", True,
                               "privileged: every /dev/nvidia* node on the host is visible in the container",
                               (_source(True, "config", "linux", "security_context", "privileged"),)))
    notes: list[str] = []
    if not spec:
        notes.append("no OCI runtime spec in the runtime's answer: device grants unknown")
    effective = [g for g in grants if g.effective]
    scope: Scope
    devices: tuple[GpuRef, ...] = ()
    if any(g.scope == "all" for g in effective):
        scope, contributing = "all", [g for g in effective if g.scope == "all"]
    else:
        seen: dict[tuple[str, str], GpuRef] = {}
        for g in effective:
            for d in g.devices:
                seen.setdefault((d.kind, d.id), d)
        devices = tuple(seen.values())
        scope = "devices" if devices else "none"
        contributing = [g for g in effective if g.devices]
    origins = tuple(dict.fromkeys(o for g in contributing for o in (g.origin, *(s.origin for s in g.sources))))
    runtime = doc.get("runtimeType") if isinstance(doc.get("runtimeType"), str) else None
    return ContainerAllocation(container_id, name, image, runtime, None, scope, devices, origins,
                               tuple(grants), tuple(notes))
