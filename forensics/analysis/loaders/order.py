"""The loaders' order: every declared ``LOADER`` of this package, each after those it ``needs``.

A module of its own (not the package's ``__init__``) so that the manifest loader, which lists the
missing sources in this order, and the package both import it, and neither imports the other.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from pathlib import Path

from forensics.analysis.loaders.common import Loader
from forensics.specs import Role, all_specs, playing

__all__ = ["loader_order"]

_PACKAGE = __name__.rpartition(".")[0]


def _declared() -> list[Loader]:
    found = []
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        loader = getattr(importlib.import_module(f"{_PACKAGE}.{info.name}"), "LOADER", None)
        if isinstance(loader, Loader):
            found.append(loader)
    return found


@cache
def loader_order() -> tuple[Loader, ...]:
    """Every declared loader, each after the loaders of the sources it ``needs`` (by name, or every
    source playing a role it names; a topological order; among the ready ones the most volatile
    source first, as capture ran them)."""
    rank = {spec.name: (spec.order, spec.name) for spec in all_specs()}
    pending = {ld.source: ld for ld in _declared()}
    after: dict[str, frozenset[str]] = {}
    for ld in pending.values():
        unknown = [n for n in (ld.source, *ld.needs) if not isinstance(n, Role) and n not in rank]
        if unknown:
            raise RuntimeError(f"loader {ld.source} names sources without a spec: {unknown}")
        after[ld.source] = frozenset(n for need in ld.needs
                                     for n in (playing(need) if isinstance(need, Role) else (need,))) - {ld.source}
    done: list[Loader] = []
    while pending:
        ready = [ld for ld in pending.values() if not any(n in pending for n in after[ld.source])]
        if not ready:
            raise RuntimeError(f"loaders need each other in a circle: {sorted(pending)}")
        first = min(ready, key=lambda ld: rank[ld.source])
        done.append(pending.pop(first.source))
    return tuple(done)
