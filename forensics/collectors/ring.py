"""``ring``: capture folds the flight recorder's history into the bundle (``capture --since``).

Source: the ring directory (``capture --ring DIR`` or ``--set ring.dir=DIR``, else
``$GPUFORENSICS_RING``, else ``/var/lib/gpuforensics/ring``), read while the recorder writes.
The window: ``--since`` when given, else the capture start minus ``--lookback``; up to the
capture start.

Members: the ring's own segments, verbatim (docs/bundle-format/ring.md):

- ``ring/segments/seg-N.jsonl.gz``: every sealed segment whose records overlap the window, the
  file's bytes as the ring holds them (their SHA-256 is the one the recorder wrote to the ring's
  ``index.jsonl`` at seal time; checked before the copy: a segment that does not match is left
  out and named);
- ``ring/segments/seg-N.jsonl``: the active segment's whole lines (up to its last whole line);
- ``ring/provenance.json``: the ring, its writer, the window, and per segment its name, member,
  whether sealed, its SHA-256 (the index's for a sealed one, of the lines copied for the active
  one), size, record count and time span; ``left_out_from`` when the bundle's evidence size cap
  stopped the fold (partial: the segments from then on are left out, the provenance still written).

The members the analysis loaders read (``ring/nvml/samples.jsonl``, ``ring/proc/<pid>/cgroup``...)
are rebuilt from the segments at read time (forensics.analysis.ring_view): the ring stores
change-only lines, so a member is a reconstruction either way, and a deterministic one; the
segments are the evidence with a chain of custody back to the node. Whole segments are carried:
a window starting inside a segment includes all of it, and the view clips records by wall time.
Every segment starts with a copy of the state (the latest write records), so the first segment
of the window holds the state as of then.

Redaction: a redacted capture (the default) carries only segments whose header says their records
were redacted. Segments a ``record --no-redact`` wrote (or a recorder of a version whose segments did
not say) are refused, never copied: they are named in ``provenance.json``'s ``not_redacted`` and in
one line of the collector's status (``partial``), which says that ``capture --no-redact`` carries
them. They are not redacted here: the recorder's redaction is each collector's own, per member, and
a segment rewritten at capture would no longer be the ring's bytes that its SHA-256 vouches for.

No ring: ``unavailable`` with one note ("no flight recorder ring at DIR").
"""

from __future__ import annotations

import hashlib
from typing import Any

from forensics.bundle.format import iso_from_unix
from forensics.collect.context import CollectContext
from forensics.errors import RingError, SourceUnavailable
from forensics.humanize import format_bytes
from forensics.ring import RingReader, SegmentInfo, resolve_ring_dir
from forensics.ring.segment import info_from_lines, valid_prefix
from forensics.specs.ring import LAYOUT, PROVENANCE, SEGMENTS, SPEC

__all__ = ["COLLECTOR", "RingFold"]

_RESERVE_BYTES = 1 << 20  # kept below the sink's cap for provenance.json
_SELECTED_BY = ("whole segments whose records overlap [since, until], carried verbatim; the members the "
                "analysis reads (ring/<member>) are rebuilt from them: records whose wall time is in the "
                "window, appends in the order written, the state (write records) as of the capture start")


def _iso(t: float | None) -> str | None:
    return iso_from_unix(t) if t is not None else None


def _entry(seg: SegmentInfo, member: str, data: bytes, sha: str) -> dict[str, Any]:
    return {"segment": seg.name, "member": member, "sealed": seg.sealed, "sha256": sha,
            "sha256_of": "file, as the ring index lists it (written at seal time)" if seg.sealed
            else "whole lines copied (the active segment, hashed at capture)",
            "bytes": len(data), "run": seg.run, "records": seg.records,
            "first": _iso(seg.min_t), "last": _iso(seg.max_t), "t_first": seg.min_t, "t_last": seg.max_t}


def _refused_line(refused: list[dict[str, Any]]) -> str:
    """The one line that says which segments a redacted capture refused, why, and how to carry them."""
    names = refused[0]["segment"] + (f" .. {refused[-1]['segment']}" if len(refused) > 1 else "")
    firsts = [r["first"] for r in refused if r["first"]]
    lasts = [r["last"] for r in refused if r["last"]]
    span = f", {min(firsts)} .. {max(lasts)}" if firsts and lasts else ""
    why = ("recorded with `record --no-redact`" if all(r["redacted"] is False for r in refused)
           else "recorded with `record --no-redact` or by a recorder that did not say whether it redacted")
    return (f"ring: {len(refused)} segment{'s' if len(refused) != 1 else ''} ({names}{span}) {why} left out: "
            "a redacted capture carries no unredacted records (`capture --no-redact` carries them as they are)")


