"""Each network namespace's ``/proc/<pid>/net/dev`` read on every sampling tick, through a
descriptor kept open only while the process lives (the net collector's per-container counters)."""

from __future__ import annotations

import contextlib
import os
import select
from collections.abc import Mapping

from forensics.hostfs.files import MAYBE_MORE, KeptFiles, read_small

__all__ = ["NamespaceFiles"]


class NamespaceFiles:
    """Each namespace's ``/proc/<pid>/net/dev`` through a descriptor kept open while its process
    lives: one pread a tick instead of open, read, read, close.

    A kept descriptor holds its network namespace (the kernel's ``seq_open_net`` takes a reference),
    so each process is watched through a pidfd (``pidfd_open(2)``): one ``poll(2)`` a tick says which
    processes exited, and their descriptors are closed before anything is read; an exited
    container's namespace is never held a tick past its process. A descriptor is kept only once the
    process is seen in the namespace discovery named (``/proc/<pid>/ns/net``), so a reused PID is
    not read as the old namespace. Without pidfds (Linux < 5.3, out of descriptors), the file is
    opened, read and closed each tick.
    """

    def __init__(self, proc_root: str) -> None:
        self.proc_root = proc_root
        self._files = KeptFiles(1 << 20)
        self._poll = select.poll()
        self._pidfds: dict[int, tuple[int, str]] = {}  # pidfd -> (pid, path)
        self._kept: dict[int, int] = {}  # pid -> pidfd
        self._fds: dict[int, int] = {}  # pid -> the kept descriptor of its net/dev, once opened

    @property
    def watched(self) -> bool:
        """Whether processes are watched by pidfds (this /proc, pidfd_open there): :meth:`alive` knows."""
        return self.proc_root == "/proc" and hasattr(os, "pidfd_open")

    @property
    def alive_pids(self) -> Mapping[int, int]:
        """The PIDs whose descriptors are kept, their processes not exited at the last :meth:`reap`."""
        return self._kept

    def reap(self) -> None:
        """Close the descriptors of processes that exited since the last tick."""
        if not self._pidfds:
            return
        for pidfd, _ in self._poll.poll(0):
            self._drop(pidfd)

    def _drop(self, pidfd: int) -> None:
        pid, path = self._pidfds.pop(pidfd)
        self._kept.pop(pid, None)
        self._fds.pop(pid, None)
        self._poll.unregister(pidfd)
        self._files.forget(path)
        with contextlib.suppress(OSError):
            os.close(pidfd)

    def read(self, pid: int, inode: int) -> bytes:
        """``/proc/<pid>/net/dev`` of the process ``pid``, seen in network namespace ``inode``."""
        fd = self._fds.get(pid)
        if fd is not None:  # the common tick: one pread, no longer than half a page (the whole file)
            try:
                data = os.pread(fd, 65536, 0)
            except OSError:
                del self._fds[pid]  # KeptFiles.read below says why (and closes it)
            else:
                if len(data) <= MAYBE_MORE:
                    return data
                del self._fds[pid]  # a long file: read on to its end, below, from now on
        path = f"{self.proc_root}/{pid}/net/dev"
        if pid in self._kept or self._keep(pid, inode, path):
            data = self._files.read(path)
            fd = self._files.descriptor(path)
            if fd is not None and len(data) <= MAYBE_MORE:
                self._fds[pid] = fd
            return data
        return read_small(path, 1 << 20)

    def _keep(self, pid: int, inode: int, path: str) -> bool:
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is None or self.proc_root != "/proc":  # a pidfd names a PID of this /proc only
            return False
        try:
            pidfd = pidfd_open(pid)
        except OSError:
            return False
        try:
            if os.readlink(f"/proc/{pid}/ns/net") != f"net:[{inode}]":
                raise OSError("another namespace")
        except OSError:
            os.close(pidfd)
            return False
        self._pidfds[pidfd] = (pid, path)
        self._kept[pid] = pidfd
        self._poll.register(pidfd, select.POLLIN)
        return True

    def close(self) -> None:
        for pidfd in list(self._pidfds):
            self._drop(pidfd)
        self._files.close()
