"""``gpuforensics top``: the live view of this node's GPUs and of every GPU process, named by
container, pod and grant, with its container's ``docker stats`` figures.

- :mod:`forensics.top.state`: the recorder's live state plus what the view shows beside it;
- :mod:`forensics.top.feeds`: its records, from the recorder's ring when a recorder runs, else from
  top's own samplers (the recorder's loop and children, no ring);
- :mod:`forensics.top.snapshot`: the typed, immutable snapshot (GPUs, processes, recently exited);
- :mod:`forensics.top.view`: the snapshot as styled lines for a width and height;
- :mod:`forensics.top.screen`: the curses loop (keys, resize, the ``c`` capture child).

:func:`run_top` is the entry point the CLI calls.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from forensics.top.feeds import RingFeed, SelfFeed, recorder_running
from forensics.top.snapshot import Snapshot, Tracker, build_snapshot
from forensics.top.state import TopState
from forensics.top.view import ViewOptions, render_text

__all__ = ["TopOptions", "run_top", "wants_screen"]


@dataclass(frozen=True)
class TopOptions:
    ring: Path
    interval_s: float = 2.0
    once: bool = False
    as_json: bool = False
    nvml_library: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    kubeconfig: str | None = None
    kube_context: str | None = None
    node_name: str | None = None
    bundles: Path = Path(".")
    keep_exited_s: float = 300.0
    width: int | None = None  # --once: the text's width (default: the terminal's, else 160)
    capture_args: tuple[str, ...] = ()  # the options the `c` capture repeats (--nvml-library, --set ...)


def wants_screen(once: bool, stdout: TextIO = sys.stdout) -> bool:
    """The full-screen view, unless --once, or stdout is not a terminal, or TERM is dumb (then the
    --once text)."""
    term = os.environ.get("TERM", "")
    return not once and stdout.isatty() and term not in ("", "dumb")


#: what a column shows when a sampler cannot read its source (said once, under the tables)
_UNREADABLE = {
    "nvml": "GPU columns: NVML cannot be read",
    "kernel": "XID counts NVML's Xid events only: the kernel log cannot be read",
    "docker": "POD / CONTAINER: named from their cgroups only: Docker cannot be asked",
    "procfs": "USER, POD / CONTAINER and GRANT: the GPU processes' /proc cannot be read",
    "cgroups": "CPU%, THR% and MEM/LIMIT: the containers' cgroups cannot be read",
}


def _notes(feed: RingFeed | SelfFeed) -> tuple[str, ...]:
    notes = []
    if isinstance(feed, SelfFeed):
        for name, st in feed.status()["sources"].items():
            if st["status"] == "unavailable" and st["error"]:
                notes.append(f"{_UNREADABLE.get(name, name)} ({st['error']})")
    return tuple(notes)


def run_top(o: TopOptions, out: TextIO = sys.stdout) -> int:
    """Run ``top`` as ``o`` says; the exit code."""
    state = TopState()
    tracker = Tracker(keep_s=o.keep_exited_s)
    feed: RingFeed | SelfFeed
    if recorder_running(o.ring):
        feed = RingFeed(state, o.ring, on_tick=lambda t: tracker.observe(state, t))
        feed.poll()
    else:
        feed = SelfFeed(state, o.interval_s, nvml_library=o.nvml_library, extra=o.extra, kubeconfig=o.kubeconfig,
                        kube_context=o.kube_context, node_name=o.node_name)
    try:
        def snapshot() -> Snapshot:
            return build_snapshot(state, tracker, feed.label, notes=_notes(feed))

        if not wants_screen(o.once, out):
            if isinstance(feed, SelfFeed):
                feed.settle()
            snap = snapshot()
            if o.as_json:
                out.write(json.dumps(snap.to_json(), indent=1, sort_keys=True, default=str) + "\n")
            else:
                width = o.width or (os.get_terminal_size(out.fileno()).columns if out.isatty() else 160)
                out.write(render_text(snap, width, ViewOptions(unicode=_utf8(out), interval_s=o.interval_s)))
            out.flush()
            return 0
        from forensics.top.screen import capture_argv, run_screen

        run_screen(feed, snapshot, ViewOptions(unicode=_utf8(out), interval_s=o.interval_s),
                   capture_argv(o.bundles, "15m", o.capture_args))
        return 0
    finally:
        feed.close()


def _utf8(out: TextIO) -> bool:
    return "utf" in (getattr(out, "encoding", "") or "").lower()