class RingFold:
    """``ring``: the flight recorder's segments for the capture window, from the ring directory
    (``index.jsonl`` and ``seg-*.jsonl[.gz]``, see forensics.ring)."""

    name = SPEC.name
    order = SPEC.order
    timeout_s = 60.0

    def snapshot(self, ctx: CollectContext) -> None:
        root = resolve_ring_dir(SPEC.read_settings(ctx.options.extra).dir)
        if not root.is_dir():
            raise SourceUnavailable(f"no flight recorder ring at {root}: history before the capture is "
                                    "only what the kernel and the engines still hold")
        until = ctx.options.capture_start.timestamp()
        since = ctx.options.since.timestamp() if ctx.options.since else until - ctx.options.lookback_s
        try:
            reader = RingReader(root)
            writer = reader.writer()
        except RingError as exc:
            raise SourceUnavailable(str(exc)) from None
        copied: list[dict[str, Any]] = []
        problems: list[str] = []
        refused: list[dict[str, Any]] = []
        cut: dict[str, Any] | None = None
        try:
            cut = self._copy(ctx, reader, since, until, copied, problems, refused)
        except RingError as exc:
            if not copied:
                raise SourceUnavailable(str(exc)) from None
            ctx.partial(f"ring: {exc}")
        finally:  # also at a deadline: what was copied has its provenance
            ctx.sink.write_json(PROVENANCE, {
                "ring": str(root),
                "writer": writer,
                "layout": LAYOUT,
                "window": {"since": iso_from_unix(since), "until": iso_from_unix(until), "t_since": since,
                           "t_until": until, "selected_by": _SELECTED_BY},
                "segments": copied,
                "problems": problems,
                **({"not_redacted": refused} if refused else {}),
                **({"left_out_from": cut} if cut else {}),
            })
        for problem in problems:
            ctx.partial(f"ring: {problem}")
        if refused:
            ctx.partial(_refused_line(refused))
        records = sum(int(s["records"] or 0) for s in copied)
        if not copied:
            ctx.note(f"ring at {root}: no records between {iso_from_unix(since)} and {iso_from_unix(until)}")
        else:
            ctx.note(f"ring at {root}: {len(copied)} segments ({records} records, "
                     f"{format_bytes(sum(s['bytes'] for s in copied), '?')}) carried for "
                     f"{iso_from_unix(since)} .. {iso_from_unix(until)}")

    @staticmethod
    def _copy(ctx: CollectContext, reader: RingReader, since: float, until: float,
              copied: list[dict[str, Any]], problems: list[str],
              refused: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Copy the window's segments, oldest first; the cut (cap) when the sink's cap stopped it."""
        # the sink's cap (a collector's members in all): segments stop short of it, keeping room
        # for provenance.json, and the fold says from when records are left out
        room = ctx.sink.max_bytes - ctx.sink.bytes_written - _RESERVE_BYTES
        for got in reader.segment_files(since, until):  # sealed ones checked against the index
            seg, data = got.info, got.data
            if got.problem:
                problems.append(f"{got.problem}: {'left out' if got.gone else 'segment left out'}")
                continue
            if seg.sealed:
                sha = seg.sha256 or ""
            else:
                good, lines, _ = valid_prefix(data)  # a whole line that is not a record is carried too
                data = data[:good]
                if len(lines) <= 1:
                    continue  # a header alone: no records
                seg = info_from_lines(seg.name, seg.seq, lines)
                sha = hashlib.sha256(data).hexdigest()
            if ctx.redactor.enabled and seg.redacted is not True:
                refused.append({"segment": seg.name, "run": seg.run, "redacted": seg.redacted,
                                "records": seg.records, "first": _iso(seg.min_t), "last": _iso(seg.max_t)})
                continue  # secrets never reach a redacted bundle; the segment is named, not copied
            if len(data) > room:
                t = seg.min_t if seg.min_t is not None else since
                ctx.partial(f"the evidence size cap ({format_bytes(ctx.sink.max_bytes, '?')}) is reached: ring "
                            f"segments from {seg.name} ({iso_from_unix(t)}) on are left out "
                            "(a shorter --since folds them)")
                return {"at": iso_from_unix(t), "t": t, "segment": seg.name, "cap_bytes": ctx.sink.max_bytes}
            member = SEGMENTS + seg.name
            ctx.sink.write_bytes(member, data)
            room -= len(data)
            copied.append(_entry(seg, member, data, sha))
            if ctx.remaining() < 3.0:
                ctx.partial(f"deadline near: the ring was copied only up to {seg.name} "
                            f"({_iso(seg.max_t)})")
                return None
        return None


COLLECTOR = RingFold()
