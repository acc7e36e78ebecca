"""The ring directory's files: their names, synced writes, the directory's mode, the key.

Layout of the ring directory (mode 0700, every file 0600, see docs/architecture.md "Flight
recorder")::

    lock                  flock(2) held by the one writer
    key                   32 random bytes: the redaction pseudonym key (ring and captures share it)
    writer.json           who writes: pid, run id, start, boot id, host, interval
    index.jsonl           one line per sealed segment: name, sha256, sizes, record count, time span
    seg-0000000042.jsonl      the active segment (at most one per run), appended to once per tick
    seg-0000000041.jsonl.gz   sealed segments, listed in index.jsonl

What a segment's lines hold is :mod:`forensics.ring.segment`; who writes them
:mod:`forensics.ring.writer`, who reads them :mod:`forensics.ring.reader`.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from forensics.errors import RingError

__all__ = [
    "ACTIVE_RE", "DEFAULT_MAX_BYTES", "DEFAULT_RETENTION_S", "DEFAULT_RING_DIR", "INDEX_FILE", "KEY_FILE",
    "LOCK_FILE", "SEALED_RE", "WRITER_FILE", "boot_id", "fsync_dir", "load_key", "prepare_dir",
    "resolve_ring_dir", "write_all", "write_private", "write_synced",
]

DEFAULT_RING_DIR = "/var/lib/gpuforensics/ring"
DEFAULT_MAX_BYTES = 512 << 20
DEFAULT_RETENTION_S = 24 * 3600.0
KEY_FILE = "key"
INDEX_FILE = "index.jsonl"
WRITER_FILE = "writer.json"
LOCK_FILE = "lock"
ACTIVE_RE = re.compile(r"^seg-(\d{10})\.jsonl$")
SEALED_RE = re.compile(r"^seg-(\d{10})\.jsonl\.gz$")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: Path, data: bytes) -> None:
    """Create or truncate ``path`` (0600), write all of ``data`` and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_private(path: Path, data: bytes) -> None:
    """Atomically replace ``path`` (0600) with ``data``."""
    tmp = path.with_name(f".{path.name}.tmp")
    write_synced(tmp, data)
    os.replace(tmp, path)


def boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def resolve_ring_dir(value: str | Path | None = None) -> Path:
    """The ring directory: ``value`` (``--ring``, ``--set ring.dir=``), else ``$GPUFORENSICS_RING``,
    else :data:`DEFAULT_RING_DIR`."""
    return Path(value or os.environ.get("GPUFORENSICS_RING") or DEFAULT_RING_DIR)


def load_key(root: Path | str, create: bool = False) -> bytes | None:
    """The ring's pseudonym key (32 bytes, file ``key``, 0600), created when ``create``."""
    path = Path(root) / KEY_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if not create:
            return None
        return _create_key(path)
    except OSError as exc:
        raise RingError(f"cannot read the ring key {path}: {exc.strerror or exc}") from None
    if len(data) != 32:
        raise RingError(f"ring key {path} is {len(data)} bytes, not 32: refusing to use it")
    return data


def _create_key(path: Path) -> bytes:
    """Write a new key whole or not at all (a temporary file, fsynced, then linked to ``key``: a
    full disk never leaves a short key behind); a key another writer made first wins."""
    data = os.urandom(32)
    tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}")
    try:
        write_synced(tmp, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            data = path.read_bytes()
        else:
            fsync_dir(path.parent)
    except OSError as exc:
        raise RingError(f"cannot create the ring key {path}: {exc.strerror or exc}") from None
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass
    if len(data) != 32:
        raise RingError(f"ring key {path} is {len(data)} bytes, not 32: refusing to use it")
    return data



def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "short write")
        view = view[n:]


def prepare_dir(root: Path) -> None:
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = root.stat()
        if st.st_uid == os.geteuid() and st.st_mode & 0o077:
            os.chmod(root, 0o700)
    except OSError as exc:
        raise RingError(f"cannot use ring directory {root}: {exc.strerror or exc}") from None

