"""The flight recorder's ring: append-only JSON-lines segments, sealed by gzip with a SHA-256 each.

Layout of the ring directory (mode 0700, every file 0600, see docs/architecture.md "Flight
recorder")::

    lock                  flock(2) held by the one writer
    key                   32 random bytes: the redaction pseudonym key (ring and captures share it)
    writer.json           who writes: pid, run id, start, boot id, host, interval
    index.jsonl           one line per sealed segment: name, sha256, sizes, record count, time span
    seg-0000000042.jsonl      the active segment (at most one per run), appended to once per tick
    seg-0000000041.jsonl.gz   sealed segments, listed in index.jsonl

A segment's first line is a header (format, version, run id, boot id, host); every other line is
one record::

    {"t": <wall unix s>, "mono": <CLOCK_MONOTONIC s>, "member": "nvml/samples.jsonl",
     "op": "append" | "write", "data": "<the member's bytes, as the collector wrote them>"}

``member`` and ``data`` are what a collector's ``sample()`` handed to ``ctx.sink``: a ring record
*is* a bundle member's bytes, so capture folds records back into members byte for byte and the
analysis loaders read them with their usual code. Members under ``recorder/`` are the recorder's
own (starts, stops, gaps, clock jumps, disk full).

Crash safety: a record line is written with one ``write(2)`` per tick; a ``kill -9`` leaves at most
a torn last line, which the next writer (or a reader) detects (no newline, or not a JSON record)
and cuts. A sealed segment is written to a temporary file, fsynced, renamed, and only then listed
in the index (itself appended and fsynced), and only then is the active file removed; recovery
finishes or undoes any seal it finds half done. Sealed data is checked against its SHA-256 on
every read. Caps: ``max_bytes`` (sealed + active) and ``retention_s``, oldest segments dropped first.

Over 500 lines on purpose: the writer's recovery and the reader's checks are two halves of one
on-disk contract (torn tails, half-done seals, the index), kept side by side so a change to one
is made against the other.
"""

from __future__ import annotations

import errno
import fcntl
import gzip
import hashlib
import json
import os
import re
import socket
import time
import uuid
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.errors import RingError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_RETENTION_S",
    "DEFAULT_RING_DIR",
    "RING_FORMAT",
    "RING_VERSION",
    "RingReader",
    "RingRecord",
    "RingWriter",
    "SegmentInfo",
    "load_key",
    "resolve_ring_dir",
]

RING_FORMAT = "gpuforensics-ring"
RING_VERSION = 1
DEFAULT_RING_DIR = "/var/lib/gpuforensics/ring"
DEFAULT_MAX_BYTES = 512 << 20
DEFAULT_RETENTION_S = 24 * 3600.0
KEY_FILE = "key"
INDEX_FILE = "index.jsonl"
WRITER_FILE = "writer.json"
LOCK_FILE = "lock"
_ACTIVE_RE = re.compile(r"^seg-(\d{10})\.jsonl$")
_SEALED_RE = re.compile(r"^seg-(\d{10})\.jsonl\.gz$")
_RECORD_KEYS = ("t", "mono", "member", "op", "data")


@dataclass(frozen=True)
class RingRecord:
    """One record read back, with where it lies (its provenance in a capture)."""

    t: float
    mono: float
    member: str
    op: str
    data: bytes
    run: str
    segment: str
    line: int  # 1-based line in the segment's uncompressed text (the header is line 1)


@dataclass
class SegmentInfo:
    """A segment's index entry (sealed) or what a scan of the active file found."""

    name: str
    seq: int
    sealed: bool
    run: str = ""
    boot_id: str | None = None
    sha256: str | None = None  # of the file as stored (compressed, for a sealed segment)
    bytes: int = 0  # on disk
    raw_bytes: int = 0  # uncompressed text
    records: int = 0
    min_t: float | None = None
    max_t: float | None = None
    first_mono: float | None = None
    last_mono: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path: Path, data: bytes) -> None:
    """Create or truncate ``path`` (0600), write all of ``data`` and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_private(path: Path, data: bytes) -> None:
    """Atomically replace ``path`` (0600) with ``data``."""
    tmp = path.with_name(f".{path.name}.tmp")
    _write_synced(tmp, data)
    os.replace(tmp, path)


def _boot_id() -> str | None:
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
        _write_synced(tmp, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            data = path.read_bytes()
        else:
            _fsync_dir(path.parent)
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


def parse_record_line(line: bytes) -> dict[str, Any] | None:
    """A record line (without its newline) as a dict, or None when it is not a whole record."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict):
        return None
    if "ring" in obj:
        return obj  # the header
    if not all(k in obj for k in _RECORD_KEYS) or not isinstance(obj["data"], str) \
            or not isinstance(obj["member"], str) or not isinstance(obj["t"], int | float) \
            or not isinstance(obj["mono"], int | float):
        return None
    return obj


