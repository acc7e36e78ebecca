"""Bounded reads of small kernel files, and one short reason for a file that could not be read."""

from __future__ import annotations

import errno
import os

__all__ = ["describe_os_error", "read_small", "read_text"]


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
