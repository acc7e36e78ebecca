"""The node's GPU resources: ``status.capacity`` against ``status.allocatable`` of
``kubernetes/node.json`` per ``nvidia.com/*`` resource, and the device ids pod-resources
``GetAllocatableResources`` lists for each (``kubernetes/podresources/allocatable.json``).

Capacity counts healthy and unhealthy devices, allocatable the healthy ones only (kubernetes PR
#57266, "Handle Unhealthy devices"), and ``GetAllocatableResources`` leaves unhealthy devices out
since kubernetes PR #104123: a device plugin that marks a GPU unhealthy (the NVIDIA plugin does on
an Xid it does not ignore) lowers allocatable below capacity and drops the GPU's id from that list.
Both are read when the kubernetes and podresources collectors ran (the capture's start); with
``--duration`` the Node is read again at the end of the window (``kubernetes/node-end.json``, the
time of that read from ``kubernetes/requests-end.json``), and ``GetAllocatableResources``
(``kubernetes/podresources/allocatable-end.json``), so whether allocatable recovered, or fell, during
the window, and which GPU left, is known.
"""

from __future__ import annotations

from typing import Any

from forensics.analysis.findings import Evidence
from forensics.analysis.loaders.common import as_float, as_int, dig
from forensics.analysis.model import Model, NodeGpuResource
from forensics.analysis.source import Source, json_pointer
from forensics.specs import kubernetes as kube_spec
from forensics.specs import podresources as podresources_spec

__all__ = ["load_node_resources"]


def _resources(doc: Any, field: str) -> tuple[dict[str, int], str]:
    """nvidia.com/* resource -> count in ``status.<field>``, and the JSON pointer of that object."""
    block, base = dig(doc, "status", field), f"/status/{field}"
    if not isinstance(block, dict):
        block, base = dig(doc, "items", 0, "status", field), f"/items/0/status/{field}"
    out: dict[str, int] = {}
    for name, value in block.items() if isinstance(block, dict) else ():
        count = as_int(value)
        if isinstance(name, str) and name.startswith("nvidia.com/") and count is not None and count >= 0:
            out[name] = count
    return out, base


def _allocatable_ids(src: Source, member: str) -> dict[str, tuple[list[str], Evidence]]:
    doc = src.json(member)
    devices = dig(doc, "devices")
    out: dict[str, tuple[list[str], Evidence]] = {}
    for k, d in enumerate(devices if isinstance(devices, list) else []):
        res = dig(d, "resource_name") or dig(d, "resourceName")
        ids = dig(d, "device_ids") or dig(d, "deviceIds") or []
        if not isinstance(res, str) or not isinstance(ids, list):
            continue
        have = out.get(res)
        found = [str(x) for x in ids if isinstance(x, str)]
        ev = src.ev_pointer(member, f"/devices/{k}", doc)
        out[res] = ((have[0] if have else []) + found, have[1] if have else ev)
    return out


def _end_read_time(src: Source, model: Model, node: str) -> float | None:
    """When the Node was read again: the answer's arrival (``received_unix``) of the answered
    node request in ``kubernetes/requests-end.json``, else the end of the node's window."""
    calls = dig(src.json(kube_spec.REQUESTS_END), "requests")
    for call in calls if isinstance(calls, list) else []:
        path = dig(call, "path")
        t = as_float(dig(call, "received_unix"))
        if dig(call, "outcome") == "ok" and isinstance(path, str) and path.startswith("/api/v1/nodes/") \
                and t is not None and t > 0:
            return t
    return model.nodes[node].end if node in model.nodes else None


def load_node_resources(src: Source, model: Model, node: str) -> None:
    doc = src.json(kube_spec.NODE)
    capacity, cap_base = _resources(doc, "capacity")
    if not capacity:
        return
    allocatable, alloc_base = _resources(doc, "allocatable")
    ids = _allocatable_ids(src, podresources_spec.ALLOCATABLE) if src.has(podresources_spec.ALLOCATABLE) else None
    end_ids = (_allocatable_ids(src, podresources_spec.ALLOCATABLE_END)
               if src.has(podresources_spec.ALLOCATABLE_END) else None)
    t = model.nodes[node].start if node in model.nodes else None
    end_doc = src.json(kube_spec.NODE_END) if src.has(kube_spec.NODE_END) else None
    end_capacity, _ = _resources(end_doc, "capacity")
    end_allocatable, end_base = _resources(end_doc, "allocatable")
    end_t = _end_read_time(src, model, node) if end_allocatable else None
    for name, count in sorted(capacity.items()):
        alloc = allocatable.get(name)
        pointer = alloc_base + json_pointer(name) if alloc is not None else cap_base + json_pointer(name)
        listed = ids.get(name) if ids is not None else None
        end_alloc = end_allocatable.get(name)
        end_listed = end_ids.get(name) if end_ids is not None else None
        model.add(NodeGpuResource(
            node, name, count, alloc, t, src.ev_pointer(kube_spec.NODE, pointer, doc),
            tuple(listed[0]) if listed else (() if ids is not None else None), listed[1] if listed else None,
            end_capacity.get(name, count) if end_alloc is not None else None, end_alloc,
            end_t if end_alloc is not None else None,
            src.ev_pointer(kube_spec.NODE_END, end_base + json_pointer(name), end_doc)
            if end_alloc is not None else None,
            tuple(end_listed[0]) if end_listed else (() if end_ids is not None else None),
            end_listed[1] if end_listed else None))
