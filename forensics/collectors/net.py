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
when sampling, ``net/samples.jsonl``: one line per tick with the counters read that tick (each
changed namespace's ``net/dev`` as the kernel wrote it) and,
beside them, the rates derived from the previous tick (``rates``). See docs/bundle-format/net.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from forensics.capture.context import CollectContext, Tick
from forensics.collectors.hostfs.files import KeptFiles, describe_os_error, read_small
from forensics.collectors.hostfs.netns import NamespaceFiles
from forensics.collectors.hostfs.proc import pid_dirs
from forensics.errors import ParseError, SourceUnavailable
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
# read on every tick (the others once, in the snapshot)
TICK_IB_COUNTERS = ("port_xmit_data", "port_rcv_data", "port_xmit_wait", "symbol_error", "link_downed",
                    "port_rcv_errors", "port_xmit_discards", "link_error_recovery")
_DATA_COUNTERS = {"port_xmit_data": "xmit_bytes_per_s", "port_rcv_data": "rcv_bytes_per_s"}
_NIC_RATES = {"rx_bytes": "rx_bytes_per_s", "tx_bytes": "tx_bytes_per_s"}
_DISK_RATES = {"read_bytes": "read_bytes_per_s", "write_bytes": "write_bytes_per_s"}


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


@dataclass
class _Port:
    device: str
    port: str
    directory: str
    rate_bytes_per_s: float | None = None


@dataclass
class _Namespace:
    inode: int
    pid: int
    container_id: str | None
    cgroup: str | None


@dataclass
class _Plan:
    interfaces: list[str] = field(default_factory=list)
    ports: list[_Port] = field(default_factory=list)
    namespaces: list[_Namespace] = field(default_factory=list)
    speeds: dict[str, int | None] = field(default_factory=dict)  # Mb/s


class NetCollector:
    """``net``: NIC, InfiniBand port, disk and per-namespace network counters."""

    name = SPEC.name
    order = SPEC.order
    timeout_s = 20.0

    def __init__(self, sysfs_root: str | None = None, proc_root: str | None = None) -> None:
        self.sysfs_root = sysfs_root
        self.proc_root = proc_root
        self._plan: _Plan | None = None
        self._files = KeptFiles(1 << 20)
        self._previous: tuple[float, dict[str, Any]] | None = None
        # each namespace's net/dev as last written (one that reads the same is not repeated in the line)
        self._netns_bytes: dict[int, bytes] = {}
        # and its bytes counters then, per interface (its rates are taken against them)
        self._netns_last: dict[str, dict[str, dict[str, int]]] = {}
        self._netns_files: NamespaceFiles | None = None
        self._settings_cache: NetSettings | None = None

    def _settings(self, ctx: CollectContext) -> NetSettings:
        if self._settings_cache is None:  # one capture's options do not change between ticks
            self._settings_cache = SPEC.read_settings(ctx.options.extra, sysfs_root=self.sysfs_root,
                                                      proc_root=self.proc_root)
        return self._settings_cache

    # -- discovery ---------------------------------------------------------------------------
    def _discover(self, ctx: CollectContext, s: NetSettings) -> _Plan:
        plan = _Plan()
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
                plan.ports.append(_Port(device, port, f"{ib_root}/{device}/ports/{port}"))
        plan.namespaces = self._namespaces(ctx, s)
        return plan

    def _namespaces(self, ctx: CollectContext, s: NetSettings) -> list[_Namespace]:
        """One process per network namespace other than the capture's own (the host's)."""
        proc = s.proc_root
        try:
            own = os.readlink(f"{proc}/self/ns/net")
        except OSError:
            own = None
        pids = PIDS.read(ctx)
        candidates = sorted(set(pids)) if pids else sorted(pid_dirs(proc)) if os.path.isdir(proc) else []
        seen: dict[int, _Namespace] = {}
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
                seen[int(inode_text)] = _Namespace(int(inode_text), pid, container_id, cgroup)
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
        """One tick: /proc/net/dev, /proc/diskstats, each interface's operstate, each IB port's
        state and :data:`TICK_IB_COUNTERS`, each namespace's net/dev
        (:class:`forensics.collectors.hostfs.netns.NamespaceFiles`);
        one line with the counters and the rates since the previous tick."""
        s = self._settings(ctx)
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
        plan = self._plan
        errors: dict[str, str] = {}
        line: dict[str, Any] = {"t": tick.time_unix, "tick": tick.index, "time": tick.time_iso}

        def text(path: str) -> str | None:
            try:
                return self._files.read(path).decode("utf-8", "replace")
            except OSError as error:
                errors[path] = describe_os_error(error)
                return None

        def parse(fn: Any, path: str) -> Any:
            raw = text(path)
            if raw is None:
                return None
            try:
                return fn(raw, path)
            except ParseError as error:
                errors[path] = f"parse error: {error}"
                return None

        node_dev = parse(netstat.parse_net_dev, f"{s.proc_root}/net/dev") or {}
        interfaces: dict[str, Any] = {}
        for iface in plan.interfaces:
            entry = dict(node_dev.get(iface) or {})
            state = text(f"{s.sysfs_root}/class/net/{iface}/operstate")
            entry["operstate"] = state.strip() if state is not None else None
            entry["speed_mbps"] = plan.speeds.get(iface)
            interfaces[iface] = entry
        line["interfaces"] = interfaces
        ib: dict[str, Any] = {}
        for p in plan.ports:
            counters: dict[str, Any] = {}
            for name in TICK_IB_COUNTERS:
                raw = text(f"{p.directory}/counters/{name}")
                if raw is not None:
                    counters[name] = _int_or_none(raw)
            state = text(f"{p.directory}/state")
            try:
                counters["state"] = netstat.parse_ib_state(state) if state is not None else None
            except ParseError:
                counters["state"] = state.strip() if state else None
            counters["rate_bytes_per_s"] = p.rate_bytes_per_s
            ib[f"{p.device}/{p.port}"] = counters
        line["ib"] = ib
        line["disks"] = parse(netstat.parse_diskstats, f"{s.proc_root}/diskstats") or {}
        netns: dict[str, Any] = {}
        unchanged: list[int] = []
        if self._netns_files is None:
            self._netns_files = NamespaceFiles(s.proc_root)
        self._netns_files.reap()
        moved: dict[str, dict[str, dict[str, int]]] = {}  # the changed namespaces' bytes, for their rates
        read, last, idle = self._netns_files.read, self._netns_bytes, unchanged.append
        for ns in plan.namespaces:
            try:
                data = read(ns.pid, ns.inode)
            except OSError as error:
                errors[f"{s.proc_root}/{ns.pid}/net/dev"] = describe_os_error(error)
                continue
            if last.get(ns.inode) == data:
                idle(ns.inode)  # an idle container's file reads the same: named, not repeated
                continue
            dev, path = data.decode("utf-8", "replace"), f"{s.proc_root}/{ns.pid}/net/dev"
            try:
                moved[str(ns.inode)] = netstat.net_dev_bytes(dev, path)
            except ParseError as error:
                errors[path] = f"parse error: {error}"
                continue
            last[ns.inode] = data
            # the kernel's own text (the loader parses it): no sixteen counters per interface to encode
            netns[str(ns.inode)] = {"pid": ns.pid, "container_id": ns.container_id, "dev": dev}
        line["netns"] = netns
        if unchanged:
            line["netns_unchanged"] = unchanged
        line["rates"] = self._rates(tick.time_unix, line, moved)
        if errors:
            line["errors"] = errors
        ctx.sink.append_jsonl(SAMPLES, line)

    def _rates(self, t: float, line: dict[str, Any], moved: dict[str, dict[str, dict[str, int]]]) -> dict[str, Any]:
        """Per-second rates since the previous tick (empty on the first): NIC bytes and link
        utilisation, IB bytes (4 x the word counters) and xmit_wait, disk bytes, namespace bytes
        (``moved``: the bytes of each namespace written this tick)."""
        previous, self._previous = self._previous, (t, line)
        try:
            if previous is None or t <= previous[0]:
                return {}
            return self._rates_since(t, previous, line, moved)
        finally:  # after the rates: they are taken against each namespace's counters before this tick
            self._netns_last.update(moved)

    def _rates_since(self, t: float, previous: tuple[float, dict[str, Any]], line: dict[str, Any],
                     moved: dict[str, dict[str, dict[str, int]]]) -> dict[str, Any]:
        dt = t - previous[0]
        before = previous[1]

        def per_s(now: dict[str, Any], then: dict[str, Any], names: dict[str, str], scale: int = 1) -> dict[str, float]:
            out: dict[str, float] = {}
            for counter, name in names.items():
                a, b = then.get(counter), now.get(counter)
                if isinstance(a, int) and isinstance(b, int) and b >= a:
                    out[name] = round((b - a) * scale / dt, 1)
            return out

        rates: dict[str, Any] = {"interval_s": round(dt, 3), "interfaces": {}, "ib": {}, "disks": {}, "netns": {}}
        for iface, now in line["interfaces"].items():
            r = per_s(now, before["interfaces"].get(iface, {}), _NIC_RATES)
            speed = now.get("speed_mbps")
            if r and isinstance(speed, int):
                r["utilisation"] = round(max(r.get("rx_bytes_per_s", 0), r.get("tx_bytes_per_s", 0)) * 8
                                         / (speed * 1e6), 4)
            rates["interfaces"][iface] = r
        for key, now in line["ib"].items():
            then = before["ib"].get(key, {})
            r = per_s(now, then, _DATA_COUNTERS, netstat.IB_DATA_WORD_BYTES)
            r.update(per_s(now, then, {"port_xmit_wait": "xmit_wait_per_s"}))
            link = now.get("rate_bytes_per_s")
            if r and isinstance(link, float) and link > 0:
                r["utilisation"] = round(max(r.get("xmit_bytes_per_s", 0), r.get("rcv_bytes_per_s", 0)) / link, 4)
            rates["ib"][key] = r
        for disk, now in line["disks"].items():
            rates["disks"][disk] = per_s(now, before["disks"].get(disk, {}), _DISK_RATES)
        for inode, now in moved.items():
            then = self._netns_last.get(inode, {})
            rates["netns"][inode] = {i: per_s(c, then.get(i, {}), _NIC_RATES) for i, c in now.items()}
        return rates

    def end_sampling(self, ctx: CollectContext) -> None:
        """Close the descriptors kept open across ticks."""
        self._files.close()
        if self._netns_files is not None:
            self._netns_files.close()
            self._netns_files = None
        self._plan = None
        self._previous = None
        self._netns_bytes.clear()
        self._netns_last = {}
        self._settings_cache = None


COLLECTOR = NetCollector()
