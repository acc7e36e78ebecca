"""The private daemons tests/support starts never outlive the pytest run that started them: a
SIGTERMed pytest runs its teardown (the daemon stopped, its directory removed), and a SIGKILLed one
takes them with it (PR_SET_PDEATHSIG). Driven as a developer does it: pytest on one integration test
in a subprocess, signalled while the test runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.docker_engine import DOCKERD
from tests.support.env import is_root, need
from tests.support.private_daemon import alive, cleanup_dir, kill_pids, pids_naming

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
#: an integration test that needs the docker engine fixture (a private dockerd) and runs a while
TARGET = "tests/integration/test_docker_collector.py::test_oom_four_ways_in_one_bundle"


def _children(ppid: int) -> list[tuple[int, list[str]]]:
    """The processes whose parent is ``ppid``, with their command lines."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[-1].split()
            if int(fields[1]) != ppid:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except (OSError, IndexError, ValueError):
            continue
        out.append((int(entry), argv))
    return out


def _containers(tmp: Path) -> bool:
    """Whether the private engine in ``tmp`` runs a container (the test's body has begun)."""
    ps = subprocess.run(["docker", "-H", f"unix://{tmp / 'docker.sock'}", "ps", "-q"], capture_output=True,
                        text=True, timeout=10, check=False)
    return bool(ps.stdout.strip())


def _pytest_with_a_running_dockerd(moment: str = "setup") -> tuple[subprocess.Popen[bytes], int, Path]:
    """pytest on TARGET in a subprocess, once the private dockerd it started has its socket
    (``setup``: the session fixture is still building the test images) or runs a container of the
    test (``test``): (pytest, dockerd's PID, dockerd's directory)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DOCKER_HOST", "PYTEST_ADDOPTS", "CI")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "pytest", TARGET, "-q", "-p", "no:cacheprovider"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        for pid, argv in _children(proc.pid):
            if argv[:1] == [DOCKERD] and "--pidfile" in argv:
                tmp = Path(argv[argv.index("--pidfile") + 1]).parent
                if (tmp / "docker.sock").exists() and (moment == "setup" or _containers(tmp)):
                    return proc, pid, tmp
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    pytest.fail(f"pytest on {TARGET} started no private dockerd within 120 s (exit {proc.returncode})")


def _container_ids(tmp: Path) -> list[bytes]:
    try:
        return [d.encode() for d in os.listdir(tmp / "data" / "containers") if len(d) == 64]
    except OSError:
        return []


def _left(pid: int, tmp: Path, ids: list[bytes]) -> list[int]:
    """dockerd, the processes that name its directory (containerd, shims) and its containers'."""
    return ([pid] if alive(pid) else []) + pids_naming([str(tmp).encode()], ("cmdline",)) + pids_naming(ids, ("cgroup",))


def _gone(pid: int, tmp: Path, ids: list[bytes], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _left(pid, tmp, ids):
            return True
        time.sleep(0.2)
    return False


def _leave_nothing(pid: int, tmp: Path, ids: list[bytes]) -> None:
    """What a failed run left: stopped by PID (its containers' processes by their cgroup), its
    directory removed."""
    kill_pids(_left(pid, tmp, ids))
    if tmp.exists():
        cleanup_dir(tmp)


@pytest.fixture(autouse=True)
def _private_daemons_only() -> None:
    need(is_root() and os.path.exists(DOCKERD), f"root and {DOCKERD} (the subprocess starts a private dockerd)")


@pytest.mark.parametrize("moment", ["setup", "test"])
def test_a_sigtermed_pytest_stops_its_daemons_and_removes_their_directories(moment: str) -> None:
    """SIGTERM while the engine fixture sets up, and while the test runs its containers: the
    daemon and every process of its directory end, and the directory is removed."""
    proc, pid, tmp = _pytest_with_a_running_dockerd(moment)
    ids = _container_ids(tmp)
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        assert proc.returncode != 0  # interrupted, not passed
        assert _gone(pid, tmp, ids, 10), f"dockerd {pid} (or a process of {tmp}) outlived the SIGTERMed pytest"
        assert not tmp.exists(), f"{tmp} was left behind"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _leave_nothing(pid, tmp, ids)


def test_a_sigkilled_pytest_takes_its_daemons_with_it() -> None:
    """No teardown runs after SIGKILL: the daemon ends by PR_SET_PDEATHSIG (its directory is then
    the one thing left, removed here)."""
    proc, pid, tmp = _pytest_with_a_running_dockerd("test")
    ids = _container_ids(tmp)
    try:
        proc.kill()
        proc.wait(timeout=30)
        assert _gone(pid, tmp, ids, 60), f"dockerd {pid} (or a process of {tmp} or a container) outlived the SIGKILLed pytest"
    finally:
        _leave_nothing(pid, tmp, ids)
