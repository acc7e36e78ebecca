"""What GPUs a podman container was given, read from podman's own inspect.

Podman's Docker-compatible inspect (``GET /containers/{id}/json``) reports every container's
runtime as ``oci`` and has no field for CDI devices or annotations: a container given GPUs the
way podman documents it (``--device nvidia.com/gpu=all`` through CDI, ``--runtime nvidia``)
looks ungranted there. Its own inspect, ``GET /libpod/containers/{id}/json``
(``docker/containers/<id>/libpod-inspect.json``, document ``libpod-inspect``), holds:

- ``/OCIRuntime``: the runtime really used (``nvidia``, ``runc``, ``crun``): the
  ``nvidia-runtime-env`` grant of :mod:`forensics.parsing.gpu_allocation` is read with it, and
  its source cites ``/OCIRuntime`` instead of the ``oci`` of ``/HostConfig/Runtime``;
- ``/Config/Env``, ``/HostConfig/Devices``, ``/HostConfig/Privileged``: read as a Docker inspect's
  (for a running container podman reads them from the OCI spec it started it with: a CDI spec's
  ``NVIDIA_VISIBLE_DEVICES=void`` is there, and never takes a CDI grant back);
- ``/Config/CreateCommand``: the ``podman run``/``create`` command line. No inspect field holds a
  container's CDI devices (podman 4.3 through 5.x keep them in the container's configuration
  only, ``cdiDevices``), so they are read here: each ``--device <vendor/class=name>`` (CDI
  qualified, as podman itself decides), and ``--gpus <ids>`` (podman 5.x turns it into
  ``nvidia.com/gpu=<id>`` CDI devices). A container created through the API has no
  ``CreateCommand``: its CDI devices are then not in the bundle;
- ``/Config/Annotations``: ``cdi.k8s.io/*`` annotations, CDI device requests the NVIDIA runtime
  reads in its ``cdi`` mode.

And from the OCI runtime spec the container was started with (the file the libpod inspect names,
``OCIConfigPath``, kept as ``docker/containers/<id>/oci-config.json``, document ``oci-config``),
when the capture could read it:

- ``/hooks/<stage>/N``: NVIDIA's OCI hook (``nvidia-container-runtime-hook``, which podman runs
  from a ``hooks.d`` file under any runtime): ``NVIDIA_VISIBLE_DEVICES`` is then effective under
  runc or crun, cited with the hook;
- ``/linux/devices/N``: GPU device nodes (character, major 195, minor N < 254) the container got,
  whoever put them there (``--device /dev/nvidia0``, a CDI spec's edits): GPU minor N.

Pure: it reads the captured documents, never podman.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from forensics.parsing.gpu_allocation import (
    CdiGrants,
    ContainerAllocation,
    GpuGrant,
    GpuRef,
    GrantSource,
    allocation_from_inspect,
    cdi_grant,
    compact_json,
    json_object,
    json_pointer,
    parse_cdi_name,
)

__all__ = ["LIBPOD_INSPECT", "OCI_CONFIG", "allocation_from_libpod", "create_command_cdi_devices"]

LIBPOD_INSPECT = "libpod-inspect"  # GrantSource.document: docker/containers/<id>/libpod-inspect.json
OCI_CONFIG = "oci-config"  # GrantSource.document: docker/containers/<id>/oci-config.json
_NVIDIA_HOOKS = frozenset({"nvidia-container-runtime-hook", "nvidia-container-toolkit"})
_NVIDIA_MAJOR = 195
_CDI_ANNOTATION = "cdi.k8s.io/"
_DEVICE_FLAGS = ("--device",)
_GPUS_FLAG = "--gpus"


def create_command_cdi_devices(argv: Any) -> list[tuple[int, str, str]]:
    """``(argument index, CDI name, how)`` of each CDI device a ``podman run`` command line asks for."""
    if not isinstance(argv, list):
        return []
    out: list[tuple[int, str, str]] = []
    args = [a if isinstance(a, str) else "" for a in argv]
    for i, arg in enumerate(args):
        flag, sep, inline = arg.partition("=")
        if flag not in (*_DEVICE_FLAGS, _GPUS_FLAG):
            continue
        at, value = (i, inline) if sep else (i + 1, args[i + 1] if i + 1 < len(args) else "")
        if flag == _GPUS_FLAG:
            for gpu in (g.strip() for g in value.split(",") if g.strip()):
                name = gpu if parse_cdi_name(gpu) else f"nvidia.com/gpu={gpu}"
                out.append((at, name, f"--gpus {value}"))
            continue
        # --device HOST[:CONTAINER[:PERMS]], or a CDI name: podman takes a qualified name whole,
        # ':' included (nvidia-ctk's MIG devices are nvidia.com/gpu=0:1); a host path starts with '/'
        parsed = parse_cdi_name(value)
        if parsed is not None and "/" not in parsed[1]:
            out.append((at, value, f"--device {value}"))
    return out


def _cdi_grants(doc: Mapping[str, Any], cdi: CdiGrants | None) -> list[GpuGrant]:
    config = json_object(doc.get("Config"), "/Config")
    grants: list[GpuGrant] = []
    argv_any = config.get("CreateCommand")
    argv: list[Any] = argv_any if isinstance(argv_any, list) else []
    for at, name, how in create_command_cdi_devices(argv):
        kind, dev = parse_cdi_name(name) or ("", "")
        src = GrantSource(LIBPOD_INSPECT, json_pointer("Config", "CreateCommand", at), compact_json(argv[at]))
        g = cdi_grant(kind, dev, src, cdi)
        if g is not None:
            grants.append(dataclasses.replace(g, reason=f"{g.reason}, from {how} (podman's CreateCommand)"))
    annotations = config.get("Annotations")
    if isinstance(annotations, Mapping):
        for key, value in sorted(annotations.items()):
            if not (isinstance(key, str) and key.startswith(_CDI_ANNOTATION) and isinstance(value, str)):
                continue
            src = GrantSource(LIBPOD_INSPECT, json_pointer("Config", "Annotations", key), compact_json(value))
            for name in (v.strip() for v in value.split(",") if v.strip()):
                parsed = parse_cdi_name(name)
                g = cdi_grant(parsed[0], parsed[1], src, cdi) if parsed else None
                if g is not None:
                    grants.append(dataclasses.replace(g, reason=f"{g.reason}, from annotation {key}"))
    return grants


def _nvidia_hook(oci: Mapping[str, Any]) -> GrantSource | None:
    """Where the OCI spec runs NVIDIA's hook, if it does."""
    hooks = oci.get("hooks")
    for stage, entries in sorted(hooks.items()) if isinstance(hooks, Mapping) else ():
        for i, hook in enumerate(entries if isinstance(entries, list) else ()):
            path = hook.get("path") if isinstance(hook, Mapping) else None
            if isinstance(path, str) and path.rsplit("/", 1)[-1] in _NVIDIA_HOOKS:
                return GrantSource(OCI_CONFIG, json_pointer("hooks", stage, i), compact_json(path))
    return None


