"""Collector child processes: forked with a lifeline, a result over a pipe, a hard deadline.

Each collector (a snapshot, or one sampling loop) runs in a child of the capture, in its own
process group, set to die with its parent (forensics/collect/lifeline.py). The child reports one
JSON result over its pipe; the parent reads the pipes of all running children, kills a child past
its deadline or on interrupt, and reaps it without waiting long (a process in uninterruptible
sleep survives SIGKILL until the kernel lets go, and the capture must still finish). What a child
raises becomes a status and a one-line error (:func:`classify`).
"""

from __future__ import annotations

import json
import os
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from forensics.collect.lifeline import fork_child, wait_readable
from forensics.errors import (
    CollectorError,
    SourcePermissionDenied,
    SourceTimeout,
    SourceUnavailable,
    sentence,
)

__all__ = ["Child", "ChildPool", "classify", "one_line"]

_RESULT_CAP = 8 << 20  # bytes a child may report over its pipe


@dataclass
class Child:
    """One collector child: its process (group) id, the read end of its result pipe, its deadline."""

    name: str
    pid: int
    fd: int
    deadline: float
    started_mono: float
    buf: bytearray = field(default_factory=bytearray)
    done: bool = False


def one_line(exc: BaseException) -> str:
    """An unexpected exception as one line: its type, then its text as a sentence."""
    text = sentence(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def classify(exc: BaseException) -> tuple[str, str]:
    """(status, error) of a collector's exception; the error is a sentence (no Python reprs)."""
    if isinstance(exc, SourcePermissionDenied):
        msg = sentence(str(exc))
        return "unavailable", msg if msg.lower().startswith("permission denied") else f"permission denied: {msg}"
    if isinstance(exc, SourceUnavailable):
        return "unavailable", sentence(str(exc)) or "source unavailable"
    if isinstance(exc, PermissionError):
        return "unavailable", f"permission denied: {exc.filename or sentence(str(exc))}"
    if isinstance(exc, SourceTimeout):
        return "failed", f"timed out: {sentence(str(exc))}"
    if isinstance(exc, CollectorError):
        return "failed", sentence(str(exc))
    return "failed", one_line(exc)


class ChildPool:
    """The running children of one capture, keyed by the read end of their result pipe;
    ``interrupted`` says when a signal asked the capture to stop (every child is then killed)."""

    def __init__(self, interrupted: Callable[[], bool]) -> None:
        self.children: dict[int, Child] = {}
        self.unreaped: list[str] = []  # children that did not exit after SIGKILL
        self._interrupted = interrupted

    def spawn(self, name: str, deadline: float, body: Callable[[], dict[str, Any]]) -> Child:
        r, w = os.pipe()

        def run() -> None:  # in the child (fork_child: a SIGKILLed capture takes its collectors with it)
            os.close(r)
            try:
                result = body()
            except BaseException as exc:  # noqa: BLE001 - the child reports everything
                status, error = classify(exc)
                result = {"status": status, "error": error}
                if os.environ.get("GPUFORENSICS_DEBUG"):
                    result["traceback"] = traceback.format_exc()
            data = json.dumps(result, default=str).encode()[:_RESULT_CAP]
            view = memoryview(data)
            while view:
                n = os.write(w, view)
                view = view[n:]

        pid = fork_child(run)
        os.close(w)
        child = Child(name=name, pid=pid, fd=r, deadline=deadline, started_mono=time.monotonic())
        self.children[r] = child
        return child

    def kill(self, child: Child) -> None:
        for kill in (os.killpg, os.kill):
            try:
                kill(child.pid, signal.SIGKILL)
            except OSError:
                pass

    def wait_all(self, on_done: Callable[[Child, dict[str, Any] | None, str | None], None],
                  on_wait: Callable[[], None] | None = None) -> None:
        """Wait for every running child; kill those past their deadline or on interrupt.
        ``on_wait`` runs at least every 0.25 s while they run (the live progress line)."""
        while self.children:
            if on_wait is not None:
                on_wait()
            now = time.monotonic()
            fds = list(self.children)
            wait = max(0.0, min(min(c.deadline for c in self.children.values()) - now, 0.25))
            try:
                ready = wait_readable(fds, wait)
            except InterruptedError:
                ready = []
            for fd in ready:
                child = self.children[fd]
                try:
                    chunk = os.read(fd, 1 << 16)
                except OSError:
                    chunk = b""
                if chunk:
                    if len(child.buf) < _RESULT_CAP:
                        child.buf.extend(chunk)
                    continue
                self.finish(child, None, on_done)
            now = time.monotonic()
            for child in list(self.children.values()):
                if self._interrupted():
                    self.kill(child)
                    self.finish(child, "interrupted (capture stopped by signal)", on_done)
                elif now >= child.deadline:
                    self.kill(child)
                    limit = child.deadline - child.started_mono
                    self.finish(child, f"timed out after {limit:.1f} s (killed)", on_done)

    def _reap(self, child: Child, patience_s: float = 2.0) -> int:
        """Reap the child, but never wait long: a process in uninterruptible sleep (NVML after a
        GPU fell off the bus) survives SIGKILL until the kernel lets go, and capture must finish."""
        end = time.monotonic() + patience_s
        while True:
            try:
                pid, status = os.waitpid(child.pid, os.WNOHANG)
            except ChildProcessError:
                return 0
            if pid:
                return status
            if time.monotonic() >= end:
                self.kill(child)
                self.unreaped.append(child.name)
                return -1
            time.sleep(0.02)

    def finish(self, child: Child, killed_reason: str | None,
                on_done: Callable[[Child, dict[str, Any] | None, str | None], None]) -> None:
        self.children.pop(child.fd, None)
        os.close(child.fd)
        status = self._reap(child)
        result: dict[str, Any] | None = None
        error = killed_reason
        if status == -1 and killed_reason is None:
            killed_reason = "collector process did not exit (uninterruptible sleep?); left behind, not reaped"
        if killed_reason is None:
            try:
                result = json.loads(bytes(child.buf)) if child.buf else None
            except ValueError:
                result = None
            if result is None:
                if os.WIFSIGNALED(status):
                    error = f"collector process died from signal {signal.Signals(os.WTERMSIG(status)).name}"
                else:
                    error = f"collector process exited with status {os.WEXITSTATUS(status)} without a result"
        on_done(child, result, error)
