"""Docker containers: ``docker/containers/<id>/inspect.json`` (GET /containers/{id}/json; on podman
its grant is read from ``libpod-inspect.json`` beside it, :mod:`forensics.parsing.libpod_allocation`,
and CDI device names through the bundle's CDI specs, :mod:`forensics.analysis.loaders.cdi`),
``docker/images/<hex>/inspect.json``, ``docker/info.json`` (DefaultRuntime), ``docker/events.jsonl``
(``oom`` events), ``docker/samples.jsonl`` and ``docker/containers/<id>/stats.json``
(``cpu_stats.throttling_data``, ``memory_stats``; and, per tick, ``blkio_stats`` and ``networks``
(:mod:`forensics.parsing.docker_stats`) for containers whose cgroup or network namespace the
cgroups and net collectors did not sample), ``docker/containers/<id>/processes.json``
(the container's host PIDs) and any ``docker/containers/<id>/logs*`` (the workload's own words:
:mod:`forensics.parsing.logsignals`).
"""

from __future__ import annotations

import re
from typing import Any

from forensics.analysis.allocation import classify_docker_allocation
from forensics.analysis.events import OomKill
from forensics.analysis.findings import Evidence
from forensics.analysis.loaders.cdi import cdi_evidence, cdi_grants
from forensics.analysis.loaders.common import (
    Loader,
    as_dict,
    as_int,
    as_opt_str,
    as_str,
    dig,
    parse_time,
)
from forensics.analysis.loaders.logs import load_log_signals
from forensics.analysis.loaders.state import LoadState
from forensics.analysis.model import UNKNOWN_ALLOCATION, Container, Model, Process
from forensics.analysis.samples import CpuSample, IoSample, MemorySample, NetSample
from forensics.analysis.source import Source
from forensics.errors import ParseError
from forensics.parsing.cdi_grants import CDI_SPEC_DOCUMENT
from forensics.parsing.docker_stats import blkio_bytes, network_totals
from forensics.parsing.gpu_allocation import allocation_from_inspect
from forensics.parsing.libpod_allocation import LIBPOD_INSPECT, OCI_CONFIG, allocation_from_libpod
from forensics.specs import docker as docker_spec
from forensics.specs import net as net_spec

__all__ = ["LOADER", "load_docker"]

_INSPECT = re.compile(r"^docker/containers/([0-9a-f]{64})/inspect\.json$")


def _cpu_quota_cores(host: dict[str, Any]) -> float | None:
    nano = as_int(host.get("NanoCpus"))
    if nano:
        return nano / 1e9
    quota, period = as_int(host.get("CpuQuota")), as_int(host.get("CpuPeriod"))
    if quota and quota > 0:
        return quota / (period or 100_000)
    return None


