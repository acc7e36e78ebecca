"""Processes and their cgroups: ``proc/<pid>/cgroup`` (verbatim ``/proc/<pid>/cgroup``),
``proc/<pid>/stat`` (comm) and the derived ``proc/index.json`` (procfs collector).

The attribution is re-derived from the raw cgroup file with
:func:`forensics.parsing.attribution.attribute_proc_cgroup`; the index is the fallback for PIDs
whose files were not stored.
"""

from __future__ import annotations

import re
from typing import Any

from forensics.analysis.findings import Evidence
from forensics.analysis.loaders.common import Loader, as_float, as_int, dig
from forensics.analysis.loaders.state import LoadState
from forensics.analysis.model import DStateHolder, Model, Process
from forensics.analysis.source import Source
from forensics.errors import ParseError
from forensics.parsing.attribution import attribute_proc_cgroup
from forensics.specs import procfs as procfs_spec

__all__ = ["LOADER", "load_procfs"]

_PID_DIR = re.compile(r"^proc/(\d+)/cgroup$")


def _start_ticks(src: Source, pid: int) -> int | None:
    """Field 22 (starttime) of ``proc/<pid>/stat``."""
    lines = src.text_lines(procfs_spec.pid_member(pid, "stat"))
    if not lines or ")" not in lines[0]:
        return None
    fields = lines[0][lines[0].rindex(")") + 2:].split()
    return int(fields[19]) if len(fields) > 19 and fields[19].isascii() and fields[19].isdigit() else None


def check_pid_reuse(model: Model, node: str, loading: LoadState) -> None:
    """A PID whose /proc start time differs from the one NVML's collector saw was reused: the
    process procfs read is not the GPU process, so it must not be joined to a container."""
    for (n, pid), (comm, start) in loading.nvml_identity.items():
        proc = model.processes.get((n, pid))
        if n != node or proc is None or start is None or proc.start_ticks is None:
            continue
        if proc.start_ticks != start:
            model.processes[(n, pid)] = Process(
                n, pid, comm or proc.comm, None, None, None, proc.evidence,
                f"PID {pid} was reused: /proc/{pid} started at tick {proc.start_ticks}, "
                f"the GPU process at tick {start}")


def _environ(src: Source, pid: int) -> list[bytes]:
    member = procfs_spec.pid_member(pid, "environ")
    if not src.has(member):
        return []
    try:
        return src.bundle.read_bytes(member).split(b"\0")
    except Exception:
        return []


def _visible_devices(src: Source, pid: int, environ: list[bytes]) -> tuple[str | None, Evidence | None]:
    """NVIDIA_VISIBLE_DEVICES from ``proc/<pid>/environ`` (NUL-separated; set by the runtime even
    when it came through the OCI spec rather than the container's Config.Env)."""
    member = procfs_spec.pid_member(pid, "environ")
    for index, item in enumerate(environ):
        if item.startswith(b"NVIDIA_VISIBLE_DEVICES="):
            value = item.split(b"=", 1)[1].decode("utf-8", "replace")
            return value, src.ev_text(member, f"entry {index + 1}", f"NVIDIA_VISIBLE_DEVICES={value}")
    return None, None


def _rank_env(environ: list[bytes], entry: Any) -> tuple[tuple[str, str], ...]:
    """The rank identity (``RANK``, ``WORLD_SIZE``, ...) from ``proc/<pid>/environ``, else from the
    index entry's ``rank_env``."""
    found: dict[str, str] = {}
    for item in environ:
        name, _, value = item.decode("utf-8", "replace").partition("=")
        if name in procfs_spec.RANK_ENV_NAMES:
            found[name] = value
    if not found:
        env = dig(entry, "rank_env")
        if isinstance(env, dict):
            found = {k: v for k, v in env.items() if k in procfs_spec.RANK_ENV_NAMES and isinstance(v, str)}
    return tuple(sorted(found.items()))


def _comm(src: Source, pid: int) -> str:
    lines = src.text_lines(procfs_spec.pid_member(pid, "stat"))
    if lines:
        text = lines[0]
        if "(" in text and ")" in text:
            return text[text.index("(") + 1: text.rindex(")")]
    status = src.text_lines(procfs_spec.pid_member(pid, "status")) or []
    for line in status:
        if line.startswith("Name:"):
            return line.split(":", 1)[1].strip()
    return ""


