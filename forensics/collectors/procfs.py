"""``procfs``: processes of interest, each attributed to its container and pod by the kernel.

Sources: ``/proc/<pid>/cgroup`` (scanned once for every PID: the kernel's own view of which
container or pod a process belongs to, child processes included), ``/proc/<pid>/stat``,
``/proc/<pid>/status`` (NSpid: the PID in each nested PID namespace), ``/proc/<pid>/cmdline``
and ``/proc/<pid>/environ`` (both redacted), ``readlink /proc/<pid>/ns/{pid,cgroup,mnt,net,user}``, ``/proc/stat`` (btime).

PIDs of interest: ``ctx.hint("pids")`` (GPU and container processes from earlier collectors),
every PID whose cgroup attributes to a container or pod, and every PID with ``--all-processes``.
Members: ``proc/<pid>/{cgroup,stat,status}`` verbatim, ``proc/<pid>/{cmdline,environ}``
(NUL-separated, after redaction), ``proc/<pid>/ns.json``, the derived ``proc/index.json``, and
``proc/dstate.json`` (every process in uninterruptible sleep, its ``wchan`` and the ``/dev/nvidia*``
files it holds open, from ``stat`` and the ``fd`` links only). Publishes the hints
``cgroup_paths``, ``container_ids`` and ``pod_uids``. See docs/bundle-format/host-evidence.md.

With a host cgroup root (``--set cgroups.root=DIR`` or ``GPUFORENSICS_CGROUP_ROOT``: a capture pod
in a private cgroup namespace), namespace-relative paths (``0::/../../kubepods-...``) are also
resolved to host paths (:mod:`forensics.hostfs.cgroupns`); the verbatim files, ``attribution``
and the published hints keep the paths as read.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from forensics.bundle.format import iso_from_unix
from forensics.collect.context import CollectContext, Tick
from forensics.errors import ParseError
from forensics.hostfs.cgroupns import make_resolver
from forensics.hostfs.dstate import scan_dstate_gpu_holders
from forensics.hostfs.files import describe_os_error, read_small
from forensics.hostfs.proc import (
    ProcessCgroup,
    ScanStats,
    attributed_paths,
    hierarchy_paths,
    pid_dirs,
    scan_proc_cgroups,
)
from forensics.parsing.attribution import attribute_proc_cgroup
from forensics.parsing.procfs import (
    parse_cmdline,
    parse_ns_link,
    parse_stat,
    parse_status,
    start_time_unix,
)
from forensics.specs.hints import CGROUP_PATHS, PIDS, PROCFS_RECORDED_PIDS
from forensics.specs.procfs import DSTATE, INDEX, RANK_ENV_NAMES, SPEC, WINDOW, pid_member

if TYPE_CHECKING:
    from forensics.hostfs.cgroupns import NamespaceResolver

__all__ = ["COLLECTOR", "ProcfsCollector"]

_NAMESPACES = ("pid", "cgroup", "mnt", "net", "user")
# Environment variables that say which GPUs a process was given (kept verbatim, see redact.py)
GPU_ENV_NAMES = frozenset({"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
                           "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_MIG_CONFIG_DEVICES",
                           "NVIDIA_MIG_MONITOR_DEVICES"})


def _boot_time_unix(proc_root: str) -> float | None:
    try:
        for line in read_small(f"{proc_root}/stat").decode().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class ProcfsCollector:
    """``procfs``: per-process evidence and PID -> container/pod attribution."""

    name = SPEC.name
    order = SPEC.order
    timeout_s = 30.0

    def __init__(self, proc_root: str = "/proc", cgroup_root: str | None = None) -> None:
        self.proc_root = proc_root
        # host cgroup tree for resolving namespace-relative paths (None: the option
        # ``cgroups.root``, then GPUFORENSICS_CGROUP_ROOT, then no resolution)
        self.cgroup_root = cgroup_root
        self._resolver: NamespaceResolver | None = None

    def snapshot(self, ctx: CollectContext) -> None:
        """Scan every PID's cgroup once, then write the files of each PID of interest."""
        if not os.path.isdir(self.proc_root):
            from forensics.errors import SourceUnavailable

            raise SourceUnavailable(f"{self.proc_root} is not mounted")
        self._resolver = make_resolver(ctx, self.proc_root, self.cgroup_root)
        stats = ScanStats()
        reasons: dict[int, set[str]] = {}
        scanned: dict[int, ProcessCgroup] = {}
        for pid in PIDS.read(ctx):
            if not isinstance(pid, bool) and pid > 0:
                reasons.setdefault(pid, set()).add("hint")
        for found in scan_proc_cgroups(self.proc_root, stats):
            interesting = found.attribution.kind in ("container", "pod")
            if interesting:
                reasons.setdefault(found.pid, set()).add(found.attribution.kind)
            if ctx.options.all_processes:
                reasons.setdefault(found.pid, set()).add("all")
            if found.pid in reasons:
                scanned[found.pid] = found
        if stats.denied:
            ctx.partial(f"permission denied reading /proc/<pid>/cgroup of {stats.denied} processes")

        boot = _boot_time_unix(self.proc_root)
        ticks = os.sysconf("SC_CLK_TCK")
        page = os.sysconf("SC_PAGE_SIZE")
        cap = SPEC.read_settings(ctx.options.extra).max_pids
        # Hinted PIDs first (GPU processes), then container processes, by PID.
        order = sorted(reasons, key=lambda p: ("hint" not in reasons[p], p))
        entries: list[dict[str, Any]] = []
        written = 0
        cut_short = False
        for pid in order:
            entry = scanned.get(pid)
            record: dict[str, Any] = {"pid": pid, "reasons": sorted(reasons[pid])}
            if entry is not None:
                record["attribution"] = entry.attribution.to_json()
                record["cgroup_paths"] = hierarchy_paths(entry.lines)
                self._resolve(record, entry)
            if written >= cap or ctx.remaining() < 2.0:
                if not cut_short:
                    why = (f"PID cap of {cap} reached" if written >= cap
                           else "deadline near")
                    ctx.partial(f"{why}: later PIDs have index entries only")
                    cut_short = True
                record["files"] = "omitted"
                entries.append(record)
                continue
            self._collect_pid(ctx, pid, entry, record, boot, ticks, page)
            if record.get("files") == "written":
                written += 1
            entries.append(record)

        index = {
            "boot_time_unix": boot,
            "clock_ticks_per_s": ticks,
            "page_size_bytes": page,
            "scan": {"scanned": stats.scanned, "vanished": stats.vanished,
                     "permission_denied": stats.denied, "unparsable": stats.unparsable},
            "pid_dir_cap": cap,
            "processes": entries,
        }
        if self._resolver is not None:
            resolved = sum(1 for e in entries if "host_cgroup_paths" in e)
            unresolved = sum(1 for e in entries if "unresolved_cgroup_paths" in e)
            index["cgroup_namespace"] = {**self._resolver.to_json(),
                                         "processes_resolved": resolved,
                                         "processes_unresolved": unresolved}
            if unresolved:
                ctx.note(f"{unresolved} processes have namespace-relative cgroup paths not "
                         "resolved to host paths")
        ctx.sink.write_json(INDEX, index)
        self._dstate(ctx)
        self._publish(ctx, [scanned[pid] for pid in sorted(scanned)])
        PROCFS_RECORDED_PIDS.publish(ctx, [e["pid"] for e in entries if e.get("files") == "written"])
        ctx.note(f"{len(entries)} processes of interest ({written} with files) out of "
                 f"{stats.scanned} scanned")

    def _dstate(self, ctx: CollectContext) -> None:
        """``proc/dstate.json``: processes in uninterruptible sleep and the ones holding /dev/nvidia* open
        (:mod:`forensics.hostfs.dstate`; their cmdline is not read: it could block)."""
        if ctx.remaining() < 2.0:
            ctx.partial("deadline near: processes in uninterruptible sleep not scanned")
            return
        t = time.time()
        doc = scan_dstate_gpu_holders(self.proc_root)
        ctx.sink.write_json(DSTATE, {"t": t, "time": iso_from_unix(t), **doc})
        if doc["gpu_holders"]:
            ctx.note(f"{len(doc['gpu_holders'])} processes in uninterruptible sleep hold /dev/nvidia* open: "
                     f"{', '.join(map(str, doc['gpu_holders'][:8]))}")

    def record_pid(self, ctx: CollectContext, pid: int, reasons: list[str], t: float) -> dict[str, Any]:
        """Write one process's files (``proc/<pid>/...``, as the snapshot does) and return its
        index record (the flight recorder's attribution at first sight of a GPU process)."""
        if self._window_boot is None:
            self._window_boot = _boot_time_unix(self.proc_root)
        record: dict[str, Any] = {"pid": pid, "reasons": reasons, "t": t, "seen_at": iso_from_unix(t)}
        self._collect_pid(ctx, pid, None, record, self._window_boot, os.sysconf("SC_CLK_TCK"),
                          os.sysconf("SC_PAGE_SIZE"))
        return record

    def _collect_pid(self, ctx: CollectContext, pid: int, entry: ProcessCgroup | None,
                     record: dict[str, Any], boot: float | None, ticks: int, page: int) -> None:
        base = f"{self.proc_root}/{pid}"
        errors: dict[str, str] = {}
        prefix = pid_member(pid)
        if entry is None:
            try:
                raw_cgroup = read_small(f"{base}/cgroup", 1 << 16)
                entry_attr, lines = attribute_proc_cgroup(raw_cgroup.decode("utf-8", "replace"))
                entry = ProcessCgroup(pid, raw_cgroup, lines, entry_attr)
                record["attribution"] = entry_attr.to_json()
                self._resolve(record, entry)
            except OSError as error:
                record["files"] = "absent"
                record["error"] = describe_os_error(error)
                return
            except ParseError as error:
                errors["cgroup"] = f"parse error: {error}"
        if entry is not None:
            ctx.sink.write_bytes(f"{prefix}/cgroup", entry.raw)
        for name in ("stat", "status"):
            try:
                data = read_small(f"{base}/{name}", 1 << 16)
            except OSError as error:
                errors[name] = describe_os_error(error)
                continue
            ctx.sink.write_bytes(f"{prefix}/{name}", data)
            text = data.decode("utf-8", "replace")
            try:
                if name == "stat":
                    stat = parse_stat(text)
                    record.update(comm=stat.comm, state=stat.state, ppid=stat.ppid,
                                  threads=stat.num_threads,
                                  start_time_ticks=stat.start_time_ticks,
                                  rss_bytes=stat.rss_pages * page,
                                  cpu_time_s=(stat.utime_ticks + stat.stime_ticks) / ticks)
                    if boot is not None:
                        started = start_time_unix(stat.start_time_ticks, ticks, boot)
                        record["start_time"] = iso_from_unix(started)
                else:
                    status = parse_status(text)
                    record.update(nspid=list(status.nspid), uid=status.uid_real,
                                  vm_rss_bytes=status.vm_rss_bytes,
                                  vm_hwm_bytes=status.vm_hwm_bytes)
            except ParseError as error:
                errors[name] = f"parse error: {error}"
        try:
            argv = parse_cmdline(read_small(f"{base}/cmdline", 1 << 20))
            redacted = ctx.redactor.argv(argv)
            ctx.sink.write_bytes(f"{prefix}/cmdline",
                                 b"\0".join(a.encode("utf-8", "surrogateescape")
                                            for a in redacted) + (b"\0" if redacted else b""))
            record["argv0"] = redacted[0] if redacted else None
        except OSError as error:
            errors["cmdline"] = describe_os_error(error)
        try:
            # The environment: GPU grants (NVIDIA_VISIBLE_DEVICES passed by the runtime spec with
            # --gpus, never in the container's Config.Env) are kept; every value not on the
            # redactor's allow list (NVIDIA_*, CUDA_*, PATH...) becomes a pseudonym.
            environ = parse_cmdline(read_small(f"{base}/environ", 1 << 20))
            redacted_env = ctx.redactor.env_list(environ) or []
            ctx.sink.write_bytes(f"{prefix}/environ",
                                 b"".join(e.encode("utf-8", "surrogateescape") + b"\0"
                                          for e in redacted_env))
            gpu_env = {name: value for name, _, value in (e.partition("=") for e in environ)
                       if name in GPU_ENV_NAMES}
            if gpu_env:
                record["gpu_env"] = gpu_env
            kept = dict(e.partition("=")[::2] for e in redacted_env)
            rank_env = {name: kept[name] for name in RANK_ENV_NAMES if name in kept}
            if rank_env:
                record["rank_env"] = rank_env
        except OSError as error:
            errors["environ"] = describe_os_error(error)
        namespaces: dict[str, Any] = {}
        for ns in _NAMESPACES:
            try:
                target = os.readlink(f"{base}/ns/{ns}")
                namespaces[ns] = {"link": target, "inode": parse_ns_link(target)[1]}
            except OSError as error:
                namespaces[ns] = {"error": describe_os_error(error)}
            except ParseError as error:
                namespaces[ns] = {"error": f"parse error: {error}"}
        ctx.sink.write_json(f"{prefix}/ns.json", namespaces)
        record["pid_ns_inode"] = namespaces["pid"].get("inode")
        record["files"] = "written"
        if errors:
            record["errors"] = errors

    # -- sampling: processes born during the window ------------------------------------------
    def sample(self, ctx: CollectContext, tick: Tick) -> None:
        """Record every process that starts during the sampling window (a GPU job launched with
        ``docker exec`` mid-incident, a host process grabbing a GPU): its files are written under
        ``proc/<pid>/`` like the snapshot's, and a line goes to ``proc/window.jsonl``. Only PIDs
        unseen so far are read (their ``stat`` once), so a tick costs one ``/proc`` listing."""
        if self._window_seen is None:
            self._window_seen = set(PROCFS_RECORDED_PIDS.read(ctx))
            self._window_boot = _boot_time_unix(self.proc_root)
            self._window_written = 0
            self._window_own = {os.getpid(), os.getppid()}
            self._resolver = make_resolver(ctx, self.proc_root, self.cgroup_root)
        seen = self._window_seen
        own = self._window_own
        start_unix = ctx.options.capture_start.timestamp() - 1.0
        ticks = os.sysconf("SC_CLK_TCK")
        page = os.sysconf("SC_PAGE_SIZE")
        cap = SPEC.read_settings(ctx.options.extra).max_window_pids
        for pid in pid_dirs(self.proc_root):
            if pid in seen:
                continue
            seen.add(pid)
            if self._window_boot is None or self._window_written >= cap:
                continue
            try:
                stat = parse_stat(read_small(f"{self.proc_root}/{pid}/stat", 1 << 16).decode("utf-8", "replace"))
            except (OSError, ParseError):
                continue
            if stat.ppid in own or pid in own:
                own.add(pid)  # capture's own collector processes and their children
                continue
            if start_time_unix(stat.start_time_ticks, ticks, self._window_boot) < start_unix:
                continue  # older than the capture: the snapshot decided about it
            record: dict[str, Any] = {"pid": pid, "reasons": ["born-during-window"], "t": tick.time_unix,
                                      "seen_at": tick.time_iso}
            self._collect_pid(ctx, pid, None, record, self._window_boot, ticks, page)
            if record.get("files") == "written":
                self._window_written += 1
            ctx.sink.append_jsonl(WINDOW, record)

    _window_seen: set[int] | None = None
    _window_boot: float | None = None
    _window_written: int = 0
    _window_own: set[int] = set()  # noqa: RUF012 - replaced per sampling child

    def _resolve(self, record: dict[str, Any], entry: ProcessCgroup) -> None:
        """Add ``host_cgroup_paths`` (per hierarchy), ``host_attribution`` and, for paths that
        could not be resolved, ``unresolved_cgroup_paths`` to a record whose cgroup lines hold
        namespace-relative paths (only with a host cgroup root)."""
        resolver = self._resolver
        if resolver is None:
            return
        paths = hierarchy_paths(entry.lines)
        host_paths: dict[str, str] = {}
        unresolved: dict[str, dict[str, str | None]] = {}
        for key, path in paths.items():
            if ".." not in path.split("/"):
                continue
            host, why = resolver.resolve(key, path)
            if host is None:
                unresolved[key] = {"path": path, "error": why}
            else:
                host_paths[key] = host
        if host_paths:
            record["host_cgroup_paths"] = host_paths
            best = next((k for k, p in paths.items() if p == entry.attribution.cgroup_path), None)
            if best in host_paths:
                from forensics.parsing.attribution import attribute_path

                record["host_attribution"] = attribute_path(host_paths[best]).to_json()
        if unresolved:
            record["unresolved_cgroup_paths"] = unresolved

    def _publish(self, ctx: CollectContext, entries: Any) -> None:
        paths: list[str] = []
        for entry in entries:
            if entry.attribution.kind not in ("container", "pod"):
                continue
            for path in attributed_paths(entry):
                if path not in paths:
                    paths.append(path)
        CGROUP_PATHS.publish(ctx, paths)


COLLECTOR = ProcfsCollector()
