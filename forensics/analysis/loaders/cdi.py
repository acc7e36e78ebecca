"""CDI spec files: ``cdi/index.json`` and the spec files it lists (``cdi/<directory>/<file>``).

The specs are not entities of their own: the engines' loaders (docker, and podman's libpod
inspect) resolve a CDI device name through them (:func:`cdi_grants`), and cite the device's
entry in its file (:func:`cdi_evidence`: the YAML line of the ``devices[]`` entry, or the JSON
pointer ``/devices/N``). This loader reports what could not be read: a file that is not a CDI
spec, and a name two files of one directory define (the runtime refuses such a name).
"""

from __future__ import annotations

from forensics.analysis.findings import Evidence
from forensics.analysis.loaders.common import Loader, as_int, as_str
from forensics.analysis.loaders.state import LoadState
from forensics.analysis.model import Model
from forensics.analysis.source import Source
from forensics.parsing.cdi_grants import SpecGrants
from forensics.parsing.cdi_spec import CdiRegistry
from forensics.specs import cdi as cdi_spec

__all__ = ["LOADER", "cdi_evidence", "cdi_grants", "cdi_registry", "load_cdi"]


def _spec_files(src: Source) -> list[tuple[str, int]]:
    """(member, precedence) of every kept spec file, from the index (or, without it, the members)."""
    index = src.json(cdi_spec.INDEX)
    out: list[tuple[str, int]] = []
    dirs = index.get("directories") if isinstance(index, dict) else None
    if isinstance(dirs, list):
        for d in dirs:
            if not isinstance(d, dict):
                continue
            priority = as_int(d.get("priority")) or 0
            for f in d.get("files") or []:
                member = as_str(f.get("member")) if isinstance(f, dict) else ""
                if member and src.has(member):
                    out.append((member, priority))
        return out
    return [(m, 0) for m in src.under(cdi_spec.PREFIX) if m.endswith(cdi_spec.SUFFIXES)]


def cdi_grants(src: Source) -> SpecGrants | None:
    """The grant reader of the bundle's CDI specs (None when it holds none)."""
    registry = cdi_registry(src)
    return SpecGrants(registry) if registry is not None else None


def cdi_registry(src: Source) -> CdiRegistry | None:
    """The bundle's CDI specs, or None when it holds none (no ``cdi`` source, or no spec on the node)."""
    files = _spec_files(src)
    if not files:
        return None
    read: list[tuple[str, bytes, int]] = []
    for member, priority in files:
        try:
            read.append((member, src.bundle.read_bytes(member), priority))
        except Exception:  # noqa: BLE001 - the reader's BundleError or I/O: that file is not evidence
            continue
    return CdiRegistry.from_files(read)


def cdi_evidence(src: Source, grants: SpecGrants | None, member: str, pointer: str,
                 excerpt: str) -> Evidence:
    """Evidence quoting a spec's ``devices[]`` entry: its first line (YAML) or its JSON value."""
    if member.endswith(".json") and src.has(member):
        return src.ev_pointer(member, pointer)
    device = grants.registry.device_at(member, pointer) if grants is not None else None
    if device is not None and device.line is not None:
        return src.ev_line(member, device.line)
    return Evidence(src.name, member, pointer, excerpt, normalised=True)


def load_cdi(src: Source, model: Model, node: str, loading: LoadState) -> None:
    registry = cdi_registry(src)
    if registry is None:
        return
    for problem in registry.problems:
        model.limit(f"{node}: CDI spec not understood: {problem}")
    names = {d.qualified for s in registry.specs for d in s.devices}
    for name in sorted(names):
        twice = registry.conflicts(name)
        if twice:
            model.limit(f"{node}: CDI device {name} is defined by {' and '.join(d.member for d in twice)} "
                        "(one directory): a runtime refuses it, and no grant is read from it")


LOADER = Loader("cdi", load_cdi)
