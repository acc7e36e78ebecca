"""Each workload's and GPU's own series, kept by the recorder for the baseline rules.

:class:`BaselineTracker` reads the live state (forensics.record.live) once per tick and adds each
fresh figure to a bounded per-minute series (:class:`forensics.analysis.baseline.BucketSeries`)
per metric and subject key; :meth:`BaselineTracker.baseline` gives its baseline or says the history
is too short. Only the metrics that a baseline rule names are kept.

The key is what survives a restart (a new container id, a new pod name):

- a pod's container: ``pod NAMESPACE/OWNER/CONTAINER``, OWNER the pod name without the suffix its
  controller generated (``trainer-7d4b9c8f6-x2kqp`` -> ``trainer``; a StatefulSet's ordinal kept);
- a plain container: ``container NAME image IMAGE``;
- a GPU: ``gpu UUID``.

No second store: at start the series are rebuilt from the recorder's own ring
(:func:`seed_from_ring`: the ring's records of the lookback fed through a fresh live state, one
look per bucket, bounded by a deadline); the ring's retention is the history's.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forensics.analysis.baseline import (
    Baseline,
    BaselineSettings,
    BucketSeries,
    InsufficientHistory,
)
from forensics.record.live.cgroups import PSI_KEYS
from forensics.record.live.state import LiveState
from forensics.ring.reader import RingReader
from forensics.specs import nvml as nvml_spec

__all__ = ["MAX_SERIES", "BaselineTracker", "Value", "seed_from_ring", "workload_key"]

MAX_SERIES = 20_000  # series kept at most (the least recently fed are dropped beyond)
# a Deployment's pod: NAME-<pod-template-hash>-<5>; a Job's, a DaemonSet's: NAME-<5>
_GENERATED = re.compile(r"^(.*?)(?:-[a-z0-9]{6,10})?-[a-z0-9]{5}$")

_MISSING: Any = object()
#: (subject as the triggers name it, series key, sample time, value)
Value = tuple[str, str, float, float]


def workload_key(name: str, image: str, pod_namespace: str, pod_name: str, k8s_container: str) -> str:
    """The key a workload's baseline is kept under (module docstring)."""
    if pod_name:
        m = _GENERATED.match(pod_name)
        owner = m.group(1) if m and m.group(1) else pod_name
        return f"pod {pod_namespace}/{owner}/{k8s_container or name}"
    return f"container {name} image {image}" if image else f"container {name}"


def _cname(cid: str, name: str) -> str:
    return f"container {name} ({cid[:12]})" if name else f"container {cid[:12]}"


