"""Helpers for the capture tests: test collectors, and run_capture in a forked child.

``run_capture`` installs SIGINT/SIGTERM handlers and lowers its own priority (nice 10); run in the
pytest process it would leave both behind, so every capture here runs in a forked child that
sends its result back over a pipe. Children are waited for and, on a timeout, killed by PID.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.bundle.leftovers import owner_token
from forensics.capture.runner import CaptureResult, run_capture
from forensics.collect.context import CaptureOptions, CollectContext, Tick
from forensics.collect.lifeline import wait_readable


def dead_owner_token() -> str:
    """The owner token of a process that has finished (its leftovers may be removed)."""
    p = subprocess.Popen(["sleep", "30"])
    token = owner_token(p.pid)
    p.kill()
    p.wait()
    return token


@dataclass
class FnCollector:
    """A collector whose snapshot is ``fn(ctx)``."""

    name: str
    fn: Callable[[CollectContext], Any]
    order: int = 10
    timeout_s: float = 10.0

    def snapshot(self, ctx: CollectContext) -> None:
        self.fn(ctx)


@dataclass
class SamplingCollector:
    """Snapshot writes ``<name>/snapshot.json``; each tick appends to ``<name>/samples.jsonl`` after
    ``on_tick(ctx, tick)``; ``end_sampling`` writes ``<name>/end.json`` with the ticks it saw."""

    name: str
    on_tick: Callable[[CollectContext, Tick], None] = lambda _c, _t: None
    order: int = 10
    timeout_s: float = 10.0
    seen: list[int] = field(default_factory=list)

    def snapshot(self, ctx: CollectContext) -> None:
        ctx.sink.write_json(f"{self.name}/snapshot.json", {"hints": ctx.hint("pids")})

    def sample(self, ctx: CollectContext, tick: Tick) -> None:
        self.on_tick(ctx, tick)
        self.seen.append(tick.index)  # state on self lives across ticks (same child process)
        ctx.sink.append_jsonl(f"{self.name}/samples.jsonl",
                              {"index": tick.index, "t": tick.time_unix, "time": tick.time_iso,
                               "hints": ctx.hint("pids")})

    def end_sampling(self, ctx: CollectContext) -> None:
        ctx.sink.write_json(f"{self.name}/end.json", {"seen": self.seen})


def hang(_ctx: CollectContext | None = None, *_a: Any) -> None:
    while True:
        time.sleep(3600)


class ChildCapture:
    """``run_capture`` in a forked child; ``result()`` returns its CaptureResult or re-raises its error."""

    def __init__(self, options: CaptureOptions, out_dir: Path, collectors: list[Any]) -> None:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 0
            try:
                os.close(r)
                try:
                    payload: tuple[str, Any] = ("ok", run_capture(options, out_dir, collectors=collectors))
                except BaseException as exc:  # noqa: BLE001 - handed to the parent
                    payload = ("exc", exc)
                try:
                    data = pickle.dumps(payload)
                except Exception as exc:  # noqa: BLE001
                    data = pickle.dumps(("exc", RuntimeError(f"unpicklable result: {exc!r}")))
                view = memoryview(data)
                while view:
                    view = view[os.write(w, view):]
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        self.pid = pid
        self._fd = r
        self._status: int | None = None

    def result(self, timeout: float = 60.0) -> CaptureResult:
        deadline = time.monotonic() + timeout
        buf = bytearray()
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"capture child {self.pid} still running after {timeout} s")
                ready = wait_readable([self._fd], left)
                if not ready:
                    continue
                chunk = os.read(self._fd, 1 << 16)
                if not chunk:
                    break
                buf.extend(chunk)
        finally:
            self.close()
        if not buf:
            raise RuntimeError(f"capture child exited with status {self._status} and no result")
        kind, value = pickle.loads(bytes(buf))
        if kind == "exc":
            raise value
        assert isinstance(value, CaptureResult)
        return value

    def close(self) -> None:
        if self._status is not None:
            return
        os.close(self._fd)
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            os.kill(self.pid, signal.SIGKILL)
            _, status = os.waitpid(self.pid, 0)
        self._status = status


def wait_for(path: Path, timeout: float = 20.0) -> str:
    """Wait until ``path`` exists and is non-empty; return its text."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size:
            return path.read_text()
        time.sleep(0.02)
    raise TimeoutError(f"{path} did not appear within {timeout} s")


def pid_gone(pid: int, timeout: float = 5.0) -> bool:
    """True once ``pid`` no longer exists (or is a zombie nobody will reap: not ours)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def kill_pid(pid: int) -> None:
    """Clean up a process a test started (by PID), ignoring one that is already gone."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
