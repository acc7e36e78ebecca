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

Pure: it reads the captured documents, never podman.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from forensics.parsing.gpu_allocation import (
    CdiGrants,
    ContainerAllocation,
    GpuGrant,
    GrantSource,
    allocation_from_inspect,
    cdi_grant,
    compact_json,
    json_object,
    json_pointer,
    parse_cdi_name,
)

__all__ = ["LIBPOD_INSPECT", "allocation_from_libpod", "create_command_cdi_devices"]

LIBPOD_INSPECT = "libpod-inspect"  # GrantSource.document: docker/containers/<id>/libpod-inspect.json
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
        # --device HOST[:CONTAINER[:PERMS]]: a CDI name is the whole value (it holds no ':')
        if parse_cdi_name(value) is not None and ":" not in value:
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


def _own(source: GrantSource) -> GrantSource:
    """A source read from the libpod document: named so, its runtime at ``/OCIRuntime``."""
    if source.document != "container-inspect":
        return source
    pointer = "/OCIRuntime" if source.pointer == "/HostConfig/Runtime" else source.pointer
    return dataclasses.replace(source, document=LIBPOD_INSPECT, pointer=pointer)


def allocation_from_libpod(libpod: Any, image: Any = None, engine_info: Any = None,
                           cdi: CdiGrants | None = None) -> ContainerAllocation:
    """A podman container's allocation from its libpod inspect (and its image's, ``/info``).

    Raises ParseError (only) when the document does not have podman's shape."""
    doc = dict(json_object(libpod, "libpod inspect", optional=False))
    runtime = doc.get("OCIRuntime")
    host = dict(json_object(doc.get("HostConfig"), "/HostConfig"))
    if isinstance(runtime, str) and runtime:
        host["Runtime"] = runtime  # the runtime podman ran it with, not the "oci" it reports there
    doc["HostConfig"] = host
    alloc = allocation_from_inspect(doc, image, engine_info, cdi, extra_grants=_cdi_grants(doc, cdi))
    grants = tuple(dataclasses.replace(g, sources=tuple(_own(s) for s in g.sources)) for g in alloc.grants)
    notes = tuple(n.replace("HostConfig.Runtime", "OCIRuntime") for n in alloc.notes)
    return dataclasses.replace(alloc, grants=grants, notes=notes)
