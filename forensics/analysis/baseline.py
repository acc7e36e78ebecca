"""A workload's own normal: a robust baseline of one series over a trailing window.

Pure arithmetic over ``(t, value)`` points (wall clock, a percentage); no I/O. The recorder keeps
one :class:`BucketSeries` per workload and metric, fed tick by tick (forensics.record.baselines),
and the analysis builds the same series from a bundle's ring history; both ask
:func:`compute_baseline` and get a :class:`Baseline` or an :class:`InsufficientHistory`.

- The series is kept as per-``bucket_s`` means (one minute by default): bounded (at most
  ``lookback`` / ``bucket_s`` buckets) and cheap to add to (one addition per sample).
- The baseline is the **median** of the buckets and their **MAD** (median absolute deviation;
  x 1.4826 the robust spread, a standard deviation for normal data), over the trailing
  ``window_s`` (24 h by default), the current bucket left out (a change is measured against what
  came before it).
- **By time of day** when there is enough history: at least ``tod_min_days`` (3) earlier days
  each with buckets within ``tod_halfwidth_s`` (20 min) of the same UTC time of day, in the last
  ``tod_lookback_days`` (7). Then the baseline is of those buckets only: a nightly job's 02:00
  peak is compared with earlier 02:00s, not with the idle afternoon.
- **Insufficient history**: less than ``min_history_s`` (1 h) between the window's first bucket and
  now (an older run before a gap, outside the window, does not count), or fewer than
  ``min_buckets`` (30) buckets in the window: :class:`InsufficientHistory` says how much
  there is and how much is needed; a baseline rule never judges such a workload.

The band a rule compares with (:meth:`Baseline.band`) is ``median -/+ max(k x spread, min_delta)``:
``k`` robust units (3 by default), never closer than ``min_delta`` percentage points (10), so a
flat series (MAD 0) does not make every wobble a deviation; and widened to the buckets' 1st and
99th percentiles -/+ ``min_delta``: what the series did for more than 1 % of its window (a nightly
job's two hours are 8 % of a day, a job's warm-up minutes recur each run) is its normal, even in
a plain window without time-of-day history.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from forensics.thresholds import AnalysisConfig

__all__ = ["MAD_TO_SIGMA", "Baseline", "BaselineSettings", "BucketSeries", "InsufficientHistory",
           "baseline_of", "baseline_settings", "bucket_means", "compute_baseline", "median", "median_mad"]

MAD_TO_SIGMA = 1.4826
DAY_S = 86400.0


@dataclass(frozen=True)
class BaselineSettings:
    """How a baseline is taken (docs/triggers.md, "Baseline rules"); every field from ``--config``."""

    window_s: float = DAY_S
    min_history_s: float = 3600.0
    min_buckets: int = 30
    bucket_s: float = 60.0
    tod_min_days: int = 3
    tod_halfwidth_s: float = 1200.0
    tod_lookback_days: int = 7
    k: float = 3.0
    min_delta_pct: float = 10.0
    refresh_s: float = 600.0  # a baseline is taken again after this long (sooner: see BucketSeries)

    @property
    def lookback_s(self) -> float:
        """How far back a series is kept: the window, or the time-of-day lookback if longer."""
        return max(self.window_s, self.tod_lookback_days * DAY_S + self.tod_halfwidth_s)


def baseline_settings(cfg: AnalysisConfig) -> BaselineSettings:
    """The settings the thresholds file (``--config``) gives."""
    return BaselineSettings(window_s=cfg.baseline_window_s, min_history_s=cfg.baseline_min_history_s,
                            min_buckets=cfg.baseline_min_buckets, bucket_s=max(cfg.baseline_bucket_s, 1e-3),
                            k=cfg.baseline_k, min_delta_pct=cfg.baseline_min_delta_pct)


@dataclass(frozen=True)
class Baseline:
    """A series' normal: ``median`` and ``mad`` of ``buckets`` bucket means over ``window_s``
    (by time of day when ``days``: the earlier days it was taken from)."""

    median: float
    mad: float
    buckets: int
    window_s: float
    history_s: float
    days: int = 0
    low: float = 0.0  # the 5th and 95th percentiles of the buckets (the "normal range" quoted)
    high: float = 0.0
    p1: float = 0.0  # the 1st and 99th: the band reaches them (module docstring)
    p99: float = 0.0

    @property
    def spread(self) -> float:
        return MAD_TO_SIGMA * self.mad

    @property
    def by_time_of_day(self) -> bool:
        return self.days > 0

    def band(self, k: float, min_delta: float) -> tuple[float, float]:
        half = max(k * self.spread, min_delta)
        return min(self.median - half, self.p1 - min_delta), max(self.median + half, self.p99 + min_delta)

    def deviation(self, value: float) -> float:
        """``value`` in robust units from the median (inf when the spread is 0 and it differs)."""
        if self.spread > 0:
            return (value - self.median) / self.spread
        return 0.0 if value == self.median else math.copysign(math.inf, value - self.median)

    def describe(self) -> str:
        when = (f"at this time of day on {self.days} earlier days" if self.days
                else f"over the last {_span(min(self.history_s, self.window_s))}")
        return f"normal {self.low:.0f}-{self.high:.0f}% (median {self.median:.1f}%, MAD {self.mad:.1f}) {when}"

    def as_dict(self) -> dict[str, float | int | bool]:
        return {"median": round(self.median, 3), "mad": round(self.mad, 3), "spread": round(self.spread, 3),
                "p1": round(self.p1, 3), "p5": round(self.low, 3), "p95": round(self.high, 3),
                "p99": round(self.p99, 3), "buckets": self.buckets,
                "window_s": self.window_s, "history_s": round(self.history_s, 1),
                "by_time_of_day": self.by_time_of_day, "days": self.days}


@dataclass(frozen=True)
class InsufficientHistory:
    """Too little of the series to call anything its normal: how much there is and is needed."""

    history_s: float
    need_s: float
    buckets: int
    need_buckets: int

    def describe(self) -> str:
        return (f"insufficient history: {_span(self.history_s)} of the {_span(self.need_s)} needed "
                f"({self.buckets} of {self.need_buckets} samples)")

    def as_dict(self) -> dict[str, float | int | str]:
        return {"insufficient_history": self.describe(), "history_s": round(self.history_s, 1),
                "need_s": self.need_s, "buckets": self.buckets, "need_buckets": self.need_buckets}


def _span(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def median(values: Sequence[float]) -> float:
    """The median of a non-empty sequence (sorted here)."""
    s = sorted(values)
    n = len(s)
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2.0


def _percentile(s: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile of sorted ``s``."""
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median_mad(values: Sequence[float]) -> tuple[float, float]:
    """The median and the median absolute deviation from it."""
    m = median(values)
    return m, median([abs(v - m) for v in values])


