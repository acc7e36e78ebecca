"""Network and InfiniBand counters: ``net/samples.jsonl`` (net collector, one line per tick), into :class:`~forensics.analysis.samples.NetSample` series:
each node interface (``/proc/net/dev`` with its ``speed`` and ``operstate``: the kernel's line of
each interface that changed in ``net_dev``, the others as last written, those gone from the file
named in ``net_dev_gone``, and the state and speed of ``links`` as last written; or, as bundles
before it wrote, parsed in ``interfaces``), each InfiniBand
port (``counters/*``, data counters times 4 as bytes, ``rate`` and ``state``) and each container
network namespace (``/proc/<pid>/net/dev``, the kernel's text in ``dev``, or parsed in
``interfaces`` as bundles before it wrote; interfaces other than ``lo`` summed; a namespace the
line names in ``netns_unchanged`` read the same as when last written, and keeps those counters;
one it names in ``netns_quiet`` was not read, and has no reading at that tick; an entry's
``unchanged_until`` is a reading of its bytes, the previous entry's, at that time).
"""

from __future__ import annotations

from typing import Any

from forensics.analysis.loaders.common import Loader, as_float, as_int
from forensics.analysis.loaders.state import LoadState
from forensics.analysis.model import Model
from forensics.analysis.samples import NetSample
from forensics.analysis.source import Source
from forensics.errors import ParseError
from forensics.parsing.netstat import IB_DATA_WORD_BYTES, parse_net_dev
from forensics.specs import net as net_spec

__all__ = ["LOADER", "load_net"]

NIC_COUNTERS = ("rx_bytes", "tx_bytes", "rx_errors", "tx_errors", "rx_dropped", "tx_dropped",
                "rx_fifo_errors", "rx_frame_errors", "tx_carrier_errors")
# the two header lines of /proc/net/dev (a line of net_dev is parsed as the file's only interface)
_NET_DEV_HEAD = "Inter-|\n face |\n"
# what a namespace's veth shows on its host end too (the rest, drops and errors, only inside)
_MIRRORED = ("rx_bytes", "tx_bytes")
IB_COUNTERS = ("port_xmit_wait", "symbol_error", "link_downed", "port_rcv_errors", "port_xmit_discards",
               "link_error_recovery")


