"""Baselines: the robust arithmetic (median, MAD, by time of day, too little history), the bounded
per-minute series, the baseline rules' grammar, and the rules over a real LiveState, seeded from a
real ring."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from forensics.analysis.baseline import (
    DAY_S,
    Baseline,
    BaselineSettings,
    BucketSeries,
    InsufficientHistory,
    compute_baseline,
    median_mad,
)
from forensics.errors import UsageError
from forensics.record.baselines import workload_key
from forensics.record.live.state import LiveState
from forensics.record.triggers import parse_rule, parse_rules
from forensics.record.triggers.baseline_rules import BaselineRules
from forensics.ring.writer import RingWriter
from forensics.thresholds import config_from_mapping

T0 = 1_700_000_000.0 - 1_700_000_000.0 % DAY_S  # a UTC midnight


# -- arithmetic ---------------------------------------------------------------------------------
def test_median_and_mad() -> None:
    assert median_mad([1, 2, 3, 4, 100]) == (3, 1)
    assert median_mad([1, 2, 3, 4]) == (2.5, 1.0)


def test_baseline_over_the_window_resists_outliers() -> None:
    rnd = random.Random(1)
    points = [(T0 + 60 * i, 95 + rnd.uniform(-1.5, 1.5)) for i in range(120)]
    points[50] = (points[50][0], 0.0)  # one bad minute
    b = compute_baseline(points, T0 + 120 * 60 + 5, BaselineSettings(min_history_s=3600, min_buckets=30))
    assert isinstance(b, Baseline) and not b.by_time_of_day
    assert 94 < b.median < 96 and b.mad < 1.0 and b.buckets == 120
    lo, hi = b.band(3.0, 10.0)
    # never closer than 10 points, and reaching the 1st percentile (the bad minute is under 1 %)
    assert lo == pytest.approx(min(b.median - 10.0, b.p1 - 10.0)) and 80 < lo < 85 and 40 < lo
    assert hi == pytest.approx(max(b.median + 10.0, b.p99 + 10.0))
    assert b.deviation(40.0) < -20


def test_too_little_history_says_how_much() -> None:
    points = [(T0 + 60 * i, 90.0) for i in range(20)]
    b = compute_baseline(points, T0 + 20 * 60, BaselineSettings(min_history_s=3600, min_buckets=30))
    assert isinstance(b, InsufficientHistory)
    assert (b.history_s, b.need_s, b.buckets, b.need_buckets) == (1200.0, 3600.0, 20, 30)
    assert b.describe() == "insufficient history: 20 min of the 1 h needed (20 of 30 samples)"


def test_history_is_the_windows_own_not_an_older_run_before_a_gap() -> None:
    """Two hours of a job five days ago, then 35 minutes of it now: the window (24 h) holds 35
    minutes, less than the hour needed (the old run, outside the window, made it look long enough,
    and a 35-minute normal was judged as a day's)."""
    now = T0 + 5 * DAY_S + 35 * 60
    old = [(T0 + 60 * i, 20.0) for i in range(120)]
    recent = [(T0 + 5 * DAY_S + 60 * i, 90.0) for i in range(35)]
    b = compute_baseline(old + recent, now, BaselineSettings(min_history_s=3600, min_buckets=30))
    assert isinstance(b, InsufficientHistory), b
    assert b.describe() == "insufficient history: 35 min of the 1 h needed (35 of 30 samples)"


def test_an_empty_window_is_insufficient_whatever_the_minimums() -> None:
    """``baseline_min_buckets: 0`` and ``baseline_min_history_s: 0`` (a thresholds file may say
    so): a window with no bucket is still no normal (it raised IndexError)."""
    b = compute_baseline([(T0, 5.0)], T0 + 10 * DAY_S, BaselineSettings(min_buckets=0, min_history_s=0))
    assert isinstance(b, InsufficientHistory) and b.buckets == 0


def test_a_baseline_says_how_long_it_was_taken_over() -> None:
    """Two hours of history in a 24-hour window: "over the last 2 h", never "over the last 24 h"."""
    points = [(T0 + 60 * i, 50.0 + (i % 3)) for i in range(120)]
    b = compute_baseline(points, T0 + 120 * 60, BaselineSettings(min_history_s=3600, min_buckets=30))
    assert isinstance(b, Baseline) and b.describe().endswith("over the last 2 h"), b.describe()


def _nightly(days: int, peak_at_s: float) -> list[tuple[float, float]]:
    """``days`` days of one-minute buckets: 5 % all day, 90 % for two hours from ``peak_at_s``."""
    return [(T0 + m * 60.0, 90.0 if 0 <= (m * 60.0) % DAY_S - peak_at_s < 7200 else 5.0)
            for m in range(int(days * 1440))]


def test_by_time_of_day_with_three_earlier_days() -> None:
    s = BaselineSettings()
    now = T0 + 3 * DAY_S + 2 * 3600 + 1800  # day 3, 02:30: inside the nightly peak
    b = compute_baseline(_nightly(3, 2 * 3600), now, s)
    assert isinstance(b, Baseline) and b.by_time_of_day and b.days == 3
    assert b.median == 90.0  # 02:30 is compared with earlier 02:30s, not with the idle day
    # two earlier days are not enough: the plain 24 h window, where 90 % is far from normal
    b2 = compute_baseline(_nightly(2, 2 * 3600), now - DAY_S, s)
    assert isinstance(b2, Baseline) and not b2.by_time_of_day and b2.median == 5.0
    # ... and yet the peak is its normal: yesterday's two hours are 8 % of the window, above its 99th percentile
    assert b2.band(s.k, s.min_delta_pct)[1] == 100.0
    # a first-ever peak is not
    b1 = compute_baseline([(t, v) for t, v in _nightly(1, 12 * 3600) if t < T0 + 12 * 3600], T0 + 14 * 3600, s)
    assert isinstance(b1, Baseline) and b1.band(s.k, s.min_delta_pct)[1] == 15.0


def test_bucket_series_is_bounded_and_cached() -> None:
    s = BaselineSettings(window_s=3600, tod_min_days=0, tod_lookback_days=0, tod_halfwidth_s=0,
                         min_history_s=600, min_buckets=5)
    series = BucketSeries(s)
    for i in range(3 * 3600):
        series.add(T0 + i, 50.0 + (i // 60) % 3)
    assert len(series.points()) <= 61 + 61 // 8 + 1  # the lookback's buckets, trimmed in batches
    b = series.baseline(T0 + 3 * 3600)
    assert isinstance(b, Baseline) and b.median == 51.0 and b.buckets == 60
    assert series.baseline(T0 + 3 * 3600 + 1) is b
    series.add(T0, 0.0)  # older than the last: ignored
    assert series.points()[-1][1] == 52.0 or series.points()[-1][1] == 50.0


def test_workload_keys_survive_restarts() -> None:
    assert workload_key("k8s_trainer_trainer-7d4b9c8f6-x2kqp_ml_1", "img", "ml", "trainer-7d4b9c8f6-x2kqp",
                        "trainer") == "pod ml/trainer/trainer"
    assert workload_key("c", "img", "ml", "trainer-7d4b9c8f6-abcde", "trainer") == "pod ml/trainer/trainer"
    assert workload_key("c", "img", "ml", "db-0", "pg") == "pod ml/db-0/pg"
    assert workload_key("trainer", "nvcr.io/pytorch:24.01", "", "", "") == "container trainer image nvcr.io/pytorch:24.01"


# -- grammar ------------------------------------------------------------------------------------
def test_baseline_rules_parse() -> None:
    r = parse_rule("container.gpu.sm<baseline:5m")
    assert (r.kind, r.name, r.op, r.baseline_k, r.duration_s, r.threshold) == ("baseline", "container.gpu.sm", "<", 3.0, 300.0, None)
    r = parse_rule("gpu.util > baseline+4.5mad : 1m")
    assert (r.kind, r.op, r.baseline_k, r.duration_s) == ("baseline", ">", 4.5, 60.0)
    cfg = config_from_mapping({"baseline_k": 5, "baseline_min_delta_pct": 20, "baseline_window_s": 7200})
    r = parse_rules(["psi.memory.some>baseline"], cfg)[0]
    assert (r.baseline_k, r.baseline_min_delta) == (5.0, 20.0)
    assert r.baseline is not None and r.baseline.window_s == 7200


@pytest.mark.parametrize(("text", "says"), [
    ("container.gpu.sm<40%", "compared with its baseline only"),
    ("container.gpu.sm<baseline+2mad", "points the wrong way"),
    ("gpu.util>baseline-2mad", "points the wrong way"),
    ("gpu.util>baseline+0mad", "above 0"),
    ("gpu.utl<baseline", "unknown metric 'gpu.utl' for a baseline"),
    ("gpu.util<baseline:9d", "not a duration"),
])
def test_bad_baseline_rules(text: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        parse_rule(text)


# -- the rules over a real LiveState --------------------------------------------------------------
def _gpu_line(t: float, util: float) -> str:
    return json.dumps({"kind": "device", "tick": int(t), "t": t, "gpu_index": 0, "uuid": "GPU-x",
                       "nvml": {"nvmlDeviceGetUtilizationRates": {"value": {"gpu": util, "memory": 0}},
                                "nvmlDeviceGetMemoryInfo_v2": {"value": {"used": 1, "total": 100}}},
                       "processes": []}) + "\n"


_FAST = {"baseline_bucket_s": 10, "baseline_min_history_s": 300, "baseline_min_buckets": 20,
         "baseline_window_s": 3600}


def test_a_fall_from_its_normal_fires_and_a_fixed_threshold_does_not() -> None:
    rules = parse_rules(["gpu.util<baseline:30s", "gpu.util<10%"], config_from_mapping(_FAST))
    br = BaselineRules(rules, max_gap_s=5.0)
    state = LiveState()
    rnd = random.Random(3)
    fired = []
    t = T0
    for i in range(900):  # 15 min at 94-97 %, then 40 %
        t = T0 + i
        state.feed(t, t, "nvml/samples.jsonl", "append", _gpu_line(t, 40.0 if i >= 600 else 95 + rnd.uniform(-1.5, 1.5)))
        got = br.evaluate(state)
        fired += [(t, f) for f in got]
        if i < 600:
            assert not got
    assert fired, "the fall to 40 % was not caught"
    at, f = fired[0]
    assert at == T0 + 630 and f.crossed_at == T0 + 600 and f.value == 40.0 and f.subject == "GPU 0 (GPU-x)"
    assert f.baseline is not None and 94 < f.baseline["median"] < 96 and f.baseline["window_s"] == 3600
    assert "robust units from its normal 9" in f.summary


def test_a_young_subject_is_reported_as_too_young() -> None:
    rules = parse_rules(["gpu.util<baseline"], config_from_mapping(_FAST))
    br = BaselineRules(rules)
    state = LiveState()
    for i in range(120):
        state.feed(T0 + i, T0 + i, "nvml/samples.jsonl", "append", _gpu_line(T0 + i, 95.0 if i < 100 else 1.0))
        assert br.evaluate(state) == []
    assert br.insufficient["gpu.util<baseline"] == 120
    status = br.tracker.status(T0 + 120)["gpu.util"]["gpu GPU-x"]
    assert str(status["insufficient_history"]).startswith("insufficient history: 2 min of the 5 min needed")


def test_history_is_rebuilt_from_the_ring(tmp_path: Path) -> None:
    ring = tmp_path / "ring"
    start = time.time() - 20 * 60
    start -= start % 10
    now = start + 20 * 60
    w = RingWriter(ring)
    w.open()
    w.append([(start + i, float(i), "nvml/samples.jsonl", "append", _gpu_line(start + i, 95.0).encode())
              for i in range(0, 20 * 60, 2)])
    w.close()
    rules = parse_rules(["gpu.util<baseline:10s"], config_from_mapping(_FAST))
    br = BaselineRules(rules)
    looks = br.seed(ring, now)
    assert looks == 120  # one look per 10 s bucket
    b = br.tracker.baseline("gpu.util", "gpu GPU-x", now)
    assert isinstance(b, Baseline) and b.median == 95.0 and b.history_s >= 1190
    fired = []
    state = LiveState()  # the recorder's, after the restart: the history is the ring's only
    for i in range(30):
        t = now + i
        state.feed(t, t, "nvml/samples.jsonl", "append", _gpu_line(t, 30.0))
        fired += br.evaluate(state)
    assert fired and fired[0].t - fired[0].crossed_at >= 10


# -- the report draws the band ---------------------------------------------------------------------
def test_the_chart_draws_a_baseline_band() -> None:
    from forensics.report.charts import ChartSpec, Line, Panel, render_svg

    t = tuple(T0 + i for i in range(60))
    sm = tuple(95.0 if i < 30 else 40.0 for i in range(60))
    panel = Panel("Utilization", "%", (Line("SM trainer", t, sm),), y_max=105.0,
                  bands=((93.0, 96.0, "trainer normal 93-96%"),))
    svg = render_svg(ChartSpec("gpu-0", "GPU 0", (panel,)))
    assert 'id="gpu-0-baseline-0-0"' in svg and "trainer normal 93-96%" in svg
    assert "baseline-0-0" not in render_svg(ChartSpec("gpu-0", "GPU 0", (Panel("U", "%", panel.lines),)))


def test_cgroup_baseline_rules_look_every_sixth_of_their_duration() -> None:
    br = BaselineRules(parse_rules(["container.throttled>baseline:2m", "gpu.util<baseline:5m"]))
    assert br.tracker.cgroup_every_s == 20.0 and br.tracker.workload_every_s == 0.0
    assert BaselineRules(parse_rules(["container.gpu.sm<baseline:5m"])).tracker.workload_every_s == 50.0
    assert BaselineRules(parse_rules(["gpu.util<baseline:5m"])).tracker.cgroup_every_s == 0.0
