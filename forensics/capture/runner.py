"""Runs collectors, each in its own child process under a hard deadline, and writes the bundle.

Why child processes: an NVML call can sleep uninterruptibly once a GPU has fallen off the bus, and
a wedged Docker or Kubernetes daemon can hold a socket forever. A thread cannot be stopped; a
process group can be killed. Each child writes its evidence straight into the staging directory,
so what it wrote before it was killed is kept, and reports its status, notes, hints and
redaction counts to the parent over a pipe (the children themselves: forensics/capture/children.py).

Phases: snapshots, one collector after another in order of volatility (hints flow from earlier
collectors to later ones); then, with ``--duration``, one sampling child per collector that can
sample, all running together over the window. The bundle is written even if every collector
failed, and on SIGINT/SIGTERM from whatever was collected, marked interrupted.

Nothing outlives the capture: every child is set to die with it (forensics/collect/lifeline.py),
and a capture starts by removing the staging directories, partial archives and name reservations
that captures killed earlier left in its output directory (forensics/bundle/leftovers.py). The
bundle's name is reserved, and the host named in the manifest, by forensics/capture/naming.py.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.bundle.format import iso, iso_from_unix, utc_now
from forensics.bundle.leftovers import sweep_abandoned
from forensics.bundle.redact import Redactor
from forensics.bundle.sink import EvidenceSink
from forensics.bundle.writer import BundleWriter
from forensics.capture.children import Child, ChildPool, classify, one_line
from forensics.capture.naming import history_host, host_identity, reserve_name
from forensics.capture.registry import load_collectors, not_selected
from forensics.collect.context import CaptureOptions, CollectContext, Tick, merge_hints
from forensics.errors import SourcePermissionDenied, SourceUnavailable, UsageError
from forensics.humanize import format_bytes
from forensics.specs import ring as ring_spec

__all__ = ["CaptureResult", "CollectorRecord", "run_capture", "stderr_notice"]

_GRACE_S = 5.0
_MIN_SLOT_S = 2.0  # seconds of --timeout kept back for each collector still to run


@dataclass
class CollectorRecord:
    """One collector's line in the manifest."""

    name: str
    status: str = "skipped"
    started: str | None = None
    duration_s: float = 0.0
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    sampling: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "status": self.status,
            "started": self.started,
            "duration_s": round(self.duration_s, 4),
            "error": self.error,
            "notes": self.notes,
        }
        if self.sampling is not None:
            d["sampling"] = self.sampling
        return d


@dataclass
class CaptureResult:
    path: Path
    manifest: dict[str, Any]
    interrupted: bool


def _staged_files(root: Path) -> set[str]:
    out = set()
    for dirpath, _dirs, files in os.walk(root):
        for fn in files:
            out.add(os.path.relpath(os.path.join(dirpath, fn), root))
    return out


