"""GPU sharing contracts of pods: time-slicing and MPS replicas, MPS and software-vGPU limits.

Sources: the node's ``status.capacity`` (``kubernetes/node.json``) names the GPU resources the
device plugin advertises (``nvidia.com/gpu``, renamed ones such as ``nvidia.com/gpu.shared`` under
``renameByDefault``, or any name its ``resources`` config gives, ``nvidia.com/mig-<profile>``); the
kubelet's pod-resources ``List`` (``kubernetes/podresources/list.json``) gives each container its
device ids, replicas being ``GPU-<uuid>::N``; the pod spec (``kubernetes/pods.json``) its limits and
environment (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``,
``CUDA_DEVICE_MEMORY_LIMIT[_N]``, ``CUDA_DEVICE_SM_LIMIT``). A resource is a GPU resource when the
node advertises it in the ``nvidia.com`` domain, or when its device ids are GPU or MIG UUIDs.

A container holding GPU devices of a resource the kubernetes loader did not read (a renamed one)
gets that explicit grant; every shared grant or limit becomes a :class:`ShareContract`.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from forensics.analysis.allocation import resolve_device_ids
from forensics.analysis.findings import Evidence
from forensics.analysis.loaders.common import as_int, dig
from forensics.analysis.model import GpuAllocation, Model, ShareContract
from forensics.analysis.source import Source
from forensics.specs import kubernetes as kube_spec
from forensics.specs import podresources as podresources_spec

__all__ = ["gpu_resource_names", "load_sharing", "parse_memory_limit"]

_LIST = podresources_spec.LIST
_PODS = kube_spec.PODS
_NODE = kube_spec.NODE
_DEFAULT = "nvidia.com/gpu"
_ENV_LIMITS = ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
               "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT")
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_MEM = re.compile(r"^\s*(?:\d+\s*=\s*)?(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def parse_memory_limit(text: str) -> int | None:
    """``4g``, ``4096m``, ``0=2G`` (MPS per-device form; the first device's) -> bytes; None if unreadable."""
    first = text.split(",", 1)[0]
    m = _MEM.match(first)
    if not m:
        return None
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def _gpu_like(ids: list[str]) -> bool:
    return bool(ids) and all(i.split("::", 1)[0].upper().startswith(("GPU-", "MIG-")) for i in ids)


def _capacity(node_doc: Any) -> Any:
    capacity = dig(node_doc, "status", "capacity")
    return capacity if isinstance(capacity, dict) else dig(node_doc, "items", 0, "status", "capacity")


def node_capacity_read(node_doc: Any) -> bool:
    """Whether the node's ``status.capacity`` was read (a ring's history has no node object: which
    ``nvidia.com/`` resources are GPUs is then not known)."""
    return isinstance(_capacity(node_doc), dict)


def gpu_resource_names(node_doc: Any, *, other_vendors: bool = False) -> dict[str, int]:
    """GPU resources the node advertises (``status.capacity``, nvidia.com domain) -> count;
    ``other_vendors``: also another domain's extended resource that names a GPU (a GPU-sharing
    device plugin's: Alibaba's ``aliyun.com/gpu-mem``, Volcano's ``volcano.sh/vgpu-number``)."""
    capacity = _capacity(node_doc)
    out: dict[str, int] = {}
    for name, value in (capacity or {}).items() if isinstance(capacity, dict) else ():
        if not isinstance(name, str) or as_int(value) is None:
            continue
        if name.startswith("nvidia.com/") or (other_vendors and "/" in name and "gpu" in name.lower()):
            out[name] = as_int(value) or 0
    return out


def _env(container: Any) -> dict[str, tuple[str, int]]:
    """The sharing variables of a pod spec container: name -> (value, index in ``env``)."""
    out: dict[str, tuple[str, int]] = {}
    env = dig(container, "env")
    for k, item in enumerate(env if isinstance(env, list) else []):
        name, value = dig(item, "name"), dig(item, "value")
        if isinstance(name, str) and isinstance(value, str) and name.startswith(_ENV_LIMITS):
            out[name] = (value, k)
    return out


def load_sharing(src: Source, model: Model, node: str) -> None:
    pods_doc = src.json(_PODS)
    items = dig(pods_doc, "items")
    if not isinstance(items, list):
        return
    advertised = gpu_resource_names(src.json(_NODE))
    gpus = model.node_gpus(node)
    by_name = {(p.namespace, p.name): p for p in model.pods.values() if p.node == node}
    # (namespace, pod, container) -> [(resource, ids, evidence)]
    grants: dict[tuple[str, str, str], list[tuple[str, list[str], Evidence]]] = {}
    lst = src.json(_LIST)
    key = "pod_resources" if isinstance(dig(lst, "pod_resources"), list) else "podResources"
    for i, p in enumerate(_list(dig(lst, key))):  # one broken entry hides no other
        for j, c in enumerate(_list(dig(p, "containers"))):
            for k, d in enumerate(_list(dig(c, "devices"))):
                res = dig(d, "resource_name") or dig(d, "resourceName")
                ids = [str(x) for x in _list(dig(d, "device_ids") or dig(d, "deviceIds")) if isinstance(x, str)]
                if not isinstance(res, str) or not ids:
                    continue
                if not (res in advertised or _gpu_like(ids)):
                    continue
                ev = src.ev_pointer(_LIST, f"/{key}/{i}/containers/{j}/devices/{k}", lst)
                grants.setdefault((str(dig(p, "namespace")), str(dig(p, "name")), str(dig(c, "name"))), []).append(
                    (res, ids, ev))
    for i, raw in enumerate(items):
        ns, name = dig(raw, "metadata", "namespace"), dig(raw, "metadata", "name")
        pod = by_name.get((str(ns), str(name)))
        if pod is None:
            continue
        spec = dig(raw, "spec", "containers")
        for j, container in enumerate(spec if isinstance(spec, list) else []):
            cname = str(dig(container, "name"))
            cids = [cid for n, cid in pod.container_ids if n == cname]
            held = grants.get((pod.namespace, pod.name, cname), [])
            env = _env(container)
            shared = [(r, ids, ev) for r, ids, ev in held if r != _DEFAULT and not r.startswith("nvidia.com/mig-")
                      or any("::" in x for x in ids)]
            if not (shared or env):
                continue
            ids_all = [x for _, ids, _ in shared for x in ids]
            uuids = resolve_device_ids(ids_all, gpus) if ids_all else ()
            resource = shared[0][0] if shared else None
            per_gpu = (advertised.get(resource, 0) // len(gpus)) if resource and gpus and advertised.get(resource) else None
            mem = sm = None
            parts: list[str] = []
            env_ev: list[Evidence] = []
            for var, (value, k) in sorted(env.items()):
                parts.append(f"{var}={value}")
                env_ev.append(src.ev_pointer(_PODS, f"/items/{i}/spec/containers/{j}/env/{k}/value", pods_doc))
                if var.startswith(("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT")):
                    mem = mem if mem is not None else parse_memory_limit(value)
                elif var.startswith(("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_DEVICE_SM_LIMIT")):
                    try:
                        sm = float(value)
                    except ValueError:
                        pass
            if shared:
                parts.insert(0, f"{resource}: {','.join(ids_all)}"
                             + (f" ({len(ids_all)} of {per_gpu} replicas per GPU)" if per_gpu else ""))
            kind = ("mps" if any(v.startswith("CUDA_MPS_") for v in env) else
                    "time-slicing" if shared else "vgpu-env")
            evidence = tuple(ev for _, _, ev in shared) + tuple(env_ev)
            for cid in cids:
                model.shares[(node, cid)] = ShareContract(
                    node, cid, kind, resource, tuple(u for u in uuids if u.startswith(("GPU-", "MIG-"))),
                    len(ids_all), per_gpu, mem, sm, "; ".join(parts), evidence)
                existing = model.container(node, cid)
                if existing is not None and shared and not existing.allocation.explicit:
                    model.containers[(node, cid)] = replace(existing, allocation=GpuAllocation(
                        "kubernetes", True, uuids, "pod-resources", f"{resource} devices {','.join(ids_all)}",
                        evidence, time_sliced=True))
        if any(grants.get((pod.namespace, pod.name, n)) for n, _ in pod.container_ids):
            extra = tuple((n, tuple(x for r, ids, _ in grants.get((pod.namespace, pod.name, n), []) for x in ids))
                          for n in dict.fromkeys(n for n, _ in pod.container_ids))
            if extra != pod.gpu_devices:
                model.pods[pod.uid] = replace(pod, gpu_devices=tuple(e for e in extra if e[1]))
