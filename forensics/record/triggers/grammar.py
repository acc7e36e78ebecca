"""The trigger grammar of ``record --trigger RULE`` (see docs/triggers.md).

::

    RULE      := THRESHOLD | BASELINE | EVENT
    THRESHOLD := METRIC [OP NUMBER [%]] [":" DURATION]
    BASELINE  := (METRIC | container.gpu.sm | container.gpu.memory) OP "baseline" [("-" | "+") NUMBER "mad"] [":" DURATION]
    METRIC    := gpu.util | gpu.memory | container.throttled | psi.(cpu|memory|io).(some|full)
    OP        := ">" | ">=" | "<" | "<="
    DURATION  := NUMBER ("s" | "m" | "h")          (how long the condition must hold; default: one sample)
    EVENT     := oom | xid | xid:N | gpu-lost | unallocated-gpu-use

Every metric is a percentage (0-100): ``gpu.util`` nvmlDeviceGetUtilizationRates ``gpu`` per GPU,
``gpu.memory`` memory used / total per GPU, ``container.throttled`` CPU-throttled periods / periods
per container cgroup over the last interval, ``psi.R.K`` PSI stall time per wall time over the last
interval (host and each container). A threshold omitted takes the analysis' own (the same
``--config`` file as ``analyze --config``): ``gpu.memory`` -> ``gpu_memory_pressure_ratio``,
``container.throttled`` -> ``cpu_throttled_ratio``, ``psi.*.some`` -> ``psi_some_avg10_pct``,
``psi.*.full`` -> ``psi_full_avg10_pct`` (``>=``, as the rules compare). ``gpu.util`` has no such
threshold and needs one. A BASELINE rule compares each subject with its own normal
(forensics.analysis.baseline; the recorder's state in forensics.record.baselines): ``<baseline``
holds below the median minus max(K robust spreads, ``baseline_min_delta_pct``), ``>baseline``
above the median plus as much; K is ``baseline_k`` (3) unless written (``baseline-4mad``).
``container.gpu.sm`` (the SM share of a workload's GPU processes, summed) and
``container.gpu.memory`` (their GPU memory / the GPU's total) are baseline metrics only. A rule that does not parse is a :class:`~forensics.errors.UsageError`
(exit 2) before anything runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from forensics.analysis.baseline import BaselineSettings, baseline_settings
from forensics.errors import UsageError
from forensics.thresholds import AnalysisConfig

__all__ = ["BASELINE_METRICS", "EVENTS", "METRICS", "Rule", "parse_duration", "parse_rule", "parse_rules"]

#: metric -> (what it measures, the analysis threshold it defaults to, that threshold as a percentage)
METRICS: dict[str, str] = {
    "gpu.util": "GPU utilisation (%), per GPU",
    "gpu.memory": "GPU memory used / total (%), per GPU",
    "container.throttled": "CPU-throttled periods / periods (%), per container, over the last interval",
    **{f"psi.{r}.{k}": f"PSI {r} {k} stall share (%), host and per container, over the last interval"
       for r in ("cpu", "memory", "io") for k in ("some", "full")},
}
#: the metrics only a baseline rule takes (a workload's own series, summed over its GPU processes)
BASELINE_ONLY: dict[str, str] = {
    "container.gpu.sm": "SM share (%) of a workload's GPU processes, summed, per container or pod container",
    "container.gpu.memory": "GPU memory of a workload's GPU processes / the GPU's total (%), summed",
}
BASELINE_METRICS: dict[str, str] = {**METRICS, **BASELINE_ONLY}
EVENTS: dict[str, str] = {
    "oom": "a kernel OOM kill (any cgroup)",
    "xid": "an NVIDIA Xid (kernel log or NVML event); xid:N only Xid N",
    "gpu-lost": "a GPU answered GpuIsLost, or Xid 79",
    "unallocated-gpu-use": "a GPU process whose container or pod has no grant for that GPU (as the analysis decides)",
}


def _default_threshold(metric: str, cfg: AnalysisConfig) -> float | None:
    if metric == "gpu.memory":
        return 100.0 * cfg.gpu_memory_pressure_ratio
    if metric == "container.throttled":
        return 100.0 * cfg.cpu_throttled_ratio
    if metric.startswith("psi.") and metric.endswith(".some"):
        return cfg.psi_some_avg10_pct
    if metric.startswith("psi.") and metric.endswith(".full"):
        return cfg.psi_full_avg10_pct
    return None


@dataclass(frozen=True)
class Rule:
    """One parsed rule; ``text`` is the rule as given (the trigger's name in logs and manifests)."""

    text: str
    kind: str  # "threshold" | "event"
    name: str  # the metric or the event
    op: str = ""
    threshold: float | None = None
    duration_s: float = 0.0
    xid: int | None = None
    threshold_from: str = ""  # the analysis threshold it came from, when not written in the rule
    baseline_k: float | None = None  # a baseline rule: robust units from the median (None: not one)
    baseline_min_delta: float = 0.0  # ... and never closer to it than this (percentage points)
    baseline: BaselineSettings | None = None  # ... its window and history needed (from --config)

    @property
    def lead_up_s(self) -> float:
        """How long before the firing the condition began (what the capture's --since must cover)."""
        return self.duration_s

    def describe(self) -> str:
        if self.kind == "event":
            return self.text
        if self.kind == "baseline":
            side = "-" if self.op.startswith("<") else "+"
            hold = f" for {self.duration_s:g} s" if self.duration_s else ""
            return (f"{self.name} {self.op} its baseline {side} max({self.baseline_k:g} x robust spread, "
                    f"{self.baseline_min_delta:g} points){hold}")
        src = f" ({self.threshold_from})" if self.threshold_from else ""
        hold = f" for {self.duration_s:g} s" if self.duration_s else ""
        return f"{self.name} {self.op} {self.threshold:g}%{src}{hold}"


_DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([smh]?)$")
_THRESHOLD = re.compile(r"^([a-z][a-z.]*[a-z])(?:(>=|<=|>|<)([0-9]+(?:\.[0-9]+)?)(%?))?(?::(.+))?$")
_BASELINE = re.compile(r"^([a-z][a-z.]*[a-z])(>=|<=|>|<)baseline(?:([-+])([0-9]+(?:\.[0-9]+)?)mad)?(?::(.+))?$")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
MAX_DURATION_S = 7 * 86400.0


def parse_duration(text: str, what: str = "duration") -> float:
    m = _DURATION.match(text.strip())
    if not m:
        raise UsageError(f"{what}: not a duration like 30s, 5m or 1h: {text!r}")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds > MAX_DURATION_S:
        raise UsageError(f"{what}: {text!r} is longer than 7 days")
    return seconds


def parse_rule(text: str, cfg: AnalysisConfig | None = None) -> Rule:
    """Parse one rule (grammar in the module docstring); UsageError names what is wrong."""
    cfg = cfg or AnalysisConfig()
    raw = text
    rule = "".join(text.split()).lower()
    where = f"--trigger {raw!r}"
    if not rule:
        raise UsageError(f"{where}: empty rule")
    if rule in EVENTS:
        return Rule(raw, "event", rule)
    if rule.startswith("xid:"):
        number = rule[4:]
        if not (number.isascii() and number.isdigit()) or not 0 < int(number) < 1000:
            raise UsageError(f"{where}: xid:N needs an Xid number (1-999), got {number!r}")
        return Rule(raw, "event", "xid", xid=int(number))
    b = _BASELINE.match(rule)
    if b:
        return _baseline_rule(raw, where, b.groups(), cfg)
    m = _THRESHOLD.match(rule)
    if not m:
        raise UsageError(f"{where}: not a rule (METRIC>N%[:DURATION] or one of {', '.join(EVENTS)}, xid:N)")
    metric, op, number, _pct, duration = m.groups()
    if metric in EVENTS:
        raise UsageError(f"{where}: event {metric!r} takes no threshold or duration")
    if metric in BASELINE_ONLY:
        raise UsageError(f"{where}: {metric} is compared with its baseline only, e.g. {metric}<baseline:5m")
    if metric not in METRICS:
        raise UsageError(f"{where}: unknown metric {metric!r} (known: {', '.join(METRICS)}; "
                         f"events: {', '.join(EVENTS)}, xid:N)")
    threshold_from = ""
    if op is None:
        value = _default_threshold(metric, cfg)
        if value is None:
            raise UsageError(f"{where}: {metric} needs a threshold, e.g. {metric}>90%:5m")
        op, threshold = ">=", value
        threshold_from = {"gpu.memory": "gpu_memory_pressure_ratio", "container.throttled": "cpu_throttled_ratio"}.get(
            metric, "psi_some_avg10_pct" if metric.endswith(".some") else "psi_full_avg10_pct")
    else:
        threshold = float(number)
        if not 0 <= threshold <= 100:
            raise UsageError(f"{where}: a percentage is between 0 and 100, not {number}")
    seconds = parse_duration(duration, where) if duration is not None else 0.0
    return Rule(raw, "threshold", metric, op, threshold, seconds, threshold_from=threshold_from)


def _baseline_rule(raw: str, where: str, groups: tuple[str | None, ...], cfg: AnalysisConfig) -> Rule:
    metric, op, sign, number, duration = groups
    assert metric is not None and op is not None
    if metric not in BASELINE_METRICS:
        raise UsageError(f"{where}: unknown metric {metric!r} for a baseline (known: {', '.join(BASELINE_METRICS)})")
    k = cfg.baseline_k
    if number is not None:
        if (sign == "-") != op.startswith("<"):
            raise UsageError(f"{where}: {op}baseline{sign}{number}mad points the wrong way "
                             f"(below: <baseline-Kmad; above: >baseline+Kmad)")
        k = float(number)
        if not 0 < k <= 100:
            raise UsageError(f"{where}: K robust units must be above 0 and at most 100, not {number}")
    seconds = parse_duration(duration, where) if duration is not None else 0.0
    return Rule(raw, "baseline", metric, op, None, seconds, threshold_from="" if number is not None else "baseline_k",
                baseline_k=k, baseline_min_delta=cfg.baseline_min_delta_pct, baseline=baseline_settings(cfg))


def parse_rules(texts: tuple[str, ...] | list[str], cfg: AnalysisConfig | None = None) -> tuple[Rule, ...]:
    """Parse every rule; the same rule twice is an error (one cooldown per trigger)."""
    rules = tuple(parse_rule(t, cfg) for t in texts)
    seen: set[str] = set()
    for r in rules:
        key = "".join(r.text.split()).lower()
        if key in seen:
            raise UsageError(f"--trigger {r.text!r} given twice")
        seen.add(key)
    return rules
