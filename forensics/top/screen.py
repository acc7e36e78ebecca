"""``gpuforensics top`` in a terminal: the curses loop around the snapshot model and the view.

stdlib :mod:`curses` (as nvitop uses it): no dependency, on every Python that has a terminal,
and the view needs no more than styled lines (docs/architecture.md says why not Textual). The
loop reads the feed (forensics.top.feeds) every 50 ms, builds a snapshot once per ``interval``
(or at once after a key), draws :func:`forensics.top.view.render`'s lines for the terminal's size
(asked of the terminal every turn, so a resize is drawn within 50 ms) and answers keys:

- ``m`` / ``s`` / ``u``: sort by GPU memory, SM %, CPU %; up/down/PgUp/PgDn (or j/k): select;
- ``g``: cycle the GPU filter; ``n``: the namespace filter (typed); ``/``: text filter; ``x``: clear;
- Enter: the selected process' full attribution and evidence (Esc or Enter: back);
- ``c``: write a bundle now (``gpuforensics capture --since 15m`` in a child process, so the view
  stays live; its path is shown when it is written);
- ``q``: quit.

Colour only for ``alert`` (the no-grant / overlap mark, an active slowdown, a lost GPU), when the
terminal has colours; everything else is attributes.
"""

from __future__ import annotations

import curses
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from forensics.collect.lifeline import die_with_parent
from forensics.top.snapshot import Snapshot
from forensics.top.view import SORTS, Line, ViewOptions, filtered, render

__all__ = ["CaptureChild", "capture_argv", "run_screen"]


class Feed(Protocol):
    @property
    def label(self) -> str: ...

    def poll(self, wait_s: float = 0.05) -> int: ...


