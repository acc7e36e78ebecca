"""What ``gpuforensics ring`` shows: the ring's span, size, segments, gaps and writer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from forensics.bundle.format import iso_from_unix
from forensics.ring import RingReader
from forensics.specs.ring import RECORDER_EVENTS

__all__ = ["ring_status"]


def ring_status(root: Path | str, verify: bool = False) -> dict[str, Any]:
    """The ring at ``root`` (RingError when there is none). ``verify`` reads every segment
    (SHA-256 of the sealed ones, whole lines of the active ones) and lists gaps and clock jumps."""
    reader = RingReader(root)
    segs = reader.segments()
    sizes = 0
    for s in segs:
        try:
            sizes += (Path(root) / s.name).stat().st_size
        except OSError:
            pass
    sealed = [s for s in segs if s.sealed]
    span_from = min((s.min_t for s in sealed if s.min_t is not None), default=None)
    span_to = max((s.max_t for s in sealed if s.max_t is not None), default=None)
    out: dict[str, Any] = {
        "ring": str(root),
        "writer": reader.writer(),
        "segments": {"sealed": len(sealed), "active": len(segs) - len(sealed)},
        "size_bytes": sizes,
        "records_sealed": sum(s.records for s in sealed),
    }
    gaps: list[dict[str, Any]] = []
    jumps: list[dict[str, Any]] = []
    runs: list[str] = []
    if verify or len(segs) != len(sealed):
        for rec in reader.records():
            span_from = rec.t if span_from is None else min(span_from, rec.t)
            span_to = rec.t if span_to is None else max(span_to, rec.t)
            if rec.run not in runs:
                runs.append(rec.run)
            if rec.member != RECORDER_EVENTS:
                continue
            for line in rec.data.splitlines():  # one record may hold several event lines
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(ev, dict):
                    continue
                if ev.get("kind") == "gap":
                    gaps.append({k: ev.get(k) for k in ("source", "from", "to", "reason")})
                elif ev.get("kind") == "clock-jump":
                    jumps.append({"at": ev.get("t"), "by_s": ev.get("by_s")})
        out["runs"] = len(runs)
        out["gaps"] = gaps
        out["clock_jumps"] = jumps
        out["problems"] = reader.report.problems
    out["span"] = {"from": iso_from_unix(span_from) if span_from else None,
                   "to": iso_from_unix(span_to) if span_to else None,
                   "seconds": round(span_to - span_from, 3) if span_from and span_to else 0.0}
    return out


def format_status(status: dict[str, Any]) -> str:
    """Plain text for a terminal."""
    w = status.get("writer") or {}
    lines = [
        f"ring      {status['ring']}",
        f"span      {status['span']['from'] or '-'} .. {status['span']['to'] or '-'} "
        f"({status['span']['seconds']:.0f} s)",
        f"size      {status['size_bytes']} bytes in {status['segments']['sealed']} sealed + "
        f"{status['segments']['active']} active segments",
        f"writer    pid {w.get('pid', '-')} {'running' if w.get('alive') else 'not running'}"
        f" (run {str(w.get('run', '-'))[:12]}, interval {w.get('interval_s', '-')} s)",
    ]
    for g in status.get("gaps", []):
        lines.append(f"gap       {g.get('source')}: {iso_from_unix(g['from']) if g.get('from') else '?'} .. "
                     f"{iso_from_unix(g['to']) if g.get('to') else '?'} ({g.get('reason')})")
    for j in status.get("clock_jumps", []):
        lines.append(f"clock     wall clock jumped {j.get('by_s')} s at {j.get('at')}")
    for p in status.get("problems", []):
        lines.append(f"problem   {p}")
    return "\n".join(lines)