class _Runner:
    def __init__(
        self,
        options: CaptureOptions,
        out_dir: Path,
        collectors: list[Any] | None,
        progress: Callable[[str], None] | None,
        notice: Callable[[str], None] | None = None,
        live: Callable[[str], None] | None = None,
    ) -> None:
        self.options = options
        self.out_dir = out_dir
        self.progress = progress or (lambda _msg: None)
        self.live = live or (lambda _msg: None)
        self.roots: dict[str, set[str]] = {}  # collector -> top directories of the members it wrote
        self.notice = notice or stderr_notice
        self.swept: list[str] = []
        if collectors is not None:
            self.collectors = collectors
        else:
            self.collectors = load_collectors(only=options.only, skip=options.skip, extra=options.extra)
        self.redactor = Redactor(enabled=options.redact, key=_ring_key(options))
        self.hints: dict[str, list[Any]] = {}
        self.records: dict[str, CollectorRecord] = {}
        self.interrupted = False
        self.pool = ChildPool(lambda: self.interrupted)
        self.start_mono = time.monotonic()
        self.global_deadline = self.start_mono + options.timeout_s + options.duration_s

    # -- signals ----------------------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.interrupted = True
        self.progress(f"{signal.Signals(signum).name}: finishing the bundle from what was collected")

    # -- phases -----------------------------------------------------------------------------
    def _select(self) -> list[Any]:
        known = {c.name for c in self.collectors}
        for opt, names in (("--only", self.options.only), ("--skip", self.options.skip)):
            unknown = sorted(set(names) - known)
            if unknown:
                raise UsageError(
                    f"{opt}: unknown collector {', '.join(unknown)} (known: {', '.join(sorted(known))})"
                )
        chosen = []
        for c in self.collectors:
            rec = CollectorRecord(name=c.name)
            self.records[c.name] = rec
            reason = not_selected(c.name, self.options.only, self.options.skip, self.options.extra)
            if reason:
                rec.error = reason
            else:
                chosen.append(c)
        if not chosen:  # --only host --skip host: an empty bundle would look like a capture
            unconfigured = [f"{name} is {rec.error}" for name, rec in self.records.items()
                            if name in self.options.only and (rec.error or "").startswith("not configured")]
            raise UsageError("; ".join(unconfigured) if unconfigured else "--only and --skip leave no collector to run")
        return chosen

    def _merge_result(self, rec: CollectorRecord, result: dict[str, Any] | None) -> None:
        if not result:
            return
        rec.notes.extend(str(n) for n in result.get("notes") or [])
        merge_hints(self.hints, result.get("hints") or {})
        for cat, n in (result.get("redactions") or {}).items():
            self.redactor.counts[cat] += int(n)

    def _snapshot_phase(self, chosen: list[Any], sink: EvidenceSink) -> None:
        for position, collector in enumerate(chosen):
            rec = self.records[collector.name]
            if self.interrupted:
                rec.status, rec.error = "skipped", "capture interrupted before this collector ran"
                continue
            now = time.monotonic()
            deadline = min(now + float(getattr(collector, "timeout_s", 30.0)), self.global_deadline)
            if deadline - now < 0.05:
                rec.status, rec.error = "skipped", "no time left in the global --timeout"
                continue
            # The collector is killed at ``kill_at``, which keeps back a slot of the budget for
            # each later collector, so one hung source does not spend all of --timeout and leave
            # the rest "skipped" (no effect on a generous budget). ``kill_at`` is also the
            # deadline its context reports: a collector paces itself by it (NVML shrinks its
            # per-call timeout to fit), so it stops waiting and writes what it read before the
            # runner's SIGKILL would throw that away.
            kill_at = min(deadline, self.global_deadline - _reserve_for_later(
                self.global_deadline - now, len(chosen) - position - 1))
            before = _staged_files(sink.root)
            rec.started = iso(utc_now())
            self.live(f"collecting {collector.name} ({position + 1} of {len(chosen)})")
            hints = {k: list(v) for k, v in self.hints.items()}

            def body(collector: Any = collector, hints: dict[str, list[Any]] = hints,
                     deadline: float = kill_at) -> dict[str, Any]:
                ctx = self._context(collector.name, sink, hints, deadline)
                try:
                    collector.snapshot(ctx)
                except BaseException as exc:
                    status, error = classify(exc)
                    return self._child_result(ctx, status, error)
                status = "partial" if ctx.partial_reasons else "ok"
                return self._child_result(ctx, status, "; ".join(ctx.partial_reasons) or None)

            def done(child: Child, result: dict[str, Any] | None, error: str | None,
                     rec: CollectorRecord = rec, before: set[str] = before) -> None:
                rec.duration_s = time.monotonic() - child.started_mono
                if result is not None:
                    rec.status = str(result.get("status", "failed"))
                    rec.error = result.get("error")
                    self._merge_result(rec, result)
                else:
                    wrote = bool(_staged_files(sink.root) - before)
                    rec.status = "partial" if wrote else "failed"
                    rec.error = error
                self.roots[rec.name] = {m.split(os.sep, 1)[0] for m in _staged_files(sink.root) - before}

            self.pool.spawn(collector.name, kill_at, body)
            if position == 0:  # while the first child runs: not on the path to the bundle
                self.redactor.prepare()
            self.pool.wait_all(done)

    def _sampling_phase(self, chosen: list[Any], sink: EvidenceSink) -> None:
        # a collector with ``end_sampling`` and no ``sample`` (kubernetes: the Node read again)
        # takes no ticks: its child waits out the window, then runs the end-of-window read
        samplers = [
            c for c in chosen
            if (callable(getattr(c, "sample", None)) or callable(getattr(c, "end_sampling", None)))
            and self.records[c.name].status in ("ok", "partial")
        ]
        if not samplers or self.interrupted:
            return
        window_start = time.monotonic()
        duration, interval = self.options.duration_s, max(self.options.interval_s, 0.05)
        deadline = min(window_start + duration + _GRACE_S + interval, self.global_deadline)
        self.live("")
        self.progress(f"sampling {len(samplers)} collectors for {duration:g} s every {interval:g} s")
        hints = {k: list(v) for k, v in self.hints.items()}

        for collector in samplers:
            def body(collector: Any = collector) -> dict[str, Any]:
                ctx = self._context(collector.name, sink, hints, deadline)
                ticks, fatal = 0, None
                errors: list[str] = []
                index = 0
                end_only = not callable(getattr(collector, "sample", None))
                if end_only:
                    time.sleep(max(0.0, window_start + duration - time.monotonic()))
                while not end_only:
                    due = window_start + index * interval
                    if due - window_start > duration + 1e-6:
                        break
                    delay = due - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    elif -delay > interval and index > 0:  # fell behind: skip missed ticks
                        index += int(-delay // interval)
                        continue
                    try:
                        collector.sample(ctx, Tick(index=index, time_unix=time.time()))
                        ticks += 1
                    except (SourceUnavailable, SourcePermissionDenied) as exc:
                        fatal = classify(exc)[1]
                        break
                    except Exception as exc:  # noqa: BLE001 - one bad tick is recorded, not fatal
                        if len(errors) < 20:
                            errors.append(f"tick {index}: {one_line(exc)}")
                    index += 1
                end = getattr(collector, "end_sampling", None)
                if callable(end):
                    try:
                        end(ctx)
                    except Exception as exc:  # noqa: BLE001
                        errors.append(f"end of sampling: {one_line(exc)}")
                errors.extend(f"partial: {r}" for r in ctx.partial_reasons[:20])
                res = self._child_result(ctx, "ok", None)
                res["sampling"] = {"ticks": None if end_only else ticks, "errors": errors, "stopped": fatal}
                if end_only:
                    res["sampling"]["end_of_window_only"] = True
                return res

            self.pool.spawn(collector.name, deadline, body)

        ticks = int(duration // interval) + 1
        shown = [""]

        def live_line() -> None:
            elapsed = min(time.monotonic() - window_start, duration)
            due = min(int(elapsed // interval) + 1, ticks)
            line = (f"sampling: {elapsed:.0f} s of {duration:g} s, {duration - elapsed:.0f} s left, "
                    f"tick {due} of {ticks}, {len(self.pool.children)} of {len(samplers)} samplers running")
            if line != shown[0]:
                shown[0] = line
                self.live(line)

        def done(child: Child, result: dict[str, Any] | None, error: str | None) -> None:
            rec = self.records[child.name]
            if result is not None:
                self._merge_result(rec, result)
                rec.sampling = result.get("sampling") or {}
                if rec.sampling.get("errors") or rec.sampling.get("stopped"):
                    rec.status = "partial"
                    first = rec.sampling.get("stopped") or rec.sampling["errors"][0]
                    rec.error = "; ".join(x for x in (rec.error, f"sampling: {first}") if x)
            else:
                rec.sampling = {"ticks": None, "errors": [error or "unknown"], "stopped": error}
                rec.status = "partial"
                rec.error = "; ".join(x for x in (rec.error, f"sampling: {error}") if x)
            rec.duration_s += time.monotonic() - child.started_mono

        self.pool.wait_all(done, live_line)

    def _context(self, name: str, sink: EvidenceSink, hints: dict[str, list[Any]], deadline: float) -> CollectContext:
        self.redactor.counts.clear()  # in the child: count only this collector's redactions
        return CollectContext(self.options, sink, self.redactor, hints, deadline, name)

    def _child_result(self, ctx: CollectContext, status: str, error: str | None) -> dict[str, Any]:
        return {
            "status": status,
            "error": error,
            "notes": ctx.notes,
            "hints": ctx.published,
            "redactions": dict(self.redactor.counts),
        }

    # -- the whole capture ------------------------------------------------------------------
    def _sweep(self) -> None:
        """Remove what captures killed earlier left in the output directory, and say so."""
        for left in sweep_abandoned(self.out_dir):
            self.swept.append(left.path.name)
            self.notice(f"removed {left.kind} {left.path.name} left by capture process "
                        f"{left.owner_pid}, which is gone")

    def run(self) -> CaptureResult:
        hostname = history_host(self.options)
        self._sweep()
        started, reservation = reserve_name(self.out_dir, hostname)
        try:
            writer = BundleWriter(self.out_dir, hostname, when=started)
        except BaseException:
            _unlink_quietly(reservation)
            raise
        old_int = signal.signal(signal.SIGINT, self._on_signal)
        old_term = signal.signal(signal.SIGTERM, self._on_signal)
        try:
            chosen = self._select()
            try:
                self._snapshot_phase(chosen, writer.sink)
                if self.options.duration_s > 0:
                    self._sampling_phase(chosen, writer.sink)
            finally:
                for child in list(self.pool.children.values()):
                    self.pool.kill(child)
                    self.pool.finish(child, "interrupted", lambda *_: None)
            finished = utc_now()
            self.live("")
            for line in self._summary(writer.sink.root):
                self.progress(line)
            manifest = self._manifest(hostname, started, finished)
            path = writer.finish(manifest)
        except BaseException:
            writer.cleanup()
            raise
        finally:
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, old_term)
            _unlink_quietly(reservation)
        return CaptureResult(path=path, manifest=manifest, interrupted=self.interrupted)

    def _summary(self, root: Path) -> list[str]:
        """One line per collector: status, members and bytes it wrote, its error in words."""
        sizes: dict[str, tuple[int, int]] = {}
        for member in _staged_files(root):
            top = member.split(os.sep, 1)[0]
            try:
                size = os.stat(os.path.join(root, member)).st_size
            except OSError:
                size = 0
            n, total = sizes.get(top, (0, 0))
            sizes[top] = (n + 1, total + size)
        lines = []
        for c in self.collectors:
            rec = self.records.get(c.name)
            if rec is None:
                continue
            tops = self.roots.get(c.name, set())
            members = sum(sizes.get(t, (0, 0))[0] for t in tops)
            total = sum(sizes.get(t, (0, 0))[1] for t in tops)
            ticks = (rec.sampling or {}).get("ticks")
            sampled = f", {ticks} ticks" if isinstance(ticks, int) else ""
            error = f": {rec.error}" if rec.error else ""
            written = format_bytes(total, "?")
            lines.append(f"{rec.name:<13} {rec.status:<12} {members:>5} members {written:>10}{sampled}{error}")
        return lines

    def _manifest(self, hostname: str, started: Any, finished: Any) -> dict[str, Any]:
        opts = self.options
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return {
            "host": host_identity(hostname, opts.node_name or os.environ.get("NODE_NAME") or None),
            "capture": {
                "started": iso(started),
                "finished": iso(finished),
                "elapsed_s": round((finished - started).total_seconds(), 3),
                "window": {
                    "duration_s": opts.duration_s,
                    "interval_s": opts.interval_s if opts.duration_s > 0 else None,
                    "since": iso(opts.since) if opts.since else None,
                    "lookback_s": opts.lookback_s,
                },
                "timeout_s": opts.timeout_s,
                "argv": self.redactor.argv(list(opts.argv)),
                "interrupted": self.interrupted,
                "unreaped_collector_processes": self.pool.unreaped,
                "removed_leftovers": self.swept,
                "uid": os.getuid(),
                "euid": os.geteuid(),
                "pid": os.getpid(),
                "resource_use": {
                    "max_rss_kib_self": own.ru_maxrss,
                    "max_rss_kib_children": kids.ru_maxrss,
                    "cpu_s_self": round(own.ru_utime + own.ru_stime, 3),
                    "cpu_s_children": round(kids.ru_utime + kids.ru_stime, 3),
                },
            },
            "collectors": [self.records[c.name].as_json() for c in self.collectors],
            "hints": {k: v[:10_000] for k, v in sorted(self.hints.items())},
            "redaction": self.redactor.summary(),
            **({"trigger": opts.trigger} if opts.trigger is not None else {}),
        }


def _reserve_for_later(left_s: float, later: int) -> float:
    """Seconds of the remaining budget kept back for the ``later`` snapshot collectors: up to
    ``_MIN_SLOT_S`` each, or an equal share of ``left_s`` when the budget is smaller."""
    if later <= 0 or left_s <= 0:
        return 0.0
    return later * min(_MIN_SLOT_S, left_s / (later + 1))


def stderr_notice(message: str) -> None:
    print(f"gpuforensics: {message}", file=sys.stderr, flush=True)


def _ring_key(options: CaptureOptions) -> bytes | None:
    """The flight recorder ring's pseudonym key, so a value redacted in the ring and in this
    capture gets the same pseudonym; None (a fresh per-capture key) when there is no readable ring
    or ``--only``/``--skip`` leave the ``ring`` source out."""
    if not_selected(ring_spec.SPEC.name, options.only, options.skip):
        return None
    # imported here: 0.1 s that a capture without the ring does not pay
    from forensics.ring import load_key, resolve_ring_dir

    try:
        return load_key(resolve_ring_dir(ring_spec.SPEC.read_settings(options.extra).dir))
    except Exception:  # noqa: BLE001 - an unreadable key: the ring collector reports the ring
        return None


def _unlink_quietly(path: Path | None) -> None:
    if path is not None:
        try:
            path.unlink()
        except OSError:
            pass


def run_capture(
    options: CaptureOptions,
    out_dir: Path | str = ".",
    collectors: list[Any] | None = None,
    progress: Callable[[str], None] | None = None,
    notice: Callable[[str], None] | None = None,
    live: Callable[[str], None] | None = None,
) -> CaptureResult:
    """Run every selected collector and write the bundle; return its path and manifest.

    ``collectors`` replaces the registry (tests hand in their own); ``progress`` receives one-line
    status messages (the CLI prints them on stderr when it is a terminal); ``notice`` receives
    what must be said even without a terminal (removed leftovers of killed captures; default:
    printed on stderr as ``gpuforensics: ...``); ``live`` receives the one changing status line
    (which collector runs, sampling's elapsed and remaining time and ticks; ``""`` clears it),
    for a terminal to overwrite in place. After the capture ``progress`` gets one summary line
    per collector (status, members, bytes, error).
    """
    return _Runner(options, Path(out_dir), collectors, progress, notice, live).run()


__all__ += ["iso_from_unix"]