class CaptureChild:
    """``gpuforensics capture --since 15m -o DIR`` in a child process; its path when written.
    In its own session (a Ctrl-C typed at the view is not its), and sent SIGTERM when top dies
    (``PR_SET_PDEATHSIG``: killed, its terminal closed), so it never outlives top: a capture ended
    so writes what it has, marked interrupted."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.log = tempfile.TemporaryFile()
        parent = os.getpid()
        self.proc = subprocess.Popen([*argv], stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL,
                                     start_new_session=True,
                                     preexec_fn=lambda: die_with_parent(parent, signal.SIGTERM))
        self.started = time.monotonic()
        self.result = ""

    def done(self) -> bool:
        if self.result:
            return True
        if self.proc.poll() is None:
            return False
        out = (self.proc.stdout.read() if self.proc.stdout else b"").decode("utf-8", "replace").strip().splitlines()
        if self.proc.returncode in (0, 3) and out:
            self.result = f"bundle written: {out[-1]}"
        else:
            self.log.seek(0)
            err = self.log.read().decode("utf-8", "replace").strip().splitlines()
            self.result = f"capture failed (exit {self.proc.returncode}): {err[-1] if err else 'no message'}"
        self.log.close()
        if self.proc.stdout:
            self.proc.stdout.close()
        return True

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


_STYLES: dict[str, int] = {}


def _init_styles() -> None:
    _STYLES.update({"": curses.A_NORMAL, "bold": curses.A_BOLD, "header": curses.A_REVERSE,
                    "dim": curses.A_DIM, "selected": curses.A_REVERSE, "alert": curses.A_BOLD})
    try:
        if curses.has_colors():
            curses.start_color()
            curses.use_default_colors()
            curses.init_pair(1, curses.COLOR_RED, -1)
            _STYLES["alert"] = curses.color_pair(1) | curses.A_BOLD
    except curses.error:
        pass


def _attr(style: str) -> int:
    a = 0
    for part in style.split("+"):
        a |= _STYLES.get(part, 0)
    return a


def _draw(win: Any, lines: list[Line]) -> None:
    height, width = win.getmaxyx()
    win.erase()
    for y, line in enumerate(lines[:height]):
        x = 0
        for text, style in line:
            if x >= width:
                break
            chunk = text[:width - x]
            if y == height - 1 and x + len(chunk) >= width:
                chunk = chunk[:max(0, width - x - 1)]  # the bottom-right cell cannot be written
            try:
                win.addstr(y, x, chunk, _attr(style))
            except curses.error:
                pass
            x += len(chunk)
    win.refresh()


class _Loop:
    def __init__(self, win: Any, feed: Feed, snapshot: Callable[[], Snapshot], options: ViewOptions,
                 capture_argv: Sequence[str]) -> None:
        self.win = win
        self.feed = feed
        self.snapshot = snapshot
        self.o = options
        self.capture_argv = capture_argv
        self.snap: Snapshot | None = None
        self.capture: CaptureChild | None = None
        self.typing: tuple[str, str] | None = None  # (field, text so far)
        self.quit = False
        self.written: list[str] = []  # the last capture's result, said again after the screen closes

    def run(self) -> None:
        win = self.win
        win.keypad(True)
        win.timeout(50)
        next_snap = 0.0
        while not self.quit:
            self.feed.poll(0.02)
            now = time.monotonic()
            redraw = False
            if now >= next_snap:
                self.snap = self.snapshot()
                next_snap = now + self.o.interval_s
                redraw = True
            if self.capture is not None and self.capture.done():
                self.o = replace(self.o, status=self.capture.result)
                self.capture = None
                redraw = True
            key = win.getch()
            if self._resized():
                redraw = True
            if key != -1:
                self._key(key)
                redraw = True
            if redraw and self.snap is not None:
                _draw(win, render(self.snap, self.o, *reversed(win.getmaxyx())))
        self.written = [self.o.status] if self.o.status.startswith(("bundle written", "capture failed")) else []

    def _resized(self) -> bool:
        """The terminal's size now, asked of the terminal itself: a SIGWINCH that came while the
        loop was busy (building a snapshot) can leave curses with the size before it."""
        try:
            cols, lines = os.get_terminal_size(sys.__stdout__.fileno() if sys.__stdout__ else 1)
        except OSError:
            return False
        if (lines, cols) != self.win.getmaxyx():
            try:
                curses.resizeterm(lines, cols)
            except curses.error:
                return False
            return True
        return False

    def _key(self, key: int) -> None:
        if self.typing is not None:
            self._type(key)
            return
        rows = len(filtered(self.snap, self.o)) if self.snap else 0
        o = self.o
        if key in (ord("q"), ord("Q")):
            self.quit = True
        elif key == curses.KEY_RESIZE:
            pass
        elif key in (ord("m"), ord("s"), ord("u")):
            self.o = replace(o, sort=SORTS[(ord("m"), ord("s"), ord("u")).index(key)])
        elif key in (curses.KEY_DOWN, ord("j")):
            self.o = replace(o, selected=min(rows - 1, o.selected + 1) if rows else 0)
        elif key in (curses.KEY_UP, ord("k")):
            self.o = replace(o, selected=max(0, o.selected - 1))
        elif key == curses.KEY_NPAGE:
            self.o = replace(o, selected=min(max(0, rows - 1), o.selected + 10))
        elif key == curses.KEY_PPAGE:
            self.o = replace(o, selected=max(0, o.selected - 10))
        elif key == ord("g") and self.snap is not None:
            gpus = [g.index for g in self.snap.gpus]
            nxt = None if not gpus else (gpus[0] if o.gpu is None else (None if o.gpu == gpus[-1] else
                                                                          gpus[gpus.index(o.gpu) + 1] if o.gpu in gpus else None))
            self.o = replace(o, gpu=nxt, selected=0)
        elif key == ord("n"):
            self.typing = ("namespace", "")
            self.o = replace(o, prompt="namespace: ")
        elif key == ord("/"):
            self.typing = ("text", "")
            self.o = replace(o, prompt="filter: ")
        elif key == ord("x"):
            self.o = replace(o, gpu=None, namespace="", text="", selected=0)
        elif key in (curses.KEY_ENTER, 10, 13):
            self.o = replace(o, details=not o.details)
        elif key == 27:
            self.o = replace(o, details=False)
        elif key == ord("c"):
            if self.capture is None:
                self.capture = CaptureChild(self.capture_argv)
                self.o = replace(o, status="capture running: gpuforensics capture --since 15m ...")

    def _type(self, key: int) -> None:
        assert self.typing is not None
        field, text = self.typing
        label = "namespace: " if field == "namespace" else "filter: "
        if key in (curses.KEY_ENTER, 10, 13):
            self.typing = None
            self.o = (replace(self.o, prompt="", selected=0, namespace=text) if field == "namespace"
                      else replace(self.o, prompt="", selected=0, text=text))
            return
        if key == 27:
            self.typing = None
            self.o = replace(self.o, prompt="")
            return
        if key in (curses.KEY_BACKSPACE, 127, 8):
            text = text[:-1]
        elif 32 <= key < 127:
            text += chr(key)
        self.typing = (field, text)
        self.o = replace(self.o, prompt=label + text)


def run_screen(feed: Feed, snapshot: Callable[[], Snapshot], options: ViewOptions, capture_argv: Sequence[str]) -> None:
    """Run the full-screen view until ``q``. The sampler children's messages (stderr) go to a file
    while the screen is up, so they cannot scribble over it; what they said is printed after. A
    capture still running at ``q`` is waited for (Ctrl-C stops it), and the last capture's path
    is printed once the screen is gone."""
    os.environ.setdefault("ESCDELAY", "25")
    log = tempfile.TemporaryFile()
    saved = os.dup(2)
    os.dup2(log.fileno(), 2)
    loops: list[_Loop] = []
    try:
        def main(win: Any) -> None:
            _init_styles()
            try:
                curses.curs_set(0)
            except curses.error:
                pass
            loops.append(_Loop(win, feed, snapshot, options, capture_argv))
            loops[0].run()

        curses.wrapper(main)
    except BaseException:  # Ctrl-C at the view, or a failure: a capture started is ended, not left behind
        if loops and loops[0].capture is not None:
            loops[0].capture.stop()
        raise
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        log.seek(0)
        said = log.read().decode("utf-8", "replace").strip()
        log.close()
        if said:
            print(said[-4000:], file=sys.stderr)
    loop = loops[0] if loops else None
    if loop is not None and loop.capture is not None:
        print("gpuforensics top: waiting for the capture to finish (Ctrl-C stops it)", file=sys.stderr, flush=True)
        try:
            while not loop.capture.done():
                time.sleep(0.2)
            loop.written = [loop.capture.result]
        except KeyboardInterrupt:
            loop.capture.stop()
            loop.written = ["capture stopped"]
    for line in loop.written if loop is not None else ():
        print(line, flush=True)


def capture_argv(output: Path, since: str = "15m", extra: Sequence[str] = ()) -> list[str]:
    """The ``c`` key's command: this gpuforensics' capture, into ``output``."""
    return [sys.executable, "-m", "forensics", "capture", "--since", since, "-o", str(output), "--quiet", *extra]
