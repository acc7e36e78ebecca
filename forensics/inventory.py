"""What a bundle holds: host, capture window, each collector's status, members per source.

This is the part of ``analyze`` that needs no rules: it tells the reader what evidence exists and,
as importantly, what could not be collected.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from forensics.bundle.reader import Bundle

__all__ = ["describe_bundle", "format_inventory"]


def describe_bundle(bundle: Bundle) -> dict[str, Any]:
    """A JSON-able summary of one bundle."""
    m = bundle.manifest
    cap: dict[str, Any] = m["capture"] if isinstance(m.get("capture"), dict) else {}
    host: dict[str, Any] = m["host"] if isinstance(m.get("host"), dict) else {}
    by_source: dict[str, dict[str, int]] = defaultdict(lambda: {"members": 0, "bytes": 0})
    for name, data in bundle.members.items():
        src = by_source[name.split("/", 1)[0]]
        src["members"] += 1
        src["bytes"] += len(data)
    collectors = [
        {
            "name": c.get("name"),
            "status": c.get("status"),
            "duration_s": c.get("duration_s"),
            "error": c.get("error"),
        }
        for c in bundle.collectors()
    ]
    return {
        "path": str(bundle.path),
        "file_sha256": bundle.file_sha256,
        "format_version": m.get("format_version"),
        "tool_version": (m.get("tool") or {}).get("version") if isinstance(m.get("tool"), dict) else None,
        "host": host.get("hostname"),
        "captured_start": cap.get("started"),
        "captured_end": cap.get("finished"),
        "window": cap.get("window"),
        "interrupted": bool(cap.get("interrupted")),
        "collectors": collectors,
        "sources": {k: dict(v) for k, v in sorted(by_source.items())},
        "member_count": len(bundle.members),
        "redaction": m.get("redaction"),
    }


def format_inventory(desc: dict[str, Any]) -> str:
    """Plain-text rendering of :func:`describe_bundle` for the terminal."""
    lines = [
        f"Bundle   {desc['path']}",
        f"Host     {_shown(desc.get('host'))}    captured {_shown(desc.get('captured_start'))} -> {_shown(desc.get('captured_end'))}"
        + ("    [INTERRUPTED]" if desc.get("interrupted") else ""),
        f"SHA-256  {desc['file_sha256']}    members {desc['member_count']}",
        "Collectors:",
    ]
    for c in desc["collectors"]:
        err = f"  {c['error']}" if c.get("error") else ""
        dur = c.get("duration_s")
        shown = f"{dur:.2f} s" if isinstance(dur, int | float) and not isinstance(dur, bool) else _shown(dur, "")
        lines.append(f"  {c['name'] or '?':<14} {c['status'] or '?':<12} {shown:>9}{err}")
    lines.append("Evidence by source:")
    for src, v in desc["sources"].items():
        lines.append(f"  {src:<14} {v['members']:>6} members {v['bytes']:>12} bytes")
    return "\n".join(lines)


def _shown(value: Any, missing: str = "?") -> str:
    """A manifest value for the terminal: ``?`` (not ``None``) when the bundle lacks it."""
    return missing if value is None or value == "" else str(value)
