"""Interrupting a capture: SIGTERM/SIGINT finish a valid bundle marked interrupted (CLI exit 3);
kill -9 at any moment leaves no file under the final bundle name.

Library-level cases run ``run_capture`` in a forked child; CLI-level cases run the real
``forensics.cli.main`` in a subprocess whose collector list is replaced by the host collector plus
a test collector (the registry only loads ``forensics.collectors.*``). Every process a test starts
is waited for or killed by PID.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from forensics.bundle.reader import open_bundle
from forensics.bundle.verify import verify_bundle
from forensics.collect.context import CollectContext, Tick

from .capture_helpers import (
    ChildCapture,
    FnCollector,
    SamplingCollector,
    hang,
    kill_pid,
    pid_gone,
    wait_for,
)

FINAL_NAME_RE = re.compile(r"^gpuforensics-.+-\d{8}T\d{6}Z\.tgz$")


def hang_after_marker(marker: Path, member: str = "hang/started.txt") -> Callable[[CollectContext], None]:
    def f(ctx: CollectContext) -> None:
        ctx.sink.write_text(member, "started\n")
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(str(os.getpid()))
        tmp.rename(marker)
        hang()
    return f


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_snapshot_finishes_an_interrupted_bundle(
        capture_child: Callable[..., ChildCapture], tmp_path: Path, signum: int) -> None:
    marker = tmp_path / "hang.pid"
    child = capture_child([FnCollector("first", lambda ctx: ctx.sink.write_text("first/a", "a")),
                           FnCollector("hang", hang_after_marker(marker), timeout_s=120),
                           FnCollector("after", lambda ctx: ctx.sink.write_text("after/a", "a"))])
    hang_pid = int(wait_for(marker))
    t0 = time.monotonic()
    os.kill(child.pid, signum)
    res = child.result(timeout=30)
    assert time.monotonic() - t0 < 5, "an interrupted capture finishes at once"
    assert res.interrupted is True and res.manifest["capture"]["interrupted"] is True
    s = {c["name"]: c for c in res.manifest["collectors"]}
    assert s["first"]["status"] == "ok"
    assert s["hang"]["status"] == "partial" and "interrupted" in s["hang"]["error"]
    assert (s["after"]["status"], s["after"]["error"]) == ("skipped", "capture interrupted before this collector ran")
    b = open_bundle(res.path)
    assert b.names() == ["first/a", "hang/started.txt"]
    verify_bundle(res.path)
    assert pid_gone(hang_pid), "the interrupted collector's process must be killed"


def test_signal_during_sampling_keeps_the_ticks(capture_child: Callable[..., ChildCapture], tmp_path: Path) -> None:
    marker = tmp_path / "tick.mark"

    def on_tick(_ctx: CollectContext, tick: Tick) -> None:
        if tick.index == 2:
            marker.write_text("2")

    child = capture_child([SamplingCollector("gpu", on_tick)], duration_s=60, interval_s=0.1)
    wait_for(marker)
    t0 = time.monotonic()
    os.kill(child.pid, signal.SIGTERM)
    res = child.result(timeout=30)
    assert time.monotonic() - t0 < 5
    assert res.interrupted
    s = res.manifest["collectors"][0]
    assert s["status"] == "partial" and "interrupted" in s["error"]
    rows = [o["index"] for _, o in open_bundle(res.path).iter_jsonl("gpu/samples.jsonl")]
    assert rows[:2] == [0, 1] and len(rows) >= 2
    verify_bundle(res.path)


# -- the real CLI in a subprocess ------------------------------------------------------------

_SCRIPT = textwrap.dedent('''
    import os, sys, time
    from forensics.capture import runner
    from forensics.capture.registry import load_collectors

    marker, out, mode = sys.argv[1], sys.argv[2], sys.argv[3]

    class Test:
        name, order, timeout_s = "test", 1, 300.0

        def snapshot(self, ctx):
            if mode == "big":  # enough incompressible evidence that packing takes a while
                for i in range(48):
                    ctx.sink.append_bytes("test/random.bin", os.urandom(1 << 20))
            if mode == "noisy":  # a chatty library inside a collector
                print("library chatter on stdout", flush=True)
                os.write(1, b"raw write to fd 1\\n")
            ctx.sink.write_text("test/started.txt", "started\\n")
            with open(marker + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(marker + ".tmp", marker)
            if mode == "hang":
                while True:
                    time.sleep(3600)

    host = [c for c in load_collectors() if c.name == "host"]
    runner.load_collectors = lambda **_: host + [Test()]
    from forensics.cli import main
    main(["capture", "-o", out, "--quiet"])
''')


@pytest.fixture
def cli_capture(tmp_path: Path) -> Iterator[Callable[[str], tuple[subprocess.Popen[str], Path, Path]]]:
    procs: list[subprocess.Popen[str]] = []
    markers: list[Path] = []

    def start(mode: str) -> tuple[subprocess.Popen[str], Path, Path]:
        out = tmp_path / f"out-{mode}"
        out.mkdir()
        marker = tmp_path / f"{mode}.pid"
        p = subprocess.Popen([sys.executable, "-c", _SCRIPT, str(marker), str(out), mode],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(p)
        markers.append(marker)
        return p, out, marker

    yield start
    for p in procs:
        if p.poll() is None:
            kill_pid(p.pid)
            p.wait(timeout=30)
    for m in markers:  # a collector orphaned by kill -9 of its parent lives in its own group
        if m.exists():
            pid = int(m.read_text())
            if not pid_gone(pid, 0):
                kill_pid(pid)
    for p in procs:  # the orphan held the pipes open: read them only once it is gone
        p.communicate(timeout=30)


def test_cli_sigterm_exits_3_with_a_valid_bundle(cli_capture: Callable[..., tuple[subprocess.Popen[str], Path, Path]]) -> None:
    proc, out, marker = cli_capture("hang")
    wait_for(marker)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 3, stderr
    assert "Traceback" not in stderr
    assert "interrupted" in stderr
    path = Path(stdout.strip())
    assert stdout.count("\n") == 1 and path.parent == out and FINAL_NAME_RE.match(path.name)
    v = subprocess.run([sys.executable, "-m", "forensics", "verify", str(path)], capture_output=True, text=True, timeout=60)
    assert v.returncode == 0, v.stderr
    i = subprocess.run([sys.executable, "-m", "forensics", "inspect", "-f", "json", str(path)],
                       capture_output=True, text=True, timeout=60)
    desc = json.loads(i.stdout)
    assert desc["interrupted"] is True
    assert {c["name"]: c["status"] for c in desc["collectors"]} == {"host": "ok", "test": "partial"}
    assert sorted(p.name for p in out.iterdir()) == [path.name]  # staging dir removed


def test_cli_kill_9_during_collection_leaves_no_bundle_name(cli_capture: Callable[..., tuple[subprocess.Popen[str], Path, Path]]) -> None:
    proc, out, marker = cli_capture("hang")
    collector_pid = int(wait_for(marker))
    proc.kill()
    proc.wait(timeout=30)
    left = [p.name for p in out.iterdir()]
    assert not [n for n in left if FINAL_NAME_RE.match(n)], left
    assert all(n.startswith(".") for n in left), left  # only the staging directory may remain
    kill_pid(collector_pid)
    assert pid_gone(collector_pid)


def test_cli_kill_9_while_packing_leaves_no_bundle_name(cli_capture: Callable[..., tuple[subprocess.Popen[str], Path, Path]]) -> None:
    proc, out, marker = cli_capture("big")
    wait_for(marker, timeout=60)
    deadline = time.monotonic() + 60
    partial: list[str] = []
    while time.monotonic() < deadline and proc.poll() is None:
        partial = [p.name for p in out.iterdir() if p.name.endswith(".tgz.partial")]
        if partial:
            break
        time.sleep(0.002)
    if not partial:
        pytest.fail("capture finished before its archive was seen being written; cannot test this race")
    proc.kill()
    proc.wait(timeout=30)
    left = [p.name for p in out.iterdir()]
    assert not [n for n in left if FINAL_NAME_RE.match(n)], left
    assert all(n.startswith(".") for n in left), left


def test_collector_output_never_reaches_capture_stdout(cli_capture: Callable[..., tuple[subprocess.Popen[str], Path, Path]]) -> None:
    """``b=$(gpuforensics capture)`` must get the path and nothing else, whatever a library prints."""
    proc, out, _marker = cli_capture("noisy")
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert stdout.count("\n") == 1 and Path(stdout.strip()).parent == out, stdout
    assert "library chatter on stdout" in stderr and "raw write to fd 1" in stderr
