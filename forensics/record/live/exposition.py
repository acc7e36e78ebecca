"""What a scrape of ``record --metrics-addr`` answers (served by :mod:`forensics.record.live.metrics`).

:class:`Snapshot` is the immutable set of figures the recorder loop publishes once per tick
(GPUs and processes from :mod:`forensics.record.live`, the triggers' counters, the recorder's own
cost as :class:`Histogram` copies); :func:`collect_snapshot` turns one into Prometheus metric
families, and :class:`ProcessLines` writes the two per-process families as text exposition 0.0.4
directly (the large part of a scrape, byte for byte what ``generate_latest`` writes for them).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString as _go_float

if TYPE_CHECKING:
    from forensics.record.live.views import GpuLive, ProcessLive

__all__ = ["GPU_LABELS", "PROCESS_LABELS", "TICK_BUCKETS", "Histogram", "ProcessLines", "ProcessView", "Snapshot", "SourceFigures",
           "collect_other", "collect_snapshot"]

PROCESS_LABELS = ("gpu", "gpu_uuid", "mig_uuid", "pid", "owner", "container", "container_id", "namespace", "pod",
                  "allocated", "grant", "claim")
GPU_LABELS = ("gpu", "gpu_uuid", "name")
# seconds; a tick at 1 Hz answers in milliseconds, a hung source in seconds
TICK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)



class Histogram:
    """A histogram the loop thread observes into and a snapshot copies: per-bucket counts (not
    cumulative), so a copy taken at any moment is a consistent histogram."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...] = TICK_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        for i, b in enumerate(self.bounds):
            if value <= b:
                self.counts[i] += 1
                break
        else:
            self.counts[-1] += 1
        self.total += value

    def frozen(self) -> tuple[tuple[int, ...], float]:
        return tuple(self.counts), self.total


class ProcessView(Sequence["ProcessLive"]):
    """A tick's processes as the loop publishes them: the live state's rows ``(pid, GPU index,
    GPU UUID, MIG UUID, t, used memory, SM %)`` and each one's ``(owner, grant)``, both immutable;
    the :class:`~forensics.record.live.ProcessLive` objects are made when a scrape first reads
    them (a node's 512 processes change figures every tick, and most ticks are not scraped)."""

    def __init__(self, rows: Sequence[tuple[Any, ...]], owners: Sequence[tuple[Any, Any]]) -> None:
        self._rows = rows
        self._owners = owners
        self._items: tuple[ProcessLive, ...] | None = None

    def _made(self) -> tuple[ProcessLive, ...]:
        items = self._items
        if items is None:
            from forensics.record.live.views import ProcessLive

            items = self._items = tuple(ProcessLive(pid, idx, uuid, mig, t, used, sm, owner, grant)
                                        for (pid, idx, uuid, mig, t, used, sm), (owner, grant)
                                        in zip(self._rows, self._owners, strict=True))
        return items

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, i: int) -> ProcessLive: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[ProcessLive, ...]: ...
    def __getitem__(self, i: int | slice) -> ProcessLive | tuple[ProcessLive, ...]:
        return self._made()[i]

    def __iter__(self) -> Iterator[ProcessLive]:
        return iter(self._made())

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class SourceFigures:
    name: str
    up: bool
    ticks: int
    missed: int
    restarts: int
    answer: tuple[tuple[int, ...], float]


@dataclass(frozen=True)
class Snapshot:
    """What one scrape serves: taken by the loop thread, read by the server thread."""

    t: float
    gpus: tuple[GpuLive, ...] = ()
    processes: Sequence[ProcessLive] = ()  # a tuple or a ProcessView
    sources: tuple[SourceFigures, ...] = ()
    ticks: int = 0
    ticks_behind: int = 0
    records_written: int = 0
    records_dropped: int = 0
    ring_bytes: int = 0
    ring_max_bytes: int = 0
    ring_segments_dropped: int = 0
    live_refreshes: int = 0
    tick: tuple[tuple[int, ...], float] = ((), 0.0)
    rules: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    trigger_counters: Mapping[str, int] = field(default_factory=dict)
    trigger_eval_s: float = 0.0
    capture_running: bool | None = None  # None: no trigger
    scrape_errors: int = 0


