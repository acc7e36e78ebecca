"""The collectors capture knows, in order of volatility (RFC 3227): most volatile first.

Derived from the source specs (:mod:`forensics.specs`): each spec names its collector module and
its order, so this module keeps no list of its own.

GPU process tables change fastest, then containers and their processes, cgroup counters, the
kernel ring buffer (it wraps), cluster state, and last the slow, stable host facts.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from forensics.collect.context import CollectContext
from forensics.specs import all_specs, spec_named

__all__ = ["COLLECTOR_MODULES", "BrokenCollector", "NotSelected", "collector_name", "load_collectors", "not_selected"]

COLLECTOR_MODULES: tuple[str, ...] = tuple(spec.collector for spec in all_specs())

_NAMES = {spec.collector: spec.name for spec in all_specs()}


def collector_name(module: str) -> str:
    """The name a registry module's collector goes by (``--only``/``--skip``), known without importing it."""
    return _NAMES.get(module, module.rsplit(".", 1)[-1])


def not_selected(name: str, only: tuple[str, ...], skip: tuple[str, ...],
                 extra: Mapping[str, str] | None = None) -> str | None:
    """Why ``--only``/``--skip`` leave collector ``name`` out, or its source is not configured (its
    spec's ``configured_by`` setting not given), or None when it runs."""
    if only and name not in only:
        return "not selected (--only)"
    if name in skip:
        return "skipped (--skip)"
    spec = spec_named(name)
    return spec.unconfigured(extra) if spec is not None else None


@dataclass
class NotSelected:
    """A collector left out by ``--only``/``--skip``: never imported, recorded as skipped."""

    name: str
    order: int = 0
    timeout_s: float = 0.0

    def snapshot(self, ctx: CollectContext) -> None:  # pragma: no cover - never run
        raise RuntimeError(f"collector {self.name} was not selected")


@dataclass
class BrokenCollector:
    """Stands in for a collector module that failed to import, so it costs only itself."""

    name: str
    error: str
    order: int = 10_000
    timeout_s: float = 1.0

    def snapshot(self, ctx: CollectContext) -> None:
        raise RuntimeError(self.error)


def _module_exists(name: str) -> bool:
    """Whether module ``name`` is there, without importing its own package: ``find_spec`` of
    ``a.b.c`` imports ``a.b``, and a collector package's ``__init__`` imports its collector (the
    net collector's cost a ``--only docker`` capture 0.04 s for a module it never runs)."""
    parent, _, leaf = name.rpartition(".")
    spec = importlib.util.find_spec(parent) if parent else None
    if spec is None or spec.submodule_search_locations is None:
        return importlib.util.find_spec(name) is not None
    return any(os.path.isfile(os.path.join(loc, f"{leaf}.py")) or os.path.isdir(os.path.join(loc, leaf))
               for loc in spec.submodule_search_locations)


def load_collectors(
    modules: tuple[str, ...] = COLLECTOR_MODULES,
    only: tuple[str, ...] = (),
    skip: tuple[str, ...] = (),
    extra: Mapping[str, str] | None = None,
) -> list[Any]:
    """Import each listed module that exists and return its ``COLLECTOR``, sorted by ``order``.

    With ``only``/``skip`` (and ``extra``, the ``--set`` settings, for sources that must be
    configured), modules of collectors that will not run are not imported at all (a ``--only host``
    capture does not pay for the docker or kubernetes clients); they are returned as
    :class:`NotSelected` so the manifest still lists them.
    """
    found: list[Any] = []
    for pos, mod_name in enumerate(modules):
        short = collector_name(mod_name)
        if not_selected(short, only, skip, extra):
            if _module_exists(mod_name):
                found.append((pos, NotSelected(short, order=pos * 10)))
            continue
        if importlib.util.find_spec(mod_name) is None:
            continue
        try:
            module = importlib.import_module(mod_name)
            collector = module.COLLECTOR
        except Exception as exc:  # a broken collector module must not break capture
            found.append((pos, BrokenCollector(short, f"cannot load collector module {mod_name}: {exc}")))
            continue
        found.append((pos, collector))
    found.sort(key=lambda pc: (getattr(pc[1], "order", 1000), pc[0]))
    return [c for _, c in found]