def _oci_device_grants(oci: Mapping[str, Any]) -> list[GpuGrant]:
    linux = oci.get("linux")
    devices = linux.get("devices") if isinstance(linux, Mapping) else None
    grants: list[GpuGrant] = []
    for i, dev in enumerate(devices if isinstance(devices, list) else ()):
        if not isinstance(dev, Mapping) or dev.get("type") != "c" or dev.get("major") != _NVIDIA_MAJOR:
            continue
        minor = dev.get("minor")
        if isinstance(minor, int) and not isinstance(minor, bool) and 0 <= minor < 254:
            grants.append(GpuGrant("device-node", "devices", (GpuRef(str(minor), "minor"),), "operator", True,
                                   f"device node {dev.get('path')} (c 195:{minor}) in the OCI spec it was "
                                   "started with", (GrantSource(OCI_CONFIG, json_pointer("linux", "devices", i),
                                                                compact_json(dev)),)))
    return grants


def _hooked(grants: tuple[GpuGrant, ...], hook: GrantSource) -> GpuGrant | None:
    """The environment's grant podman's runtime alone would not honour, made effective by NVIDIA's hook."""
    env = next((g for g in grants if g.mechanism == "nvidia-runtime-env" and not g.effective), None)
    if env is None:
        return None
    return dataclasses.replace(env, effective=True, sources=(*env.sources, hook),
                               reason=f"{env.reason.split(', but runtime')[0]} under NVIDIA's OCI hook "
                                      f"({json.loads(hook.excerpt)}, in the OCI spec it was started with)")


def _own(source: GrantSource) -> GrantSource:
    """A source read from the libpod document: named so, its runtime at ``/OCIRuntime``."""
    if source.document != "container-inspect":
        return source
    pointer = "/OCIRuntime" if source.pointer == "/HostConfig/Runtime" else source.pointer
    return dataclasses.replace(source, document=LIBPOD_INSPECT, pointer=pointer)


def allocation_from_libpod(libpod: Any, image: Any = None, engine_info: Any = None,
                           cdi: CdiGrants | None = None, oci_config: Any = None) -> ContainerAllocation:
    """A podman container's allocation from its libpod inspect (and its image's, ``/info``, and the
    OCI runtime spec it was started with when the bundle has it).

    Raises ParseError (only) when the document does not have podman's shape."""
    doc = dict(json_object(libpod, "libpod inspect", optional=False))
    runtime = doc.get("OCIRuntime")
    host = dict(json_object(doc.get("HostConfig"), "/HostConfig"))
    if isinstance(runtime, str) and runtime:
        host["Runtime"] = runtime  # the runtime podman ran it with, not the "oci" it reports there
    doc["HostConfig"] = host
    oci = oci_config if isinstance(oci_config, Mapping) else {}
    extra = [*_cdi_grants(doc, cdi), *_oci_device_grants(oci)]
    alloc = allocation_from_inspect(doc, image, engine_info, cdi, extra_grants=extra)
    hook = _nvidia_hook(oci)
    hooked = _hooked(alloc.grants, hook) if hook is not None else None
    if hooked is not None:  # again, with the hook's grant instead of the one without effect
        alloc = allocation_from_inspect(doc, image, engine_info, cdi, extra_grants=[*extra, hooked])
        alloc = dataclasses.replace(alloc, grants=tuple(
            g for g in alloc.grants if g.effective or g.mechanism != "nvidia-runtime-env"))
    grants = tuple(dataclasses.replace(g, sources=tuple(_own(s) for s in g.sources)) for g in alloc.grants)
    notes = tuple(n.replace("HostConfig.Runtime", "OCIRuntime") for n in alloc.notes)
    return dataclasses.replace(alloc, grants=grants, notes=notes)
