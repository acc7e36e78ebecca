"""The flight recorder's history inside a bundle, read by the ordinary loaders.

``capture --since`` carries the ring's own segments (``ring/segments/seg-N.jsonl.gz``, sealed, their
SHA-256 the ring index's; ``seg-N.jsonl``, the active one's whole lines) with ``ring/provenance.json``.
:func:`ring_view` rebuilds from them the members the recorder's collectors wrote, under ``ring/``
with the bundle's own layout (``ring/nvml/samples.jsonl``, ``ring/proc/<pid>/cgroup``,
``ring/docker/containers/<id>/inspect.json``...): the records whose wall time is in the provenance's
window, appends concatenated in the order written, each write member as of the capture start
(``forensics.ring.reader.window_records``, the ring reader's own definition, so the bytes are the
ones a fold into whole members wrote). It gives the loaders a
:class:`~forensics.analysis.source.Source` that sees those members under their usual names, so
ring samples and capture samples land in the model as one series; every evidence it builds names
the rebuilt member (``ring/...``) and line, and says which segment record it was rebuilt from
(``derived_from``: the segment member and its line, and whether its SHA-256 was checked against
the provenance: not where the bundle has no readable ``ring/provenance.json``).

The rebuilt members are not held (forensics.analysis.ring_members): of each record the view keeps
where it lies (the byte offset its data starts at in the member, its segment record, run and time);
a member bigger than the view holds (a quarter of ``ReadLimits.held_total_bytes``) is rebuilt again
from its segments when a loader reads it, one segment at a time (``read_chunks``, and ``read_at``
for a quoted line: the one segment holding it), so what the view holds of it is at most one
segment's records, not the hundreds of MB an hour of samples rebuilds.

A segment is untrusted input: its hash is checked against the provenance by the bundle's one check
(forensics.bundle.verify.segment_faults: a mismatch, or a segment the provenance does not list,
leaves it out; analyze's integrity limitation states the fact, so the view does not again), its
inflation and the rebuilt bytes are capped by the bundle reader's limits, a broken line is a
problem in the report (a whole line that is not a record is skipped and named, the records after it
read). The caps: a segment's text at most ``max_member_bytes`` (the inflation bomb: each time it is
decoded), the text of all segments at most twice ``max_total_bytes``, and the bytes rebuilt, as
what change-only lines may rebuild, at most ``max_total_bytes``. Since the rebuilt bytes are not held,
``max_total_bytes`` no longer protects the memory from them (``held_*`` and one segment do): it
bounds the work, the bytes the loaders parse and the decoder makes, and it stays what it was so the
same bundle under the same limits reads the same records (and says the same of what it left out).
Bundles of earlier versions hold the ``ring/`` members whole: they are read as they are.

A :class:`HistoryPart` asks for one part of the history (forensics.analysis.slices cuts a long one
into slices): the records of its window only, from the segments that can hold them, the state as of
its end (from the parts before it too), evidence numbered as the whole history's member is.
"""

from __future__ import annotations

import hashlib
import math
from bisect import bisect_right
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from forensics.analysis.findings import Evidence, EvidenceRef
from forensics.analysis.ring_members import RingMembers
from forensics.analysis.source import Source
from forensics.bundle.format import iso_from_unix
from forensics.bundle.reader import ReadLimits
from forensics.bundle.verify import segment_faults
from forensics.errors import RingError
from forensics.ring.reader import DecodeBudget, window_records
from forensics.ring.segment import SegmentTooLarge, segment_text, valid_prefix
from forensics.specs.ring import PREFIX as RING_PREFIX
from forensics.specs.ring import PROVENANCE, SEGMENTS

__all__ = ["RING_PREFIX", "HistoryPart", "RebuiltRing", "RingSource", "Window", "history_spans", "rebuild_ring",
           "ring_view"]

#: a part of the ring's history: wall times [t0, t1), t1 None: to the provenance window's end (inclusive)
Window = tuple[float, float | None]
#: write members as of some time: member -> its bytes and the segment record they were rebuilt from
State = dict[str, tuple[bytes, tuple[str, int]]]


@dataclass
class HistoryPart:
    """One part of a ring's history to rebuild (forensics.analysis.slices cuts a long one): its
    window, and what the parts before it leave it: each appended member's lines in them (evidence
    numbers a line as the whole history's member does) and the state as of their end (a member the
    ring stopped copying at its segments' tops, the recorder's state cap reached, is still known, as
    it is to a view of the whole history)."""

    window: Window
    line_base: dict[str, int] = field(default_factory=dict)
    state: State = field(default_factory=dict)


