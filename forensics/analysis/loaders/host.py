"""The host: what the machine is, for page one of a report (``host/host.json``: ``uname``
kernel release and ``os_release`` PRETTY_NAME, into the node's ``facts``), and its clock
discipline (``host/clock.json``: ``adjtimex(2)`` read with ``modes = 0``).

A clock an NTP daemon keeps synchronised (``STA_UNSYNC`` clear, state not ``TIME_ERROR``) is
within ``maxerror`` of UTC: the node's clock reference ``UTC`` with offset 0 and that uncertainty.
Nodes sharing a reference are put on one clock by :func:`forensics.analysis.loaders.clocks.align_clocks`.
"""

from __future__ import annotations

from forensics.analysis.loaders.common import Loader, dig
from forensics.analysis.loaders.state import LoadState
from forensics.analysis.model import Model
from forensics.analysis.source import Source
from forensics.specs import host as host_spec

__all__ = ["LOADER", "load_host"]

_MAX_TRUSTED_ERROR_S = 60.0  # a larger maxerror says nothing useful about the clock


def load_host(src: Source, model: Model, node: str, loading: LoadState) -> None:
    doc = src.json(host_spec.FACTS)
    facts = model.node(node).facts
    release = dig(doc, "uname", "release")
    if isinstance(release, str) and release:
        facts.setdefault("kernel", release)
    pretty = dig(doc, "os_release", "PRETTY_NAME")
    if isinstance(pretty, str) and pretty:
        facts.setdefault("os", pretty)
    _load_clock(src, model, node)


def _load_clock(src: Source, model: Model, node: str) -> None:
    doc = src.json(host_spec.CLOCK)
    adj = dig(doc, "adjtimex")
    if not isinstance(adj, dict) or adj.get("synchronised") is not True:
        return
    maxerror = adj.get("maxerror_us")
    if not isinstance(maxerror, int | float) or isinstance(maxerror, bool) or not 0 <= maxerror / 1e6 <= _MAX_TRUSTED_ERROR_S:
        return
    model.node(node).clock_refs["UTC (NTP-synchronised clocks)"] = (
        0.0, maxerror / 1e6, src.ev_pointer(host_spec.CLOCK, "/adjtimex/maxerror_us", doc))


LOADER = Loader("host", load_host)
