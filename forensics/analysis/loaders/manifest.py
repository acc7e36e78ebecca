"""The bundle's identity and collectors (``manifest.json``): node, capture window, collector statuses."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from forensics.analysis.loaders.common import as_float, dig, parse_time
from forensics.analysis.loaders.order import loader_order
from forensics.analysis.model import Model, NodeInfo
from forensics.analysis.source import Source
from forensics.specs import Absence, StandIn, all_specs

__all__ = ["load_manifest"]

def load_manifest(src: Source, model: Model, path: Path, file_sha256: str,
                  member_hashes: dict[str, str]) -> str:
    """Register the bundle and its node; return the node (host name)."""
    manifest = src.manifest
    # the Kubernetes node name when the capture knew it (in a pod, hostname is the pod's name)
    host = dig(manifest, "host", "node_name") or dig(manifest, "host", "hostname")
    node = host if isinstance(host, str) and host else src.name
    info = model.node(node)
    info.bundles.append(src.name)
    start = parse_time(dig(manifest, "capture", "started"))
    end = parse_time(dig(manifest, "capture", "finished"))
    if start is not None:
        info.start = start if info.start is None else min(info.start, start)
    if end is not None:
        info.end = end if info.end is None else max(info.end, end)
    lookback = dig(manifest, "capture", "window", "lookback_s")
    if isinstance(lookback, int | float) and not isinstance(lookback, bool) and lookback >= 0:
        info.lookback_s = float(lookback) if info.lookback_s is None else max(info.lookback_s, float(lookback))
    since = parse_time(dig(manifest, "capture", "window", "since"))
    if since is not None:
        info.since = since if info.since is None else min(info.since, since)
    crossed = parse_time(dig(manifest, "trigger", "crossed_at"))  # a record --trigger capture's condition began
    if crossed is not None:
        info.trigger_crossed_at = crossed if info.trigger_crossed_at is None else min(info.trigger_crossed_at, crossed)
    interrupted = bool(dig(manifest, "capture", "interrupted"))
    model.bundles.append({
        "path": str(path),
        "file_sha256": file_sha256,
        "host": node,
        "captured_start": dig(manifest, "capture", "started"),
        "captured_end": dig(manifest, "capture", "finished"),
        "interrupted": interrupted,
        "tool_version": dig(manifest, "tool", "version"),
        "bundle_format_version": manifest.get("format_version"),
        "members": dict(sorted(member_hashes.items())),
    })
    if interrupted:
        model.limit(f"{src.name}: the capture was interrupted: evidence may be incomplete")
    collectors = manifest.get("collectors")
    seen: set[str] = set()
    for c in collectors if isinstance(collectors, list) else []:
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            continue
        name = c["name"]
        status = c["status"] if isinstance(c.get("status"), str) else "unknown"
        seen.add(name)
        prev = info.collector_status.get(name)
        if prev not in ("ok", "partial") or status == "ok":
            info.collector_status[name] = status
        notes: Any = c.get("notes")
        model.collectors.append({
            "bundle": src.name, "node": node, "name": name, "status": status,
            "duration_s": as_float(c.get("duration_s")), "error": c.get("error"),
            "notes": [n for n in notes if isinstance(n, str)] if isinstance(notes, list) else [],
        })
    return node


def _absences() -> list[tuple[str, Absence]]:
    """Each source whose absence costs the analysis something, in the order its loader runs."""
    by_name = {spec.name: spec for spec in all_specs()}
    names = [ld.source for ld in loader_order()]
    names += [spec.name for spec in all_specs() if spec.name not in names]
    return [(n, a) for n in names if (a := by_name[n].absence) is not None]


def _stand_ins(info: NodeInfo, missing: str) -> str:
    """``; <source> stands in for <what>`` for each source that answered on the node and declares
    it gives back part of ``missing`` (history: at the step it was asked)."""
    out = ""
    for spec in all_specs():
        gives = [s.gives for s in spec.stands_in if s.source == missing and not s.held_under]
        if gives and info.collector_status.get(spec.name) in ("ok", "partial"):
            step = f" at a {info.history_step_s:g} s step" if info.history_step_s is not None else ""
            out += f"; {spec.stand_in_label or spec.name}{step} stands in for {', '.join(gives)}"
        for s in spec.stands_in:  # a history held: only where its records were read
            if s.source == missing and s.held_under and not s.replaces and s.held_under in info.history_held:
                out += f"; {_held_text(spec.stand_in_label or spec.name, s, info)}"
    return out


def _held_text(label: str, s: StandIn, info: NodeInfo) -> str:
    """``the flight recorder's history (ring/nvml/, its records 2026-11-29 13:02:10Z to 2026-11-29
    14:05:40Z) stands in for ...`` (no span where it is not known)."""
    span = info.history_held.get(s.held_under)
    when = f", its records {_date_time(span[0])} to {_date_time(span[1])}" if span is not None else ""
    return f"{label} ({s.held_under}{when}) stands in for {s.gives}"


def _date_time(t: float) -> str:
    """``2026-11-29 14:02:10Z`` (UTC)."""
    try:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return "an unknown time"


def _replaced(info: NodeInfo, missing: str) -> str | None:
    """What the history the analysis read for the node gives back of all ``missing`` would have
    given (a stand-in that ``replaces``, its records read), worded; None when none does."""
    for spec in all_specs():
        for s in spec.stands_in:
            if s.source == missing and s.replaces and s.held_under in info.history_held:
                return _held_text(spec.stand_in_label or spec.name, s, info)
    return None


def note_missing_sources(model: Model) -> None:
    """One limitation per needed collector that is absent or failed on a node (what its absence
    means, when it costs nothing, and which other source stands in for part of it, is declared in
    the specs)."""
    absences = _absences()
    costly = dict(absences)
    for entry in model.collectors:  # a source this kind of node need not have is not a lost one
        node, name = str(entry["node"]), str(entry["name"])
        info = model.nodes.get(node)
        absence = costly.get(name)
        entry["expected"] = entry["status"] in ("ok", "partial") or (
            absence is not None and info is not None
            and absence.costs(info.collector_status.get(name), info.collector_status))
    for node, info in sorted(model.nodes.items()):
        for name, absence in absences:
            status = info.collector_status.get(name)
            if status in ("ok", "partial"):
                if status == "partial":
                    model.limit(f"{node}: collector {name} was partial: some of its evidence is missing")
                continue
            if not absence.costs(status, info.collector_status):
                continue
            why = f"collector {name} {status}" if status else f"no {name} collector in the bundle"
            held = _replaced(info, name)
            if held is not None:  # its evidence is there, from its records' span: not the absence's meaning
                model.limit(f"{node}: {why}: {held}; nothing from the capture's own window{_stand_ins(info, name)}")
                continue
            why += _stand_ins(info, name)
            model.limit(f"{node}: {absence.meaning} ({why})")
