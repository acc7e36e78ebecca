"""The cri collector: what containerd or CRI-O says about every pod sandbox and container.

Source: the Kubernetes Container Runtime Interface, ``runtime.v1.RuntimeService`` on the
runtime's socket (``unix:///run/containerd/containerd.sock``, ``unix:///var/run/crio/crio.sock``;
``--set cri.endpoint=unix:///PATH`` overrides). The calls, each with its own deadline
(``cri.call_timeout_s``), and their members (JSON of the protobuf response, proto field names;
see docs/bundle-format/cri.md), the equivalent of ``crictl version``, ``crictl pods``,
``crictl ps -a``, ``crictl inspectp``, ``crictl inspect`` and ``crictl stats``:

- ``Version`` -> ``cri/version.json``
- ``ListPodSandbox`` -> ``cri/pods.json``; ``ListContainers`` -> ``cri/containers.json``
- ``PodSandboxStatus(verbose=true)`` -> ``cri/pods/<sandbox id>.json``
- ``ContainerStatus(verbose=true)`` -> ``cri/containers/<id>.json``: its ``info`` holds
  the OCI runtime spec (env, ``linux.devices``, the device cgroup rules, mounts,
  ``cgroupsPath``, annotations) and the host PID;
- ``ListContainerStats`` (every container's ``ContainerStats`` in one call) -> ``cri/stats.json``;
  when that call fails, ``ContainerStats`` of each running container, assembled into the same
  member shape (``{"stats": [...]}``) and said so in a note.

One flat file per sandbox and container (no directory each): on a full node (110 pods) a
directory per object costs more than everything else the collector does.

No socket, a socket that refuses, one that does not answer ``Version`` in time, or a runtime
that does not speak ``runtime.v1`` -> ``unavailable`` with the reason. A sandbox or container
removed between the list and its status call is a race, noted, not a failure; any other failed
call -> ``partial``. Everything is redacted by ``ctx.redactor`` before it is written
(``redaction.py``). Publishes the containers' ``cgroup_paths`` and host ``pids`` for the procfs
and cgroups collectors. Settings and member paths: forensics.specs.cri.
"""

from __future__ import annotations

import re
from typing import Any

from forensics.collect.context import CollectContext
from forensics.collectors.cri.client import CallFailed, CriClient, resolve_endpoint, socket_path
from forensics.collectors.cri.redaction import (
    redact_container_status,
    redact_listing,
    redact_sandbox_status,
)
from forensics.hostfs.files import check_socket
from forensics.parsing.oci_allocation import verbose_info
from forensics.specs import cri as cspec
from forensics.specs.cri import SPEC, CriSettings
from forensics.specs.hints import CGROUP_PATHS, PIDS

__all__ = ["COLLECTOR", "MAX_CONTAINERS", "MAX_SANDBOXES", "CriCollector", "cgroup_path_of"]

# bounds: a node runs at most a few hundred pods (the kubelet's default limit is 110)
MAX_SANDBOXES = 2000
MAX_CONTAINERS = 4000
_ID_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_.-]{0,127}$")
_RUNNING = "CONTAINER_RUNNING"