def load_docker(src: Source, model: Model, node: str, loading: LoadState) -> None:
    info = src.json(docker_spec.INFO)
    info_doc = info if isinstance(info, dict) else None
    gpus = model.node_gpus(node)
    cdi = cdi_grants(src)
    for member in src.under(docker_spec.CONTAINERS_DIR):
        m = _INSPECT.match(member)
        if not m:
            continue
        doc = src.json(member)
        if not isinstance(doc, dict):
            continue
        cid = as_str(doc.get("Id"), m.group(1))
        image_id = as_str(doc.get("Image"))
        image_member = docker_spec.image_inspect(image_id.split(':', 1)[-1])
        image_doc = src.json(image_member)
        libpod_member = docker_spec.container_member(cid, docker_spec.LIBPOD_INSPECT)
        libpod_doc = src.json(libpod_member)
        oci_member = docker_spec.container_member(cid, docker_spec.OCI_CONFIG)
        members = {"container-inspect": member, "image-inspect": image_member, "engine-info": docker_spec.INFO,
                   LIBPOD_INSPECT: libpod_member, OCI_CONFIG: oci_member}

        def evidence_for(document: str, pointer: str, excerpt: str, _members: dict[str, str] = members,
                         _member: str = member) -> Evidence:
            if document.startswith(CDI_SPEC_DOCUMENT):
                return cdi_evidence(src, cdi, document[len(CDI_SPEC_DOCUMENT):], pointer, excerpt)
            mem = _members.get(document, _member)
            if src.has(mem):
                return src.ev_pointer(mem, pointer)
            return Evidence(src.name, mem, pointer, excerpt, normalised=True)

        image_arg = image_doc if isinstance(image_doc, dict) else None
        try:
            if isinstance(libpod_doc, dict):  # podman: its own inspect has the runtime and CDI devices
                alloc = classify_docker_allocation(
                    allocation_from_libpod(libpod_doc, image_arg, info_doc, cdi, src.json(oci_member)),
                    gpus, evidence_for,
                    source="podman libpod inspect", none_at=(LIBPOD_INSPECT, "/OCIRuntime"))
            else:
                alloc = classify_docker_allocation(
                    allocation_from_inspect(doc, image_arg, info_doc, cdi), gpus, evidence_for)
        except ParseError as exc:
            src.problems.append(f"{src.name}: {member}: allocation not understood: {exc}")
            alloc = UNKNOWN_ALLOCATION
        if not gpus and alloc.known and (alloc.explicit or alloc.blanket_detail):
            model.limit(f"{node}: no GPU list (NVML) to resolve the GPUs granted to containers")
        # With --duration the engine was asked again after the window: the later state wins.
        end_member = docker_spec.container_member(cid, "inspect-end.json")
        end_doc = src.json(end_member)
        state_member = end_member if isinstance(end_doc, dict) and isinstance(end_doc.get("State"), dict) else member
        state = as_dict((end_doc if state_member == end_member else doc).get("State"))
        host = as_dict(doc.get("HostConfig"))
        labels = as_dict(dig(doc, "Config", "Labels"))
        pod_uid = as_opt_str(labels.get("io.kubernetes.pod.uid"))
        k8s_name = as_opt_str(labels.get("io.kubernetes.container.name"))
        name = as_str(doc.get("Name")).lstrip("/") or cid[:12]
        image = as_str(dig(doc, "Config", "Image"), image_id)
        finished = parse_time(state.get("FinishedAt"))
        c = Container(
            node=node, id=cid, name=name, image=image, pod_uid=pod_uid,
            state=str(state.get("Status") or "unknown"),
            exit_code=as_int(state.get("ExitCode")) if state.get("Status") == "exited" else None,
            oom_killed=state.get("OOMKilled") is True,
            started_at=parse_time(state.get("StartedAt")), finished_at=finished,
            allocation=alloc, cpu_quota_cores=_cpu_quota_cores(host),
            memory_limit_bytes=as_int(host.get("Memory")) or None,
            evidence=(src.ev_pointer(state_member, "/State"),),
            k8s_container_name=k8s_name,
        )
        model.containers[(node, cid)] = c
        if c.oom_killed:
            model.add(OomKill(node, finished, None, None, cid, c.pod_uid, False, None,
                                      c.memory_limit_bytes, None, "docker",
                                      (src.ev_pointer(state_member, "/State/OOMKilled"),)))
        _load_processes(src, model, node, cid)
        _load_io_limits(src, model, node, cid, host, member)
        _load_stats(src, model, node, cid)
        _load_logs(src, model, node, cid)
    _load_events(src, model, node)
    _load_samples(src, model, node)


def _load_processes(src: Source, model: Model, node: str, cid: str) -> None:
    """Container PIDs the engine reported (top / cgroup.procs), for PIDs procfs did not store."""
    member = docker_spec.container_member(cid, "processes.json")
    doc = src.json(member)
    pids = dig(doc, "pids")
    if not isinstance(pids, dict):
        return
    for p in pids:
        pid = as_int(p)
        if pid is None or (node, pid) in model.processes:
            continue
        model.processes[(node, pid)] = Process(node, pid, "", None, cid, None,
                                               (src.ev_pointer(member, f"/pids/{p}", doc),), None)


_BLKIO_LIMITS = (("BlkioDeviceReadBps", "rbps"), ("BlkioDeviceWriteBps", "wbps"),
                 ("BlkioDeviceReadIOps", "riops"), ("BlkioDeviceWriteIOps", "wiops"))


def _load_io_limits(src: Source, model: Model, node: str, cid: str, host: dict[str, Any], member: str) -> None:
    """``HostConfig.BlkioDevice{Read,Write}{Bps,IOps}`` (``--device-read-bps`` ...) for a container
    whose cgroup limits the cgroups loader does not give (its own, read after, replace these): each ``Path`` (``/dev/vda``) resolved to
    ``MAJ:MIN`` through the node's ``/proc/diskstats`` (net collector), the numbering cgroup IO
    counters use."""
    if not any(host.get(k) for k, _ in _BLKIO_LIMITS):
        return
    disks = dig(src.json(net_spec.INDEX), "disks")
    if not isinstance(disks, dict):
        return
    limits: dict[str, dict[str, int | None]] = {}
    for key, name in _BLKIO_LIMITS:
        entries = host.get(key)
        for entry in entries if isinstance(entries, list) else []:
            path, rate = dig(entry, "Path"), as_int(dig(entry, "Rate"))
            device = dig(disks, path.rsplit("/", 1)[-1], "device") if isinstance(path, str) else None
            if isinstance(device, str) and rate:
                limits.setdefault(device, {})[name] = rate
    if limits:
        first = next(k for k, _ in _BLKIO_LIMITS if host.get(k))
        model.io_limits[(node, cid)] = (limits, src.ev_pointer(member, f"/HostConfig/{first}"))


