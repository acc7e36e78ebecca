"""Tolerant reading of the analysis document: a field of the wrong type is unknown, never trusted.

Every reader takes a mapping and a key and returns the value when it has the expected type, a
default otherwise (``""``, ``None``, an empty list): the document comes from a bundle, and the
report renders what it can of a damaged one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from forensics.report.formatting import parse_time

__all__ = [
    "get_bool",
    "get_dict",
    "get_dicts",
    "get_int",
    "get_list",
    "get_num",
    "get_str",
    "get_strs",
    "unix",
]


def get_str(d: Mapping[str, Any], key: str, default: str = "") -> str:
    value = d.get(key)
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return default
    if isinstance(value, int | float):
        return str(value)
    return default


def get_num(d: Mapping[str, Any], key: str) -> float | None:
    value = d.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def get_int(d: Mapping[str, Any], key: str) -> int | None:
    value = d.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def get_bool(d: Mapping[str, Any], key: str) -> bool | None:
    value = d.get(key)
    return value if isinstance(value, bool) else None


def get_list(d: Mapping[str, Any], key: str) -> list[Any]:
    value = d.get(key)
    return value if isinstance(value, list) else []


def get_dicts(d: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    return [item for item in get_list(d, key) if isinstance(item, dict)]


def get_dict(d: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = d.get(key)
    return value if isinstance(value, dict) else {}


def get_strs(d: Mapping[str, Any], key: str) -> tuple[str, ...]:
    return tuple(item for item in get_list(d, key) if isinstance(item, str))


def unix(value: object) -> float | None:
    """An ISO 8601 time (or unix seconds) -> unix seconds; None when it is neither."""
    parsed = parse_time(value)
    return parsed.timestamp() if parsed is not None else None

