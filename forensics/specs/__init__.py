"""One declaration per evidence source (the bottom layer capture and analysis both read).

Each module here other than :mod:`base` and :mod:`hints` declares one source: a ``SPEC``
(:class:`~forensics.specs.base.SourceSpec`: name, volatility order, collector module, typed
settings, what its absence costs, hints published and read, roles played) beside the bundle member paths the
collector writes and the loader reads. :func:`all_specs` finds them by walking this package, so a
new source needs no entry in a hand-kept list. Imports nothing from capture, analysis, collectors
or report.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import Any

from forensics.specs.base import (
    Absence,
    Excuse,
    Hint,
    NoSettings,
    Setting,
    SourceSpec,
    StandIn,
    check_value,
    setting,
)
from forensics.specs.roles import Role

__all__ = [
    "Absence", "Excuse", "Hint", "NoSettings", "Setting", "SourceSpec", "StandIn", "all_specs", "check_value", "setting",
    "Role", "playing", "spec_named",
]

_NOT_SOURCES = frozenset({"base", "hints", "roles"})


@cache
def all_specs() -> tuple[SourceSpec[Any], ...]:
    """Every source's spec, most volatile first (RFC 3227), name breaking ties."""
    found: list[SourceSpec[Any]] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name in _NOT_SOURCES or info.name.startswith("_"):
            continue
        spec = getattr(importlib.import_module(f"{__name__}.{info.name}"), "SPEC", None)
        if isinstance(spec, SourceSpec):
            found.append(spec)
    names = [s.name for s in found]
    if len(names) != len(set(names)):
        raise RuntimeError(f"two source specs share a name: {sorted(names)}")
    return tuple(sorted(found, key=lambda s: (s.order, s.name)))


def spec_named(name: str) -> SourceSpec[Any] | None:
    return next((s for s in all_specs() if s.name == name), None)


@cache
def playing(role: Role) -> frozenset[str]:
    """The names of the sources whose spec declares ``role``. A role no spec declares is an error
    (a rule asking it could never be answered: a typo, or a source that dropped the role)."""
    names = frozenset(s.name for s in all_specs() if role in s.roles)
    if not names:
        raise ValueError(f"no source spec declares the role {role.name!r}")
    return names