@dataclass
class RebuiltRing:
    """The ``ring/<member>`` members rebuilt from a bundle's segments (names without ``ring/``), and
    where each record's lines came from."""

    #: by name: the small ones held, the others rebuilt again when read (:class:`RingMembers`)
    members: Mapping[str, bytes] = field(default_factory=dict)
    #: member -> (first line of each record in the member, (segment member, record line) of each)
    origins: dict[str, tuple[list[int], list[tuple[str, int]]]] = field(default_factory=dict)
    segments: list[str] = field(default_factory=list)  # the segment members used, in order
    problems: list[str] = field(default_factory=list)
    #: member -> the recorder run (its id) that appended each record, in ``origins``' order; and each
    #: run's boot time: wall minus monotonic clock at its latest appended record (a run's clock
    #: stepped since boot, NTP setting it right, is taken as set right for all the run's records).
    #: A kernel record's microseconds since boot are of the boot of the run that followed it.
    runs: dict[str, list[str]] = field(default_factory=dict)
    run_boots: dict[str, float] = field(default_factory=dict)
    #: member -> wall times of its first and last record appended in the window (the write members,
    #: the state repeated at every segment's top, have none: they say nothing of when it was sampled)
    spans: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: the segment members read without their SHA-256 checked (no readable provenance to check it against)
    unverified: set[str] = field(default_factory=set)
    #: of a part of the history: the write members as of its end, with their origins, and the
    #: appended members' lines (what the next part starts from)
    state: State = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)

    def origin(self, member: str, line: int) -> tuple[str, int] | None:
        """The segment record that line ``line`` (1-based; 0: the first) of ``member`` was rebuilt from."""
        found = self.origins.get(member)
        if not found:
            return None
        starts, where = found
        k = bisect_right(starts, max(line, 1)) - 1
        return where[max(k, 0)]

    def boot_time(self, member: str, line: int) -> float | None:
        """The boot time of the recorder run whose record holds line ``line`` of ``member``
        (:attr:`run_boots`; None for a member not appended, or a run with no plausible clock)."""
        found = self.origins.get(member)
        runs = self.runs.get(member)
        if not found or not runs:
            return None
        k = bisect_right(found[0], max(line, 1)) - 1
        boot = self.run_boots.get(runs[max(k, 0)])
        return boot if boot is not None and math.isfinite(boot) else None


def _window(prov: Any) -> tuple[float | None, float | None]:
    window = prov.get("window") if isinstance(prov, dict) else None
    if not isinstance(window, dict):
        return None, None
    since, until = window.get("t_since"), window.get("t_until")
    ok = [v if isinstance(v, int | float) and not isinstance(v, bool) else None for v in (since, until)]
    return ok[0], ok[1]


def _listed(prov: Any) -> dict[str, dict[str, Any]]:
    segs = prov.get("segments") if isinstance(prov, dict) else None
    return {e["member"]: e for e in segs or [] if isinstance(e, dict) and isinstance(e.get("member"), str)} \
        if isinstance(segs, list) else {}


def _when(t: float) -> str:
    """``t`` (a segment's, untrusted) as ISO time, or as the number it is when it is none."""
    try:
        return iso_from_unix(t)
    except (ValueError, OverflowError, OSError):
        return f"t={t!r}"


