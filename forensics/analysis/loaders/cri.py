"""CRI containers and pod sandboxes: ``cri/containers/<id>.json`` (``ContainerStatus(verbose)``),
``cri/pods/<sandbox id>.json`` (``PodSandboxStatus(verbose)``) and the two listings
``cri/containers.json`` / ``cri/pods.json`` (for objects whose status call failed).

The join the Kubernetes API would give, from the runtime alone: a container's sandbox (the verbose
info's ``sandboxID``, else the listing's ``pod_sandbox_id``) is its pod, named by the sandbox's
metadata (UID, name, namespace) as the kubelet created it. So a containerd/CRI-O node's
containers are named ``namespace/pod/container`` and belong to their pod even when the
Kubernetes API was not reachable; when it was, the kubernetes loader (run after this one) adds
the pod spec's limits and the kubelet's device assignment.

A container's GPU allocation is the OCI runtime spec it was started with
(forensics.parsing.oci_allocation): ``linux.devices``, the device cgroup rules, CDI devices,
``NVIDIA_VISIBLE_DEVICES``; a CDI device name is read through the bundle's CDI specs
(:mod:`forensics.analysis.loaders.cdi`), its spec entry cited. The runtime spec is a JSON string inside the member (``/info/info``):
evidence from it points at ``/info/info#<pointer into that JSON>`` and quotes the value's text as
the member holds it (inside the string, its escapes as written).
"""

from __future__ import annotations

import json
from typing import Any

from forensics.analysis.allocation import classify_docker_allocation
from forensics.analysis.events import OomKill
from forensics.analysis.excerpt import JsonText, cut
from forensics.analysis.findings import Evidence
from forensics.analysis.loaders.cdi import cdi_evidence, cdi_grants
from forensics.analysis.loaders.common import Loader, as_dict, as_int, as_opt_str, as_str, dig
from forensics.analysis.loaders.state import LoadState
from forensics.analysis.model import UNKNOWN_ALLOCATION, Container, Model, Pod
from forensics.analysis.source import Source
from forensics.errors import ParseError
from forensics.parsing.cdi_grants import CDI_SPEC_DOCUMENT
from forensics.parsing.oci_allocation import (
    RUNTIME_INFO,
    allocation_from_runtime_info,
    verbose_info,
)
from forensics.specs import cri as cri_spec

__all__ = ["INFO_POINTER", "LOADER", "load_cri"]

INFO_POINTER = "/info/info"  # the verbose info, a JSON string
_STATES = {"CONTAINER_CREATED": "created", "CONTAINER_RUNNING": "running", "CONTAINER_EXITED": "exited",
           "CONTAINER_UNKNOWN": "unknown"}


def _in_info(src: Source, member: str, info_text: str, pointer: str, excerpt: str) -> Evidence:
    """Evidence for the value at ``pointer`` inside the verbose info string of ``member``: its text
    as the member holds it (the span in the info JSON, escaped as a JSON string is); the parser's
    compact rendering, said to be normalised, when that text cannot be found in the member."""
    locator = f"{INFO_POINTER}#{pointer}"
    span = JsonText(info_text).pointer_span(pointer)
    member_text = src.json_text(member)
    if span is not None and member_text is not None:
        raw = info_text[span[0]:span[1]]
        if len(raw) >= 2 and raw[0] == raw[-1] == '"':
            raw = raw[1:-1]
        escaped = json.dumps(raw, ensure_ascii=False)[1:-1]
        if escaped in member_text.text:
            return Evidence(src.name, member, locator, cut(escaped))
    return Evidence(src.name, member, locator, excerpt, True)


def _ns_time(value: Any) -> float | None:
    """A CRI timestamp (nanoseconds since the epoch; 0: not yet) in seconds."""
    n = as_int(value)
    return n / 1e9 if n else None


class _Sandbox:
    def __init__(self, sid: str, meta: dict[str, Any], handler: str | None, state: str, evidence: Evidence) -> None:
        self.id, self.handler, self.state, self.evidence = sid, handler, state, evidence
        self.uid = as_opt_str(meta.get("uid"))
        self.name = as_str(meta.get("name"))
        self.namespace = as_str(meta.get("namespace"))
        self.containers: list[tuple[str, str]] = []


def _sandboxes(src: Source) -> dict[str, _Sandbox]:
    out: dict[str, _Sandbox] = {}
    listing = src.json(cri_spec.PODS)
    for i, item in enumerate(dig(listing, "items") or []):
        sid = as_str(dig(item, "id"))
        if sid:
            out[sid] = _Sandbox(sid, as_dict(dig(item, "metadata")), as_opt_str(dig(item, "runtime_handler")),
                                as_str(dig(item, "state")), src.ev_pointer(cri_spec.PODS, f"/items/{i}/metadata", listing))
    for member in src.under(cri_spec.PODS_DIR):
        doc = src.json(member)
        status = as_dict(dig(doc, "status"))
        sid = as_str(status.get("id"))
        if not sid:
            continue
        out[sid] = _Sandbox(sid, as_dict(status.get("metadata")), as_opt_str(status.get("runtime_handler")),
                            as_str(status.get("state")), src.ev_pointer(member, "/status/metadata", doc))
    return out