class CriCollector:
    """``cri``: the container runtime's own view of pods and containers (containerd, CRI-O).

    Over the CRI socket: version, pod sandboxes, containers with their OCI runtime spec (devices, env,
    cgroups path), stats. Members: ``cri/`` (docs/bundle-format/cri.md)."""

    name = SPEC.name
    order = SPEC.order
    timeout_s = 30.0

    def __init__(self, endpoint: str | None = None, call_timeout_s: float | None = None) -> None:
        self._given = {"endpoint": endpoint, "call_timeout_s": call_timeout_s}

    def settings(self, ctx: CollectContext) -> CriSettings:
        return SPEC.read_settings(ctx.options.extra, **self._given)

    def snapshot(self, ctx: CollectContext) -> None:
        settings = self.settings(ctx)
        endpoint = resolve_endpoint(settings.endpoint)
        check_socket(socket_path(endpoint), "CRI runtime")
        with CriClient(endpoint, call_timeout_s=settings.call_timeout_s,
                       deadline=ctx.deadline - 1.0) as client:
            self._collect(ctx, client)

    def _collect(self, ctx: CollectContext, client: CriClient) -> None:
        r = ctx.redactor
        version = client.version()  # raises SourceUnavailable for a runtime we cannot use
        ctx.sink.write_json(cspec.VERSION, version)
        ctx.note(f"endpoint {client.endpoint}: {version.get('runtime_name')} "
                 f"{version.get('runtime_version')} (CRI {version.get('runtime_api_version')})")
        failures: list[str] = []
        races: list[str] = []

        def attempt(method: str, what: str, fn: Any, *args: Any) -> dict[str, Any] | None:
            try:
                doc: dict[str, Any] = fn(*args)
                return doc
            except CallFailed as exc:
                if exc.code == "NOT_FOUND":
                    races.append(f"{method} {what}")
                else:
                    failures.append(str(exc))
                return None

        pods = attempt("ListPodSandbox", "", client.list_pod_sandbox) or {}
        containers = attempt("ListContainers", "", client.list_containers) or {}
        if pods:
            ctx.sink.write_json(cspec.PODS, redact_listing(pods, r))
        if containers:
            ctx.sink.write_json(cspec.CONTAINERS, redact_listing(containers, r))
        sandboxes = [p for p in pods.get("items") or [] if isinstance(p, dict)]
        ctrs = [c for c in containers.get("containers") or [] if isinstance(c, dict)]
        if len(sandboxes) > MAX_SANDBOXES or len(ctrs) > MAX_CONTAINERS:
            ctx.partial(f"{len(sandboxes)} sandboxes and {len(ctrs)} containers; status taken for "
                        f"the first {MAX_SANDBOXES} and {MAX_CONTAINERS}")
            sandboxes, ctrs = sandboxes[:MAX_SANDBOXES], ctrs[:MAX_CONTAINERS]

        cgroup_paths: set[str] = set()
        pids: set[int] = set()
        out_of_time = False
        for sandbox in sandboxes:
            sid = str(sandbox.get("id", ""))
            if not _ID_RE.match(sid):
                failures.append(f"sandbox id {sid[:80]!r} is not a runtime id; status not taken")
                continue
            if ctx.remaining() < 2.0:
                out_of_time = True
                break
            doc = attempt("PodSandboxStatus", sid[:12], client.pod_sandbox_status, sid)
            if doc is None:
                continue
            info = verbose_info(doc)
            self._note_runtime_view(info, cgroup_paths, pids)
            ctx.sink.write_json(cspec.sandbox_member(sid), redact_sandbox_status(doc, r, info))
        for container in [] if out_of_time else ctrs:
            cid = str(container.get("id", ""))
            if not _ID_RE.match(cid):
                failures.append(f"container id {cid[:80]!r} is not a runtime id; status not taken")
                continue
            if ctx.remaining() < 2.0:
                out_of_time = True
                break
            doc = attempt("ContainerStatus", cid[:12], client.container_status, cid)
            if doc is not None:
                info = verbose_info(doc)
                self._note_runtime_view(info, cgroup_paths, pids)
                ctx.sink.write_json(cspec.container_member(cid), redact_container_status(doc, r, info))
        if not out_of_time:
            self._stats(ctx, client, ctrs, attempt)
        if out_of_time:
            ctx.partial("stopped early: the collector's deadline was near")
        if failures:
            ctx.partial(f"{len(failures)} CRI calls failed: " + "; ".join(failures[:5]))
        if races:
            ctx.note(f"gone before their status was taken (removed meanwhile): {', '.join(races[:10])}")
        CGROUP_PATHS.publish(ctx, sorted(cgroup_paths))
        PIDS.publish(ctx, sorted(pids))
        ctx.note(f"{len(sandboxes)} pod sandboxes, {len(ctrs)} containers, "
                 f"{len(client.timings)} CRI calls")

    @staticmethod
    def _stats(ctx: CollectContext, client: CriClient, ctrs: list[dict[str, Any]],
               attempt: Any) -> None:
        try:
            listing = client.list_container_stats()
        except CallFailed as exc:
            running = [str(c.get("id", "")) for c in ctrs if c.get("state") == _RUNNING]
            ctx.note(f"{exc}; taking ContainerStats of {len(running)} running containers instead")
            stats = []
            for cid in running:
                if not _ID_RE.match(cid) or ctx.remaining() < 2.0:
                    continue
                doc = attempt("ContainerStats", cid[:12], client.container_stats, cid)
                if doc is not None and isinstance(doc.get("stats"), dict):
                    stats.append(doc["stats"])
            listing = {"stats": stats}
        ctx.sink.write_json(cspec.STATS, listing)

    @staticmethod
    def _note_runtime_view(info: dict[str, Any], cgroup_paths: set[str], pids: set[int]) -> None:
        pid = info.get("pid")
        if isinstance(pid, int) and pid > 0:
            pids.add(pid)
        spec = info.get("runtimeSpec")
        linux = spec.get("linux") if isinstance(spec, dict) else None
        path = linux.get("cgroupsPath") if isinstance(linux, dict) else None
        if isinstance(path, str) and path:
            cgroup_paths.add(cgroup_path_of(path))


def cgroup_path_of(cgroups_path: str) -> str:
    """The cgroup path (relative to a hierarchy's root) an OCI ``cgroupsPath`` names.

    cgroupfs drivers give the path itself (``/kubepods/burstable/pod<uid>/<id>``); the systemd
    driver gives ``slice:prefix:name`` (``kubepods-burstable-pod<uid>.slice:cri-containerd:<id>``),
    which systemd lays out as ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-
    pod<uid>.slice/cri-containerd-<id>.scope``.
    """
    if cgroups_path.startswith("/") or cgroups_path.count(":") != 2:
        return cgroups_path
    slice_name, prefix, name = cgroups_path.split(":")
    parts: list[str] = []
    if slice_name.endswith(".slice") and slice_name != "-.slice":
        words = slice_name[: -len(".slice")].split("-")
        parts = ["-".join(words[: i + 1]) + ".slice" for i in range(len(words))]
    unit = name if name.endswith((".scope", ".slice")) else f"{prefix}-{name}.scope" if prefix else f"{name}.scope"
    return "/" + "/".join([*parts, unit])


COLLECTOR = CriCollector()
