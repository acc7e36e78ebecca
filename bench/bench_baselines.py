"""Baseline triggers against fixed thresholds, replayed over synthesised week-long scenarios.

Each scenario is eight days of one GPU's utilisation, one NVML device line every ``--step`` seconds
(30), fed as records through the recorder's own live state (forensics.record.live) to the baseline
rules (forensics.record.triggers.baseline_rules) and to the fixed rules (evaluate.py) side by
side, with the engine's cooldown (15 min per rule) applied as it would be. The first day is
history only (what a 24 h ring holds when the recorder starts); days 2-8 are judged. Quiet
scenarios have no incident; their firings are false firings. The same scenarios with an incident
injected on day 6 must be caught: the delay is from the incident's start to the first firing.

    python bench/bench_baselines.py [--step 30] [--seed 1]

Rules: ``gpu.util<baseline:5m``, ``gpu.util>baseline:5m`` against ``gpu.util<10%:5m``,
``gpu.util>90%:5m``. The scenarios (UTC):

- trainer: 93-97 % all week, a one-minute checkpoint dip to 60 % every 3 h;
- nightly batch: idle 3-8 %, a job 01:00-03:00 (start +/- 15 min) at 88-92 % after a 3 min warm-up;
- inference: diurnal, 30 % at night to 70 % by day, +/- 5 noise;
- restarting job: restarted every 6 h, 5 minutes of warm-up at 15-25 % then 93-97 %.

Incidents (day 6): the trainer falls to 40 % for 1 h at 14:00 (something took its GPU); the nightly
job runs at 45 % from 01:30 for 1 h; the inference server falls to 30 % for 1 h at 13:00 (its
night level, at midday); the restarting job falls to 50 % for 1 h at 15:00, after its warm-up.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forensics.record.live.state import LiveState  # noqa: E402
from forensics.record.triggers import Evaluator, Firing, parse_rules  # noqa: E402
from forensics.record.triggers.baseline_rules import BaselineRules  # noqa: E402

DAY = 86400.0
T0 = 1_765_000_000.0 - 1_765_000_000.0 % DAY  # a UTC midnight
DAYS = 8
INCIDENT_DAY = 5  # day 6, 0-based
BASELINE_RULES = ["gpu.util<baseline:5m", "gpu.util>baseline:5m"]
FIXED_RULES = ["gpu.util<10%:5m", "gpu.util>90%:5m"]
COOLDOWN_S = 900.0

Series = Callable[[float, random.Random], float]


def trainer(t: float, rnd: random.Random) -> float:
    return 60.0 if t % 10800 < 60 else 95.0 + rnd.uniform(-2, 2)


def nightly_starts(seed: int) -> dict[int, float]:
    r = random.Random(seed)
    return {d: 3600.0 + r.uniform(-900, 900) for d in range(DAYS)}


def nightly(starts: dict[int, float]) -> Series:
    def f(t: float, rnd: random.Random) -> float:
        day, tod = int((t - T0) // DAY), (t - T0) % DAY
        start = starts[day]
        if start <= tod < start + 7200:
            ramp = min(1.0, (tod - start) / 180.0)
            return 5.0 + ramp * (85.0 + rnd.uniform(-2, 2))
        return 5.0 + rnd.uniform(-2, 3)
    return f


def inference(t: float, rnd: random.Random) -> float:
    tod = (t - T0) % DAY
    return 50.0 - 20.0 * math.cos(2 * math.pi * tod / DAY) + rnd.uniform(-5, 5)


def restarting(t: float, rnd: random.Random) -> float:
    return 20.0 + rnd.uniform(-5, 5) if (t - T0) % 21600 < 300 else 95.0 + rnd.uniform(-2, 2)


def incident(base: Series, at_tod: float, value: float, length_s: float = 3600.0) -> tuple[Series, float, float]:
    start = T0 + INCIDENT_DAY * DAY + at_tod

    def f(t: float, rnd: random.Random) -> float:
        return value + rnd.uniform(-2, 2) if start <= t < start + length_s else base(t, rnd)
    return f, start, start + length_s


def _line(t: float, util: float) -> str:
    return json.dumps({"kind": "device", "tick": int(t), "t": t, "gpu_index": 0, "uuid": "GPU-replay",
                       "nvml": {"nvmlDeviceGetUtilizationRates": {"value": {"gpu": round(util, 1), "memory": 0}},
                                "nvmlDeviceGetMemoryInfo_v2": {"value": {"used": 1 << 30, "total": 80 << 30}}},
                       "processes": []}) + "\n"


def replay(series: Series, step: float, seed: int) -> tuple[dict[str, list[Firing]], float]:
    """Every firing per rule after the cooldown, on days 2-8; and the baseline rules' CPU seconds."""
    rnd = random.Random(seed)
    live = LiveState()
    gap = 3 * step
    base = BaselineRules(parse_rules(BASELINE_RULES), max_gap_s=gap)
    fixed = Evaluator(parse_rules(FIXED_RULES), max_gap_s=gap, interval_s=step)
    fired: dict[str, list[Firing]] = {r: [] for r in BASELINE_RULES + FIXED_RULES}
    last: dict[str, float] = {}
    cpu = 0.0
    t = T0
    while t < T0 + DAYS * DAY:
        live.feed(t, t, "nvml/samples.jsonl", "append", _line(t, series(t, rnd)))
        c0 = time.process_time()
        got = base.evaluate(live)
        cpu += time.process_time() - c0
        got += fixed.evaluate(live)
        for f in got:
            name = f.rule.text
            if t >= T0 + DAY and t - last.get(name, -math.inf) >= COOLDOWN_S:
                last[name] = t
                fired[name].append(f)
        t += step
    return fired, cpu


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--step", type=float, default=30.0, help="seconds between samples (default 30)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    starts = nightly_starts(args.seed)
    quiet: dict[str, Series] = {"trainer": trainer, "nightly batch": nightly(starts), "inference": inference,
                                "restarting job": restarting}
    incidents = {
        "trainer falls to 40 % at 14:00": incident(trainer, 14 * 3600, 40.0),
        "nightly job at 45 % from 01:30": incident(nightly(starts), 5400, 45.0),
        "inference falls to 30 % at 13:00": incident(inference, 13 * 3600, 30.0),
        "restarting job falls to 50 % at 15:00": incident(restarting, 15 * 3600, 50.0),
    }
    judged_days = DAYS - 1
    t_all = time.perf_counter()
    print(f"replay: {DAYS} days per scenario, a sample every {args.step:g} s, day 1 history only, "
          f"days 2-{DAYS} judged; cooldown {COOLDOWN_S / 60:g} min")
    print("quiet replays (every firing is a false one):")
    total_false = {"baseline": 0, "fixed": 0}
    cpu_all, samples = 0.0, 0
    for name, series in quiet.items():
        fired, cpu = replay(series, args.step, args.seed)
        cpu_all += cpu
        samples += int(DAYS * DAY / args.step)
        b = sum(len(fired[r]) for r in BASELINE_RULES)
        f = sum(len(fired[r]) for r in FIXED_RULES)
        total_false["baseline"] += b
        total_false["fixed"] += f
        print(f"  {name:16s} baseline rules {b} false firings ({b / judged_days:.2f}/day), "
              f"fixed rules {f} ({f / judged_days:.2f}/day)")
    print("incidents (day 6):")
    caught = {"baseline": 0, "fixed": 0}
    for name, (series, start, end) in incidents.items():
        fired, cpu = replay(series, args.step, args.seed)
        cpu_all += cpu
        samples += int(DAYS * DAY / args.step)
        out: dict[str, str] = {}
        for kind, rules in (("baseline", BASELINE_RULES), ("fixed", FIXED_RULES)):
            hits = [f for r in rules for f in fired[r] if start <= f.t < end]
            false = [f for r in rules for f in fired[r] if not start <= f.t < end + COOLDOWN_S]
            if hits:
                caught[kind] += 1
                first = min(hits, key=lambda f: f.t)
                out[kind] = f"caught after {(first.t - start) / 60:.1f} min ({first.rule.text})"
            else:
                out[kind] = "missed"
            out[kind] += f", {len(false)} false firings elsewhere"
            total_false[kind] += len(false)
        print(f"  {name:38s} baseline: {out['baseline']}; fixed: {out['fixed']}")
        if hits := [f for r in BASELINE_RULES for f in fired[r] if start <= f.t < end]:
            print(f"    {hits[0].summary}")
    days = judged_days * (len(quiet) + len(incidents))
    print(f"summary: baseline rules caught {caught['baseline']}/{len(incidents)} incidents, fixed rules "
          f"{caught['fixed']}/{len(incidents)}; false firings per day of replay: baseline "
          f"{total_false['baseline'] / days:.3f}, fixed {total_false['fixed'] / days:.3f} ({days} days)")
    print(f"  baseline rules' CPU per sample: {1e6 * cpu_all / samples:.1f} us (the live state's fold not counted); "
          f"replay took {time.perf_counter() - t_all:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