def _throttling(stats: Any) -> tuple[int, int, int] | None:
    td = dig(stats, "cpu_stats", "throttling_data")
    if not isinstance(td, dict):
        return None
    periods, throttled, t_ns = as_int(td.get("periods")), as_int(td.get("throttled_periods")), as_int(td.get("throttled_time"))
    if periods is None or throttled is None:
        return None
    return periods, throttled, t_ns or 0


def _load_stats(src: Source, model: Model, node: str, cid: str) -> None:
    member = docker_spec.container_member(cid, "stats.json")
    stats = src.json(member)
    if not isinstance(stats, dict):
        return
    t = parse_time(stats.get("read"))
    th = _throttling(stats)
    if th is not None and t is not None:
        model.add(CpuSample(node, cid, t, th[0], th[1], th[2] // 1000,
                                           src.ref(member, 0, stats, ("cpu_stats", "throttling_data"),
                                                   pointer="/cpu_stats/throttling_data")))


def _load_logs(src: Source, model: Model, node: str, cid: str) -> None:
    c = model.container(node, cid)
    pod = c.pod_uid if c else None
    for member in src.under(docker_spec.container_member(cid, "log")):
        load_log_signals(src, model, node, member, cid, pod)


def _load_events(src: Source, model: Model, node: str) -> None:
    """``oom`` events from ``docker/events.jsonl`` (look-back) and ``docker/window/events.jsonl``."""
    seen: set[tuple[object, object, object]] = set()
    for member in (docker_spec.EVENTS, docker_spec.WINDOW_EVENTS):
        _load_events_from(src, model, node, member, seen)


def _load_events_from(src: Source, model: Model, node: str, member: str,
                      seen: set[tuple[object, object, object]]) -> None:
    for no, ev, raw in src.jsonl(member):
        if ev.get("Type") != "container":
            continue
        actor_id, name = dig(ev, "Actor", "ID"), dig(ev, "Actor", "Attributes", "name")
        if isinstance(actor_id, str) and isinstance(name, str) and name:
            model.event_names.setdefault((node, actor_id), name.lstrip("/"))
        if ev.get("Action") != "oom":
            continue
        key = (dig(ev, "Actor", "ID"), ev.get("Action"), ev.get("timeNano") or ev.get("time"))
        if key in seen:
            continue
        seen.add(key)
        cid = dig(ev, "Actor", "ID") or ev.get("id")
        t_nano = as_int(ev.get("timeNano"))
        t = t_nano / 1e9 if t_nano else parse_time(ev.get("time"))
        if isinstance(cid, str):
            c = model.container(node, cid)
            model.add(OomKill(node, t, None, None, cid, c.pod_uid if c else None, False, None,
                                      None, None, "docker", (src.ev_line(member, no, raw),)))


_BLKIO_QUOTE = (("container_id",), ("stats", "blkio_stats", "io_service_bytes_recursive"))


def _load_samples(src: Source, model: Model, node: str) -> None:
    # the series' appends taken once: this loop runs per container per tick
    add_cpu, add_memory = model.series(CpuSample).append, model.series(MemorySample).append
    add_io, add_net = model.series(IoSample).append, model.series(NetSample).append
    for no, rec, raw in src.jsonl(docker_spec.SAMPLES):
        cid = rec.get("container_id")
        t = rec.get("t")
        if not isinstance(cid, str) or not isinstance(t, int | float):
            continue
        stats = rec.get("stats")
        th = _throttling(stats)
        ev = src.ref(docker_spec.SAMPLES, no, raw)
        if th is not None:
            add_cpu(CpuSample(node, cid, float(t), th[0], th[1], th[2] // 1000, ev,
                                               (("container_id",), ("stats", "cpu_stats", "throttling_data"))))
        usage = as_int(dig(stats, "memory_stats", "usage"))
        if usage is not None:
            add_memory(MemorySample(node, cid, float(t), usage,
                                                     as_int(dig(stats, "memory_stats", "limit"))))
        # the same kernel counters the cgroups and net collectors read: finalize() keeps these only
        # for a container those left without a series
        devices = blkio_bytes(stats)
        if devices:
            add_io(IoSample(node, cid, float(t), devices, ev, _BLKIO_QUOTE))
        counters = network_totals(stats)
        if counters:
            add_net(NetSample(node, "netns", f"docker:{cid[:12]}", float(t), counters, None, None,
                                               cid, src.ref(docker_spec.SAMPLES, no, raw,
                                                            ("container_id",), ("stats", "networks"))))


# needs: grants resolve against NVML's GPUs; its process lists only fill PIDs /proc did not record
LOADER = Loader("docker", load_docker, needs=("nvml", "procfs"))
