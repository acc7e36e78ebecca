"""The live state's cgroup part: ``cgroup/samples.jsonl`` lines folded into per-cgroup rates.

Every figure the triggers read from these lines is a share of two cumulative counters
(``nr_throttled``/``nr_periods``, PSI ``*_total_usec`` / wall time), so the shares between two
readings are the same whatever lines came between: :class:`CgroupFold` keeps each cgroup's newest
line as text as it comes (a dict store, keyed by the line's text before ``t``: no parse) and folds
them only when someone reads (:meth:`CgroupFold.fold`, called by every reader). Per cgroup path it
then keeps its last reading folded (``nr_periods``, ``nr_throttled``, the PSI totals, the host's
``/proc/pressure`` on the root's line) and the one before: :meth:`CgroupFold.rows` gives
``(path, container id, t, throttled %, PSI %)``, the shares between those two, however far apart
(a cgroup sampler that sends nothing for a quiet cgroup reads it again later: the next row covers
the whole quiet interval; a reader that reads every 10 s gets 10 s shares).

Folding, a line whose counters did not change since that cgroup's last parsed line costs no JSON
parse: the cgroups collector writes each line as ``{"cgroup": P, ["errors": E, ]"t": T, "tick": N,
"time": ISO, "values": V}`` (sorted keys), and a line whose text outside ``t``/``tick``/``time`` is
the same as the cgroup's last one has the same counters (the reading then differs only in its
time). Any other line (another layout, other keys between ``time`` and ``values``) is parsed
whole. The triggers read apart (:meth:`CgroupFold.take_fresh`): each cgroup read since their last
look, with its shares over the whole interval since its reading then (their own base, whoever
else read between), and the host's; :attr:`CgroupFold.newest` is the newest line's time, kept
without a parse (the cgroup sampler's clock, for deciding when to look).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from typing import Any

__all__ = ["PSI_KEYS", "PSI_RESOURCES", "CgroupFold", "FreshRow", "Row", "cgroup_summary", "psi_dict", "psi_shares", "psi_totals"]

PSI_RESOURCES = ("cpu", "memory", "io")
PSI_KEYS = tuple((res, kind) for res in PSI_RESOURCES for kind in ("some", "full"))
_NUMBER = (int, float)
_INT = {int}
_Totals = tuple[float | None, ...]  # PSI *_total_usec in PSI_KEYS order
_Pcts = tuple[float | None, ...]  # PSI stall shares (%) in PSI_KEYS order
_NO_STALL: _Pcts = (0.0,) * len(PSI_KEYS)
#: (path, container id, t, throttled %, PSI % in PSI_KEYS order or ())
Row = tuple[str, str | None, float, float | None, _Pcts]
#: (path, container id, from, t, throttled %, PSI %): a cgroup's shares over (from, t]
FreshRow = tuple[str, str | None, float, float, float | None, _Pcts]
_Full = tuple[Any, ...]  # a reading: (path, t, nr_periods, nr_throttled, PSI totals, host PSI totals or None)
_T, _TICK, _TIME, _VALUES = b', "t": ', b'"tick": ', b'"time": ', b', "values": '
_UU = b', "unchanged_until": '  # after quiet ticks, between the cgroup and t: not part of a line's key


def cgroup_summary(line: dict[str, Any]) -> list[Any] | None:
    """``[path, t, nr_periods, nr_throttled, PSI totals, host PSI totals or None]`` of a cgroup line."""
    got = _reading(line)
    if got is None:
        return None
    path, t, periods, throttled, totals, host = got
    return [path, t, periods, throttled, list(totals), None if host is None else list(host)]


def _reading(line: dict[str, Any]) -> tuple[str, float, Any, Any, _Totals, _Totals | None] | None:
    """:func:`cgroup_summary` as tuples (what the fold keeps)."""
    path, values, t = line.get("cgroup"), line.get("values"), line.get("t")
    if type(path) is not str or type(values) is not dict or not isinstance(t, float | int):
        return None
    cpu = values.get("cpu")
    if type(cpu) is dict:
        periods, throttled = cpu.get("nr_periods"), cpu.get("nr_throttled")
    else:
        periods = throttled = None
    host = values.get("host_pressure")
    return path, float(t), periods, throttled, psi_totals(values.get("pressure")), \
        psi_totals(host) if type(host) is dict else None


def _middle_t(line: bytes, i: int, j: int) -> float | None:
    """``t`` of ``line[i:j]`` when that is ``, "t": T, "tick": N, "time": "ISO"`` (those three keys,
    nothing else, up to ``, "values": ``), else None."""
    middle = line[i:j]
    if middle.count(b'"') != 8 or _TICK not in middle or _TIME not in middle or not line.startswith(_VALUES, j):
        return None
    try:
        return float(line[i + len(_T):line.find(b",", i + len(_T))])
    except ValueError:
        return None


class CgroupFold:
    """See the module docstring. ``loads`` parses one JSON line; ``container_id`` a path's
    container (cached here per path)."""

    def __init__(self, loads: Callable[[bytes], Any], container_id: Callable[[str], str | None],
                 max_cgroups: int = 20_000, forget_s: float = 600.0, quiet_forget_s: float = 60.0) -> None:
        self.loads = loads
        self.container_id = container_id
        self.max_cgroups = max_cgroups
        self.forget_s = forget_s
        self.quiet_forget_s = min(quiet_forget_s, forget_s)
        # the longest interval seen between two readings of one cgroup (the cgroup sampler's
        # cgroups.idle_full_s, 10 s by default, for a quiet one): a cgroup silent for three of
        # them (at least quiet_forget_s, at most forget_s) is gone
        self.longest_gap = 0.0
        # cgroups forgotten in the last forget_s -> their last reading's time: one that comes back
        # tells how long a quiet cgroup can be silent (the gap is learned even when it is longer
        # than the horizon that forgot it)
        self._gone: dict[str, float] = {}
        # path -> [t, nr_periods, nr_throttled, PSI totals, the reading before (a reading, or its
        # line not parsed yet) or None, container id]
        self._by_path: dict[str, list[Any]] = {}
        # a line's text before t -> the last line parsed with it, from its ``, "values": `` on (None:
        # a line without), and the reading it gave
        self._text: dict[bytes, tuple[bytes | None, _Full]] = {}
        # kept, not folded yet: a line's text before t -> its newest line, and -> the one before
        # (where one came); readings (summaries, lines of another layout) by path -> [the newest,
        # the one before or None]
        self._pending: dict[bytes, bytes] = {}
        self._before: dict[bytes, bytes] = {}
        self._pending_readings: dict[str, list[Any]] = {}
        # per path, the reading the last take_fresh compared with (paths read since only)
        self._fresh: dict[str, _Full | bytes] = {}
        self.clock = 0.0  # the newest reading's time (folded)
        self.newest = 0.0  # the newest line's time seen, folded or not (read without a parse)
        self.gen = 0  # bumped per fold that folded a reading
        self.parsed = 0  # lines parsed (the others had the counters of their cgroup's last line)
        self._host_cur: tuple[float, _Totals] | None = None
        self._host_prev: Any = None  # the host's reading before (or the root's line, not parsed yet)
        self._host_base: Any = None  # the host's at the last take_fresh (the same)
        self._rows: tuple[int, tuple[Row, ...]] = (-1, ())
        self._swept = 0.0  # the clock at the last _forget
        self._folded_at = 0.0  # the newest line's time at the last fold

    # -- feeding: kept, not parsed -------------------------------------------------------------
    def lines(self, data: bytes) -> None:
        """A record's bytes: one line per cgroup. Each cgroup's newest line (and the one
        before) is kept as text, keyed by its text before ``t`` (the cgroup, and its errors if
        any), and folded when someone reads (:meth:`fold`). The sampler's record (every line
        with a ``t``, one line per cgroup) is kept with a few dict and set operations, no Python
        step per line but cutting its key."""
        pending = self._pending
        rows = data.split(b"\n")
        if rows and not rows[-1]:
            rows.pop()
        cuts = list(map(bytes.find, rows, repeat(_T, len(rows))))
        new: dict[bytes, bytes] | None = None
        if rows and min(cuts) > 0:
            heads = [ln[:i] for ln, i in zip(rows, cuts, strict=True)]
            if _UU in b"".join(heads):  # after quiet ticks (in the keys only): the same key as the cgroup's other lines
                heads = [h[:u] if (u := h.find(_UU)) > 0 else h for h in heads]
            new = dict(zip(heads, rows, strict=True))
            if len(new) < len(rows):
                new = None  # a cgroup twice in one record: line by line, in order
        last = b""
        if new is not None:
            common = new.keys() & pending.keys()
            if common:
                self._before.update(zip(common, map(pending.__getitem__, common), strict=True))
            pending.update(new)
            last = rows[-1]
        else:
            for line in rows:
                if not line:
                    continue
                i = line.find(_T)
                if i > 0:
                    last = line
                    head = line[:i]
                    if (u := head.find(_UU)) > 0:
                        head = head[:u]  # the same key as the cgroup's other lines
                    was = pending.get(head)
                    if was is not None:
                        self._before[head] = was
                    pending[head] = line
                else:  # another layout: parsed now, folded with the others
                    got = self._parse(line, None)
                    if got is not None:
                        self._keep(got)
        if last:
            i = last.find(_T) + len(_T)
            try:
                t = float(last[i:last.find(b",", i)])
            except ValueError:
                t = 0.0
            if t > self.newest:
                self.newest = t
        if not self._folded_at:
            self._folded_at = self.newest
        if len(pending) >= self.max_cgroups or self.newest - self._folded_at >= self.horizon / 4:
            self.fold()  # nobody read for a quarter of the horizon (no cgroup rule): fold, so gone cgroups are swept

    def summaries(self, summaries: Iterable[list[Any]]) -> None:
        for path, t, periods, throttled, totals, host in summaries:
            self._keep((path, t, periods, throttled, tuple(totals), None if host is None else tuple(host)))
        if len(self._pending_readings) >= self.max_cgroups:
            self.fold()

    def _keep(self, r: _Full) -> None:
        kept = self._pending_readings.get(r[0])
        if kept is None:
            self._pending_readings[r[0]] = [r, None]
        elif not r[1] < kept[0][1]:
            kept[1], kept[0] = kept[0], r
        elif kept[1] is None or r[1] > kept[1][1]:
            kept[1] = r
        if r[1] > self.newest:
            self.newest = r[1]

    def _parse(self, line: bytes, head: bytes | None) -> _Full | None:
        """A line's reading ``(path, t, periods, throttled, totals, host)``, parsed (None: not a
        cgroup line); remembered by ``head`` (its text before ``t``)."""
        try:
            obj = self.loads(line)
        except ValueError:
            return None
        got = _reading(obj) if type(obj) is dict else None
        if got is None:
            return None
        self.parsed += 1
        if head is not None:
            text = self._text
            if len(text) >= self.max_cgroups:
                text.clear()
            j = line.find(_VALUES, line.find(_T))
            text[head] = (line[j:] if j > 0 else None, got)
        return got

    def _line_reading(self, head: bytes, line: bytes) -> _Full | None:
        """A kept line's reading: a line whose text outside ``t``/``tick``/``time`` is its text's
        last parsed line's has the same counters and costs no parse."""
        known = self._text.get(head)
        if known is not None and (tail := known[0]) is not None:
            reading = known[1]
            i = line.find(_T)  # after the key, and after unchanged_until where the line has one
            end = len(line) - len(tail)
            if i > 0 and end > i and line.startswith(tail, end) and (t := _middle_t(line, i, end)) is not None:
                return (reading[0], t, *reading[2:])  # the same counters
        return self._parse(line, head)

    def _resolve(self, before: _Full | bytes | None) -> _Full | None:
        """A reading kept as its line, parsed (once it is needed)."""
        if type(before) is bytes:
            i = before.find(_T)
            return self._line_reading(before[:i], before) if i > 0 else self._parse(before, None)
        return before  # type: ignore[return-value]

    # -- folding: when read ----------------------------------------------------------------------
    def fold(self) -> None:
        """Fold the kept lines and readings: each cgroup's newest is read (its line parsed unless it
        repeats its counters), the one before kept as it is until someone asks for the last
        interval's shares (:meth:`rows`, :meth:`host_psi`)."""
        pending, befores, readings = self._pending, self._before, self._pending_readings
        self._folded_at = self.newest
        if not pending and not readings:
            return
        self._pending, self._before, self._pending_readings = {}, {}, {}
        got: dict[str, tuple[_Full, Any]] = {}
        for head, line in pending.items():
            r = self._line_reading(head, line)
            if r is not None and ((was := got.get(r[0])) is None or r[1] > was[0][1]):
                got[r[0]] = (r, befores.get(head))  # a cgroup's lines of two texts (errors came or went): the newest
        for r, before in readings.values():
            if (was := got.get(r[0])) is None or r[1] > was[0][1]:
                got[r[0]] = (r, before)
        for (path, t, periods, throttled, totals, host), before in got.values():
            self.reading(path, t, periods, throttled, totals, host, before)
        if got:
            self.gen += 1
        if self.clock - self._swept >= self.horizon / 4:  # after the fold: a cgroup read in it is not gone
            self._forget(self.clock)

    def reading(self, path: str, t: float, periods: Any, throttled: Any, totals: _Totals,
                host: _Totals | None, before: _Full | bytes | None = None) -> None:
        """One cgroup's counters at ``t`` (``host``: the host's PSI totals, on the root's line);
        ``before``: the reading that came before it since the last fold, if any (or its line)."""
        c = self._by_path.get(path)
        if c is None:
            if self._gone and (last := self._gone.pop(path, None)) is not None and t - last > self.longest_gap:
                self.longest_gap = min(t - last, self.forget_s)  # a quiet cgroup forgotten too soon
            if len(self._by_path) >= self.max_cgroups:
                self._forget(t)
            self._by_path[path] = [t, periods, throttled, totals, before, self.container_id(path)]
            if before is not None:
                self._fresh[path] = before
        else:
            was = (path, c[0], c[1], c[2], c[3], None)
            if path not in self._fresh:
                self._fresh[path] = was  # what the triggers compare with
            dt = t - c[0]
            if dt > 0:
                c[4] = was if before is None else before
                if dt > self.longest_gap:
                    self.longest_gap = min(dt, self.forget_s)
            elif dt < 0:
                c[4] = None  # the clock went back: nothing compares until the next reading
            c[0], c[1], c[2], c[3] = t, periods, throttled, totals
        if host is not None:
            self._host_prev = self._host_cur if before is None else before
            self._host_cur = (t, host)
            if self._host_base is None:
                self._host_base = self._host_prev
        if t > self.clock:
            self.clock = t

    @property
    def horizon(self) -> float:
        """How long a cgroup may go unsampled before it is taken for gone: three times the longest
        interval seen between two readings of one cgroup (the cgroup sampler reads a living cgroup
        in full, with a line, at least every ``cgroups.idle_full_s``: 10 s by default), at least
        ``quiet_forget_s`` (60 s), at most ``forget_s`` (600 s)."""
        return min(self.forget_s, max(self.quiet_forget_s, 3.0 * self.longest_gap))

    def _forget(self, now: float) -> None:
        """Containers come and go: forget the cgroups not sampled for :attr:`horizon` (swept every
        quarter of it, and whenever ``max_cgroups`` are kept), so what is kept is the cgroups that
        exist now (and those gone in the last minute), not every cgroup ever sampled. A forgotten
        cgroup's path and time are kept for ``forget_s``, so that one sampled again after a longer
        silence lengthens the horizon."""
        self._swept = now
        cutoff = now - self.horizon
        cg: dict[str, list[Any]] = {}
        gone = self._gone
        for p, c in self._by_path.items():
            if c[0] > cutoff:
                cg[p] = c
            else:
                gone[p] = c[0]
        self._by_path = cg
        if gone:
            self._gone = {p: t for p, t in gone.items() if t > now - self.forget_s}
        self._fresh = {p: r for p, r in self._fresh.items() if p in cg}
        self._text = {h: v for h, v in self._text.items() if v[1][0] in cg}
        self.gen += 1  # rows() derived again without the forgotten

    def _host_reading(self, r: Any) -> tuple[float, _Totals] | None:
        if type(r) is bytes or (type(r) is tuple and len(r) == 6):
            full = self._resolve(r)
            return (full[1], full[5]) if full is not None and full[5] is not None else None
        return r  # type: ignore[no-any-return]

    # -- reading -------------------------------------------------------------------------------
    def rows(self) -> tuple[Row, ...]:
        """Every cgroup's row (sampled twice or more): its shares between its last two readings,
        by path (derived once per change)."""
        self.fold()
        gen, rows = self._rows
        if gen != self.gen:
            out = []
            for path, c in sorted(self._by_path.items()):
                if type(c[4]) is bytes:
                    c[4] = self._resolve(c[4])
                if c[4] is not None and (row := _row(path, c[5], c[4], c)) is not None:
                    out.append(row)
            rows = tuple(out)
            self._rows = (self.gen, rows)
        return rows

    def take_fresh(self) -> tuple[list[FreshRow], tuple[float, float, _Pcts] | None]:
        """The cgroups read since the last call, each with its shares over the whole interval since
        its reading then: ``(path, container id, from, t, throttled %, PSI %)``; and the host's PSI
        shares over the same interval ``(from, t, shares)`` (None: nothing to compare). The counters
        are cumulative: the shares between two calls are those between their readings, however
        many lines came between, and whoever else read between."""
        self.fold()
        out: list[FreshRow] = []
        cg = self._by_path
        for path, kept in self._fresh.items():
            c = cg.get(path)
            if c is None or (base := self._resolve(kept)) is None:
                continue
            row = _row(path, c[5], base, c)
            if row is not None:
                out.append((path, c[5], base[1], *row[2:]))
        self._fresh = {}
        host = None
        cur, base_h = self._host_cur, self._host_reading(self._host_base)
        if cur is not None and base_h is not None and cur[0] > base_h[0]:
            host = (base_h[0], cur[0], psi_shares(base_h[1], cur[1], cur[0] - base_h[0]))
        self._host_base = cur
        return out, host

    def host_psi(self) -> dict[str, dict[str, float]]:
        self.fold()
        cur = self._host_cur
        prev = self._host_prev = self._host_reading(self._host_prev)
        if cur is None or prev is None or not cur[0] > prev[0]:
            return {}
        return psi_dict(psi_shares(prev[1], cur[1], cur[0] - prev[0]))

    def host_t(self) -> float | None:
        self.fold()
        return self._host_cur[0] if self._host_cur is not None else None


