"""The net collector's sampling tick: what is read on every tick, what one ``net/samples.jsonl``
line holds, and the rates beside it (docs/bundle-format/net.md).

Read every tick, each through a descriptor kept open (one ``pread``): ``/proc/net/dev`` (every
interface's sixteen counters, errors and drops included: the same kernel counters as
``statistics/*``), ``/proc/diskstats``, each interface's ``operstate``, each InfiniBand port's
``state`` and :data:`TICK_IB_COUNTERS` (sysfs has no aggregate of a port's error counters, so each
is read: a rising ``symbol_error`` or ``link_downed`` is seen the tick it rises), and each
container network namespace's ``net/dev``
(:class:`forensics.hostfs.netns.NamespaceFiles`).

Written only when it changed, each as the kernel wrote it: a ``/proc/net/dev`` line (``net_dev``,
by interface: an interface absent from a line read the same as when last written; one gone from
the file is named in ``net_dev_gone``), an interface's ``operstate`` (``links``, with its ``speed``
read again when the state moved: a link renegotiates when it comes back), a namespace's whole
``net/dev`` (``netns``; one that read the same is named in ``netns_unchanged``); an interface's
``statistics/*`` (``statistics``) the tick its fault counters in ``/proc/net/dev`` moved. On a node with a
veth per container, an idle container's veth costs one set lookup a tick (only the lines that moved
are looked at, :meth:`TickReader._interfaces_moved`), and no bytes in the line.

With gating (the setting ``net.quiet_namespaces``, ``idle_full_s`` over the interval), a
namespace with only ``lo`` and one veth's peer whose host end's line did not move is left unread,
for up to ``idle_full_s``, and named in ``netns_quiet``; its next entry says ``unchanged_until``
(:meth:`TickReader._gate`, docs/bundle-format/net.md "Quiet namespaces").

Why this module is long: one tick's reads share one state (kept descriptors, each file's bytes as
last written, the veth peers of the quiet namespaces) and one line; the fast paths (only the moved
lines of ``/proc/net/dev``, memoised namespace parses) and their fall-backs to the line-by-line
reading must sit beside the code whose bytes they promise to repeat, so the test that compares the
two reads one place. The veth-peer lookup (rtnetlink) is apart, in ``peers.py``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from forensics.collect.context import Tick
from forensics.collectors.net.links import LinkWatch
from forensics.collectors.net.peers import veth_peers
from forensics.errors import ParseError
from forensics.hostfs.files import MAYBE_MORE, KeptFiles, describe_os_error, read_small
from forensics.hostfs.netns import NamespaceFiles
from forensics.parsing import netstat

__all__ = ["TICK_IB_COUNTERS", "Namespace", "Plan", "Port", "TickReader"]

# read on every tick (the others once, in the snapshot)
TICK_IB_COUNTERS = ("port_xmit_data", "port_rcv_data", "port_xmit_wait", "symbol_error", "link_downed",
                    "port_rcv_errors", "port_xmit_discards", "link_error_recovery")
_NET_DEV_COUNTERS = len(netstat.NET_DEV_FIELDS)
_DISK_RATES = {"read_bytes": "read_bytes_per_s", "write_bytes": "write_bytes_per_s"}


@dataclass
class Port:
    device: str
    port: str
    directory: str
    rate_bytes_per_s: float | None = None


@dataclass
class Namespace:
    inode: int
    pid: int
    container_id: str | None
    cgroup: str | None


@dataclass
class Plan:
    interfaces: list[str] = field(default_factory=list)
    ports: list[Port] = field(default_factory=list)
    namespaces: list[Namespace] = field(default_factory=list)
    speeds: dict[str, int | None] = field(default_factory=dict)  # Mb/s


def _faults(line: bytes) -> list[bytes]:
    """A /proc/net/dev line's fault counters: rx errs, drop, fifo, frame; tx errs, drop, fifo,
    colls, carrier (the fields between the byte and packet counts and the compressed/multicast ones)."""
    fields = line.partition(b":")[2].split()
    return fields[2:6] + fields[10:15]


def _counter(raw: bytes) -> int | None:
    value = raw.strip()
    return int(value) if value.isdigit() and len(value) <= 40 else None  # bytes.isdigit: ASCII only


def _nic_rates(rx: int, tx: int, then: tuple[int, int], dt: float, speed: int | None) -> dict[str, float]:
    """An interface's byte rates since ``then`` (none over a reset), with its share of ``speed`` (Mb/s)."""
    r: dict[str, float] = {}
    if rx >= then[0]:
        r["rx_bytes_per_s"] = round((rx - then[0]) / dt)
    if tx >= then[1]:
        r["tx_bytes_per_s"] = round((tx - then[1]) / dt)
    if r and isinstance(speed, int):
        r["utilisation"] = round(max(r.get("rx_bytes_per_s", 0), r.get("tx_bytes_per_s", 0)) * 8 / (speed * 1e6), 4)
    return r