class BaselineTracker:
    """See the module docstring."""

    def __init__(self, settings: BaselineSettings, metrics: frozenset[str], cgroup_every_s: float = 0.0,
                 workload_every_s: float = 0.0) -> None:
        self.settings = settings
        self.metrics = metrics
        # the cgroup figures are read every this often (the cgroup lines are parsed when read:
        # every tick would parse every busy cgroup's line every tick), by the cgroup sampler's clock
        self.cgroup_every_s = cgroup_every_s
        self._cg_looked = -math.inf
        # the workloads' GPU figures (every GPU process of the tick, summed per owner) as often
        self.workload_every_s = workload_every_s
        self._wl_looked = -math.inf
        self.series: dict[tuple[str, str], BucketSeries] = {}
        self.current: dict[str, list[Value]] = {}
        self._keys: dict[str, tuple[str, str]] = {}  # container id -> (subject, key)
        self._keys_at = -1
        self._nvml_stamp: tuple[int, float] = (-1, 0.0)
        self._who: dict[tuple[int, str, str | None], tuple[str, str] | None] = {}  # (pid, GPU, MIG) -> owner
        self._who_at: tuple[int, int] = (-1, -1)
        self._gpu_t: dict[str, float] = {}
        self._cg_t: dict[str, float] = {}

    # -- reading the live state ----------------------------------------------------------------
    def _container(self, live: LiveState, cid: str) -> tuple[str, str]:
        if self._keys_at != live.refreshes or len(self._keys) > 50_000:
            self._keys, self._keys_at = {}, live.refreshes
        got = self._keys.get(cid)
        if got is None:
            name, image, ns, pod, cname = live.container_identity(cid)
            got = self._keys[cid] = (_cname(cid, name), workload_key(name or cid[:12], image, ns, pod, cname))
        return got

    def observe(self, live: LiveState) -> dict[str, list[Value]]:
        """Add this tick's fresh figures to their series; return them per metric (what the rules
        compare)."""
        out: dict[str, list[Value]] = {}
        metrics = self.metrics
        if "gpu.util" in metrics or "gpu.memory" in metrics:
            gpus = [g for g in live.gpus() if g.t > self._gpu_t.get(g.uuid, -math.inf)]
            for g in gpus:
                self._gpu_t[g.uuid] = g.t
            if "gpu.util" in metrics:
                out["gpu.util"] = [(f"GPU {g.index} ({g.uuid})", f"gpu {g.uuid}", g.t, g.util_pct)
                                   for g in gpus if g.util_pct is not None]
            if "gpu.memory" in metrics:
                out["gpu.memory"] = [(f"GPU {g.index} ({g.uuid})", f"gpu {g.uuid}", g.t, pct)
                                     for g in gpus if (pct := g.memory_used_pct) is not None]
        if "container.gpu.sm" in metrics or "container.gpu.memory" in metrics:
            clock = max((g.t for g in live.gpus()), default=0.0)
            if not 0 <= clock - self._wl_looked < self.workload_every_s:
                self._wl_looked = clock
                out.update(self._workloads(live))
        cg = [m for m in metrics if m == "container.throttled" or m.startswith("psi.")]
        clock = live.cgroup_clock() if cg else 0.0
        if cg and not 0 <= clock - self._cg_looked < self.cgroup_every_s:
            self._cg_looked = clock
            out.update(self._cgroups(live, cg))
        for metric, values in out.items():
            for _, key, t, v in values:
                self._series(metric, key).add(t, v)
        self.current = out
        return out

    def _workloads(self, live: LiveState) -> dict[str, list[Value]]:
        rows = live.process_rows()
        stamp = (live.process_gen, max((r[4] for r in rows), default=0.0))
        if stamp == self._nvml_stamp:
            return {}
        self._nvml_stamp = stamp
        if self._who_at != (live.refreshes, live.process_gen):  # owners change with these only
            self._who, self._who_at = {}, (live.refreshes, live.process_gen)
        who_of = self._who
        want_sm, want_mem = "container.gpu.sm" in self.metrics, "container.gpu.memory" in self.metrics
        totals = {g.uuid: g.memory_total_bytes for g in live.gpus()} if want_mem else {}
        sm: dict[tuple[str, str], list[float]] = {}
        mem: dict[tuple[str, str], list[float]] = {}
        for pid, _idx, uuid, mig, t, used, pct in rows:
            who = who_of.get((pid, uuid, mig), _MISSING)
            if who is _MISSING:
                who = who_of[(pid, uuid, mig)] = self._owner(live, pid, uuid, mig)
            if who is None:
                continue  # a process no container or pod owns has no workload to compare
            if want_sm and pct is not None:
                acc = sm.get(who)
                if acc is None:
                    sm[who] = [t, pct]
                else:
                    acc[0], acc[1] = max(acc[0], t), acc[1] + pct
            if want_mem and used is not None and (total := totals.get(uuid)):
                acc = mem.setdefault(who, [t, 0.0])
                acc[0], acc[1] = max(acc[0], t), acc[1] + 100.0 * used / total
        out: dict[str, list[Value]] = {}
        if want_sm:
            out["container.gpu.sm"] = [(s, k, t, v) for (s, k), (t, v) in sm.items()]
        if want_mem:
            out["container.gpu.memory"] = [(s, k, t, v) for (s, k), (t, v) in mem.items()]
        return out

    def _owner(self, live: LiveState, pid: int, uuid: str, mig: str | None) -> tuple[str, str] | None:
        owner, _ = live.owner_grant(pid, uuid, mig)
        if owner.container_id:
            return self._container(live, owner.container_id)
        if owner.pod_name:
            return (f"pod {owner.pod_namespace}/{owner.pod_name}",
                    workload_key("", "", owner.pod_namespace, owner.pod_name, ""))
        return None

    def _cgroups(self, live: LiveState, metrics: list[str]) -> dict[str, list[Value]]:
        out: dict[str, list[Value]] = {m: [] for m in metrics}
        psi_at = {m: PSI_KEYS.index(tuple(m.split(".")[1:])) for m in metrics if m.startswith("psi.")}
        for path, cid, t, throttled, psi in live.cgroup_rows():
            if not cid or t <= self._cg_t.get(path, -math.inf):
                continue
            self._cg_t[path] = t
            subject, key = self._container(live, cid)
            if "container.throttled" in out and throttled is not None:
                out["container.throttled"].append((subject, key, t, throttled))
            for m, k in psi_at.items():
                if psi and (v := psi[k]) is not None:
                    out[m].append((subject, key, t, v))
        if len(self._cg_t) > 50_000:
            self._cg_t.clear()
        return out

    # -- the series ------------------------------------------------------------------------------
    def _series(self, metric: str, key: str) -> BucketSeries:
        s = self.series.get((metric, key))
        if s is None:
            if len(self.series) >= MAX_SERIES:
                oldest = sorted(self.series, key=lambda k: self.series[k].last_t)[: MAX_SERIES // 10]
                for k in oldest:
                    del self.series[k]
            s = self.series[(metric, key)] = BucketSeries(self.settings)
        return s

    def baseline(self, metric: str, key: str, now: float, max_age_s: float | None = None) -> Baseline | InsufficientHistory:
        """The series' baseline (cached up to ``max_age_s``: forensics.analysis.baseline.BucketSeries)."""
        s = self.series.get((metric, key))
        if s is None:
            return InsufficientHistory(0.0, self.settings.min_history_s, 0, self.settings.min_buckets)
        return s.baseline(now, max_age_s)

    def status(self, now: float) -> dict[str, dict[str, object]]:
        """Per metric and key, the baseline now (or why there is none): the recorder's status."""
        out: dict[str, dict[str, object]] = {}
        for (metric, key), s in sorted(self.series.items())[:200]:
            b = s.baseline(now)
            out.setdefault(metric, {})[key] = b.as_dict()
        return out


def seed_from_ring(tracker: BaselineTracker, ring: Path, now: float, deadline_s: float = 30.0,
                   log: Callable[[str], None] | None = None) -> int:
    """Rebuild the tracker's series from the ring's last ``lookback`` (module docstring): every
    record fed to a fresh live state, the tracker looking once per bucket of the NVML clock.
    Returns the looks made; stops at ``deadline_s`` (logged)."""
    try:
        reader = RingReader(ring)
        records = reader.records(since=now - tracker.settings.lookback_s, keep_writes=True)
    except Exception as exc:  # noqa: BLE001 - an unreadable ring leaves the history empty, never stops the recorder
        if log:
            log(f"baselines: the ring's history could not be read ({exc}); starting without it")
        return 0
    live = LiveState()
    bucket = tracker.settings.bucket_s
    looked = -math.inf
    looks = 0
    stop = time.monotonic() + deadline_s
    try:
        for rec in records:
            live.feed(rec.t, rec.mono, rec.member, rec.op, rec.data)
            if rec.member == nvml_spec.SAMPLES and rec.t - looked >= bucket:
                looked = rec.t
                live.refresh()
                tracker.observe(live)
                looks += 1
                if time.monotonic() > stop:
                    if log:
                        log(f"baselines: rebuilding the history from the ring stopped after {deadline_s:g} s "
                            f"(at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(rec.t))})")
                    break
    except Exception as exc:  # noqa: BLE001 - as above
        if log:
            log(f"baselines: the ring's history could not be read whole ({exc})")
    tracker.current = {}
    return looks