def _valid_prefix(data: bytes) -> tuple[int, list[tuple[int, dict[str, Any]]]]:
    """Length of the longest prefix made of whole, valid lines, and those lines parsed
    (1-based line number, object). The first line must be a ring header."""
    out: list[tuple[int, dict[str, Any]]] = []
    pos = 0
    no = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            break
        obj = parse_record_line(data[pos:nl])
        if obj is None or (no == 0) != ("ring" in obj):
            break
        no += 1
        out.append((no, obj))
        pos = nl + 1
    return pos, out


def _info_from_lines(name: str, seq: int, lines: list[tuple[int, dict[str, Any]]]) -> SegmentInfo:
    info = SegmentInfo(name=name, seq=seq, sealed=False)
    if lines:
        head = lines[0][1]
        info.run = str(head.get("run", ""))
        info.boot_id = head.get("boot_id") if isinstance(head.get("boot_id"), str) else None
    for _, rec in lines[1:]:
        t, mono = float(rec["t"]), float(rec["mono"])
        info.records += 1
        info.min_t = t if info.min_t is None else min(info.min_t, t)
        info.max_t = t if info.max_t is None else max(info.max_t, t)
        if info.first_mono is None:
            info.first_mono = mono
        info.last_mono = mono
    return info


def encode_record(t: float, mono: float, member: str, op: str, data: bytes) -> bytes:
    """One record line (ASCII JSON: undecodable bytes survive as surrogate escapes)."""
    return (json.dumps({"t": round(t, 6), "mono": round(mono, 6), "member": member, "op": op,
                        "data": data.decode("utf-8", "surrogateescape")},
                       separators=(",", ":")) + "\n").encode("ascii")


