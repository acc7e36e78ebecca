"""``net``: network interfaces, InfiniBand/RoCE ports, disks, and the network counters of each
container's network namespace; sampled per tick.

Sources (``--set net.sysfs_root=DIR`` / ``net.proc_root=DIR`` move the roots, for a capture pod
with the host's trees mounted elsewhere, and for tests): ``/proc/net/dev``, ``/proc/diskstats``,
``/sys/class/net/<if>/{speed,operstate,mtu,carrier_changes,statistics/*}``, and per InfiniBand
port (``Documentation/ABI/stable/sysfs-class-infiniband``)
``/sys/class/infiniband/<dev>/ports/<n>/{rate,state,phys_state,link_layer,counters/*,hw_counters/*}``;
per container network namespace (``/proc/<pid>/ns/net``, one process per namespace, from the
``pids`` hint or, without one, a scan of ``/proc``) its ``/proc/<pid>/net/dev``.

Members: every file verbatim under ``net/`` (see :mod:`forensics.specs.net`), the derived
``net/index.json`` (parsed values, link rates, which container each namespace belongs to), and,
when sampling, ``net/samples.jsonl``: one line per tick with what moved since the last, as the
kernel wrote it (each changed ``/proc/net/dev`` line, ``operstate``, namespace ``net/dev``; see
:mod:`forensics.collectors.net.tick`), and, beside it, the rates derived from the previous tick
(``rates``). See docs/bundle-format/net.md.
"""

from __future__ import annotations

import os
from typing import Any

from forensics.collect.context import CollectContext, Tick
from forensics.collectors.net.tick import TICK_IB_COUNTERS, Namespace, Plan, Port, TickReader
from forensics.errors import ParseError, SourceUnavailable
from forensics.hostfs.files import describe_os_error, read_small
from forensics.hostfs.proc import pid_dirs
from forensics.parsing import netstat
from forensics.parsing.attribution import attribute_proc_cgroup
from forensics.specs.hints import PIDS
from forensics.specs.net import (
    INDEX,
    SAMPLES,
    SPEC,
    NetSettings,
    ib_member,
    iface_member,
    netns_member,
    proc_member,
)

__all__ = ["COLLECTOR", "NetCollector", "TICK_IB_COUNTERS"]

IFACE_FILES = ("speed", "operstate", "mtu", "carrier_changes")
IB_PORT_FILES = ("rate", "state", "phys_state", "link_layer")