def _histogram(name: str, doc: str, frozen: tuple[tuple[int, ...], float], bounds: tuple[float, ...],
               labels: tuple[str, ...] = (), values: tuple[str, ...] = (),
               family: HistogramMetricFamily | None = None) -> HistogramMetricFamily:
    fam = family or HistogramMetricFamily(name, doc, labels=labels)
    counts, total = frozen
    if not counts:
        counts = (0,) * (len(bounds) + 1)
    buckets, acc = [], 0
    for bound, n in zip((*bounds, math.inf), counts, strict=True):
        acc += n
        buckets.append(("+Inf" if bound == math.inf else repr(float(bound)), float(acc)))
    fam.add_metric(list(values), buckets, total)
    return fam


MEMORY = ("gpuforensics_process_gpu_memory_bytes",
          "GPU memory used by a process (NVML), by GPU, container, pod and the owner's grant on that GPU")
SM = ("gpuforensics_process_sm_utilization_percent",
      "SM utilisation of a process over the last sampling period (NVML process utilization)")


def _process_labels(p: ProcessLive) -> list[str]:
    o, g = p.owner, p.grant
    return [str(p.gpu_index), p.gpu_uuid, p.mig_uuid or "", str(p.pid), o.kind, o.container_name,
            o.container_id, o.pod_namespace, o.pod_name, "true" if g.allocated else "false", g.grant,
            g.claim]


def collect_snapshot(s: Snapshot, stale_before: float) -> Iterator[Metric]:
    """The metric families of one snapshot (figures sampled before ``stale_before`` left out)."""
    mem = GaugeMetricFamily(*MEMORY, labels=PROCESS_LABELS)
    sm = GaugeMetricFamily(*SM, labels=PROCESS_LABELS)
    for p in s.processes:
        if p.t >= stale_before:
            if p.used_memory_bytes is not None:
                mem.add_metric(_process_labels(p), float(p.used_memory_bytes))
            if p.sm_util_pct is not None:
                sm.add_metric(_process_labels(p), p.sm_util_pct)
    yield mem
    yield sm
    yield from collect_other(s, stale_before)