class RingWriter:
    """The one writer of a ring directory (an exclusive ``flock`` on ``lock``)."""

    def __init__(self, root: Path | str, max_bytes: int = DEFAULT_MAX_BYTES,
                 retention_s: float = DEFAULT_RETENTION_S, segment_bytes: int | None = None,
                 segment_age_s: float = 600.0, fsync_s: float = 2.0,
                 writer_info: dict[str, Any] | None = None) -> None:
        if max_bytes < 64 << 10:
            raise RingError(f"--max-bytes {max_bytes} is too small for a ring (at least 64 KiB)")
        if retention_s <= 0:
            raise RingError("--retention must be positive")
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.retention_s = retention_s
        self.segment_bytes = segment_bytes or max(16 << 10, min(4 << 20, max_bytes // 8))
        self.segment_age_s = segment_age_s
        self.fsync_s = fsync_s
        self.writer_info = dict(writer_info or {})
        self.run = uuid.uuid4().hex
        self.recovered: list[dict[str, Any]] = []  # what opening the ring found and repaired
        self.dropped_segments = 0
        self._lock_fd: int | None = None
        self._fd: int | None = None
        self._active: SegmentInfo | None = None
        self._size = 0
        self._opened_mono = 0.0
        self._last_sync = 0.0
        self._sealed: list[SegmentInfo] = []
        # the latest "write" record of each member (device lists, container inspects): written
        # again at the top of every new segment, so any segment read alone holds the state
        self._state: dict[str, tuple[float, float, str, str, bytes]] = {}
        self.state_max_bytes = self.segment_bytes // 2

    # -- opening ----------------------------------------------------------------------------
    def open(self) -> RingWriter:
        _prepare_dir(self.root)
        fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        for attempt in range(20):  # a reader checks the lock for an instant
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if attempt < 19:
                    time.sleep(0.05)
        else:
            os.close(fd)
            raise RingError(f"{self.root}: another recorder holds the ring (lock {self.root / LOCK_FILE})") from None
        self._lock_fd = fd
        self.key = load_key(self.root, create=True)
        self._recover()
        self._enforce_caps(time.time())
        info = {"pid": os.getpid(), "run": self.run, "started": time.time(), "boot_id": _boot_id(),
                "host": socket.gethostname(), **self.writer_info}
        _write_private(self.root / WRITER_FILE, json.dumps(info, sort_keys=True).encode() + b"\n")
        self._new_segment()
        return self

    def _recover(self) -> None:
        """Read the index, cut its torn tail; finish or undo half-done seals; seal what a killed
        writer left active (its torn tail cut)."""
        entries, torn = _read_index(self.root)
        if torn:
            self.recovered.append({"kind": "index-tail-cut", "bytes": torn})
        names = {e.name for e in entries}
        files = sorted(os.listdir(self.root))
        sealed_on_disk = {f for f in files if _SEALED_RE.match(f)}
        kept = [e for e in entries if e.name in sealed_on_disk]
        if len(kept) != len(entries):
            self.recovered.append({"kind": "index-entries-without-file",
                                   "segments": sorted(names - sealed_on_disk)})
        self._sealed = kept
        if torn or len(kept) != len(entries):
            self._rewrite_index()
        for f in files:
            m = _SEALED_RE.match(f)
            if m and f not in names:
                os.unlink(self.root / f)  # a seal that never reached the index, or a dropped one
            if f.startswith(".") and f.endswith(".tmp"):
                os.unlink(self.root / f)
        for f in files:
            m = _ACTIVE_RE.match(f)
            if not m:
                continue
            path = self.root / f
            if f + ".gz" in names:
                os.unlink(path)  # sealed and indexed; the removal did not happen
                continue
            data = path.read_bytes()
            good, lines = _valid_prefix(data)
            if good < len(data):
                self.recovered.append({"kind": "torn-tail-cut", "segment": f, "bytes": len(data) - good,
                                       "kept_records": max(len(lines) - 1, 0)})
                with open(path, "r+b") as fh:
                    fh.truncate(good)
                    fh.flush()
                    os.fsync(fh.fileno())
            if len(lines) <= 1:
                os.unlink(path)
                continue
            info = _info_from_lines(f, int(m.group(1)), lines)
            self._seal_file(path, data[:good], info)
        self._load_state()

    def _load_state(self) -> None:
        """The state (latest writes) as the last sealed segment left it."""
        if not self._sealed:
            return
        last = self._sealed[-1]
        try:
            data = gzip.decompress((self.root / last.name).read_bytes())
        except (OSError, EOFError, zlib.error):
            return
        _, lines = _valid_prefix(data)
        for _, rec in lines[1:]:
            if rec["op"] == "write":
                self._remember((float(rec["t"]), float(rec["mono"]), rec["member"], "write",
                                rec["data"].encode("utf-8", "surrogateescape")))

    def _remember(self, record: tuple[float, float, str, str, bytes]) -> None:
        self._state.pop(record[2], None)
        self._state[record[2]] = record  # insertion order: oldest first
        total = sum(len(r[4]) for r in self._state.values())
        horizon = time.time() - self.retention_s
        for member in list(self._state):
            rec = self._state[member]
            if total <= self.state_max_bytes and rec[0] >= horizon:
                break
            total -= len(rec[4])
            del self._state[member]

    def _next_seq(self) -> int:
        seqs = [s.seq for s in self._sealed]
        for f in os.listdir(self.root):
            m = _ACTIVE_RE.match(f) or _SEALED_RE.match(f)
            if m:
                seqs.append(int(m.group(1)))
        return max(seqs, default=0) + 1

    def _new_segment(self) -> None:
        seq = self._next_seq()
        name = f"seg-{seq:010d}.jsonl"
        header = {"ring": RING_FORMAT, "version": RING_VERSION, "run": self.run, "boot_id": _boot_id(),
                  "host": socket.gethostname(), "pid": os.getpid(), "created": round(time.time(), 6),
                  "mono": round(time.monotonic(), 6)}
        data = (json.dumps(header, sort_keys=True, separators=(",", ":")) + "\n").encode()
        fd = os.open(self.root / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        try:
            _write_all(fd, data)
        except OSError:
            os.close(fd)
            os.unlink(self.root / name)
            raise
        self._fd = fd
        self._size = len(data)
        self._active = SegmentInfo(name=name, seq=seq, sealed=False, run=self.run, boot_id=_boot_id())
        self._opened_mono = time.monotonic()
        self._last_sync = self._opened_mono
        if self._state:
            self.append(list(self._state.values()), remember=False)

    # -- writing ----------------------------------------------------------------------------
    def append(self, records: Iterable[tuple[float, float, str, str, bytes]], remember: bool = True) -> int:
        """Append records ``(wall, mono, member, op, data)`` with one write; returns the bytes
        written. Raises OSError (ENOSPC...) after cutting any partial write, so the segment
        stays whole."""
        if self._fd is None:
            self._new_segment()
        assert self._fd is not None and self._active is not None
        chunks: list[bytes] = []
        info = self._active
        writes = []
        for t, mono, member, op, data in records:
            chunks.append(encode_record(t, mono, member, op, data))
            if op == "write" and remember:
                writes.append((t, mono, member, op, data))
            info.records += 1
            info.min_t = t if info.min_t is None else min(info.min_t, t)
            info.max_t = t if info.max_t is None else max(info.max_t, t)
            if info.first_mono is None:
                info.first_mono = mono
            info.last_mono = mono
        if not chunks:
            return 0
        blob = b"".join(chunks)
        try:
            _write_all(self._fd, blob)
        except OSError:
            try:  # a partial write must not leave half a line in the middle of the segment
                os.ftruncate(self._fd, self._size)
            except OSError:
                pass
            raise
        self._size += len(blob)
        for w in writes:
            self._remember(w)
        now = time.monotonic()
        if now - self._last_sync >= self.fsync_s:
            os.fdatasync(self._fd)
            self._last_sync = now
        if remember and (self._size >= self.segment_bytes or now - self._opened_mono >= self.segment_age_s):
            self.rotate()
        return len(blob)

    def rotate(self) -> None:
        """Seal the active segment and start a new one; then apply the caps."""
        if self._fd is None or self._active is None:
            return
        os.fdatasync(self._fd)
        os.close(self._fd)
        self._fd = None
        path = self.root / self._active.name
        info = self._active
        self._active = None
        if info.records:
            data = path.read_bytes()
            try:
                self._seal_file(path, data, info)
            except OSError:
                # no room to seal: keep the file as it is (a reader reads it, the next writer
                # seals it) and go on with a fresh segment
                pass
        else:
            os.unlink(path)
        self._enforce_caps(time.time())

    def _seal_file(self, path: Path, data: bytes, info: SegmentInfo) -> None:
        gz = path.with_name(path.name + ".gz")
        tmp = path.with_name(f".{gz.name}.tmp")
        packed = gzip.compress(data, compresslevel=6, mtime=0)
        try:
            _write_synced(tmp, packed)
            os.replace(tmp, gz)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        _fsync_dir(self.root)
        info.sealed = True
        info.name = gz.name
        info.sha256 = hashlib.sha256(packed).hexdigest()
        info.bytes = len(packed)
        info.raw_bytes = len(data)
        line = (json.dumps(info.as_json(), sort_keys=True) + "\n").encode()
        try:
            fd = os.open(self.root / INDEX_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                _write_all(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            os.unlink(gz)
            raise
        self._sealed.append(info)
        os.unlink(path)

    def _rewrite_index(self) -> None:
        data = b"".join((json.dumps(s.as_json(), sort_keys=True) + "\n").encode() for s in self._sealed)
        _write_private(self.root / INDEX_FILE, data)

    def _enforce_caps(self, now: float) -> None:
        """Drop the oldest sealed segments past ``retention_s`` or while over ``max_bytes``."""
        drop: list[SegmentInfo] = []
        total = sum(s.bytes for s in self._sealed) + self._size
        for seg in self._sealed:
            too_old = seg.max_t is not None and seg.max_t < now - self.retention_s
            if too_old or total > self.max_bytes:
                drop.append(seg)
                total -= seg.bytes
        if not drop:
            return
        self._sealed = [s for s in self._sealed if s not in drop]
        self._rewrite_index()  # first forget them, then remove them: a crash in between is an orphan
        for seg in drop:
            try:
                os.unlink(self.root / seg.name)
            except FileNotFoundError:
                pass
        self.dropped_segments += len(drop)

    @property
    def size_bytes(self) -> int:
        return sum(s.bytes for s in self._sealed) + self._size

    def maintain(self) -> None:
        """Periodic work: age-based rotation and the caps (called by the recorder every tick)."""
        if self._fd is not None and time.monotonic() - self._opened_mono >= self.segment_age_s:
            self.rotate()
        elif self._size + sum(s.bytes for s in self._sealed) > self.max_bytes:
            self.rotate()

    def close(self, seal: bool = True) -> None:
        if seal:
            try:
                self.rotate()
            except OSError:
                pass
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "short write")
        view = view[n:]


def _prepare_dir(root: Path) -> None:
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = root.stat()
        if st.st_uid == os.geteuid() and st.st_mode & 0o077:
            os.chmod(root, 0o700)
    except OSError as exc:
        raise RingError(f"cannot use ring directory {root}: {exc.strerror or exc}") from None


def _read_index(root: Path) -> tuple[list[SegmentInfo], int]:
    """Index entries, and the number of bytes of a torn tail (0 when whole)."""
    try:
        data = (root / INDEX_FILE).read_bytes()
    except FileNotFoundError:
        return [], 0
    except OSError as exc:
        raise RingError(f"cannot read {root / INDEX_FILE}: {exc.strerror or exc}") from None
    out: list[SegmentInfo] = []
    pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            break
        try:
            d = json.loads(data[pos:nl])
            out.append(SegmentInfo(**{k: d[k] for k in SegmentInfo.__dataclass_fields__ if k in d}))
        except (ValueError, TypeError):
            break
        pos = nl + 1
    return out, len(data) - pos


@dataclass
class ReadReport:
    """What a read met: segments used (provenance), problems (hash mismatch, torn tails)."""

    segments: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class RingReader:
    """Reads a ring while it is written (no lock): sealed segments checked against their
    SHA-256, then the active ones up to their last whole line."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise RingError(f"no ring at {self.root}")
        self.report = ReadReport()

    def segments(self) -> list[SegmentInfo]:
        """Sealed (from the index) then active segments, oldest first."""
        entries, _ = _read_index(self.root)
        names = {e.name for e in entries}
        active = []
        try:
            files = os.listdir(self.root)
        except OSError as exc:
            raise RingError(f"cannot list {self.root}: {exc.strerror or exc}") from None
        for f in files:
            m = _ACTIVE_RE.match(f)
            if m and f + ".gz" not in names:
                active.append(SegmentInfo(name=f, seq=int(m.group(1)), sealed=False))
        return sorted(entries, key=lambda s: s.seq) + sorted(active, key=lambda s: s.seq)

    def _segment_lines(self, seg: SegmentInfo) -> tuple[list[tuple[int, dict[str, Any]]], str | None]:
        path = self.root / seg.name
        data = path.read_bytes()  # FileNotFoundError: sealed or dropped meanwhile (caller retries)
        if seg.sealed:
            digest = hashlib.sha256(data).hexdigest()
            if digest != seg.sha256:
                self.report.problems.append(f"{seg.name}: SHA-256 {digest} does not match the index "
                                            f"({seg.sha256}): segment skipped")
                return [], None
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError, zlib.error) as exc:
                self.report.problems.append(f"{seg.name}: cannot decompress: {exc}: segment skipped")
                return [], None
            sha = seg.sha256
        else:
            sha = None
        good, lines = _valid_prefix(data)
        if good < len(data) and seg.sealed:
            self.report.problems.append(f"{seg.name}: {len(data) - good} bytes after the last whole record")
        if not seg.sealed:
            sha = hashlib.sha256(data[:good]).hexdigest()
        return lines, sha

    def records(self, since: float | None = None, until: float | None = None,
                members: tuple[str, ...] = (), keep_writes: bool = False) -> Iterator[RingRecord]:
        """Records whose wall time is in [since, until], in the order they were written
        (which is the monotonic order of one run; runs follow each other). ``keep_writes``: also
        the "write" records older than ``since`` in the segments read (the state then: device
        lists, container inspects; every segment starts with a copy of it)."""
        done: set[str] = set()
        for _attempt in range(3):
            retry = False
            for seg in self.segments():
                stem = seg.name.removesuffix(".gz")
                if stem in done:
                    continue
                if seg.sealed and ((since is not None and seg.max_t is not None and seg.max_t < since)
                                   or (until is not None and seg.min_t is not None and seg.min_t > until)):
                    done.add(stem)
                    continue
                try:
                    lines, sha = self._segment_lines(seg)
                except FileNotFoundError:
                    retry = True
                    continue
                done.add(stem)
                if not lines:
                    continue
                run = str(lines[0][1].get("run", ""))
                first = last = None
                for no, rec in lines[1:]:
                    t = float(rec["t"])
                    if (until is not None and t > until) or (since is not None and t < since and not (
                            keep_writes and rec["op"] == "write")):
                        continue
                    if members and not rec["member"].startswith(members):
                        continue
                    first = no if first is None else first
                    last = no
                    yield RingRecord(t, float(rec["mono"]), rec["member"], str(rec["op"]),
                                     rec["data"].encode("utf-8", "surrogateescape"), run, seg.name, no)
                if first is not None:
                    self.report.segments.append({"segment": seg.name, "sealed": seg.sealed, "sha256": sha,
                                                 "sha256_of": "file" if seg.sealed else "lines read",
                                                 "run": run, "lines": [first, last]})
            if not retry:
                return

    def writer(self) -> dict[str, Any] | None:
        """writer.json, with ``alive`` (the lock is held) and ``pid_alive``."""
        try:
            info = json.loads((self.root / WRITER_FILE).read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(info, dict):
            return None
        held = False
        try:
            fd = os.open(self.root / LOCK_FILE, os.O_RDONLY)
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                held = True
            finally:
                os.close(fd)
        info["alive"] = held
        return info