def _row(path: str, cid: str | None, base: _Full, cur: Sequence[Any]) -> Row | None:
    """A cgroup's row between a reading ``base`` and its folded state ``cur`` (``[t, nr_periods,
    nr_throttled, PSI totals, ...]``; None: the later is not later)."""
    t = cur[0]
    dt = t - base[1]
    if not dt > 0:
        return None
    periods, throttled, p0, th0 = cur[1], cur[2], base[2], base[3]
    pct = None
    if type(periods) is int and type(throttled) is int and type(p0) is int and type(th0) is int:
        dp, dth = periods - p0, throttled - th0
        pct = 100.0 * dth / dp if dp > 0 and dth >= 0 else (0.0 if dp == 0 else None)
    return (path, cid, t, pct, psi_shares(base[4], cur[3], dt))


def psi_totals(pressure: Any) -> _Totals:
    """The cumulative PSI stall times (µs) of a cgroup's or the host's ``pressure`` reading."""
    if type(pressure) is not dict:
        return ()
    try:  # the common reading: every resource, some and full, whole numbers
        c, m, io = pressure["cpu"], pressure["memory"], pressure["io"]
        got = (c["some_total_usec"], c["full_total_usec"], m["some_total_usec"], m["full_total_usec"],
               io["some_total_usec"], io["full_total_usec"])
        if set(map(type, got)) == _INT:
            return got
    except (KeyError, TypeError):
        pass
    out: list[float | None] = []
    for res in PSI_RESOURCES:
        r = pressure.get(res)
        if type(r) is dict:
            some, full = r.get("some_total_usec"), r.get("full_total_usec")
            out.append(some if isinstance(some, _NUMBER) else None)
            out.append(full if isinstance(full, _NUMBER) else None)
        else:
            out += (None, None)
    return tuple(out)