def _safe(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and name.isprintable()


def _listdir(path: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(path) if _safe(n))
    except OSError:
        return []


def _int_or_none(text: str) -> int | None:
    value = text.strip()
    return int(value) if value.isdigit() and len(value) <= 40 else None


class NetCollector:
    """``net``: NIC, InfiniBand port, disk and per-namespace network counters."""

    name = SPEC.name
    order = SPEC.order
    timeout_s = 20.0

    def __init__(self, sysfs_root: str | None = None, proc_root: str | None = None) -> None:
        self.sysfs_root = sysfs_root
        self.proc_root = proc_root
        self._plan: Plan | None = None
        self._tick: TickReader | None = None
        self._settings_cache: NetSettings | None = None

    def _settings(self, ctx: CollectContext) -> NetSettings:
        if self._settings_cache is None:  # one capture's options do not change between ticks
            self._settings_cache = SPEC.read_settings(ctx.options.extra, sysfs_root=self.sysfs_root,
                                                      proc_root=self.proc_root)
        return self._settings_cache

    # -- discovery ---------------------------------------------------------------------------
    def _discover(self, ctx: CollectContext, s: NetSettings) -> Plan:
        plan = Plan()
        names = _listdir(f"{s.sysfs_root}/class/net")
        if len(names) > s.max_interfaces:
            ctx.partial(f"{len(names)} network interfaces; only the first {s.max_interfaces} read")
        plan.interfaces = names[:s.max_interfaces]
        ib_root = f"{s.sysfs_root}/class/infiniband"
        for device in _listdir(ib_root):
            for port in _listdir(f"{ib_root}/{device}/ports"):
                if len(plan.ports) >= s.max_interfaces:
                    ctx.partial(f"more than {s.max_interfaces} InfiniBand ports; later ones not read")
                    break
                plan.ports.append(Port(device, port, f"{ib_root}/{device}/ports/{port}"))
        plan.namespaces = self._namespaces(ctx, s)
        return plan

    def _namespaces(self, ctx: CollectContext, s: NetSettings) -> list[Namespace]:
        """One process per network namespace other than the capture's own (the host's)."""
        proc = s.proc_root
        try:
            own = os.readlink(f"{proc}/self/ns/net")
        except OSError:
            own = None
        pids = PIDS.read(ctx)
        candidates = sorted(set(pids)) if pids else sorted(pid_dirs(proc)) if os.path.isdir(proc) else []
        seen: dict[int, Namespace] = {}
        capped = False
        for pid in candidates:
            try:
                link = os.readlink(f"{proc}/{pid}/ns/net")
            except OSError:
                continue
            if link == own or not link.startswith("net:[") or not link.endswith("]"):
                continue
            inode_text = link[5:-1]
            if not inode_text.isdigit():
                continue
            known = seen.get(int(inode_text))
            if known is not None and known.container_id is not None:
                continue  # one process per namespace: one that names its container wins
            if known is None and len(seen) >= s.max_namespaces:
                capped = True
                continue
            container_id = cgroup = None
            try:
                attribution, _ = attribute_proc_cgroup(read_small(f"{proc}/{pid}/cgroup", 1 << 16).decode(
                    "utf-8", "replace"))
                container_id = attribution.container_id if attribution.kind == "container" else None
                cgroup = attribution.cgroup_path
            except (OSError, ParseError):
                pass
            if known is None or container_id is not None:
                seen[int(inode_text)] = Namespace(int(inode_text), pid, container_id, cgroup)
        if capped:
            ctx.partial(f"more than {s.max_namespaces} network namespaces; later ones not read")
        return list(seen.values())

    # -- snapshot ----------------------------------------------------------------------------
    def snapshot(self, ctx: CollectContext) -> None:
        """Every file once, verbatim, with the parsed values and link rates in ``net/index.json``."""
        s = self._settings(ctx)
        if not os.path.isdir(s.proc_root) and not os.path.isdir(s.sysfs_root):
            raise SourceUnavailable(f"neither {s.proc_root} nor {s.sysfs_root} exists")
        plan = self._discover(ctx, s)
        unreadable: dict[str, str] = {}

        def keep(path: str, member: str) -> str | None:
            try:
                data = read_small(path)
            except OSError as error:
                unreadable[path] = describe_os_error(error)
                return None
            ctx.sink.write_bytes(member, data)
            return data.decode("utf-8", "replace")

        def parsed(text: str | None, fn: Any, what: str) -> Any:
            if text is None:
                return None
            try:
                return fn(text, what)
            except ParseError as error:
                unreadable[what] = f"parse error: {error}"
                return None

        node_dev = parsed(keep(f"{s.proc_root}/net/dev", proc_member("net_dev")), netstat.parse_net_dev,
                          "/proc/net/dev") or {}
        disks = parsed(keep(f"{s.proc_root}/diskstats", proc_member("diskstats")), netstat.parse_diskstats,
                       "/proc/diskstats") or {}
        interfaces: dict[str, Any] = {}
        for iface in plan.interfaces:
            base = f"{s.sysfs_root}/class/net/{iface}"
            entry: dict[str, Any] = {"counters": node_dev.get(iface)}
            for file in IFACE_FILES:
                entry[file] = keep(f"{base}/{file}", iface_member(iface, file))
            speed = entry.pop("speed")
            entry["speed_mbps"] = None
            if speed is not None:
                entry["speed_mbps"] = parsed(speed, netstat.parse_speed_mbps, f"{base}/speed")
            plan.speeds[iface] = entry["speed_mbps"]
            entry["operstate"] = (entry["operstate"] or "").strip() or None
            for file in ("mtu", "carrier_changes"):
                entry[file] = _int_or_none(entry[file] or "")
            statistics: dict[str, int | None] = {}
            for name in _listdir(f"{base}/statistics"):
                text = keep(f"{base}/statistics/{name}", iface_member(iface, f"statistics/{name}"))
                statistics[name] = _int_or_none(text) if text is not None else None
            entry["statistics"] = statistics
            interfaces[iface] = entry
        ports: list[dict[str, Any]] = []
        for p in plan.ports:
            texts = {f: keep(f"{p.directory}/{f}", ib_member(p.device, p.port, f)) for f in IB_PORT_FILES}
            p.rate_bytes_per_s = parsed(texts["rate"], netstat.parse_ib_rate, f"{p.directory}/rate")
            record: dict[str, Any] = {
                "device": p.device, "port": p.port, "rate": (texts["rate"] or "").strip() or None,
                "rate_bytes_per_s": p.rate_bytes_per_s,
                "state": parsed(texts["state"], netstat.parse_ib_state, f"{p.directory}/state"),
                "phys_state": parsed(texts["phys_state"], netstat.parse_ib_state, f"{p.directory}/phys_state"),
                "link_layer": (texts["link_layer"] or "").strip() or None,
            }
            for group in ("counters", "hw_counters"):
                values: dict[str, int | None] = {}
                for name in _listdir(f"{p.directory}/{group}"):
                    text = keep(f"{p.directory}/{group}/{name}", ib_member(p.device, p.port, f"{group}/{name}"))
                    values[name] = _int_or_none(text) if text is not None else None
                record[group] = values
            ports.append(record)
        namespaces: list[dict[str, Any]] = []
        for ns in plan.namespaces:
            text = keep(f"{s.proc_root}/{ns.pid}/net/dev", netns_member(ns.inode))
            namespaces.append({"inode": ns.inode, "pid": ns.pid, "container_id": ns.container_id, "cgroup": ns.cgroup,
                               "member": netns_member(ns.inode) if text is not None else None,
                               "interfaces": parsed(text, netstat.parse_net_dev, f"/proc/{ns.pid}/net/dev")})
        ctx.sink.write_json(INDEX, {"interfaces": interfaces, "ib_ports": ports, "disks": disks,
                                    "namespaces": namespaces, "unreadable": unreadable,
                                    "sysfs_root": s.sysfs_root, "proc_root": s.proc_root})
        self._plan = plan
        ctx.note(f"{len(interfaces)} interfaces, {len(ports)} InfiniBand ports, {len(disks)} disks, "
                 f"{len(namespaces)} container network namespaces")

    # -- sampling ----------------------------------------------------------------------------
    def sample(self, ctx: CollectContext, tick: Tick) -> None:
        """One tick: one line of ``net/samples.jsonl``
        (:class:`forensics.collectors.net.tick.TickReader`: what is read, what is written)."""
        s = self._settings(ctx)
        if self._tick is None:
            if self._plan is None:
                self._plan = self._discover(ctx, s)
                for iface in self._plan.interfaces:
                    try:
                        self._plan.speeds[iface] = netstat.parse_speed_mbps(
                            read_small(f"{s.sysfs_root}/class/net/{iface}/speed").decode("ascii", "replace"))
                    except (OSError, ParseError):
                        self._plan.speeds[iface] = None
                for p in self._plan.ports:
                    try:
                        p.rate_bytes_per_s = netstat.parse_ib_rate(read_small(f"{p.directory}/rate").decode(
                            "ascii", "replace"))
                    except (OSError, ParseError):
                        p.rate_bytes_per_s = None
            # quiet namespaces left unread only where the capture's settings say so (net.quiet_namespaces)
            self._tick = TickReader(self._plan, s.sysfs_root, s.proc_root,
                                    s.idle_full_s if s.quiet_namespaces else 0.0, ctx.options.interval_s)
        ctx.sink.append_jsonl(SAMPLES, self._tick.tick(tick))

    def end_sampling(self, ctx: CollectContext) -> None:
        """Close the descriptors kept open across ticks."""
        if self._tick is not None:
            self._tick.close()
            self._tick = None
        self._plan = None
        self._settings_cache = None


COLLECTOR = NetCollector()
