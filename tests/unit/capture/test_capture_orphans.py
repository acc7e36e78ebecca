"""Nothing outlives a killed capture, and the next capture cleans up after it.

The real case: ``gpuforensics capture --duration 30`` sampling the simulated NVML, SIGKILLed;
its collector children must be gone 2 s later, and the next capture into the same directory
removes the staging directory and reservation it left (saying so on stderr). The parts: the
parent-death lifeline of a collector child (forensics/collect/lifeline.py), and owner tokens
(forensics/bundle/leftovers.py), tested against real processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from forensics.bundle.leftovers import STAGING_PREFIX, owner_alive, owner_token, sweep_abandoned
from forensics.bundle.reader import open_bundle
from forensics.bundle.writer import BundleWriter
from forensics.capture.runner import CaptureResult
from forensics.collect.context import CollectContext
from forensics.collect.lifeline import parent_death_signal
from tests.support import capture_kill as ck
from tests.support.nvmlsim import fixtures as nvf

from .capture_helpers import FnCollector, kill_pid, pid_gone
from .capture_helpers import dead_owner_token as _dead_pid_token

sim_lib = nvf.sim_lib


class TestOwnerTokens:
    def test_this_process_is_alive_a_finished_one_is_not(self) -> None:
        assert owner_alive(owner_token()) is True
        assert owner_alive(_dead_pid_token()) is False

    def test_a_reused_pid_is_not_the_owner(self) -> None:
        """Same PID, other start time: the process that wrote the token is gone."""
        pid, start, boot = owner_token().split("-")
        assert owner_alive(f"{pid}-{int(start) + 1}-{boot}") is False

    def test_another_boot_is_gone(self) -> None:
        pid, start, boot = owner_token().split("-")
        other = "0" * 8 if boot != "0" * 8 else "1" * 8
        assert owner_alive(f"{pid}-{start}-{other}") is False

    @pytest.mark.parametrize("text", ["", "123", "garbage\n", "12-x-abcdef12", "0-1-abcdef12"])
    def test_no_token_means_unknown(self, text: str) -> None:
        assert owner_alive(text) is None


class TestSweep:
    def test_removes_only_what_a_dead_owner_left(self, tmp_path: Path) -> None:
        dead, live = _dead_pid_token(), owner_token()
        stem = "gpuforensics-h-20260101T000000Z"
        (tmp_path / f"{STAGING_PREFIX}{dead}-abc123").mkdir()
        (tmp_path / f"{STAGING_PREFIX}{dead}-abc123" / "nvml").mkdir()
        (tmp_path / f"{STAGING_PREFIX}{dead}-abc123" / "nvml" / "devices.json").write_text("{}")
        (tmp_path / f".{stem}.{dead}.x1y2z3.tgz.partial").write_bytes(b"\x1f\x8b")
        (tmp_path / f".{stem}.tgz.reserved").write_text(dead + "\n")
        keep = [
            f"{STAGING_PREFIX}{live}-def456",                    # a capture running now
            f".{stem}.{live}.q1w2e3.tgz.partial",
            f"{STAGING_PREFIX}nopid",                            # no token: not ours to judge
            ".gpuforensics-h-20260101T000001Z.tgz.reserved",     # empty: being written right now
            f"{stem}.tgz",                                       # a finished bundle
            "notes.txt",
        ]
        (tmp_path / keep[0]).mkdir()
        (tmp_path / keep[1]).write_bytes(b"")
        (tmp_path / keep[2]).mkdir()
        (tmp_path / keep[3]).write_text("")
        (tmp_path / keep[4]).write_bytes(b"")
        (tmp_path / keep[5]).write_text("x")
        removed = sweep_abandoned(tmp_path)
        assert sorted((r.kind, r.owner_pid) for r in removed) == sorted(
            [(k, int(dead.split("-")[0])) for k in ("staging directory", "partial archive", "name reservation")])
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep)

    def test_a_symlink_named_like_staging_is_not_followed(self, tmp_path: Path) -> None:
        victim = tmp_path / "victim"
        victim.mkdir()
        (victim / "precious").write_text("x")
        out = tmp_path / "out"
        out.mkdir()
        (out / f"{STAGING_PREFIX}{_dead_pid_token()}-abc").symlink_to(victim)
        assert sweep_abandoned(out) == []
        assert (victim / "precious").exists()

    def test_the_writer_names_its_owner(self, tmp_path: Path) -> None:
        w = BundleWriter(tmp_path, "h")
        try:
            assert w.staging.name.startswith(f"{STAGING_PREFIX}{owner_token()}-")
            assert sweep_abandoned(tmp_path) == []  # its owner (this process) is alive
        finally:
            w.cleanup()


_ORPHAN_SCRIPT = textwrap.dedent('''
    import os, sys, time
    from forensics.collect.lifeline import die_with_parent
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        die_with_parent(parent)
        os.setpgid(0, 0)  # its own process group, as collectors are
        while True:
            time.sleep(3600)
    print(pid, flush=True)
    time.sleep(3600)
''')


def test_a_child_dies_within_a_second_of_its_parent_whatever_killed_it() -> None:
    for signum in (signal.SIGKILL, signal.SIGSEGV):
        p = subprocess.Popen([sys.executable, "-c", _ORPHAN_SCRIPT], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONFAULTHANDLER": ""})
        assert p.stdout is not None
        child = int(p.stdout.readline())
        try:
            time.sleep(0.2)
            assert not pid_gone(child, 0)
            os.kill(p.pid, signum)
            p.wait(timeout=10)
            assert pid_gone(child, 1.0), f"child {child} outlived its parent killed by {signum!r}"
        finally:
            kill_pid(child)
            p.communicate(timeout=10)


def test_collector_children_are_armed(capture: Callable[..., CaptureResult]) -> None:
    """In the runner's own children, PR_GET_PDEATHSIG answers SIGKILL."""
    def probe(ctx: CollectContext) -> None:
        ctx.sink.write_text("probe/signal", str(parent_death_signal()))

    res = capture([FnCollector("probe", probe)])
    assert open_bundle(res.path).read_text("probe/signal") == str(int(signal.SIGKILL))