def psi_shares(prev: _Totals, cur: _Totals, dt: float) -> _Pcts:
    """Stall share (%) per :data:`PSI_KEYS` entry between two PSI readings ``dt`` seconds apart
    (None where either reading lacks it or the counter went back; ``()`` when nothing compares)."""
    if not prev or not cur or dt <= 0:
        return ()
    if prev == cur and None not in cur:  # an idle cgroup: nothing stalled
        return _NO_STALL
    span = dt * 1e6
    if None not in prev and None not in cur and len(prev) == len(cur):  # the common reading
        out = [100.0 * (y - x) / span for x, y in zip(prev, cur)]  # type: ignore[operator]  # noqa: B905 - no None, lengths checked
        if 0.0 <= min(out) and max(out) <= 100.0:
            return tuple(out)
        return tuple([None if v < 0 else min(100.0, v) for v in out])
    return tuple([min(100.0, 100.0 * (y - x) / span) if x is not None and y is not None and y >= x else None
                  for x, y in zip(prev, cur, strict=True)])


def psi_dict(shares: _Pcts) -> dict[str, dict[str, float]]:
    """:func:`psi_shares` per resource and some|full (the shares known)."""
    out: dict[str, dict[str, float]] = {}
    for (res, kind), v in zip(PSI_KEYS, shares, strict=False):
        if v is not None:
            out.setdefault(res, {})[kind] = v
    return out