def rebuild_ring(src: Source, limits: ReadLimits | None = None, part: HistoryPart | None = None) -> RebuiltRing:
    """The members rebuilt from ``src``'s segment members (see the module's docstring); with
    ``part`` only the records of its window (:func:`_in_window`), the state from its own."""
    limits = limits or getattr(src.bundle, "limits", None) or ReadLimits()  # the bundle's, as read
    out = RebuiltRing()
    prov = src.json(PROVENANCE)
    listed = _listed(prov)
    since, until = _window(prov)
    name = src.name
    present = sorted(m for m in src.members if m.startswith(SEGMENTS))
    left_out = _check(src, present, out)
    order = [m for m in listed if m in src.members] + [m for m in present if m not in listed]
    if part is not None:
        since, until, order = _in_window(part.window, since, until, order, listed)
    store = RingMembers(src.bundle, limits, since, until, out.origins)  # where each record lies, not its bytes
    lines_so_far: dict[str, int] = {}
    latest: State = dict(part.state) if part is not None else {}  # (a part's: the next one starts from it)
    for m, (data, origin) in latest.items():
        store.carry(m, data, origin)
    total = sum(len(data) for data, _ in latest.values())
    decode = DecodeBudget(limits.max_total_bytes)  # what change-only lines rebuild, in all segments
    inflate_left = 2 * limits.max_total_bytes  # the text of all segments (records outside the window too)
    for member in order:
        seg = member.rsplit("/", 1)[-1]
        if member in left_out:
            continue
        try:
            data = src.bundle.read_bytes(member)
        except Exception as exc:  # the reader's BundleError: noted, the rest goes on
            out.problems.append(f"{name}: cannot read {member}: {exc}")
            continue
        cap = min(limits.max_member_bytes, inflate_left)
        try:  # one segment's text at a time, at most a member's size (the rebuilt bytes are capped below)
            text = segment_text(bytes(data), seg.endswith(".gz"), cap)
        except SegmentTooLarge as exc:
            if cap == limits.max_member_bytes:
                out.problems.append(f"{name}: {member}: {exc}: its records are left out")
                continue
            out.problems.append(f"{name}: the ring segments' text passes {2 * limits.max_total_bytes} bytes in "
                                f"all (twice the reader's cap) at {member}: it and the segments after it are "
                                "left out")
            break
        except RingError as exc:
            out.problems.append(f"{name}: {member}: {exc}: its records are left out")
            continue
        inflate_left -= len(text)
        good, lines, skipped = valid_prefix(text)
        if good < len(text):
            out.problems.append(f"{name}: {member}: {len(text) - good} bytes after line "
                                f"{len(lines) + len(skipped)} are not whole ring records: left out")
        del text
        if not lines:
            out.problems.append(f"{name}: {member}: not a ring segment (no header line): left out")
            continue
        out.segments.append(member)
        problems: list[str] = []
        run = str(lines[0][1].get("run", ""))
        store.segment(member, run, lines, not skipped)
        capped = False
        decode.left = min(decode.left, limits.max_total_bytes - total)
        for rec in window_records(member, lines, run, since, until, (), True, {}, [], problems, decode, skipped):
            total += len(rec.data)
            if total > limits.max_total_bytes:
                problems.append(f"the ring members rebuilt from the segments pass the reader's cap "
                                f"({limits.max_total_bytes} bytes): records from {_when(rec.t)} "
                                f"({member} line {rec.line}) on are left out")
                capped = True
                break
            origin = (member, rec.line)
            if rec.op == "write":  # the state, copied into every segment: only the latest copy is kept
                total -= store.write_size(rec.member)
                store.write(rec)
                if part is not None:
                    latest[rec.member] = (rec.data, origin)
                continue
            first = lines_so_far.get(rec.member, 0) + 1
            lines_so_far[rec.member] = first - 1 + rec.data.count(b"\n")
            store.append(rec)
            starts, where = out.origins.setdefault(rec.member, ([], []))
            starts.append(first)
            where.append(origin)
            out.runs.setdefault(rec.member, []).append(rec.run)
            if rec.mono >= 0:  # else its boot would be after it: not a time
                out.run_boots[rec.run] = rec.t - rec.mono  # appended in order: the run's latest last
            span = out.spans.get(rec.member)
            out.spans[rec.member] = (rec.t, rec.t) if span is None else (min(span[0], rec.t), max(span[1], rec.t))
        out.problems.extend(f"{name}: {p}" for p in problems)
        if capped or decode.passed:
            break
    store.close()  # a write is the member as of the capture start
    out.members = store
    out.state = latest
    out.lines = lines_so_far
    return out


def _in_window(window: Window, since: float | None, until: float | None, order: list[str],
               listed: dict[str, dict[str, Any]]) -> tuple[float | None, float | None, list[str]]:
    """The provenance window ``[since, until]`` cut to ``window``, and the segments that can hold its
    records: from the first whose last record (the provenance's ``t_last``) is at or after ``t0`` to
    the first whose last record is at or after ``t1``. A segment's records are written in time order,
    so one ending before ``t0`` holds none of the window's (the state it held is copied at the next
    one's top), and one after the segment that passes ``t1`` would bring only a later state. A
    segment the provenance does not time is read."""
    t0, t1 = window
    since = t0 if since is None else max(since, t0)
    if t1 is not None:
        end = math.nextafter(t1, -math.inf)  # the window's end is not in it: the next slice's
        until = end if until is None else min(until, end)
    kept: list[str] = []
    for m in order:
        raw = listed.get(m, {}).get("t_last")
        last = float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else None
        if last is not None and last < t0:
            continue
        kept.append(m)
        if last is not None and t1 is not None and last >= t1:
            break
    return since, until, kept