def _dev_counts(data: bytes, memo: dict[bytes, tuple[str, int, int]]) -> dict[str, tuple[int, int]] | None:
    """A namespace's ``net/dev`` as read: ``{iface: (rx_bytes, tx_bytes)}``, what
    :func:`~forensics.parsing.netstat.net_dev_bytes` gives, each line checked as it checks one
    (``memo``: lines parsed before, the same bytes parsed once); None where a line does not parse
    (the caller asks net_dev_bytes what to say)."""
    out: dict[str, tuple[int, int]] = {}
    lines = data.split(b"\n")
    if len(lines) > 100_000:
        return None
    for number, raw in enumerate(lines):
        known = memo.get(raw)
        if known is None:
            if not raw:
                continue
            if b"|" in raw:
                if number < 2:
                    continue  # the two header lines
                return None
            try:
                counts = netstat.net_dev_line(raw)
            except ParseError:
                return None
            if counts is None:
                continue
            known = memo[raw] = counts
        out[known[0]] = (known[1], known[2])
    return out


def _per_s(now: int, then: int | None, dt: float, scale: int = 1) -> int | None:
    """A counter's rate in whole units a second (an int: a byte a second is finer than any link
    cares about, and encodes in half the time of a float); None over a reset."""
    return round((now - then) * scale / dt) if then is not None and now >= then else None