@pytest.mark.slow
def test_sigkill_of_a_real_capture_leaves_no_process_and_the_next_capture_cleans_up(
        sim_lib: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    scenario = ck.scenario_file(tmp_path)
    proc = ck.start_capture(out, sim_lib, scenario, "--duration", "30", "--interval", "0.5",
                            "--skip", "docker,kubernetes")
    try:
        deadline = time.monotonic() + 90
        samples: list[Path] = []
        while time.monotonic() < deadline and proc.poll() is None and not samples:
            samples = [p for p in out.glob(f"{STAGING_PREFIX}*/nvml/samples.jsonl") if p.stat().st_size]
            time.sleep(0.1)
        assert samples, f"sampling never started: {proc.poll()} {list(out.iterdir())}"
        time.sleep(1.0)
        outcome = ck.kill_and_look(proc, out)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert outcome.seen_processes >= 3, outcome  # the samplers were running when it was killed
    assert outcome.alive_after == [], outcome
    assert outcome.bundle_names == [], outcome
    staging = [n for n in outcome.temporaries if n.startswith(STAGING_PREFIX)]
    assert len(staging) == 1 and any(n.endswith(".reserved") for n in outcome.temporaries), outcome
    size = sum(f.stat().st_size for f in (out / staging[0]).rglob("*") if f.is_file())
    time.sleep(1.0)  # nothing writes into the abandoned staging directory any more
    assert sum(f.stat().st_size for f in (out / staging[0]).rglob("*") if f.is_file()) == size

    nxt = ck.start_capture(out, sim_lib, scenario, "--only", "host")
    stdout, stderr = nxt.communicate(timeout=120)
    assert nxt.returncode == 0, stderr
    assert f"removed staging directory {staging[0]} left by capture process {proc.pid}, which is gone" in stderr
    assert "removed name reservation" in stderr
    assert sorted(p.name for p in out.iterdir()) == [Path(stdout.strip()).name]


_TOOL_SCRIPT = textwrap.dedent('''
    import os, subprocess, sys, time
    from forensics.collect.lifeline import run_tied
    tool = ["sh", "-c", "echo $$ > " + sys.argv[2] + "; exec sleep 60"]
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # a collector child running a helper program, as the kernel collector runs dmesg
        if sys.argv[1] == "tied":
            run_tied(tool, timeout=60)
        else:
            subprocess.run(tool, timeout=60, check=False)
        os._exit(0)
    print(pid, flush=True)
    time.sleep(3600)
''')


@pytest.mark.parametrize("how", ["tied", "plain"])
def test_a_helper_program_dies_with_the_collector_that_ran_it(how: str, tmp_path: Path) -> None:
    """The kernel collector's dmesg/journalctl fallback runs through run_tied: SIGKILL the collector
    child and the program goes too; a plain subprocess.run (the control) is left running."""
    pidfile = tmp_path / "tool.pid"
    p = subprocess.Popen([sys.executable, "-c", _TOOL_SCRIPT, how, str(pidfile)], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    child = int(p.stdout.readline())
    tool = 0
    try:
        deadline = time.monotonic() + 10
        while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        tool = int(pidfile.read_text())
        assert not pid_gone(tool, 0)
        os.kill(child, signal.SIGKILL)
        if how == "tied":
            assert pid_gone(tool, 1.0), f"helper program {tool} outlived the collector that ran it"
        else:
            assert not pid_gone(tool, 0.5), "the control: an untied program is left behind"
    finally:
        if tool:
            kill_pid(tool)
        kill_pid(child)
        p.kill()
        p.communicate(timeout=10)