def load_cri(src: Source, model: Model, node: str, loading: LoadState) -> None:
    sandboxes = _sandboxes(src)
    listing = src.json(cri_spec.CONTAINERS)
    listed_sandbox = {as_str(dig(c, "id")): as_str(dig(c, "pod_sandbox_id")) for c in dig(listing, "containers") or []}
    gpus = model.node_gpus(node)
    cdi = cdi_grants(src)  # the node's CDI specs: which GPU a CDI device name is
    for member in src.under(cri_spec.CONTAINERS_DIR):
        doc = src.json(member)
        status = as_dict(dig(doc, "status"))
        cid = as_str(status.get("id"))
        if not cid:
            continue
        info = verbose_info(doc)
        sandbox = sandboxes.get(as_str(info.get("sandboxID")) or listed_sandbox.get(cid, ""))
        labels = as_dict(status.get("labels"))
        k8s_name = as_opt_str(dig(status, "metadata", "name")) or as_opt_str(labels.get("io.kubernetes.container.name"))
        pod_uid = (sandbox.uid if sandbox else None) or as_opt_str(labels.get("io.kubernetes.pod.uid"))
        namespace = sandbox.namespace if sandbox else as_str(labels.get("io.kubernetes.pod.namespace"))
        pod_name = sandbox.name if sandbox else as_str(labels.get("io.kubernetes.pod.name"))
        name = f"{namespace}/{pod_name}/{k8s_name}" if namespace and pod_name and k8s_name else (k8s_name or cid[:12])
        image = as_str(dig(status, "image", "image")) or as_str(status.get("image_ref"))

        info_text = as_str(dig(doc, "info", "info"))

        def evidence_for(document: str, pointer: str, excerpt: str, _member: str = member,
                         _doc: Any = doc, _text: str = info_text) -> Evidence:
            if document == RUNTIME_INFO:
                return _in_info(src, _member, _text, pointer, excerpt)
            if document.startswith(CDI_SPEC_DOCUMENT):
                return cdi_evidence(src, cdi, document[len(CDI_SPEC_DOCUMENT):], pointer, excerpt)
            return src.ev_pointer(_member, "/status", _doc)

        try:
            alloc = classify_docker_allocation(
                allocation_from_runtime_info(cid, name, image, info, sandbox.handler if sandbox else None, cdi),
                gpus, evidence_for, "runtime spec", (RUNTIME_INFO, "/runtimeSpec/linux"))
        except ParseError as exc:
            src.problems.append(f"{src.name}: {member}: allocation not understood: {exc}")
            alloc = UNKNOWN_ALLOCATION
        if not info:
            alloc = UNKNOWN_ALLOCATION
        resources = as_dict(dig(info, "runtimeSpec", "linux", "resources"))
        quota, period = as_int(dig(resources, "cpu", "quota")), as_int(dig(resources, "cpu", "period"))
        state = _STATES.get(as_str(status.get("state")), "unknown")
        oom = status.get("reason") == "OOMKilled"
        finished = _ns_time(status.get("finished_at"))
        memory_limit = as_int(dig(resources, "memory", "limit")) or \
            as_int(dig(status, "resources", "linux", "memory_limit_in_bytes")) or None
        c = Container(
            node=node, id=cid, name=name, image=image, pod_uid=pod_uid, state=state,
            exit_code=as_int(status.get("exit_code")) if state == "exited" else None, oom_killed=oom,
            started_at=_ns_time(status.get("started_at")), finished_at=finished, allocation=alloc,
            cpu_quota_cores=quota / (period or 100_000) if quota and quota > 0 else None,
            memory_limit_bytes=memory_limit, evidence=(src.ev_pointer(member, "/status/state", doc),),
            k8s_container_name=k8s_name)
        model.containers[(node, cid)] = c
        if sandbox is not None and k8s_name:
            sandbox.containers.append((k8s_name, cid))
        if oom:
            model.add(OomKill(node, finished, None, None, cid, pod_uid, False, None, memory_limit, None,
                                      "cri", (src.ev_pointer(member, "/status/reason", doc),),
                                      k8s_container_name=k8s_name))
    for sandbox in sandboxes.values():
        if sandbox.uid and sandbox.uid not in model.pods:
            model.pods[sandbox.uid] = Pod(node, sandbox.uid, sandbox.namespace, sandbox.name,
                                          sandbox.state or "unknown", tuple(sandbox.containers), (), (),
                                          (sandbox.evidence,), gpu_limits_known=False)


# needs: grants resolve against NVML's GPUs
LOADER = Loader("cri", load_cri, needs=("nvml",))