def _index_env(src: Source, index: Any, i: int, entry: Any) -> tuple[str | None, Evidence | None]:
    """NVIDIA_VISIBLE_DEVICES from a ``proc/index.json`` entry's ``gpu_env`` (read from
    /proc/<pid>/environ by the procfs collector), with a JSON-pointer evidence."""
    value = dig(entry, "gpu_env", "NVIDIA_VISIBLE_DEVICES")
    if not isinstance(value, str):
        return None, None
    return value, src.ev_pointer(procfs_spec.INDEX, f"/processes/{i}/gpu_env/NVIDIA_VISIBLE_DEVICES", index)


def load_procfs(src: Source, model: Model, node: str, loading: LoadState) -> None:
    """Fill ``model.processes`` for every PID with a stored cgroup file or an index entry."""
    index = src.json(procfs_spec.INDEX)
    entries = dig(index, "processes")
    by_pid: dict[int, tuple[int, Any]] = {}
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        entry_pid = as_int(dig(entry, "pid"))
        if entry_pid is not None:
            by_pid.setdefault(entry_pid, (i, entry))
    for member in src.under(procfs_spec.PREFIX):
        m = _PID_DIR.match(member)
        if not m:
            continue
        pid = int(m.group(1))
        lines = src.text_lines(member) or []
        try:
            attribution, _ = attribute_proc_cgroup("\n".join(lines))
        except ParseError as exc:
            model.processes[(node, pid)] = Process(
                node, pid, _comm(src, pid), None, None, None,
                (src.ev_line(member, 1),), f"unparsable /proc/{pid}/cgroup: {exc}")
            continue
        line_no = next((i for i, line in enumerate(lines, 1)
                        if line.endswith(":" + attribution.cgroup_path)), 1)
        reason = None
        if attribution.namespace_relative:
            reason = "cgroup path relative to a private cgroup namespace"
        elif attribution.kind == "unknown":
            reason = f"cgroup path {attribution.cgroup_path} names no known runtime"
        environ = _environ(src, pid)
        visible, visible_ev = _visible_devices(src, pid, environ)
        if visible is None and pid in by_pid:
            visible, visible_ev = _index_env(src, index, *by_pid[pid])
        model.processes[(node, pid)] = Process(
            node, pid, _comm(src, pid), attribution.cgroup_path, attribution.container_id,
            attribution.pod_uid, (src.ev_line(member, line_no),), reason, _start_ticks(src, pid),
            visible, visible_ev, _rank_env(environ, by_pid.get(pid, (0, None))[1]))
    for pid, (i, entry) in by_pid.items():
        if (node, pid) in model.processes:
            continue
        att = dig(entry, "attribution")
        if not isinstance(att, dict):
            continue
        ev: Evidence = src.ev_pointer(procfs_spec.INDEX, f"/processes/{i}/attribution", index)
        cid = att.get("container_id") if isinstance(att.get("container_id"), str) else None
        uid = att.get("pod_uid") if isinstance(att.get("pod_uid"), str) else None
        path = att.get("cgroup_path") if isinstance(att.get("cgroup_path"), str) else None
        comm = dig(entry, "comm")
        reason = None
        if att.get("namespace_relative") is True:
            reason = "cgroup path relative to a private cgroup namespace"
        visible, visible_ev = _index_env(src, index, i, entry)
        model.processes[(node, pid)] = Process(
            node, pid, comm if isinstance(comm, str) else "", path, cid, uid, (ev,), reason,
            as_int(dig(entry, "start_time_ticks")), visible, visible_ev, _rank_env([], entry))
    check_pid_reuse(model, node, loading)
    load_dstate(src, model, node)


def load_dstate(src: Source, model: Model, node: str) -> None:
    """``proc/dstate.json``: the processes in state D that hold ``/dev/nvidia*`` open."""
    doc = src.json(procfs_spec.DSTATE)
    entries = dig(doc, "processes")
    if not isinstance(entries, list):
        return
    model.dstate_scanned.add(node)
    t = as_float(dig(doc, "t"))
    for i, entry in enumerate(entries):
        pid = as_int(dig(entry, "pid"))
        fds = dig(entry, "nvidia_fds")
        targets = sorted({str(dig(f, "target")) for f in fds if isinstance(dig(f, "target"), str)}
                         if isinstance(fds, list) else set())
        if pid is None or not targets:
            continue
        comm, wchan = dig(entry, "comm"), dig(entry, "wchan")
        model.add(DStateHolder(
            node, pid, comm if isinstance(comm, str) else None, wchan if isinstance(wchan, str) else None,
            tuple(targets), t, src.ev_pointer(procfs_spec.DSTATE, f"/processes/{i}", doc)))


# needs: NVML's PID-namespace verdict decides which PIDs are comparable
LOADER = Loader("procfs", load_procfs, needs=("nvml",))