def _ints(values: Any, names: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    if isinstance(values, dict):
        for name in names:
            v = as_int(values.get(name))
            if v is not None and v >= 0:
                out[name] = v
    return out


def _ib(values: Any) -> dict[str, int]:
    counters = _ints(values, IB_COUNTERS)
    if isinstance(values, dict):
        for word, name in (("port_xmit_data", "tx_bytes"), ("port_rcv_data", "rx_bytes")):
            v = as_int(values.get(word))
            if v is not None and v >= 0:
                counters[name] = v * IB_DATA_WORD_BYTES
    return counters


def _netns(values: dict[str, Any]) -> dict[str, int] | None:
    """A namespace's counters, other than ``lo``'s, summed; None for a ``dev`` text that does not parse."""
    interfaces, dev = values.get("interfaces"), values.get("dev")
    if isinstance(dev, str):
        try:
            interfaces = parse_net_dev(dev, "net/dev")
        except ParseError:
            return None
    total: dict[str, int] = {}
    if isinstance(interfaces, dict):
        for iface, counters in interfaces.items():
            if iface == "lo":
                continue
            for k, v in _ints(counters, NIC_COUNTERS).items():
                total[k] = total.get(k, 0) + v
    return total


def _speed(mbps: Any) -> float | None:
    v = as_int(mbps)
    return v * 1e6 / 8 if v is not None and v > 0 else None


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class _Nics:
    """The node interfaces as last written (``net_dev`` lines, ``links`` states and speeds)."""

    def __init__(self) -> None:
        self.counters: dict[str, tuple[dict[str, int], Any]] = {}  # iface -> counters, the ref of their line
        self.links: dict[str, tuple[str | None, float | None]] = {}  # iface -> operstate, link bytes/s


def _nic_lines(model: Model, node: str, t: float, rec: dict[str, Any], ref: Any, nics: _Nics) -> None:
    """A line written with ``net_dev`` (one line of ``/proc/net/dev`` per interface that changed)."""
    lines, links = rec.get("net_dev"), _table(rec.get("links"))
    for iface, values in links.items():
        if isinstance(values, dict):
            state = values.get("operstate")
            nics.links[iface] = (state if isinstance(state, str) else None, _speed(values.get("speed_mbps")))
    if not isinstance(lines, dict):  # /proc/net/dev not read this tick: nothing known of its interfaces
        nics.counters = {}
        return
    gone = rec.get("net_dev_gone")
    for iface in gone if isinstance(gone, list) else []:
        nics.counters.pop(str(iface), None)
    for iface, text in lines.items():
        if isinstance(text, str):
            try:
                parsed = parse_net_dev(_NET_DEV_HEAD + text, "net_dev").get(iface)
            except ParseError:
                parsed = None
            if parsed is None:
                nics.counters.pop(iface, None)
            else:
                nics.counters[iface] = (_ints(parsed, NIC_COUNTERS), ref(("net_dev", iface)))
    for iface, (counters, written) in nics.counters.items():
        state, speed = nics.links.get(iface, (None, None))
        where = written  # an interface whose line read the same: the line that last wrote it
        if iface in links:
            where = ref(("net_dev", iface), ("links", iface)) if iface in lines else ref(("links", iface))
        model.add(NetSample(node, "nic", iface, t, counters, speed, state, None, where))


def _add_line(model: Model, node: str, t: float, rec: dict[str, Any], ref: Any,
              last: dict[str, tuple[dict[str, int], str | None]], nics: _Nics) -> None:
    add = model.series(NetSample).append  # once per line, not per interface
    if "net_dev" in rec or "links" in rec:
        _nic_lines(model, node, t, rec, ref, nics)
    for iface, values in _table(rec.get("interfaces")).items():
        if isinstance(values, dict):
            state = values.get("operstate")
            add(NetSample(node, "nic", iface, t, _ints(values, NIC_COUNTERS),
                                               _speed(values.get("speed_mbps")),
                                               state if isinstance(state, str) else None, None,
                                               ref(("interfaces", iface))))
    for port, values in _table(rec.get("ib")).items():
        if isinstance(values, dict):
            state = values.get("state")
            add(NetSample(node, "ib", port, t, _ib(values), as_float(values.get("rate_bytes_per_s")),
                                               state if isinstance(state, str) else None, None, ref(("ib", port))))
    for inode, values in _table(rec.get("netns")).items():
        if isinstance(values, dict):
            cid = values.get("container_id")
            counters, owner = _netns(values), cid if isinstance(cid, str) else None
            if counters is None:
                continue
            quiet, known = as_float(values.get("unchanged_until")), last.get(inode)
            if quiet is not None and known is not None and quiet < t:
                # its host veth's line read then as at its previous reading: its veth's bytes (each
                # end's received is the other's sent) still held the previous values then
                add(NetSample(node, "netns", inode, quiet,
                                                   {k: v for k, v in known[0].items() if k in _MIRRORED},
                                                   None, None, known[1], ref(("netns", inode, "unchanged_until"))))
            last[inode] = (counters, owner)
            add(NetSample(node, "netns", inode, t, counters, None, None, owner,
                                               ref(("netns", inode))))
    unchanged = rec.get("netns_unchanged")
    for inode in unchanged if isinstance(unchanged, list) else []:
        known = last.get(str(inode))
        if known is not None:  # read the same as when last written: the same counters at this tick
            add(NetSample(node, "netns", str(inode), t, known[0], None, None, known[1],
                                               ref(("netns_unchanged",))))


def load_net(src: Source, model: Model, node: str, loading: LoadState) -> None:
    sampled = False
    last: dict[str, tuple[dict[str, int], str | None]] = {}
    nics = _Nics()
    for no, rec, raw in src.jsonl(net_spec.SAMPLES):
        t = as_float(rec.get("t"))
        if t is None:
            continue
        sampled = True
        _add_line(model, node, t, rec, lambda *paths, no=no, raw=raw: src.ref(net_spec.SAMPLES, no, raw, *paths), last,
                  nics)
    if sampled:  # the snapshot alone holds counters since boot: nothing can be seen rising
        # the member's path in the bundle (``ring/...`` over the ring view), as its evidence names it
        model.node(node).members_used.setdefault("net", src.ref(net_spec.SAMPLES, 0, None).member)


LOADER = Loader("net", load_net, needs=())