def collect_other(s: Snapshot, stale_before: float) -> Iterator[Metric]:
    """:func:`collect_snapshot` without the two per-process families."""
    per_gpu: dict[tuple[str, str], list[int]] = {}
    for p in s.processes:
        if p.t >= stale_before:
            n = per_gpu.setdefault((str(p.gpu_index), p.gpu_uuid), [0, 0])
            n[0 if p.grant.allocated else 1] += 1

    util = GaugeMetricFamily("gpuforensics_gpu_utilization_percent", "GPU utilisation (NVML utilization rates)",
                             labels=GPU_LABELS)
    used = GaugeMetricFamily("gpuforensics_gpu_memory_used_bytes", "GPU memory used (NVML)", labels=GPU_LABELS)
    total = GaugeMetricFamily("gpuforensics_gpu_memory_total_bytes", "GPU memory total (NVML)", labels=GPU_LABELS)
    lost = GaugeMetricFamily("gpuforensics_gpu_lost", "1 when the GPU answered GpuIsLost", labels=GPU_LABELS)
    procs = GaugeMetricFamily("gpuforensics_gpu_processes",
                              "GPU processes on the GPU, by whether their owner was granted it",
                              labels=("gpu", "gpu_uuid", "allocated"))
    seen = GaugeMetricFamily("gpuforensics_gpu_last_sample_timestamp_seconds",
                             "When the GPU was last sampled (unix seconds)", labels=GPU_LABELS)
    for gpu in s.gpus:
        labels = [str(gpu.index), gpu.uuid, gpu.name]
        seen.add_metric(labels, gpu.t)
        if gpu.t < stale_before:
            continue
        lost.add_metric(labels, 1.0 if gpu.lost else 0.0)
        if gpu.util_pct is not None:
            util.add_metric(labels, gpu.util_pct)
        if gpu.memory_used_bytes is not None:
            used.add_metric(labels, float(gpu.memory_used_bytes))
        if gpu.memory_total_bytes is not None:
            total.add_metric(labels, float(gpu.memory_total_bytes))
        yes, no = per_gpu.get((str(gpu.index), gpu.uuid), [0, 0])
        procs.add_metric([str(gpu.index), gpu.uuid, "true"], float(yes))
        procs.add_metric([str(gpu.index), gpu.uuid, "false"], float(no))
    yield from (util, used, total, lost, procs, seen)

    if s.capture_running is not None:
        fired = CounterMetricFamily("gpuforensics_trigger_firings", "Times a trigger's rule fired (inside its cooldown or not)",
                                    labels=("trigger",))
        suppressed = CounterMetricFamily("gpuforensics_trigger_suppressed",
                                         "Firings inside the trigger's cooldown (no capture)", labels=("trigger",))
        captures = CounterMetricFamily("gpuforensics_trigger_captures", "Captures a trigger started, by outcome",
                                       labels=("trigger", "outcome"))
        for rule, c in sorted(s.rules.items()):
            fired.add_metric([rule], float(c.get("fired", 0) + c.get("suppressed", 0)))
            suppressed.add_metric([rule], float(c.get("suppressed", 0)))
            for outcome in ("captured", "failed"):
                captures.add_metric([rule, outcome], float(c.get(outcome, 0)))
        yield from (fired, suppressed, captures)
        tc = s.trigger_counters
        outcomes = CounterMetricFamily("gpuforensics_captures", "Triggered captures that ended, by outcome",
                                       labels=("outcome",))
        for outcome in ("ok", "incomplete", "failed"):
            outcomes.add_metric([outcome], float(tc.get(f"captures_{outcome}", 0)))
        yield outcomes
        hooks = CounterMetricFamily("gpuforensics_on_capture", "--on-capture commands, by outcome", labels=("outcome",))
        for outcome in ("ok", "failed", "timed_out", "skipped"):
            hooks.add_metric([outcome], float(tc.get(f"on_capture_{outcome}", 0)))
        yield hooks
        yield CounterMetricFamily("gpuforensics_trigger_bundles_rotated", "Triggered bundles deleted by --keep/--keep-bytes",
                                  value=float(tc.get("bundles_rotated", 0)))
        yield CounterMetricFamily("gpuforensics_trigger_evaluation_seconds", "Time spent evaluating the trigger rules",
                                  value=s.trigger_eval_s)
        yield GaugeMetricFamily("gpuforensics_trigger_capture_running", "1 while a triggered capture runs",
                                value=1.0 if s.capture_running else 0.0)

    yield _histogram("gpuforensics_recorder_tick_duration_seconds",
                     "From a tick's commands sent to the last source's answer", s.tick, TICK_BUCKETS)
    answer = HistogramMetricFamily("gpuforensics_recorder_source_answer_seconds",
                                   "From a tick's command to a source's answer", labels=("source",))
    up = GaugeMetricFamily("gpuforensics_recorder_source_up", "1 while the source's sampler answers", labels=("source",))
    missed = CounterMetricFamily("gpuforensics_recorder_source_ticks_missed",
                                 "Ticks a source's sampler had not answered in time (dropped for that source)",
                                 labels=("source",))
    restarts = CounterMetricFamily("gpuforensics_recorder_source_restarts",
                                   "Sampler processes ended and started again (hung, exited, failed)", labels=("source",))
    for src in s.sources:
        _histogram("", "", src.answer, TICK_BUCKETS, values=(src.name,), family=answer)
        up.add_metric([src.name], 1.0 if src.up else 0.0)
        missed.add_metric([src.name], float(src.missed))
        restarts.add_metric([src.name], float(src.restarts))
    yield from (answer, up, missed, restarts)
    yield CounterMetricFamily("gpuforensics_recorder_ticks", "Ticks sent", value=float(s.ticks))
    yield CounterMetricFamily("gpuforensics_recorder_ticks_dropped",
                              "Ticks skipped because the loop fell behind (suspended, starved)", value=float(s.ticks_behind))
    yield CounterMetricFamily("gpuforensics_recorder_records_written", "Records written to the ring",
                              value=float(s.records_written))
    yield CounterMetricFamily("gpuforensics_recorder_records_dropped", "Records not written (the ring's disk full)",
                              value=float(s.records_dropped))
    yield GaugeMetricFamily("gpuforensics_recorder_ring_bytes", "Bytes the ring holds on disk", value=float(s.ring_bytes))
    yield GaugeMetricFamily("gpuforensics_recorder_ring_max_bytes", "The ring's cap (--max-bytes)",
                            value=float(s.ring_max_bytes))
    yield CounterMetricFamily("gpuforensics_recorder_ring_segments_dropped",
                              "Ring segments deleted by the size and retention caps", value=float(s.ring_segments_dropped))
    yield CounterMetricFamily("gpuforensics_recorder_attribution_runs",
                              "Times the live attribution ran (identities changed)", value=float(s.live_refreshes))
    yield CounterMetricFamily("gpuforensics_metrics_scrape_errors", "Metrics requests that failed (bad request, "
                              "TLS handshake, timeout, client gone)", value=float(s.scrape_errors))
    yield GaugeMetricFamily("gpuforensics_recorder_snapshot_timestamp_seconds",
                            "When the served figures were taken (unix seconds)", value=s.t)


