"""What the tests' private daemons share: dockerd (docker_engine.py), containerd
(containerd_engine.py) and podman's API service (podman_engine.py).

Each engine module starts its daemon in a fresh temporary directory (:func:`private_dir`), with
its output in a log file there (:func:`spawn_logged`), waits until it answers
(:func:`wait_ready`), and stops it by its PID (:func:`terminate`), then kills what it left by PID
(:func:`pids_naming`, :func:`kill_pids`: processes whose command line names the directory or whose
cgroup names one of its containers) and removes the directory, unmounting what is mounted under it
first (:func:`cleanup_dir`). Nothing is found by name (no ``pkill``): only what this test run
started is stopped. :func:`engine_fixture` is the body of each session fixture: skip with the
reason when the engine cannot be had, fail instead under ``CI=true``.

A daemon never outlives the test run: it is started with ``PR_SET_PDEATHSIG`` (:func:`die_with_us`:
SIGTERM when the pytest process that started it ends, even by SIGKILL), and a SIGTERM to pytest runs
the normal teardown (tests/conftest.py turns it into an interrupt), which stops each daemon and
removes its directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from forensics.collect.lifeline import die_with_parent

__all__ = [
    "EngineUnavailable",
    "alive",
    "cgroup_hierarchies",
    "cleanup_dir",
    "die_with_us",
    "engine_fixture",
    "in_ci",
    "kill_pids",
    "pids_naming",
    "private_dir",
    "spawn_logged",
    "tail",
    "terminate",
    "wait_ready",
]

E = TypeVar("E")


class EngineUnavailable(RuntimeError):
    """No engine could be had (with the reason)."""


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def private_dir(prefix: str, tmp_parent: str | None = None) -> Path:
    """A fresh directory for one daemon (kept short: a unix socket path has a 108-byte limit)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=tmp_parent or "/tmp"))


def die_with_us() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child sent SIGTERM when this process ends (``PR_SET_PDEATHSIG``,
    as capture's own children: forensics.collect.lifeline; a daemon's handler then stops it cleanly),
    or exit at once when this process is already gone. None off the main thread: the signal follows
    the *thread* that forked, and a worker thread that ends would stop a daemon the run still uses."""
    if threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid()

    def in_child() -> None:
        die_with_parent(parent, signal.SIGTERM)

    return in_child


def spawn_logged(argv: Sequence[str], log_path: Path,
                 env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session, ended when this process ends (:func:`die_with_us`), stdout
    and stderr appended to ``log_path``, in the log's directory (the daemon's own: what it or its helpers write to their working directory, such as
    conmon's ``oom`` file when a container is OOM-killed, stays there, not in the checkout)."""
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(list(argv), env=dict(env) if env is not None else None, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=log_path.parent, preexec_fn=die_with_us())
    finally:
        log.close()


def wait_ready(proc: subprocess.Popen[bytes], ready: Callable[[], str | None], timeout_s: float,
               what: str, poll_s: float = 0.1) -> str | None:
    """Poll ``ready()`` (None: it answers; else why not) until it answers, the daemon exits or
    ``timeout_s`` passes; None when it answered, else the last reason."""
    deadline = time.monotonic() + timeout_s
    reason: str | None = "not started"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"{what} exited with status {proc.returncode}"
        reason = ready()
        if reason is None:
            return None
        time.sleep(poll_s)
    return reason


def tail(path: Path, n: int = 600) -> str:
    """The end of a daemon's log on one line, for an error message."""
    try:
        return path.read_text(errors="replace")[-n:].replace("\n", " / ")
    except OSError:
        return "(no log)"


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def terminate(pid: int, proc: subprocess.Popen[bytes] | None = None, timeout_s: float = 30.0) -> None:
    """SIGTERM ``pid``, wait, then SIGKILL (only this PID, which we started)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None:
            if proc.poll() is not None:
                return
        else:
            try:
                waited, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                waited = pid if not alive(pid) else 0
            if waited == pid:
                return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def pids_naming(needles: Sequence[bytes], files: Sequence[str]) -> list[int]:
    """PIDs (not this one) whose ``/proc/<pid>/<file>`` contains one of ``needles``."""
    out = []
    if not needles:
        return out
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        for name in files:
            try:
                with open(f"/proc/{entry}/{name}", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            if any(n in data for n in needles):
                out.append(int(entry))
                break
    return out


def kill_pids(pids: Sequence[int]) -> None:
    """SIGKILL each PID and wait (5 s at most) until they are gone."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)


def cgroup_hierarchies(root: str = "/sys/fs/cgroup") -> list[str]:
    """Every mounted cgroup hierarchy under ``root`` (v1 controllers, ``unified``, or root itself)."""
    if os.path.exists(os.path.join(root, "cgroup.controllers")):
        return [root]
    out = []
    with contextlib.suppress(OSError):
        for entry in sorted(os.listdir(root)):
            path = os.path.join(root, entry)
            if os.path.isdir(path) and not os.path.islink(path):
                out.append(path)
    return out


def _mounts_under(tmp: Path) -> list[str]:
    prefix = str(tmp) + "/"
    out = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
        for line in f:
            mp = line.split()[4].replace("\\040", " ")
            if mp.startswith(prefix):
                out.append(mp)
    return sorted(out, key=len, reverse=True)


def cleanup_dir(tmp: Path, keep: Sequence[str] | None = None) -> None:
    """Unmount what is mounted under ``tmp`` and remove it; with ``keep``, empty it but for
    those names (a daemon's log and config, for its next start)."""
    for mp in _mounts_under(tmp):
        subprocess.run(["umount", "-l", mp], capture_output=True, check=False)
    if keep is None:
        shutil.rmtree(tmp, ignore_errors=True)
        return
    for child in tmp.iterdir():
        if child.name in keep:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def engine_fixture(start: Callable[[], E], stop: Callable[[E], None], what: str) -> Iterator[E]:
    """A session fixture's body: the started engine, stopped afterwards; skips with the reason
    when it cannot be had (fails under ``CI=true``, where the engine is expected)."""
    import pytest

    try:
        engine = start()
    except EngineUnavailable as exc:
        if in_ci():
            pytest.fail(f"CI=true and no {what}: {exc}", pytrace=False)
        pytest.skip(f"no {what}: {exc}")
    try:
        yield engine
    finally:
        stop(engine)
