"""Bounded reads of small kernel files, one short reason for a file that could not be read, and the
check that a unix socket an API client is about to dial is there and usable."""

from __future__ import annotations

import errno
import os
import stat

from forensics.errors import SourcePermissionDenied, SourceUnavailable

__all__ = ["MAYBE_MORE", "KeptFiles", "check_socket", "describe_os_error", "read_small", "read_text"]


def read_small(path: str, limit: int = 1 << 20) -> bytes:
    """Read a small kernel file with one open and as few reads as needed (up to ``limit``).

    Raises OSError (FileNotFoundError, PermissionError, ProcessLookupError...) as the kernel says.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        total = 0
        while total < limit:
            chunk = os.read(fd, min(65536, limit - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str, limit: int = 4 << 20) -> str:
    """:func:`read_small` decoded as UTF-8 (undecodable bytes replaced)."""
    return read_small(path, limit).decode("utf-8", "replace")


def describe_os_error(error: OSError) -> str:
    """A short, stable reason for a file that could not be read."""
    if isinstance(error, PermissionError) or error.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied: {error.strerror or error}"
    if error.errno in (errno.ENOENT, errno.ESRCH):
        return "absent (process exited or file does not exist)"
    if error.errno == errno.ENODEV:
        return "removed (the cgroup was deleted while reading)"
    return f"{type(error).__name__}: {error.strerror or error}"


def check_socket(path: str, what: str) -> None:
    """Raise ``SourceUnavailable`` / ``SourcePermissionDenied`` unless ``path`` is a unix socket
    this process may connect to; ``what`` names it in the message (``kubelet pod-resources``)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise SourceUnavailable(f"no {what} socket at {path}") from None
    except PermissionError as exc:
        raise SourcePermissionDenied(f"permission denied: {path}: {exc.strerror}") from None
    except OSError as exc:
        raise SourceUnavailable(f"cannot stat {path}: {exc.strerror}") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise SourceUnavailable(f"{path} is not a unix socket")
    if not os.access(path, os.R_OK | os.W_OK):
        raise SourcePermissionDenied(f"permission denied: {path} (connecting needs write access; run as root)")


_CHUNK = 65536
# A seq_file (/proc/net/dev, /proc/diskstats, mountinfo, most cgroup files) gives at most its
# page-sized buffer per read, short of the end when the next record does not fit: a read longer
# than half a page may not be the whole file (records here are far shorter than half a page).
MAYBE_MORE = 2048


class KeptFiles:
    """Files re-read on every sampling tick through descriptors kept open (one ``pread`` at offset
    0 re-generates a kernel file; a long one is read on to its end, up to ``limit``); out of
    descriptors (EMFILE), a file is opened, read and closed."""

    def __init__(self, limit: int = 65536) -> None:
        self.limit = limit
        self._fds: dict[str, int] = {}

    def read(self, path: str) -> bytes:
        fd = self._fds.get(path)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as error:
                if error.errno != errno.EMFILE:
                    raise
                return read_small(path, self.limit)
            self._fds[path] = fd
        try:
            data = os.pread(fd, min(self.limit, _CHUNK), 0)  # never a limit-sized buffer per read
            if len(data) <= MAYBE_MORE or len(data) >= self.limit:
                return data
            parts, total = [data], len(data)
            while total < self.limit:  # on from where the last read ended: the seq_file's next record
                more = os.pread(fd, min(self.limit - total, _CHUNK), total)
                if not more:
                    break
                parts.append(more)
                total += len(more)
            return b"".join(parts)
        except OSError:
            os.close(fd)
            del self._fds[path]
            raise

    def forget(self, path: str) -> None:
        """Close the descriptor kept for ``path`` (the next read opens it again)."""
        fd = self._fds.pop(path, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    @staticmethod
    def reserve(wanted: int) -> None:
        """Raise this process's soft descriptor limit to ``wanted`` (up to the hard limit; never
        lowered), for the descriptors to keep."""
        try:
            import resource
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            if soft != resource.RLIM_INFINITY and soft < wanted:
                new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
                resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        except (ImportError, ValueError, OSError):
            pass

    def descriptor(self, path: str) -> int | None:
        """The descriptor kept for ``path`` (None: none kept, e.g. out of descriptors)."""
        return self._fds.get(path)

    def keep_only(self, paths: set[str]) -> None:
        """Close the descriptors kept for every path not in ``paths`` (a new plan's files)."""
        for path in [p for p in self._fds if p not in paths]:
            self.forget(path)

    def descriptors(self) -> list[int]:
        """The descriptors kept open now (benchmarks compare against bare preads of them)."""
        return list(self._fds.values())

    def close(self) -> None:
        """Close every kept descriptor."""
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()

