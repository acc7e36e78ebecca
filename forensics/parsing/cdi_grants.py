"""CDI grants read through the node's CDI spec files: :class:`SpecGrants`, the
:class:`~forensics.parsing.gpu_allocation.CdiGrants` the engines' grant readers are given when
the bundle holds specs (``cdi/``, :mod:`forensics.parsing.cdi_spec`).

- A CDI device name (``nvidia.com/gpu=0``, ``k8s.gpu.nvidia.com/claim=<uid>-gpu-0``) the specs
  define is the GPUs of that device's own ``/dev/nvidia<N>`` nodes (GPU minor N), whatever its
  kind; the grant cites the request and the device's entry in its spec file (document
  ``cdi-spec:<member>``, pointer ``/devices/N``). A device whose edits hold no GPU node grants no
  GPU. A name the specs lack, or define twice in one directory, is read by NVIDIA's naming, and
  the reason says so.
- A ``--gpus`` request on Engine 29.2+ (``/info`` ``ServerVersion``): with ``nvidia-cdi-hook``
  installed the engine injects it as ``nvidia.com/gpu=<id>`` CDI devices (``all`` for Count -1;
  moby's ``daemon/devices_nvidia_linux.go``), so where the specs define every such name the
  grant is those devices' GPUs, the specs cited beside the request. Otherwise it is read as before.

Pure: it reads parsed specs, never the host.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from forensics.parsing.cdi_spec import CdiDevice, CdiRegistry
from forensics.parsing.gpu_allocation import (
    GpuGrant,
    GpuRef,
    GrantSource,
    compact_json,
    nvidia_cdi_grant,
)

__all__ = ["CDI_SPEC_DOCUMENT", "SpecGrants"]

CDI_SPEC_DOCUMENT = "cdi-spec:"  # GrantSource.document prefix: the bundle member of a CDI spec file
_ENGINE_VERSION_RE = re.compile(r"^v?([0-9]+)\.([0-9]+)")


def _spec_source(device: CdiDevice) -> GrantSource:
    return GrantSource(f"{CDI_SPEC_DOCUMENT}{device.member}", device.pointer,
                       compact_json({"name": device.qualified, "gpu_minors": list(device.minors)}))


def _nodes(minors: tuple[int, ...]) -> str:
    return ", ".join(f"/dev/nvidia{m}" for m in minors)


@dataclass(frozen=True)
class SpecGrants:
    """CDI names resolved through ``registry`` (the node's spec files)."""

    registry: CdiRegistry

    def device(self, kind: str, name: str, source: GrantSource) -> GpuGrant | None:
        qualified = f"{kind}={name}"
        found = self.registry.resolve(qualified)
        if found is None:
            why = (" (defined twice in one CDI spec directory: the runtime refuses it)"
                   if self.registry.conflicts(qualified) else
                   " (not in the captured CDI specs: read by nvidia-ctk's device naming)")
            return nvidia_cdi_grant(kind, name, source, why)
        if not found.minors:
            return None  # a device whose edits give no GPU node: not a GPU grant
        return GpuGrant("cdi", "devices", tuple(GpuRef(str(m), "minor") for m in found.minors), "operator",
                        True, f"CDI device {qualified} ({_nodes(found.minors)} per {found.member})",
                        (source, _spec_source(found)), cdi_names=(qualified,))

    def gpus_request(self, grant: GpuGrant, engine_info: Mapping[str, Any] | None) -> GpuGrant:
        if grant.mechanism != "device-request" or grant.scope == "none" or engine_info is None:
            return grant
        m = _ENGINE_VERSION_RE.match(str(engine_info.get("ServerVersion") or ""))
        if m is None or (int(m.group(1)), int(m.group(2))) < (29, 2):
            return grant
        names = ([f"nvidia.com/gpu={d.id}" for d in grant.devices] if grant.scope == "devices"
                 else ["nvidia.com/gpu=all"])
        resolved = [self.registry.resolve(n) for n in names]
        found = [r for r in resolved if r is not None and r.minors]
        if len(found) != len(names):
            return grant
        minors = tuple(dict.fromkeys(mi for r in found for mi in r.minors))
        return dataclasses.replace(
            grant, scope="devices", devices=tuple(GpuRef(str(mi), "minor") for mi in minors),
            reason=f"{grant.reason}; Engine {m.group(1)}.{m.group(2)} injects it as CDI device "
                   f"{', '.join(names)} when nvidia-cdi-hook is installed ({_nodes(minors)} per the CDI spec)",
            sources=grant.sources + tuple(_spec_source(r) for r in found), cdi_names=tuple(names))
