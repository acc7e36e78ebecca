"""Member bytes as the live state reads them: text, bytes, JSON lines (orjson where installed)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["as_bytes", "as_text", "json_lines", "loads"]

loads: Callable[[str | bytes], Any]
try:  # orjson parses JSON lines several times faster (the analysis uses it the same way)
    import orjson

    loads = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    loads = json.loads


def as_text(data: str | bytes) -> str:
    return data if isinstance(data, str) else bytes(data).decode("utf-8", "surrogateescape")


def as_bytes(data: str | bytes) -> bytes:
    return data.encode("utf-8", "surrogateescape") if isinstance(data, str) else bytes(data)


def json_lines(data: str) -> list[dict[str, Any]]:
    out = []
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            obj = loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out
