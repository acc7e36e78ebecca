"""What the loaders share: the :class:`Loader` declaration and small tolerant readers
(timestamps, numbers, nested lookups)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from forensics.parsing.timestamps import parse_iso_unix
from forensics.specs.roles import Role

if TYPE_CHECKING:
    from forensics.analysis.loaders.state import LoadState
    from forensics.analysis.model import Model
    from forensics.analysis.source import Source

__all__ = ["Loader", "as_dict", "as_float", "as_int", "as_str", "dig", "parse_time"]


@dataclass(frozen=True)
class Loader:
    """A source's loader: ``load(src, model, node, loading)`` reads that source's members into the model;
    ``loading`` (:class:`~forensics.analysis.loaders.state.LoadState`) is what loaders keep between
    themselves while the model loads, which rules never see.

    ``needs`` says which loaders run before it: a source's name where it reads that source's own
    entities (the docker loader resolves grants against NVML's GPUs), a role
    (:class:`~forensics.specs.roles.Role`) where it reads what every source of the role loaded (the
    kubernetes loader puts its pods on the containers of every container runtime: a new runtime's
    spec declares the role and its loader runs before, with no edit here). The order of all loaders
    is derived from these declarations (:func:`forensics.analysis.loaders.loader_order`), ties
    broken by the sources' volatility order.
    """

    source: str
    load: Callable[[Source, Model, str, LoadState], None]
    needs: tuple[str | Role, ...] = ()


def as_str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def as_opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}



def parse_time(value: Any) -> float | None:
    """ISO 8601 / RFC 3339 (``Z`` or offset, up to nanoseconds) or unix seconds -> unix seconds.

    Docker's zero time (``0001-01-01T00:00:00Z``) and anything unparsable give None.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if value > 0 else None
    return parse_iso_unix(value)


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isascii() and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    return None


def dig(doc: Any, *path: str | int) -> Any:
    """``doc[path[0]][path[1]]...`` or None when any step is missing or of the wrong type."""
    cur = doc
    for p in path:
        if isinstance(p, int):
            if not isinstance(cur, list) or not -len(cur) <= p < len(cur):
                return None
            cur = cur[p]
        else:
            if not isinstance(cur, dict) or p not in cur:
                return None
            cur = cur[p]
    return cur
