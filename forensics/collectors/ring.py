"""``ring``: capture folds the flight recorder's history into the bundle (``capture --since``).

Source: the ring directory (``capture --ring DIR`` or ``--set ring.dir=DIR``, else
``$GPUFORENSICS_RING``, else ``/var/lib/gpuforensics/ring``), read while the recorder writes
(forensics.ring.RingReader: sealed segments checked against
their SHA-256, the active one up to its last whole line). The window: ``--since`` when given,
else the capture start minus ``--lookback``; records up to the capture start.

Members, each the bytes the recorder's collectors wrote, under ``ring/`` with the bundle's own
layout (so the analysis loaders read them as they read live members):

- append records concatenated in the order written (``ring/nvml/samples.jsonl``,
  ``ring/cgroup/samples.jsonl``, ``ring/docker/events.jsonl``, ``ring/proc/window.jsonl``,
  ``ring/kernel/kmsg-window.txt``, ``ring/recorder/events.jsonl``...);
- write records: the latest at or before the capture start (``ring/nvml/devices.json``,
  ``ring/docker/containers/<id>/inspect.json``, ``ring/proc/<pid>/cgroup``...), even when older
  than the window (every segment starts with a copy of that state);
- ``ring/provenance.json``: the ring, its writer, the window, and per segment read its name,
  whether sealed, its SHA-256 (of the file for a sealed segment, of the lines read for the
  active one) and the first and last line used; per member the record count and time span;
  ``left_out_from`` when the bundle's evidence size cap stopped the fold (partial: the records
  from then on are left out, the state and provenance still written).

No ring: ``unavailable`` with one note ("no flight recorder ring at DIR").
"""

from __future__ import annotations

from typing import Any

from forensics.bundle.format import iso_from_unix
from forensics.capture.context import CollectContext
from forensics.errors import RingError, SourceUnavailable
from forensics.humanize import format_bytes
from forensics.ring import RingReader, resolve_ring_dir
from forensics.specs.ring import PROVENANCE, SPEC, folded

__all__ = ["COLLECTOR", "RingFold"]

_FLUSH_BYTES = 1 << 20
_RESERVE_BYTES = 4 << 20  # kept below the sink's cap for provenance.json and what the state adds late


class RingFold:
    """``ring``: the flight recorder's records for the capture window, from the ring directory
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
            buffers: dict[str, list[bytes]] = {}
            sizes: dict[str, int] = {}
            latest: dict[str, tuple[float, bytes]] = {}
            spans: dict[str, list[Any]] = {}
            cut: dict[str, Any] | None = None
            # the sink's cap (a collector's members in all): appends stop short of it, keeping room
            # for the state and provenance.json, and the fold says where it stopped
            room = ctx.sink.max_bytes - ctx.sink.bytes_written - _RESERVE_BYTES
            appended = state = 0
            for rec in reader.records(since=since, until=until, keep_writes=True):
                if rec.op == "write":
                    state += len(rec.data) - len(latest.get(rec.member, (0.0, b""))[1])
                elif appended + state + len(rec.data) > room:
                    cut = {"at": iso_from_unix(rec.t), "t": rec.t, "cap_bytes": ctx.sink.max_bytes}
                    ctx.partial(f"the evidence size cap ({format_bytes(ctx.sink.max_bytes, '?')}) is reached: ring "
                                f"records from {iso_from_unix(rec.t)} on are left out (a shorter --since folds them)")
                    break
                span = spans.setdefault(rec.member, [0, rec.t, rec.t, rec.op])
                span[0] += 1
                span[1], span[2] = min(span[1], rec.t), max(span[2], rec.t)
                if rec.op == "write":
                    latest[rec.member] = (rec.t, rec.data)
                    continue
                appended += len(rec.data)
                buffers.setdefault(rec.member, []).append(rec.data)
                sizes[rec.member] = sizes.get(rec.member, 0) + len(rec.data)
                if sizes[rec.member] >= _FLUSH_BYTES:
                    ctx.sink.append_bytes(folded(rec.member), b"".join(buffers.pop(rec.member)))
                    sizes[rec.member] = 0
                if ctx.remaining() < 3.0:
                    ctx.partial("deadline near: the ring was read only up to "
                                f"{iso_from_unix(rec.t)}")
                    break
        except RingError as exc:
            raise SourceUnavailable(str(exc)) from None
        for member, chunks in buffers.items():
            if chunks:
                ctx.sink.append_bytes(folded(member), b"".join(chunks))
        for member, (_t, data) in latest.items():
            ctx.sink.write_bytes(folded(member), data)
        records = sum(s[0] for s in spans.values())
        ctx.sink.write_json(PROVENANCE, {
            "ring": str(root),
            "writer": writer,
            "window": {"since": iso_from_unix(since), "until": iso_from_unix(until), "t_since": since,
                       "t_until": until, "selected_by": "wall time of each record; state (write records) "
                       "as of the capture start"},
            "segments": reader.report.segments,
            "problems": reader.report.problems,
            "members": {m: {"records": s[0], "op": s[3], "first": iso_from_unix(s[1]), "last": iso_from_unix(s[2])}
                        for m, s in sorted(spans.items())},
            **({"left_out_from": cut} if cut else {}),
        })
        for problem in reader.report.problems:
            ctx.partial(f"ring: {problem}")
        if not records:
            ctx.note(f"ring at {root}: no records between {iso_from_unix(since)} and {iso_from_unix(until)}")
        else:
            ctx.note(f"ring at {root}: {records} records from {len(reader.report.segments)} segments, "
                     f"{iso_from_unix(since)} .. {iso_from_unix(until)}")


COLLECTOR = RingFold()