def _check(src: Source, present: list[str], out: RebuiltRing) -> set[str]:
    """The segments left out, by the one check of segments against their provenance
    (forensics.bundle.verify.segment_faults): the bundle's integrity check's, when it ran (then its
    limitation states each fact and what is done about it, and the view does not state it again),
    else made here and stated here. The segments a fault reads unverified (no readable provenance:
    its member "", all of them) are ``out.unverified``, so their evidence does not claim a check."""
    checked = src.integrity
    if checked is not None:
        faults = checked.segments
        stated = set(checked.problems)
    else:
        found: dict[str, tuple[str, int]] = {}
        for m in present:
            try:
                data = src.bundle.read_bytes(m)
            except Exception:  # noqa: BLE001 - named when the segments are read
                continue
            found[m] = (hashlib.sha256(data).hexdigest(), len(data))
        try:
            prov: bytes | None = src.bundle.read_bytes(PROVENANCE) if PROVENANCE in src.members else None
        except Exception:  # noqa: BLE001 - unreadable: as missing, and said to be
            prov = None
        faults = [f for f in segment_faults(prov, found) if f.member == "" or f.member in found
                  or f.member not in present]  # an unreadable segment is named when it is read
        stated = set()
    for f in faults:
        if f.problem not in stated:
            out.problems.append(f"{src.name}: {f.stated()}")
        if not f.left_out:
            out.unverified.update(present if f.member == "" else [f.member])
    return {f.member for f in faults if f.left_out}


def history_spans(view: RingSource) -> dict[str, tuple[float, float] | None]:
    """The sources' member folders the view holds history of (``ring/nvml/``), with the wall
    times of the first and last record appended in the window; of a view rebuilt from segments only
    the folders with appended records (a write member is the state every segment repeats: it is
    there hours after its source stopped), of an older capture's whole members every folder (no
    span: not known)."""
    out: dict[str, tuple[float, float] | None] = {}
    if view.rebuilt is None:
        for m in view.members:
            if "/" in m:
                out[view.prefix + m.split("/", 1)[0] + "/"] = None
        return out
    for m, (first, last) in view.rebuilt.spans.items():
        if "/" not in m:
            continue
        folder = view.prefix + m.split("/", 1)[0] + "/"
        had = out.get(folder)
        out[folder] = (first, last) if had is None else (min(had[0], first), max(had[1], last))
    return out


class _PrefixBundle:
    def __init__(self, bundle: Any, prefix: str) -> None:
        self._bundle = bundle
        self._prefix = prefix

    @property
    def manifest(self) -> dict[str, Any]:
        m = self._bundle.manifest
        return m if isinstance(m, dict) else {}

    def read_bytes(self, member: str) -> bytes:
        data: bytes = self._bundle.read_bytes(self._prefix + member)
        return data


class _RebuiltBundle(_PrefixBundle):
    """The rebuilt members first, then the bundle's own ``ring/`` members (an older layout's); a
    rebuilt member not held is read in pieces (``read_chunks``, ``read_at``: Source prefers them)."""

    def __init__(self, bundle: Any, prefix: str, rebuilt: RebuiltRing) -> None:
        super().__init__(bundle, prefix)
        self.rebuilt = rebuilt

    def read_bytes(self, member: str) -> bytes:
        if member in self.rebuilt.members:
            return self.rebuilt.members[member]
        return super().read_bytes(member)

    def read_chunks(self, member: str) -> Iterator[bytes]:
        members = self.rebuilt.members
        if isinstance(members, RingMembers) and member in members:
            return members.chunks(member)
        return iter((self.read_bytes(member),))

    def read_at(self, member: str, offset: int, length: int) -> bytes:
        members = self.rebuilt.members
        if isinstance(members, RingMembers) and member in members:
            return members.read_at(member, offset, length)
        data = self.read_bytes(member)
        return bytes(data[offset:offset + length])


