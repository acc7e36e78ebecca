"""A collector process never outlives the capture that forked it.

Each collector runs in a child process in its own process group (so the runner can kill it and
whatever it started). If the capture itself dies without cleaning up (SIGKILL, the OOM killer, a
crash in the interpreter), nothing would stop those children: they would keep sampling into an
abandoned staging directory for the rest of the window. :func:`die_with_parent`, called in the
child right after ``fork``, asks the kernel to send it SIGKILL when its parent dies
(``prctl(PR_SET_PDEATHSIG, SIGKILL)``), then checks that the parent is still the process that
forked it: a parent that died between ``fork`` and ``prctl`` would otherwise go unnoticed.
:func:`enter_child` is that and the other rules of a collector child, in one place for capture's
runner and the flight recorder's samplers. :func:`run_tied` runs a helper program from a collector
child (the kernel collector's ``dmesg``/``journalctl`` fallbacks) under the same rule: the program
is killed when the collector child that started it dies, however it dies.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence

__all__ = ["die_with_parent", "enter_child", "fork_child", "malloc_trim", "parent_death_signal", "run_tied",
           "wait_readable"]

_PR_SET_PDEATHSIG = 1
_PR_GET_PDEATHSIG = 2


def _libc() -> ctypes.CDLL | None:
    """glibc's ``libc.so.6`` by name; else what ``find_library`` finds (musl's ``libc.so``): it
    runs ``ldconfig -p`` in a subprocess, a fork and exec every command paid before it started."""
    for name in ("libc.so.6", None):
        try:
            return ctypes.CDLL(name or ctypes.util.find_library("c") or "libc.so", use_errno=True)
        except OSError:
            continue
    return None


_LIBC = _libc()  # loaded in the parent: the child must not search the file system after fork


def die_with_parent(parent_pid: int, signum: int = signal.SIGKILL) -> bool:
    """In a freshly forked child: be sent ``signum`` when the parent dies; exit at once if it
    already has. Returns False where the kernel offers no such thing (not Linux): the runner's
    own deadlines still apply there."""
    armed = False
    if _LIBC is not None:
        armed = _LIBC.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signum), 0, 0, 0) == 0
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
    return armed


def enter_child(parent_pid: int, nice: int = 10) -> None:
    """The rules of every collector child, first thing after ``fork`` (capture's collectors and the
    flight recorder's samplers alike): die with the parent, own process group (the parent kills
    the group), stdout onto stderr (a chatty library must never reach the parent's stdout: the
    bundle path, the recorder's status), ``nice`` lower priority than the parent (capture must not
    compete with the workload it investigates), SIGINT ignored (the parent decides), SIGTERM fatal."""
    die_with_parent(parent_pid)
    os.setpgid(0, 0)
    os.dup2(2, 1)
    if nice:
        try:
            os.nice(nice)
        except OSError:
            pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def fork_child(body: Callable[[], None], nice: int = 10) -> int:
    """Fork a child that follows :func:`enter_child`'s rules (first thing), runs ``body()`` and
    exits: status 0, or 1 when ``body`` raised (it never returns into the parent's code). The
    parent gets the child's PID, the child's process group made its own from both sides (the
    parent kills the group even before the child has run). Buffered output is flushed first, so
    the child cannot write the parent's pending output a second time."""
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            enter_child(parent, nice=nice)  # first: a SIGKILLed parent takes its children with it
            body()
        except BaseException:  # noqa: BLE001 - the child never returns into the parent's code
            code = 1
        finally:
            os._exit(code)
    try:
        os.setpgid(pid, pid)
    except OSError:  # the child did it first, or has exited already
        pass
    return pid


def malloc_trim() -> bool:
    """Give the C heap's free pages back to the kernel (glibc's ``malloc_trim(0)``: the top of the
    heap and the free pages inside it). A long-running sampler frees a tick's buffers every tick;
    without this the pages they took stay counted in its resident memory. False where the C
    library has no such call (musl)."""
    trim = getattr(_LIBC, "malloc_trim", None) if _LIBC is not None else None
    if trim is None:
        return False
    trim(ctypes.c_size_t(0))
    return True


def parent_death_signal() -> int:
    """The signal this process is set to receive when its parent dies (0: none)."""
    if _LIBC is None:
        return 0
    value = ctypes.c_int(0)
    if _LIBC.prctl(_PR_GET_PDEATHSIG, ctypes.byref(value), 0, 0, 0) != 0:
        return 0
    return value.value


def run_tied(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` (stdin empty, stdout and stderr captured, killed after ``timeout`` seconds) so
    that it cannot outlive the calling process: between ``fork`` and ``exec`` the program is armed
    with SIGKILL on its parent's death (the death signal survives ``exec`` of an ordinary program).
    Raises what :func:`subprocess.run` raises (OSError, TimeoutExpired)."""
    parent = os.getpid()

    def arm() -> None:  # runs in the forked child before exec: async-signal-safe calls only
        if _LIBC is not None:
            _LIBC.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return subprocess.run(list(argv), capture_output=True, timeout=timeout, check=False,
                          stdin=subprocess.DEVNULL, preexec_fn=arm)


def wait_readable(fds: Iterable[int], timeout_s: float) -> list[int]:
    """The descriptors of ``fds`` that can be read (data, end of file or an error) within
    ``timeout_s``: the children's pipes a capture or the recorder waits on. poll(2), not select(2),
    which refuses any descriptor above 1023 (a process that keeps thousands of cgroup files open,
    or a capture started by a tool that holds many, would fail there: ValueError)."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return [fd for fd, _ in poller.poll(max(timeout_s, 0.0) * 1000.0)]
