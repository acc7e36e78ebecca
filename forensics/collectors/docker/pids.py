"""A container's host PIDs from the kernel's view, for the docker collector.

Sources: ``/proc/self/mountinfo`` (where each cgroup hierarchy is mounted; the ``cgroups.root``
tree instead when that is set),
``/proc/<State.Pid>/cgroup`` (the main process's cgroup in every hierarchy), each hierarchy's
``cgroup.procs`` (every process in the container: children of the main process and ``docker
exec`` processes alike), merged with ``docker top`` rows and exec sessions' PIDs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from forensics.bundle.format import iso_from_unix
from forensics.errors import ParseError
from forensics.hostfs.cgroupns import NamespaceResolver
from forensics.hostfs.files import describe_os_error, read_text
from forensics.hostfs.mounts import cgroup_dirs
from forensics.parsing.cgroup_mounts import CgroupMount
from forensics.parsing.docker_top import parse_top
from forensics.parsing.timestamps import parse_iso_unix

__all__ = ["container_processes", "merge_pids"]


def container_processes(state_pid: int, mounts: tuple[CgroupMount, ...],
                        proc_root: str = "/proc", container_id: str | None = None,
                        resolver: NamespaceResolver | None = None) -> dict[str, Any]:
    """Every PID in the cgroups of ``state_pid`` (all hierarchies), with the files read.

    Source: ``/proc/<State.Pid>/cgroup``, then ``<mount>/<path>/cgroup.procs`` per hierarchy.
    The mounts and resolver are :func:`forensics.hostfs.mounts.host_cgroup_mounts`'s
    (``--set cgroups.root`` honoured). With ``container_id``, the cgroup file must name it: otherwise this /proc is not the
    engine's host (a remote engine, or another PID namespace) and the PID means something else.
    """
    result: dict[str, Any] = {"state_pid": state_pid, "cgroup_paths": {}, "pids": {},
                              "errors": {}}
    try:
        text = read_text(f"{proc_root}/{state_pid}/cgroup")
    except OSError as exc:
        result["errors"][f"{proc_root}/{state_pid}/cgroup"] = describe_os_error(exc)
        return result
    result["proc_cgroup"] = text
    if container_id is not None and container_id not in text:
        result["errors"][f"{proc_root}/{state_pid}/cgroup"] = (
            "does not name the container: this /proc is not the engine's (remote engine or "
            "another PID namespace); PIDs not attributed")
        return result
    try:
        dirs = cgroup_dirs(text, mounts, resolver)
    except ParseError as exc:
        result["errors"][f"{proc_root}/{state_pid}/cgroup"] = str(exc)
        return result
    pids: dict[int, list[str]] = {}
    for label, (cg_path, directory) in sorted(dirs.items()):
        result["cgroup_paths"][label] = cg_path
        procs = f"{directory}/cgroup.procs"
        try:
            content = read_text(procs)
        except OSError as exc:
            result["errors"][procs] = describe_os_error(exc)
            continue
        for tok in content.split():
            if tok.isdigit():
                pids.setdefault(int(tok), []).append(procs)
    result["pids"] = {str(p): sorted(set(srcs)) for p, srcs in sorted(pids.items())}
    return result


def merge_pids(procs: Mapping[str, Any] | None, top_doc: Any, top_time: str | None,
                execs: list[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """One list of the container's host PIDs, each with where it was seen (``cgroup.procs``
    files, ``top``, ``exec:<id>`` for the main process of a ``docker exec``)."""
    pids: dict[int, dict[str, Any]] = {}
    out: dict[str, Any] = {"state_pid": None, "cgroup_paths": {}, "errors": {}, "top_time": top_time}
    if procs is not None:
        out["state_pid"] = procs.get("state_pid")
        out["cgroup_paths"] = dict(procs.get("cgroup_paths") or {})
        out["errors"] = dict(procs.get("errors") or {})
        if "proc_cgroup" in procs:
            out["proc_cgroup"] = procs["proc_cgroup"]
        for p, srcs in (procs.get("pids") or {}).items():
            pids.setdefault(int(p), {"sources": []})["sources"].extend(srcs)
    if top_doc is not None:
        try:
            rows = parse_top(top_doc)
        except ParseError as exc:
            out["errors"]["top"] = str(exc)
            rows = ()
        top_unix = parse_iso_unix(top_time) if top_time else None
        for row in rows:
            rec = pids.setdefault(row.pid, {"sources": []})
            rec["sources"].append("top")
            rec.update(ppid=row.ppid, user=row.user, cpu_percent=row.cpu_percent,
                       rss_bytes=row.rss_bytes, elapsed_s=row.elapsed_s)
            if top_unix is not None and row.elapsed_s is not None:
                rec["start_time_approx"] = iso_from_unix(top_unix - row.elapsed_s)
    for ex in execs or []:
        pid = ex.get("Pid")
        if isinstance(pid, int) and pid > 0 and ex.get("Running"):
            rec = pids.setdefault(pid, {"sources": []})
            rec["sources"].append(f"exec:{ex.get('ID')}")
    out["pids"] = {str(p): pids[p] for p in sorted(pids)}
    return out