class RingSource(Source):
    """A Source over the ``ring/`` members of another (rebuilt from its segments, or the members an
    older capture wrote whole), evidence named by their paths in the bundle."""

    def __init__(self, src: Source, prefix: str = RING_PREFIX, part: HistoryPart | None = None) -> None:
        self.rebuilt: RebuiltRing | None = None
        #: member -> its lines before the part's window: evidence numbers a line as the whole
        #: history's member does
        self.line_base = part.line_base if part is not None else {}
        own = [m[len(prefix):] for m in src.members
               if m.startswith(prefix) and not m.startswith(SEGMENTS) and m != PROVENANCE]
        if any(m.startswith(SEGMENTS) for m in src.members):
            self.rebuilt = rebuild_ring(src) if part is None else rebuild_ring(src, part=part)
            if own:
                src.problems.append(f"{src.name}: {len(own)} ring member(s) beside the ring segments "
                                    f"(such as ring/{sorted(own)[0]}): read only where no segment rebuilds them")
            bundle: _PrefixBundle = _RebuiltBundle(src.bundle, prefix, self.rebuilt)
            names = set(own) | set(self.rebuilt.members)
        else:
            bundle = _PrefixBundle(src.bundle, prefix)
            names = {m[len(prefix):] for m in src.members if m.startswith(prefix)}
        super().__init__(bundle, src.name, names)
        self.prefix = prefix
        self.problems = src.problems  # one list: the bundle's problems
        if self.rebuilt is not None:
            self.problems.extend(self.rebuilt.problems)

    def real_bytes(self, member: str) -> bytes | None:
        """The bytes of ``member`` (its path in the bundle, ``ring/...``) as this view reads them."""
        rel = member.removeprefix(self.prefix)
        if member == rel or rel not in self.members:
            return None
        try:
            return self.bundle.read_bytes(rel)
        except Exception:
            return None

    def boot_time_at(self, member: str, line: int) -> float | None:
        """The boot time of the recorder run that appended line ``line`` of ``member`` (its name
        in this view), where the view was rebuilt from segments; else None."""
        return None if self.rebuilt is None else self.rebuilt.boot_time(member, line)

    def derived(self, ev: Evidence, line: int) -> Evidence:
        """``ev`` (its member the bundle path) with the segment record its member's line came from,
        and whether that segment's SHA-256 was checked against the provenance."""
        if self.rebuilt is None:
            return ev
        rel = ev.member.removeprefix(self.prefix)
        origin = self.rebuilt.origin(rel, line - self.line_base.get(rel, 0) if line else line)
        if not origin:
            return ev
        return replace(ev, derived_from=origin, derived_verified=origin[0] not in self.rebuilt.unverified)

    def _real(self, ev: Evidence, line: int = 0) -> Evidence:
        base = self.line_base.get(ev.member, 0) if line else 0
        if base:  # the line as the whole history's member numbers it
            line += base
            ev = replace(ev, locator=f"line {line}")
        return self.derived(replace(ev, member=self.prefix + ev.member), line)

    def ev_pointer(self, member: str, pointer: str, doc: Any = None) -> Evidence:
        return self._real(super().ev_pointer(member, pointer, doc))

    def ev_line(self, member: str, line_no: int, raw: str | bytes | None = None) -> Evidence:
        return self._real(super().ev_line(member, line_no, raw), line_no)

    def ev_member(self, member: str, excerpt: str) -> Evidence:
        return self._real(super().ev_member(member, excerpt))

    def ev_text(self, member: str, locator: str, excerpt: str) -> Evidence:
        return self._real(super().ev_text(member, locator, excerpt))

    def ref(self, member: str, line: int, payload: Any, *paths: tuple[str | int, ...],
            pointer: str = "") -> EvidenceRef:
        r = super().ref(member, line, payload, *paths, pointer=pointer)
        base = self.line_base.get(member, 0) if line else 0
        # quoted, it asks derived() where it came from
        return r._replace(member=self.prefix + r.member, line=line + base) if base else r._replace(
            member=self.prefix + r.member)

    def line_at(self, member: str, offset: int) -> bytes:
        return super().line_at(member.removeprefix(self.prefix), offset)


def ring_view(src: Source, part: HistoryPart | None = None) -> RingSource | None:
    """The bundle's ring history as a Source, or None when the capture folded in no ring; ``part``:
    only that part of it (:class:`HistoryPart`; where the bundle carries the segments: the whole
    members of an older capture are read whole)."""
    if not any(m.startswith(RING_PREFIX) for m in src.members):
        return None
    return RingSource(src, part=part)
