"""The live state's cgroup part: ``cgroup/samples.jsonl`` lines folded into per-cgroup rates.

:class:`CgroupFold` keeps, per cgroup path, its last reading (``nr_periods``, ``nr_throttled``,
the PSI ``*_total_usec`` counters, the host's ``/proc/pressure`` on the root's line) and the row
derived from it and the reading before: ``(path, container id, t, throttled %, PSI %)``, the
shares over the interval between the two readings, however long (a cgroup sampler that sends
nothing for a quiet cgroup reads it again later: the next row covers the whole quiet interval).

Work per tick is proportional to the lines received, and a line whose counters did not change
since that cgroup's last line costs no JSON parse: the cgroups collector writes each line as
``{"cgroup": P, ["errors": E, ]"t": T, "tick": N, "time": ISO, "values": V}`` (sorted keys), and
a line whose text outside ``t``/``tick``/``time`` is the same as the cgroup's last one has the same
counters (the reading then differs only in its time). Any other line (another layout, other
keys between ``time`` and ``values``) is parsed whole. The rows received since the triggers last
looked are kept apart (:meth:`CgroupFold.take_fresh`) with the newest reading time (the cgroup
sampler's clock), so an evaluation reads what changed, not every cgroup.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["PSI_KEYS", "PSI_RESOURCES", "CgroupFold", "Row", "cgroup_summary", "psi_dict", "psi_shares", "psi_totals"]

PSI_RESOURCES = ("cpu", "memory", "io")
PSI_KEYS = tuple((res, kind) for res in PSI_RESOURCES for kind in ("some", "full"))
_NUMBER = (int, float)
_INT = {int}
_Totals = tuple[float | None, ...]  # PSI *_total_usec in PSI_KEYS order
_Pcts = tuple[float | None, ...]  # PSI stall shares (%) in PSI_KEYS order
_NO_STALL: _Pcts = (0.0,) * len(PSI_KEYS)
#: (path, container id, t, throttled %, PSI % in PSI_KEYS order or ())
Row = tuple[str, str | None, float, float | None, _Pcts]
_T, _TICK, _TIME, _VALUES = ', "t": ', '"tick": ', '"time": ', ', "values": '


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


def _middle_t(line: str, i: int, j: int) -> float | None:
    """``t`` of ``line[i:j]`` when that is ``, "t": T, "tick": N, "time": "ISO"`` (those three keys,
    nothing else, up to ``, "values": ``), else None."""
    middle = line[i:j]
    if middle.count('"') != 8 or _TICK not in middle or _TIME not in middle or not line.startswith(_VALUES, j):
        return None
    try:
        return float(line[i + len(_T):line.find(",", i + len(_T))])
    except ValueError:
        return None


class CgroupFold:
    """See the module docstring. ``loads`` parses one JSON line; ``container_id`` a path's
    container (cached here per path)."""

    def __init__(self, loads: Callable[[str], Any], container_id: Callable[[str], str | None],
                 max_cgroups: int = 20_000, forget_s: float = 600.0) -> None:
        self.loads = loads
        self.container_id = container_id
        self.max_cgroups = max_cgroups
        self.forget_s = forget_s
        # path -> [t, nr_periods, nr_throttled, PSI totals, row or None, container id]
        self._cg: dict[str, list[Any]] = {}
        # a line's text before t -> the last line parsed with it and the reading it gave
        self._text: dict[str, tuple[str, tuple[Any, ...]]] = {}
        self._fresh: dict[str, Row] = {}
        self.clock = 0.0  # the newest reading's time
        self.gen = 0  # bumped per reading folded
        self.parsed = 0  # lines parsed (the others had the counters of their cgroup's last line)
        self._host_cur: tuple[float, _Totals] | None = None
        self._host_prev: tuple[float, _Totals] | None = None
        self._rows: tuple[int, tuple[Row, ...]] = (-1, ())
        self._swept = 0.0  # the clock at the last _forget

    # -- feeding -------------------------------------------------------------------------------
    def lines(self, data: str) -> None:
        """A record's bytes (decoded): one line per cgroup."""
        text, loads = self._text, self.loads
        for line in data.split("\n"):
            if not line:
                continue
            i = line.find(_T)
            head = line[:i] if i > 0 else None
            if head is not None and (known := text.get(head)) is not None:
                last, reading = known  # this cgroup's last line parsed (the same text before t)
                j = last.find(_VALUES, i)
                end = len(line) - (len(last) - j)
                if j > 0 and end > i and line.endswith(last[j:]) and (t := _middle_t(line, i, end)) is not None:
                    self.reading(reading[0], t, *reading[1:])  # the same counters
                    continue
            try:
                obj = loads(line)
            except ValueError:
                continue
            got = _reading(obj) if type(obj) is dict else None
            if got is None:
                continue
            self.parsed += 1
            reading = (got[0], *got[2:])
            self.reading(got[0], got[1], *got[2:])
            if head is not None:
                if len(text) >= self.max_cgroups:
                    text.clear()
                text[head] = (line, reading)

    def summaries(self, summaries: Iterable[list[Any]]) -> None:
        for path, t, periods, throttled, totals, host in summaries:
            self.reading(path, t, periods, throttled, tuple(totals), None if host is None else tuple(host))

    def reading(self, path: str, t: float, periods: Any, throttled: Any, totals: _Totals,
                host: _Totals | None) -> None:
        """One cgroup's counters at ``t`` (``host``: the host's PSI totals, on the root's line)."""
        c = self._cg.get(path)
        if c is None:
            if len(self._cg) >= self.max_cgroups:
                self._forget(t)
            self._cg[path] = [t, periods, throttled, totals, None, self.container_id(path)]
        else:
            dt = t - c[0]
            if dt > 0:
                pct = None
                if type(periods) is int and type(throttled) is int and type(c[1]) is int and type(c[2]) is int:
                    dp, dth = periods - c[1], throttled - c[2]
                    pct = 100.0 * dth / dp if dp > 0 and dth >= 0 else (0.0 if dp == 0 else None)
                row: Row = (path, c[5], t, pct, psi_shares(c[3], totals, dt))
                self._fresh[path] = c[4] = row
            elif dt < 0:
                c[4] = None  # the clock went back: nothing compares until the next reading
            c[0], c[1], c[2], c[3] = t, periods, throttled, totals
        if host is not None:
            self._host_prev, self._host_cur = self._host_cur, (t, host)
        if t > self.clock:
            self.clock = t
            if t - self._swept >= self.forget_s / 4:
                self._forget(t)
        self.gen += 1

    def _forget(self, now: float) -> None:
        """Containers come and go: forget the cgroups not sampled for ``forget_s`` (swept every
        quarter of it, and whenever ``max_cgroups`` are kept), so what is kept is the cgroups of
        the last ``forget_s``, not every cgroup ever sampled."""
        self._swept = now
        cg = self._cg = {p: c for p, c in self._cg.items() if c[0] > now - self.forget_s}
        self._fresh = {p: r for p, r in self._fresh.items() if p in cg}
        self._text = {h: v for h, v in self._text.items() if v[1][0] in cg}
        self.gen += 1  # rows() derived again without the forgotten

    # -- reading -------------------------------------------------------------------------------
    def rows(self) -> tuple[Row, ...]:
        """Every cgroup's latest row (sampled twice or more), by path (derived once per change)."""
        gen, rows = self._rows
        if gen != self.gen:
            rows = tuple(c[4] for _, c in sorted(self._cg.items()) if c[4] is not None)
            self._rows = (self.gen, rows)
        return rows

    def take_fresh(self) -> list[Row]:
        """The rows that came since the last call (one per cgroup: its newest)."""
        out = list(self._fresh.values())
        self._fresh = {}
        return out

    def host_psi(self) -> dict[str, dict[str, float]]:
        cur, prev = self._host_cur, self._host_prev
        if cur is None or prev is None or not cur[0] > prev[0]:
            return {}
        return psi_dict(psi_shares(prev[1], cur[1], cur[0] - prev[0]))

    def host_t(self) -> float | None:
        return self._host_cur[0] if self._host_cur is not None else None


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