def floatToGoString(value: float) -> str:  # noqa: N802 - prometheus_client's name, typed
    text: str = _go_float(value)  # type: ignore[no-untyped-call]
    return text


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


_SORTED = sorted(range(len(PROCESS_LABELS)), key=lambda i: PROCESS_LABELS[i])


class ProcessLines:
    """The two per-process families as the text exposition format (0.0.4), byte for byte what
    prometheus_client's ``generate_latest`` writes for them (tested), with each process' label
    string kept while its identity, owner and grant stay the same: a node's 512 processes change
    values every tick, their labels seldom, and escaping 11 labels per series per scrape is most of
    prometheus_client's time."""

    def __init__(self) -> None:
        # the label strings of the last render's processes: a process gone (or whose labels
        # changed) is not kept past the next render, so this follows the processes there now
        self._labels: dict[tuple[Any, ...], str] = {}

    @staticmethod
    def _label_text(p: ProcessLive) -> str:
        values = _process_labels(p)
        return ",".join(f'{PROCESS_LABELS[i]}="{_escape(values[i])}"' for i in _SORTED)

    def render(self, s: Snapshot, stale_before: float) -> str:
        was, now = self._labels, {}
        live = []
        for p in s.processes:
            if p.t >= stale_before:
                key = (p.pid, p.gpu_index, p.gpu_uuid, p.mig_uuid, p.owner, p.grant)
                text = was.get(key)
                if text is None:
                    text = self._label_text(p)
                now[key] = text
                live.append((text, p))
        self._labels = now
        out = []
        for (name, doc), field_name in ((MEMORY, "used_memory_bytes"), (SM, "sm_util_pct")):
            out.append(f"# HELP {name} {doc}\n# TYPE {name} gauge\n")
            for labels, p in live:
                value = getattr(p, field_name)
                if value is not None:
                    out.append(f"{name}{{{labels}}} {floatToGoString(value)}\n")
        return "".join(out)
