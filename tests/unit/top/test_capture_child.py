"""The ``c`` key's capture child never outlives ``top``: killed with top (PR_SET_PDEATHSIG, the
child in its own session all the same), and ended when the view stops on Ctrl-C or a failure."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from forensics.top import screen
from forensics.top.screen import CaptureChild, run_screen
from forensics.top.snapshot import Tracker, build_snapshot
from forensics.top.state import TopState
from forensics.top.view import ViewOptions

ROOT = Path(__file__).resolve().parents[3]
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_the_capture_child_dies_with_top() -> None:
    code = ("import sys, time\n"
            "from forensics.top.screen import CaptureChild\n"
            f"c = CaptureChild({SLEEPER!r})\n"
            "print(c.proc.pid, flush=True)\n"
            "time.sleep(120)\n")
    top = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE)
    child = 0
    try:
        assert top.stdout is not None
        child = int(top.stdout.readline())
        assert _alive(child)
        top.kill()  # SIGKILL: no finally runs in top
        top.wait()
        assert _gone_within(child, 5.0), "the capture child outlived top"
    finally:
        if top.poll() is None:
            top.kill()
            top.wait()
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)


class _Win:
    """The window curses would hand the loop: ``c`` pressed, then Ctrl-C."""

    def __init__(self) -> None:
        self.keys = [ord("c")]

    def getch(self) -> int:
        if self.keys:
            return self.keys.pop()
        raise KeyboardInterrupt

    def getmaxyx(self) -> tuple[int, int]:
        return 24, 80

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


class _Feed:
    label = "test"

    def poll(self, wait_s: float = 0.05) -> int:
        return 0


def test_ctrl_c_at_the_view_ends_a_running_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[CaptureChild] = []

    class Recorded(CaptureChild):
        def __init__(self, argv: Any) -> None:
            super().__init__(argv)
            started.append(self)

    monkeypatch.setattr(screen, "CaptureChild", Recorded)
    monkeypatch.setattr(screen.curses, "wrapper", lambda main: main(_Win()))
    state = TopState()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_screen(_Feed(), lambda: build_snapshot(state, Tracker(), "test"), ViewOptions(), SLEEPER)
        (capture,) = started
        assert capture.proc.poll() is not None, "the capture child was left running"
    finally:
        for c in started:
            if c.proc.poll() is None:
                c.proc.kill()
                c.proc.wait()
