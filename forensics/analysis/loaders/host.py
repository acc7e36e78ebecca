"""What the machine is, for page one of a report: ``host/host.json`` (host collector) ``uname``
(kernel release) and ``os_release`` (PRETTY_NAME), into the node's ``facts``."""

from __future__ import annotations

from forensics.analysis.loaders.common import Loader, dig
from forensics.analysis.model import Model
from forensics.analysis.source import Source
from forensics.specs import host as host_spec

__all__ = ["LOADER", "load_host"]


def load_host(src: Source, model: Model, node: str) -> None:
    doc = src.json(host_spec.FACTS)
    facts = model.node(node).facts
    release = dig(doc, "uname", "release")
    if isinstance(release, str) and release:
        facts.setdefault("kernel", release)
    pretty = dig(doc, "os_release", "PRETTY_NAME")
    if isinstance(pretty, str) and pretty:
        facts.setdefault("os", pretty)


LOADER = Loader("host", load_host)