def _tod_distance(a: float, b: float) -> float:
    d = abs((a % DAY_S) - (b % DAY_S))
    return min(d, DAY_S - d)


def compute_baseline(points: Iterable[tuple[float, float]], now: float,
                     settings: BaselineSettings | None = None) -> Baseline | InsufficientHistory:
    """The baseline at ``now`` of bucket means ``(bucket start, mean)`` in time order (see the
    module docstring); buckets at or after the one ``now`` falls in are left out."""
    pts = [(t, v) for t, v in points if math.isfinite(v)]
    return baseline_of([t for t, _ in pts], [v for _, v in pts], now, settings or BaselineSettings())


def baseline_of(ts: Sequence[float], vs: Sequence[float], now: float,
                s: BaselineSettings) -> Baseline | InsufficientHistory:
    """:func:`compute_baseline` over parallel sequences (``ts`` ascending): the slices it needs are
    found by bisection, so the cost is the window's buckets, not the lookback's."""
    current = math.floor(now / s.bucket_s) * s.bucket_s
    first = bisect_left(ts, now - s.lookback_s)
    stop = bisect_left(ts, current)
    history_s = now - ts[first] if stop > first else 0.0
    if s.tod_min_days > 0 and history_s > DAY_S - s.tod_halfwidth_s:
        tod: list[float] = []
        days = 0
        for d in range(1, s.tod_lookback_days + 1):
            lo = bisect_left(ts, now - d * DAY_S - s.tod_halfwidth_s, first, stop)
            hi = bisect_right(ts, now - d * DAY_S + s.tod_halfwidth_s, lo, stop)
            if hi > lo:
                tod.extend(vs[lo:hi])
                days += 1
        if days >= s.tod_min_days and len(tod) >= s.min_buckets:
            return _baseline(tod, s.window_s, history_s, days)
    start = bisect_left(ts, now - s.window_s, first, stop)
    window = list(vs[start:stop])
    # the window's own history (an older run before a gap, outside the window, is not its history)
    window_history_s = now - ts[start] if stop > start else 0.0
    if not window or window_history_s < s.min_history_s or len(window) < s.min_buckets:
        return InsufficientHistory(window_history_s, s.min_history_s, len(window), s.min_buckets)
    return _baseline(window, s.window_s, window_history_s, 0)