class TickReader:
    """The state one sampling run keeps between ticks: kept descriptors, what was last written."""

    def __init__(self, plan: Plan, sysfs_root: str, proc_root: str, idle_full_s: float = 0.0,
                 interval_s: float = 1.0) -> None:
        self.plan = plan
        self.sysfs_root = sysfs_root
        self.proc_root = proc_root
        self._files = KeptFiles(1 << 20)
        self._netns_files = NamespaceFiles(proc_root)
        self._t: float | None = None  # the previous tick's time
        # /proc/net/dev: each interface's line as last read, and its (rx, tx) bytes then
        self._nic_lines: dict[bytes, bytes] = {}
        self._nic_known: set[bytes] = set()  # the lines of _nic_lines (a line read as last tick is in it)
        self._nic_faults: dict[bytes, list[bytes]] = {}  # _faults of a line of _nic_lines, where known
        self._nic_bytes: dict[str, tuple[int, int]] = {}
        self._nic_path = f"{proc_root}/net/dev"
        self._opers = [(iface, f"{sysfs_root}/class/net/{iface}/operstate") for iface in plan.interfaces]
        self._opers_by_name = dict(self._opers)
        self._stat_names: dict[str, list[str]] = {}  # each interface's statistics/ files, once listed
        self._oper_last: dict[str, bytes] = {}  # each interface's operstate as last written
        # opened before the first tick reads every operstate: no change after that read goes unannounced
        self._watch = LinkWatch.open(sysfs_root, plan.interfaces) if plan.interfaces else None
        self._speeds = dict(plan.speeds)
        self._ib = [(f"{p.device}/{p.port}", p, [(n, f"{p.directory}/counters/{n}") for n in TICK_IB_COUNTERS],
                     f"{p.directory}/state") for p in plan.ports]
        self._ib_last: dict[str, dict[str, Any]] = {}
        self._ib_fds: dict[str, int] = {}  # each counter's kept descriptor, once it read short
        self._ib_states: dict[bytes, str | None] = {}  # a port's state file as read, parsed
        self._disk_lines: dict[bytes, tuple[str, dict[str, int | str]]] = {}
        self._disks_last: dict[str, dict[str, Any]] = {}
        # each namespace's net/dev as last written (one that reads the same is not repeated in the line)
        self._netns_bytes: dict[int, bytes] = {}
        # and its bytes counters then, per interface (its rates are taken against them)
        self._netns_last: dict[int, dict[str, tuple[int, int]]] = {}
        # quiet namespaces (idle_full_s > interval_s: see _gate): each one's veth here (None: not
        # asked yet, or rtnetlink not there), and, for those with only lo and that veth's peer, the
        # veth's /proc/net/dev line and the monotonic time when the namespace was last read, and the
        # time of the last tick that left it unread
        self._idle_full_s = idle_full_s if idle_full_s > interval_s else 0.0
        self._interval_s = interval_s
        self._last_tick: float | None = None
        self._bound = 0.0
        self._peers: dict[int, list[str]] | None = None
        self._peers_asked = False
        self._nic_same = False  # this tick's /proc/net/dev has the same interfaces as the last
        self._veth_of: dict[int, bytes] = {}
        self._veth_seen: dict[int, tuple[bytes, float]] = {}
        self._quiet: set[int] | None = None  # the namespaces the last tick left unread
        self._ns_t: float | None = None  # the last tick's time
        self._dev_memo: dict[bytes, tuple[str, int, int]] = {}  # a namespace's net/dev line, parsed

    def close(self) -> None:
        """Close the descriptors kept open across ticks."""
        self._files.close()
        self._netns_files.close()
        if self._watch is not None:
            self._watch.close()
            self._watch = None

    def tick(self, tick: Tick) -> dict[str, Any]:
        """One tick's line (rates since the previous tick beside the counters)."""
        errors: dict[str, str] = {}
        line: dict[str, Any] = {"t": tick.time_unix, "tick": tick.index, "time": tick.time_iso}
        dt = tick.time_unix - self._t if self._t is not None else 0.0
        self._t = tick.time_unix
        rates: dict[str, Any] = {"interval_s": round(dt, 3), "interfaces": {}, "ib": {}, "disks": {}, "netns": {}}
        self._links(line, errors)
        self._interfaces(line, rates["interfaces"], dt, errors)
        line["ib"] = self._ports(rates["ib"], dt, errors)
        line["disks"] = self._disks(rates["disks"], dt, errors)
        self._namespaces(line, rates["netns"], dt, errors)
        line["rates"] = rates if dt > 0 else {}
        if errors:
            line["errors"] = errors
        return line

    def _read_kept(self, path: str) -> bytes:
        """A file through its kept descriptor (KeptFiles.read), that descriptor then read bare
        while the file stays short (:meth:`_ports`)."""
        data = self._files.read(path)
        fd = self._files.descriptor(path)
        if fd is not None and 0 < len(data) <= MAYBE_MORE:
            self._ib_fds[path] = fd
        return data

    def _read(self, path: str, errors: dict[str, str]) -> bytes | None:
        try:
            return self._files.read(path)
        except OSError as error:
            errors[path] = describe_os_error(error)
            return None

    # -- node interfaces ---------------------------------------------------------------------
    def _links(self, line: dict[str, Any], errors: dict[str, str]) -> None:
        """Each interface's operstate, written when it changed (the first tick: all), with its speed;
        with a :class:`~forensics.collectors.net.links.LinkWatch`, read only where the kernel
        announced a change of that link since the last tick."""
        links: dict[str, Any] = {}
        read, last = self._files.read, self._oper_last
        opers = self._opers
        if self._watch is not None and last:
            moved = self._watch.moved()
            if moved is not None:
                opers = [(iface, path) for iface, path in opers if iface in moved] if moved else []
        for iface, path in opers:
            try:
                raw = read(path)
            except OSError as error:
                errors[path] = describe_os_error(error)
                raw = b""
            if last.get(iface) == raw:
                continue
            if iface in last:  # the state moved: a link that came back may have renegotiated its speed
                try:
                    self._speeds[iface] = netstat.parse_speed_mbps(read_small(
                        f"{self.sysfs_root}/class/net/{iface}/speed").decode("ascii", "replace"))
                except (OSError, ParseError):
                    self._speeds[iface] = None  # EINVAL while down or on a virtual link
            last[iface] = raw
            links[iface] = {"operstate": raw.decode("utf-8", "replace").strip() or None,
                            "speed_mbps": self._speeds.get(iface)}
        line["links"] = links

    def _interfaces(self, line: dict[str, Any], rates: dict[str, Any], dt: float, errors: dict[str, str]) -> None:
        """``/proc/net/dev``: the lines that changed since the last tick, verbatim, by interface."""
        path = self._nic_path
        data = self._read(path, errors)
        if data is None:  # nothing known this tick: the next read writes every line again
            self._nic_lines, self._nic_known, self._nic_bytes = {}, set(), {}
            self._nic_same = False
            return
        raws = data.split(b"\n")
        known = self._nic_known
        fresh = [raw for raw in raws if raw not in known]  # an idle interface's line: one set lookup
        self._nic_same = self._interfaces_moved(line, rates, dt, errors, raws, fresh)
        if not self._nic_same:
            before = self._nic_lines
            self._interfaces_each(line, rates, dt, errors, path, raws)
            self._nic_same = bool(before) and self._nic_lines.keys() == before.keys()

    def _interfaces_moved(self, line: dict[str, Any], rates: dict[str, Any], dt: float, errors: dict[str, str],
                          raws: list[bytes], fresh: list[bytes]) -> bool:
        """The common tick: the same interfaces as last tick, some lines moved, each of those
        parsing as an interface's line. Writes what :meth:`_interfaces_each` would (the same line,
        rates and state) looking only at the lines that moved; False (nothing done) for any other
        tick (an interface new or gone, a line that does not parse, a header out of place)."""
        previous = self._nic_lines
        if not previous:
            return False
        head = raws[:2]
        parsed: list[tuple[bytes, bytes, list[bytes]]] = []
        for raw in fresh:
            if not raw:
                continue
            if b"|" in raw:
                if any(raw is h for h in head):
                    continue  # a header line, as the kernel writes it on lines 1 and 2
                return False
            # checked as netstat.net_dev_line checks a line, split once
            name, sep, rest = raw.partition(b":")
            fields = rest.split()
            key = name.strip()
            if not sep or len(fields) != _NET_DEV_COUNTERS or not key or not b"".join(fields).isdigit() \
                    or (len(rest) > 400 and max(map(len, fields)) > 40) or key not in previous:
                return False
            parsed.append((key, raw, fields))
        moved = {key for key, _, _ in parsed}
        if len(moved) != len(parsed):
            return False  # one interface on two lines
        known = self._nic_known
        for raw in known.difference(raws):  # a line no longer read: its interface must have moved
            if raw.partition(b":")[0].strip() not in moved:
                return False
        changed: dict[str, str] = {}
        faulted: list[str] = []
        last_bytes, speeds, fault_counts = self._nic_bytes, self._speeds, self._nic_faults
        for key, raw, fields in parsed:
            was = previous[key]
            known.discard(was)
            known.add(raw)
            previous[key] = raw  # the same interfaces in the same order: the dict keeps the file's
            iface = key.decode("utf-8", "replace")
            rx, tx = int(fields[0]), int(fields[8])
            changed[iface] = raw.decode("utf-8", "replace")
            faults = fields[2:6] + fields[10:15]  # as _faults
            before = fault_counts.get(key)
            fault_counts[key] = faults
            if (before if before is not None else _faults(was)) != faults:
                faulted.append(iface)
            then = last_bytes.get(iface)
            last_bytes[iface] = (rx, tx)
            if dt > 0 and then is not None:
                rates[iface] = _nic_rates(rx, tx, then, dt, speeds.get(iface))
        line["net_dev"] = changed
        if faulted:
            self._statistics(line, faulted, errors)
        return True

    def _interfaces_each(self, line: dict[str, Any], rates: dict[str, Any], dt: float, errors: dict[str, str],
                         path: str, raws: list[bytes]) -> None:
        """/proc/net/dev line by line (the first tick, an interface new or gone, a line that does
        not parse)."""
        changed: dict[str, str] = {}
        faulted: list[str] = []
        lines: dict[bytes, bytes] = {}
        previous, last_bytes, speeds = self._nic_lines, self._nic_bytes, self._speeds
        for number, raw in enumerate(raws, 1):
            key = raw.partition(b":")[0].strip()
            if previous.get(key) == raw:  # an idle interface: one comparison, nothing parsed or written
                lines[key] = raw
                continue
            try:
                if number > 2 and b"|" in raw:
                    raise ParseError(f"{path} line {number}: expected 'iface: counters': {raw[:80]!r}")
                counts = netstat.net_dev_line(raw, f"{path} line {number}")
            except ParseError as error:
                errors[path] = f"parse error: {error}"
                continue
            if counts is None:
                continue
            iface, rx, tx = counts
            lines[key] = raw
            changed[iface] = raw.decode("utf-8", "replace")
            was = previous.get(key)
            if was is not None and _faults(was) != _faults(raw):
                faulted.append(iface)
            then = last_bytes.get(iface)
            last_bytes[iface] = (rx, tx)
            if dt > 0 and then is not None:
                rates[iface] = _nic_rates(rx, tx, then, dt, speeds.get(iface))
        gone = [key.decode("utf-8", "replace") for key in previous if key not in lines]
        for iface in gone:
            last_bytes.pop(iface, None)
        self._nic_lines = lines
        self._nic_known = set(lines.values())
        self._nic_faults.clear()
        line["net_dev"] = changed
        if gone:
            line["net_dev_gone"] = gone
        if faulted:
            self._statistics(line, faulted, errors)

    def _statistics(self, line: dict[str, Any], faulted: list[str], errors: dict[str, str]) -> None:
        """The detail of an interface whose error, drop, fifo, frame, collision or carrier counts
        moved this tick: every file of its ``statistics/`` as the kernel wrote it (``rx_crc_errors``,
        ``rx_missed_errors``, ``tx_aborted_errors``...: what the aggregate of /proc/net/dev sums)."""
        details: dict[str, dict[str, str]] = {}
        for iface in faulted:
            if iface not in self._opers_by_name:
                continue  # not one of class/net's (read at discovery): no statistics directory known
            base = f"{self.sysfs_root}/class/net/{iface}/statistics"
            names = self._stat_names.get(iface)
            if names is None:
                try:
                    names = self._stat_names[iface] = sorted(n for n in os.listdir(base) if n.isprintable()
                                                             and "/" not in n and not n.startswith("."))
                except OSError as error:
                    errors[base] = describe_os_error(error)
                    continue
            files: dict[str, str] = {}
            for name in names:
                raw = self._read(f"{base}/{name}", errors)
                if raw is not None:
                    files[name] = raw.decode("utf-8", "replace")
            details[iface] = files
        if details:
            line["statistics"] = details

    # -- InfiniBand ports ----------------------------------------------------------------------
    def _ports(self, rates: dict[str, Any], dt: float, errors: dict[str, str]) -> dict[str, Any]:
        ib: dict[str, Any] = {}
        read, fds, pread, states = self._read_kept, self._ib_fds, os.pread, self._ib_states
        for key, port, counters_at, state_path in self._ib:
            counters: dict[str, Any] = {}
            for name, path in counters_at:
                fd = fds.get(path)
                if fd is not None:  # the common tick: one bare pread of a short file
                    try:
                        raw = pread(fd, 65536, 0)
                    except OSError:
                        raw = b""
                    if 0 < len(raw) <= MAYBE_MORE:
                        counters[name] = _counter(raw)
                        continue
                    del fds[path]  # KeptFiles says why, or reads a long file on to its end
                try:
                    counters[name] = _counter(read(path))
                except OSError as error:
                    errors[path] = describe_os_error(error)
            state = self._read(state_path, errors)
            if state is not None:
                known = states.get(state)
                if known is None:
                    text = state.decode("utf-8", "replace")
                    try:
                        known = netstat.parse_ib_state(text)
                    except ParseError:
                        known = text.strip() or None
                    if len(states) < 64:
                        states[state] = known
                counters["state"] = known
            else:
                counters["state"] = None
            counters["rate_bytes_per_s"] = port.rate_bytes_per_s
            ib[key] = counters
            then = self._ib_last.get(key)
            if dt > 0 and then is not None:
                r: dict[str, float] = {}
                for name, out, scale in (("port_xmit_data", "xmit_bytes_per_s", netstat.IB_DATA_WORD_BYTES),
                                         ("port_rcv_data", "rcv_bytes_per_s", netstat.IB_DATA_WORD_BYTES),
                                         ("port_xmit_wait", "xmit_wait_per_s", 1)):
                    now, before = counters.get(name), then.get(name)
                    if isinstance(now, int) and isinstance(before, int):
                        value = _per_s(now, before, dt, scale)
                        if value is not None:
                            r[out] = value
                link = port.rate_bytes_per_s
                if r and isinstance(link, float) and link > 0:
                    r["utilisation"] = round(max(r.get("xmit_bytes_per_s", 0), r.get("rcv_bytes_per_s", 0)) / link, 4)
                rates[key] = r
        self._ib_last = ib
        return ib

    # -- disks ---------------------------------------------------------------------------------
    def _disks(self, rates: dict[str, Any], dt: float, errors: dict[str, str]) -> dict[str, Any]:
        """``/proc/diskstats`` parsed (a line that reads as on the last tick is not parsed again)."""
        path = f"{self.proc_root}/diskstats"
        data = self._read(path, errors)
        disks: dict[str, Any] = {}
        memo: dict[bytes, tuple[str, dict[str, int | str]]] = {}
        if data is not None:
            for number, raw in enumerate(data.split(b"\n"), 1):
                known = self._disk_lines.get(raw)
                if known is None:
                    if not raw.strip():
                        continue
                    try:
                        ((name, values),) = netstat.parse_diskstats(raw.decode("utf-8", "replace"),
                                                                    f"{path} line {number}").items()
                    except ParseError as error:
                        errors[path] = f"parse error: {error}"
                        continue
                    known = (name, values)
                memo[raw] = known
                disks[known[0]] = known[1]
        self._disk_lines = memo
        if dt > 0:
            for disk, now in disks.items():
                then = self._disks_last.get(disk, {})
                r: dict[str, float] = {}
                for counter, name in _DISK_RATES.items():
                    a, b = then.get(counter), now.get(counter)
                    if isinstance(a, int) and isinstance(b, int):
                        value = _per_s(b, a, dt)
                        if value is not None:
                            r[name] = value
                rates[disk] = r
        self._disks_last = disks
        return disks

    # -- container network namespaces ----------------------------------------------------------
    def _namespaces(self, line: dict[str, Any], rates: dict[str, Any], dt: float, errors: dict[str, str]) -> None:
        netns: dict[str, Any] = {}
        unchanged: list[int] = []
        files = self._netns_files
        files.reap()
        read, last, idle, counts_at = files.read, self._netns_bytes, unchanged.append, self._netns_last
        gating = self._gating_now()
        nic_lines, seen_at, veth_of = self._nic_lines, self._veth_seen, self._veth_of
        alive = files.alive_pids
        now = time.monotonic()
        bound = self._bound
        quiet: list[int] = []
        # a namespace left unread at the last tick and read now: its veth read as at its previous
        # reading until that tick (each tick either reads a namespace or leaves it unread)
        was_quiet, last_t = self._quiet, self._ns_t
        self._ns_t = line["t"]
        memo = self._dev_memo
        if len(memo) > 4096:
            memo.clear()
        for ns in self.plan.namespaces:
            inode = ns.inode
            if gating:
                veth = veth_of.get(inode)
                if veth is not None:
                    seen, now_line = seen_at[inode], nic_lines.get(veth)
                    if now_line is not None and now_line == seen[0] and now - seen[1] <= bound and ns.pid in alive:
                        quiet.append(inode)  # its veth's line as when last read: not read this tick
                        continue
            try:
                data = read(ns.pid, inode)
            except OSError as error:
                errors[f"{self.proc_root}/{ns.pid}/net/dev"] = describe_os_error(error)
                last.pop(inode, None)  # not known this tick: no rate against older counters
                counts_at.pop(inode, None)
                veth_of.pop(inode, None)
                continue
            after_quiet = last_t if was_quiet and inode in was_quiet else None
            if last.get(inode) == data:
                idle(inode)  # an idle container's file reads the same: named, not repeated
                if self._peers is not None:
                    self._gate(inode, counts_at.get(inode, {}), now)
                continue
            now_bytes = _dev_counts(data, memo)
            if now_bytes is None:  # a line that does not parse: said as net_dev_bytes says it
                path = f"{self.proc_root}/{ns.pid}/net/dev"
                try:
                    now_bytes = {i: (c["rx_bytes"], c["tx_bytes"]) for i, c in netstat.net_dev_bytes(data, path).items()}
                except ParseError as error:
                    errors[path] = f"parse error: {error}"
                    veth_of.pop(inode, None)
                    continue
            then = counts_at.get(inode)
            last[inode] = data
            counts_at[inode] = now_bytes
            # the kernel's own text (the loader parses it): no sixteen counters per interface to encode
            entry: dict[str, Any] = {"pid": ns.pid, "container_id": ns.container_id,
                                     "dev": data.decode("utf-8", "replace")}
            name = str(inode)
            netns[name] = entry
            if self._peers is not None:
                self._gate(inode, now_bytes, now)
            if after_quiet is not None:  # its previous reading is older than the interval: no rate
                entry["unchanged_until"] = after_quiet
                continue
            if dt > 0 and then is not None:
                moved: dict[str, dict[str, int]] = {}
                for iface, (rx, tx) in now_bytes.items():
                    before = then.get(iface)
                    r: dict[str, int] = {}
                    if before is not None:
                        if rx >= before[0]:
                            r["rx_bytes_per_s"] = round((rx - before[0]) / dt)
                        if tx >= before[1]:
                            r["tx_bytes_per_s"] = round((tx - before[1]) / dt)
                    moved[iface] = r
                rates[name] = moved
        line["netns"] = netns
        if unchanged:
            line["netns_unchanged"] = unchanged
        if quiet:
            line["netns_quiet"] = quiet
        self._quiet = set(quiet) if quiet else None

    # -- quiet namespaces ------------------------------------------------------------------------
    def _gating_now(self) -> bool:
        """Whether this tick may leave a namespace unread (:meth:`_gate`): gating on, this tick's
        /proc/net/dev read with the same interfaces as the last (else every namespace is read, and
        the veths' peers asked again: a veth new or gone may have moved a namespace's interfaces)."""
        if self._idle_full_s <= 0:
            return False
        now = time.monotonic()
        # read in full now if waiting for the next tick (an interval on, or as late as the last one
        # came) would leave a namespace unread for longer than idle_full_s (as cgroups.idle_full_s)
        step = max(now - self._last_tick if self._last_tick is not None else 0.0, self._interval_s)
        self._last_tick = now
        self._bound = self._idle_full_s - 1.25 * step
        if not self._peers_asked or not self._nic_same:
            self._peers = veth_peers((ns.inode, ns.pid) for ns in self.plan.namespaces) \
                if self._netns_files.watched else None
            self._peers_asked = True
            self._veth_of.clear()  # each namespace is read this tick
            return False
        return self._peers is not None and bool(self._veth_of) and self._bound > 0

    def _gate(self, inode: int, interfaces: dict[str, Any], now: float) -> None:
        """A namespace read this tick that has only ``lo`` and one other interface, the peer of one
        veth here (:func:`~forensics.collectors.net.peers.veth_peers`): left unread in a later tick
        while that veth's line in /proc/net/dev reads as it did now, for up to idle_full_s."""
        peers = self._peers.get(inode) if self._peers is not None else None
        veth = peers[0].encode("utf-8", "surrogateescape") if peers is not None and len(peers) == 1 else None
        seen = self._nic_lines.get(veth) if veth is not None else None
        if veth is None or seen is None or len(interfaces) != 2 or "lo" not in interfaces:
            self._veth_of.pop(inode, None)
            return
        self._veth_of[inode] = veth
        self._veth_seen[inode] = (seen, now)
