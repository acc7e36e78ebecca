"""What happens when a trigger fires: a capture, bounded, beside the recorder loop.

:class:`TriggerEngine` is the recorder's one hook for triggers: ``tick()`` once per recorder tick
(the live state refreshed when identities changed, the rules evaluated, the capture and the
``--on-capture`` commands polled: it never waits on any of them) and ``close()`` on stop.

- A firing becomes a capture unless that trigger started one less than ``cooldown_s`` ago
  (counted as ``suppressed``). One capture runs at a time: a firing while one runs waits, one per
  trigger, the latest kept, and starts when the running one ends (if its cooldown allows).
- The capture is ``python -m forensics.capture.triggered`` (capture's own
  ``run_capture``: the same collectors, sampling ``trigger_duration_s`` at the recorder's interval,
  ``--since`` the condition's start minus ``margin_s``, the recorder's ring folded in) in its own
  process group, armed with ``PR_SET_PDEATHSIG`` (collect/lifeline.py) so it cannot outlive the
  recorder; killed (group) past its deadline, or on the recorder's stop after ``stop_grace_s``.
- Its manifest carries ``trigger`` (docs/bundle-format.md); when it ends one line is logged with
  the bundle path, then bundles in ``bundles`` (``gpuforensics-*.tgz``) are rotated: newest first,
  at most ``keep`` and at most ``keep_bytes`` together (the newest is always kept); the capture's
  stderr log, the staging directory and partial archive a capture killed with its recorder left
  are removed then and when the next recorder starts.
- ``on_capture`` (argv, the bundle path appended) runs in its own process group, killed after
  ``on_capture_timeout_s``; its exit status is logged. At most ``MAX_ON_CAPTURE`` run at once.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.bundle.format import iso_from_unix
from forensics.bundle.leftovers import TRIGGER_LOG_PREFIX, owner_token, sweep_abandoned
from forensics.collect.lifeline import die_with_parent
from forensics.errors import UsageError
from forensics.record.live.state import LiveState
from forensics.record.triggers.baseline_rules import BaselineRules
from forensics.record.triggers.evaluate import Evaluator, Firing
from forensics.record.triggers.grammar import Rule
from forensics.specs.cgroups import SPEC as CGROUPS_SPEC

__all__ = ["MAX_ON_CAPTURE", "TriggerEngine", "TriggerOptions", "rotate_bundles"]

MAX_ON_CAPTURE = 4
BUNDLE_GLOB = "gpuforensics-*.tgz"


@dataclass(frozen=True)
class TriggerOptions:
    """``record --trigger ...`` and its bounds."""

    rules: tuple[Rule, ...]
    bundles: Path
    trigger_duration_s: float = 30.0
    cooldown_s: float = 900.0
    keep: int = 10
    keep_bytes: int = 2 << 30
    on_capture: tuple[str, ...] = ()
    on_capture_timeout_s: float = 300.0
    margin_s: float = 60.0
    capture_timeout_s: float = 120.0
    stop_grace_s: float = 5.0
    active_sm_pct: float = 1.0
    capture_args: dict[str, Any] = field(default_factory=dict)  # more CaptureOptions fields (tests)

    def check(self) -> None:
        if not self.rules:
            raise UsageError("no --trigger rule given")
        if not 1 <= self.trigger_duration_s <= 3600:
            raise UsageError(f"--trigger-duration must be between 1 s and 1 h, not {self.trigger_duration_s:g} s")
        if self.keep < 1:
            raise UsageError("--keep must be at least 1")
        if self.keep_bytes < 1:
            raise UsageError("--keep-bytes must be positive")
        if self.on_capture and shutil.which(self.on_capture[0]) is None:
            raise UsageError(f"--on-capture: command not found: {self.on_capture[0]!r}")
        if not self.on_capture_timeout_s > 0:
            raise UsageError("--on-capture-timeout must be positive")
        try:
            self.bundles.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--bundles: cannot create {self.bundles}: {exc.strerror or exc}") from None
        if not self.bundles.is_dir() or not os.access(self.bundles, os.W_OK | os.X_OK):
            raise UsageError(f"--bundles: {self.bundles} is not a writable directory")


def parse_on_capture(cmd: str | None) -> tuple[str, ...]:
    if not cmd:
        return ()
    try:
        argv = tuple(shlex.split(cmd))
    except ValueError as exc:
        raise UsageError(f"--on-capture: {exc}: {cmd!r}") from None
    if not argv:
        raise UsageError("--on-capture: empty command")
    return argv


def rotate_bundles(directory: Path, keep: int, keep_bytes: int, busy: frozenset[str] = frozenset()) -> list[Path]:
    """Delete the oldest ``gpuforensics-*.tgz`` regular files of ``directory`` beyond ``keep``
    bundles or ``keep_bytes`` together (the newest is always kept, and so are ``busy`` names);
    return what was deleted. What killed captures left there (their stderr logs, staging
    directories, partial archives: forensics.bundle.leftovers) goes first, once its owner is gone."""
    sweep_abandoned(directory)
    found: list[tuple[float, str, int, Path]] = []
    for p in directory.glob(BUNDLE_GLOB):
        try:
            st = p.lstat()
        except OSError:
            continue
        if p.is_symlink() or not p.is_file():
            continue
        found.append((st.st_mtime, p.name, st.st_size, p))
    found.sort(reverse=True)
    removed: list[Path] = []
    total = 0
    for n, (_, name, size, path) in enumerate(found):
        total += size
        if n == 0 or name in busy or (n < keep and total <= keep_bytes):
            continue
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass
        total -= size
    return removed


@dataclass
class _Running:
    firing: Firing
    proc: subprocess.Popen[bytes]
    started: float
    deadline: float
    log_path: Path


@dataclass
class _Hook:
    proc: subprocess.Popen[bytes]
    bundle: str
    deadline: float
    started: float


class TriggerEngine:
    """See the module docstring; ``counters`` (firings, captures, on-capture outcomes) for the
    recorder's status and the metrics exporter."""

    def __init__(self, options: TriggerOptions, live: LiveState, log: Callable[[str], None], *,
                 ring: Path, interval_s: float, redact: bool = True, nvml_library: str | None = None,
                 extra: dict[str, str] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self.live = live
        self.log = log
        self.ring = ring
        self.interval_s = interval_s
        self.redact = redact
        self.nvml_library = nvml_library
        self.extra = dict(extra or {})
        self.clock = clock
        # a silence longer than this is "not sampled"; the recorder's cgroup gating leaves a quiet
        # cgroup silent for up to cgroups.idle_full_s, which must stay a quiet cgroup, not a gone one
        idle_full_s = CGROUPS_SPEC.read_settings(self.extra).idle_full_s
        self.evaluator = Evaluator(options.rules, max_gap_s=max(10.0, 5 * interval_s, idle_full_s),
                                   active_sm_pct=options.active_sm_pct, interval_s=interval_s)
        # the baseline rules: each subject's own series, rebuilt from the ring's history at start
        self.baselines: BaselineRules | None = None
        if any(r.kind == "baseline" for r in options.rules):
            self.baselines = BaselineRules(options.rules, max_gap_s=max(10.0, 5 * interval_s, idle_full_s))
            t0 = time.perf_counter()
            looks = self.baselines.seed(ring, time.time(), log=self.log)
            self.log(f"baselines: {looks} looks at the ring's history in {time.perf_counter() - t0:.1f} s")
        self.last_start: dict[str, float] = {}
        self.pending: dict[str, Firing] = {}
        self.running: _Running | None = None
        self.hooks: list[_Hook] = []
        self.counters: Counter[str] = Counter()
        self.per_rule: dict[str, Counter[str]] = {r.text: Counter() for r in options.rules}
        self.bundles: list[str] = []
        self.eval_s = 0.0
        left = sweep_abandoned(options.bundles)  # a recorder before this one killed mid-capture
        if left:
            self.log(f"removed {len(left)} leftovers of interrupted triggered captures in {options.bundles}")

    # -- the tick ------------------------------------------------------------------------------
    def tick(self) -> None:
        t0 = time.perf_counter()
        self.live.refresh()
        firings = self.evaluator.evaluate(self.live)
        if self.baselines is not None:
            firings += self.baselines.evaluate(self.live)
        self.eval_s += time.perf_counter() - t0
        for f in firings:
            self.offer(f)
        self._poll_capture()
        self._poll_hooks()
        self._start_pending()

    def offer(self, f: Firing) -> None:
        """A firing: a capture now, later (one is running), or none (inside the trigger's cooldown)."""
        name = f.rule.text
        now = self.clock()
        last = self.last_start.get(name)
        if last is not None and now - last < self.options.cooldown_s:
            self.per_rule[name]["suppressed"] += 1
            return
        self.per_rule[name]["fired"] += 1
        if self.running is not None:
            if name not in self.pending:
                self.per_rule[name]["waited"] += 1
            self.pending[name] = f
            return
        self._start(f)

    def _start_pending(self) -> None:
        while self.running is None and self.pending:
            name, f = next(iter(self.pending.items()))
            del self.pending[name]
            last = self.last_start.get(name)
            if last is not None and self.clock() - last < self.options.cooldown_s:
                continue
            self._start(f)

    # -- the capture ---------------------------------------------------------------------------
    def trigger_doc(self, f: Firing, since: float) -> dict[str, Any]:
        r = f.rule
        return {
            "name": r.text, "rule": r.describe(), "kind": r.kind, "metric_or_event": r.name,
            "op": r.op or None, "threshold_pct": r.threshold, "threshold_from": r.threshold_from or None,
            "duration_s": r.duration_s, "xid": r.xid,
            "subject": f.subject, "value": f.value, "summary": f.summary, "member": f.member,
            "crossed_at": iso_from_unix(f.crossed_at), "fired_at": iso_from_unix(f.t),
            "also_matching_events": f.also, "since": iso_from_unix(since),
            **({"baseline": f.baseline} if f.baseline is not None else {}),
            "cooldown_s": self.options.cooldown_s, "recorder_pid": os.getpid(),
        }

    def _spec(self, f: Firing) -> dict[str, Any]:
        since = min(f.crossed_at, f.t) - self.options.margin_s
        if f.baseline is not None:  # the bundle carries the history the baseline was taken from
            since -= min(float(f.baseline["history_s"]), float(f.baseline["window_s"]))
        return {"out": str(self.options.bundles), "trigger": self.trigger_doc(f, since), "options": {
            "duration_s": self.options.trigger_duration_s, "interval_s": min(self.interval_s, self.options.trigger_duration_s),
            "timeout_s": self.options.capture_timeout_s, "redact": self.redact, "since_unix": since,
            "nvml_library": self.nvml_library, "extra": {**self.extra, "ring.dir": str(self.ring)},
            "argv": ["gpuforensics", "record", "--trigger", f.rule.text], **self.options.capture_args}}

    def _start(self, f: Firing) -> None:
        name = f.rule.text
        self.last_start[name] = self.clock()
        # named by this recorder's token: a recorder killed mid-capture leaves it to the next sweep
        fd, log_name = tempfile.mkstemp(prefix=f"{TRIGGER_LOG_PREFIX}{owner_token()}.", suffix=".log", dir=self.options.bundles)
        parent = os.getpid()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "forensics.capture.triggered"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=fd, close_fds=True,
                preexec_fn=lambda: _enter_capture_child(parent))  # noqa: PLW1509 - see _enter_capture_child
        except OSError as exc:
            os.close(fd)
            Path(log_name).unlink(missing_ok=True)
            self.per_rule[name]["failed"] += 1
            self.log(f"trigger {name} fired ({f.summary}) but the capture could not start: {exc}")
            return
        os.close(fd)
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps(self._spec(f)).encode())
            proc.stdin.close()
        except OSError:
            pass
        now = self.clock()
        budget = self.options.trigger_duration_s + self.options.capture_timeout_s + 60.0
        self.running = _Running(f, proc, now, now + budget, Path(log_name))
        self.counters["captures_started"] += 1

    def _poll_capture(self, final: bool = False) -> None:
        run = self.running
        if run is None:
            return
        code = run.proc.poll()
        if code is None:
            if self.clock() < run.deadline and not final:
                return
            _kill_group(run.proc)
            code = run.proc.wait()
            self.log(f"trigger {run.firing.rule.text}: capture killed after {self.clock() - run.started:.0f} s")
        self.running = None
        assert run.proc.stdout is not None
        out = run.proc.stdout.read(1 << 16).decode("utf-8", "replace")
        run.proc.stdout.close()
        try:
            err_tail = run.log_path.read_bytes()[-2000:].decode("utf-8", "replace").strip()
        except OSError:
            err_tail = ""
        run.log_path.unlink(missing_ok=True)
        result: dict[str, Any] = {}
        for line in out.splitlines()[::-1]:
            try:
                result = json.loads(line)
                break
            except ValueError:
                continue
        name, f = run.firing.rule.text, run.firing
        path = result.get("path")
        if not isinstance(path, str):
            self.per_rule[name]["failed"] += 1
            self.counters["captures_failed"] += 1
            why = result.get("error") or err_tail.splitlines()[-1:] or [f"exit {code}"]
            self.log(f"trigger {name} fired ({f.summary}): capture failed (exit {code}): "
                     f"{why if isinstance(why, str) else why[0]}")
            return
        self.per_rule[name]["captured"] += 1
        self.counters["captures_ok" if not result.get("incomplete") else "captures_incomplete"] += 1
        self.bundles.append(path)
        incomplete = f"; incomplete: {', '.join(result['incomplete'])}" if result.get("incomplete") else ""
        self.log(f"trigger {name} fired at {iso_from_unix(f.t)} ({f.summary}): bundle {path}{incomplete}")
        busy = frozenset(Path(h.bundle).name for h in self.hooks)
        removed = rotate_bundles(self.options.bundles, self.options.keep, self.options.keep_bytes, busy | {Path(path).name})
        self.counters["bundles_rotated"] += len(removed)
        if self.options.on_capture:
            self._run_hook(path)

    # -- --on-capture --------------------------------------------------------------------------
    def _run_hook(self, bundle: str) -> None:
        if len(self.hooks) >= MAX_ON_CAPTURE:
            self.counters["on_capture_skipped"] += 1
            self.log(f"--on-capture not run for {bundle}: {MAX_ON_CAPTURE} still running")
            return
        parent = os.getpid()
        try:
            proc = subprocess.Popen([*self.options.on_capture, bundle], stdin=subprocess.DEVNULL, stdout=2,
                                    close_fds=True, preexec_fn=lambda: _enter_capture_child(parent))  # noqa: PLW1509
        except OSError as exc:
            self.counters["on_capture_failed"] += 1
            self.log(f"--on-capture {self.options.on_capture[0]} could not start for {bundle}: {exc}")
            return
        now = self.clock()
        self.hooks.append(_Hook(proc, bundle, now + self.options.on_capture_timeout_s, now))

    def _poll_hooks(self, final: bool = False) -> None:
        left: list[_Hook] = []
        for h in self.hooks:
            code = h.proc.poll()
            if code is None and self.clock() < h.deadline and not final:
                left.append(h)
                continue
            if code is None:
                _kill_group(h.proc)
                h.proc.wait()
                self.counters["on_capture_timed_out"] += 1
                self.log(f"--on-capture for {h.bundle}: killed after {self.clock() - h.started:.0f} s "
                         f"({'recorder stopping' if final else f'timeout {self.options.on_capture_timeout_s:g} s'})")
                continue
            self.counters["on_capture_ok" if code == 0 else "on_capture_failed"] += 1
            self.log(f"--on-capture for {h.bundle}: exit status {code}")
        self.hooks = left

    # -- stop ----------------------------------------------------------------------------------
    def close(self) -> None:
        """The recorder stops: the running capture gets SIGTERM (it writes what it has), then is
        killed after ``stop_grace_s``; on-capture commands are killed."""
        run = self.running
        if run is not None and run.proc.poll() is None:
            try:
                os.killpg(run.proc.pid, signal.SIGTERM)
            except OSError:
                pass
            try:
                run.proc.wait(self.options.stop_grace_s)
            except subprocess.TimeoutExpired:
                pass
        self._poll_capture(final=True)
        self._poll_hooks(final=True)

    def status(self) -> dict[str, Any]:
        return {"rules": {k: dict(v) for k, v in self.per_rule.items()}, **dict(self.counters),
                "bundles": list(self.bundles[-20:]), "evaluations": self.evaluator.evaluations,
                "evaluation_s": round(self.eval_s, 6), "attributions": self.live.refreshes,
                "capture_running": self.running is not None,
                **({"baselines": self.baselines.tracker.status(time.time()),
                    "baseline_insufficient": dict(self.baselines.insufficient)} if self.baselines is not None else {})}


def _enter_capture_child(parent: int) -> None:
    """In the forked capture or hook, before exec: die with the recorder, own process group.

    It makes system calls only (prctl through the libc handle loaded before any fork, getppid,
    setpgid, sigaction): the one other thread the recorder may run, the ``--metrics-addr`` server,
    holds no lock these need, so the child cannot block on a lock held at the fork."""
    die_with_parent(parent)
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for fn in (os.killpg, os.kill):
        try:
            fn(proc.pid, signal.SIGKILL)
        except OSError:
            pass