def bucket_means(points: Iterable[tuple[float, float]], bucket_s: float) -> list[tuple[float, float]]:
    """``(t, value)`` points in time order as ``(bucket start, mean)``, as :class:`BucketSeries` keeps them."""
    out: list[tuple[float, float]] = []
    cur, total, n = -math.inf, 0.0, 0
    for t, v in points:
        start = t - t % bucket_s
        if start != cur:
            if n:
                out.append((cur, total / n))
            cur, total, n = start, 0.0, 0
        total += v
        n += 1
    if n:
        out.append((cur, total / n))
    return out


def _baseline(values: list[float], window_s: float, history_s: float, days: int) -> Baseline:
    m, mad = median_mad(values)
    ordered = sorted(values)
    return Baseline(m, mad, len(values), window_s, history_s, days, _percentile(ordered, 0.05),
                    _percentile(ordered, 0.95), _percentile(ordered, 0.01), _percentile(ordered, 0.99))


class BucketSeries:
    """One series as per-bucket means, bounded to ``settings.lookback_s``. :meth:`baseline` is
    taken again when the cached one is older than ``max_age_s`` (``settings.refresh_s`` unless
    given; at most once per bucket; an insufficient history once per bucket): a day's normal moves
    little in ten minutes, and a caller that sees a figure outside a cached band asks again with
    ``max_age_s=0`` before it acts on it (forensics.record.triggers.baseline_rules)."""

    __slots__ = ("_cache", "_cur", "_n", "_sum", "_ts", "_vs", "last_t", "settings")

    def __init__(self, settings: BaselineSettings) -> None:
        self.settings = settings
        self._ts: list[float] = []  # the closed buckets' starts and means, in time order
        self._vs: list[float] = []
        self._cur = -math.inf  # the open bucket's start, its sum and count
        self._sum = 0.0
        self._n = 0
        self._cache: tuple[float, Baseline | InsufficientHistory] | None = None
        self.last_t = -math.inf

    def add(self, t: float, value: float) -> None:
        """One sample (samples come in time order; an older one than the last is ignored)."""
        if t < self.last_t or not math.isfinite(value):
            return
        self.last_t = t
        start = t - t % self.settings.bucket_s
        if start != self._cur:
            if self._n:
                self._ts.append(self._cur)
                self._vs.append(self._sum / self._n)
                cap = int(self.settings.lookback_s / self.settings.bucket_s) + 1
                if len(self._ts) > cap + cap // 8:  # trimmed in batches: amortised O(1) per bucket
                    del self._ts[:-cap], self._vs[:-cap]
            self._cur, self._sum, self._n = start, 0.0, 0
        self._sum += value
        self._n += 1

    def points(self) -> list[tuple[float, float]]:
        """The closed buckets ``(start, mean)`` and the open one."""
        out = list(zip(self._ts, self._vs, strict=True))
        if self._n:
            out.append((self._cur, self._sum / self._n))
        return out

    def baseline(self, now: float, max_age_s: float | None = None) -> Baseline | InsufficientHistory:
        s = self.settings
        key = now - now % s.bucket_s
        cached = self._cache
        if cached is not None:
            age = key - cached[0]
            limit = s.refresh_s if max_age_s is None else max_age_s
            if age == 0 or (0 < age <= limit and isinstance(cached[1], Baseline)):
                return cached[1]
        closing = bool(self._n) and self._cur < key  # the open bucket is a past one by now
        if closing:
            self._ts.append(self._cur)
            self._vs.append(self._sum / self._n)
        try:
            got = baseline_of(self._ts, self._vs, now, s)
        finally:
            if closing:
                self._ts.pop()
                self._vs.pop()
        self._cache = (key, got)
        return got
