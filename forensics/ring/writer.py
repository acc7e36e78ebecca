"""The one writer of a ring: recovery on open, appends, seals, the caps.

Crash safety: a record line is written with one ``write(2)`` per tick; a ``kill -9`` leaves at most
a torn last line, which the next writer (or a reader) detects (the bytes after the last newline)
and cuts; a whole line that is not a record is kept (readers name and skip it). A sealed segment is written to a temporary file, fsynced, renamed, and only then listed
in the index (itself appended and fsynced), and only then is the active file removed; recovery
(:meth:`RingWriter.open`) finishes or undoes any seal it finds half done. Caps: ``max_bytes``
(sealed + active) and ``retention_s``, oldest segments dropped first (the index rewritten before
the files go). What a reader checks of all this is :mod:`forensics.ring.reader`.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import os
import socket
import time
import uuid
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from forensics.errors import RingError
from forensics.ring.delta import DELTA_OP, DeltaEncoder
from forensics.ring.files import (
    ACTIVE_RE,
    DEFAULT_MAX_BYTES,
    DEFAULT_RETENTION_S,
    INDEX_FILE,
    LOCK_FILE,
    SEALED_RE,
    WRITER_FILE,
    boot_id,
    fsync_dir,
    load_key,
    prepare_dir,
    write_all,
    write_private,
    write_synced,
)
from forensics.ring.segment import (
    RING_FORMAT,
    RING_VERSION,
    SegmentInfo,
    encode_record,
    index_line,
    info_from_lines,
    read_index,
    valid_prefix,
)

__all__ = ["RingWriter"]

_PACK_OVER = 256  # state lines longer than this are kept zlib-compressed


def _pack(line: bytes) -> bytes:
    """A state line as kept: as it is when short, else ``z`` and the line zlib-compressed (a record
    line starts with ``{``, so the first byte tells which)."""
    return b"z" + zlib.compress(line, 1) if len(line) > _PACK_OVER else line


def _unpack(kept: bytes) -> bytes:
    return zlib.decompress(kept[1:]) if kept[:1] == b"z" else kept


class RingWriter:
    """The one writer of a ring directory (an exclusive ``flock`` on ``lock``)."""

    def __init__(self, root: Path | str, max_bytes: int = DEFAULT_MAX_BYTES,
                 retention_s: float = DEFAULT_RETENTION_S, segment_bytes: int | None = None,
                 segment_age_s: float = 600.0, fsync_s: float = 2.0,
                 writer_info: dict[str, Any] | None = None, delta_members: Iterable[str] = (),
                 redacted: bool = True) -> None:
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
        # whether the records appended are redacted (the recorder's ``--no-redact``: False): said in
        # every segment's header, so a redacted capture carries only redacted segments
        # (forensics.collectors.ring), and never carried from an unredacted segment's state into a
        # redacted one (:meth:`_load_state`)
        self.redacted = redacted
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
        # per member: (wall, mono, the data's size, its record line), the line encoded once and
        # kept zlib-compressed when long (the state is read back only when a segment starts; a
        # node's first-seen processes leave thousands of proc/<pid>/* files in it)
        self._state: dict[str, tuple[float, float, int, bytes]] = {}
        self._state_bytes = 0  # the data sizes' sum, kept as members come and go
        self.state_max_bytes = self.segment_bytes // 2
        # append records of these members are stored change-only (forensics.ring.delta), one
        # encoder per member per segment
        self.delta_members = frozenset(delta_members)
        self._encoders: dict[str, DeltaEncoder] = {}

    # -- opening ----------------------------------------------------------------------------
    def open(self) -> RingWriter:
        prepare_dir(self.root)
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
        info = {"pid": os.getpid(), "run": self.run, "started": time.time(), "boot_id": boot_id(),
                "host": socket.gethostname(), **self.writer_info}
        write_private(self.root / WRITER_FILE, json.dumps(info, sort_keys=True).encode() + b"\n")
        self._new_segment()
        return self

    def _recover(self) -> None:
        """Read the index, cut its torn tail; finish or undo half-done seals; seal what a killed
        writer left active (its torn tail cut)."""
        entries, torn = read_index(self.root)
        if torn:
            self.recovered.append({"kind": "index-tail-cut", "bytes": torn})
        names = {e.name for e in entries}
        files = sorted(os.listdir(self.root))
        sealed_on_disk = {f for f in files if SEALED_RE.match(f)}
        kept = [e for e in entries if e.name in sealed_on_disk]
        if len(kept) != len(entries):
            self.recovered.append({"kind": "index-entries-without-file",
                                   "segments": sorted(names - sealed_on_disk)})
        self._sealed = kept
        if torn or len(kept) != len(entries):
            self._rewrite_index()
        for f in files:
            m = SEALED_RE.match(f)
            if m and f not in names:
                os.unlink(self.root / f)  # a seal that never reached the index, or a dropped one
            if f.startswith(".") and f.endswith(".tmp"):
                os.unlink(self.root / f)
        for f in files:
            m = ACTIVE_RE.match(f)
            if not m:
                continue
            path = self.root / f
            if f + ".gz" in names:
                os.unlink(path)  # sealed and indexed; the removal did not happen
                continue
            data = path.read_bytes()
            good, lines, _ = valid_prefix(data)  # whole lines that are not records are kept
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
            info = info_from_lines(f, int(m.group(1)), lines)
            self._seal_file(path, data[:good], info)
        self._load_state()

    def _load_state(self) -> None:
        """The state (latest writes) as the last sealed segment left it."""
        if not self._sealed:
            return
        last = self._sealed[-1]
        if self.redacted and last.redacted is not True:
            return  # its state may hold secrets (record --no-redact): this run's records say it again
        try:
            data = gzip.decompress((self.root / last.name).read_bytes())
        except (OSError, EOFError, zlib.error):
            return
        _, lines, _ = valid_prefix(data)
        for _, rec in lines[1:]:
            if rec["op"] == "write":
                self._remember((float(rec["t"]), float(rec["mono"]), rec["member"], "write",
                                rec["data"].encode("utf-8", "surrogateescape")))

    def _remember(self, record: tuple[float, float, str, str, bytes], line: bytes | None = None) -> None:
        t, mono, member, _, data = record
        line = line if line is not None else encode_record(*record)
        old = self._state.pop(member, None)
        if old is not None:
            self._state_bytes -= old[2]
        self._state[member] = (t, mono, len(data), _pack(line))  # insertion order: oldest first
        self._state_bytes += len(data)
        horizon = time.time() - self.retention_s
        while self._state:
            oldest = next(iter(self._state))
            rec = self._state[oldest]
            if self._state_bytes <= self.state_max_bytes and rec[0] >= horizon:
                break
            self._state_bytes -= rec[2]
            del self._state[oldest]

    def _next_seq(self) -> int:
        seqs = [s.seq for s in self._sealed]
        for f in os.listdir(self.root):
            m = ACTIVE_RE.match(f) or SEALED_RE.match(f)
            if m:
                seqs.append(int(m.group(1)))
        return max(seqs, default=0) + 1

    def _new_segment(self) -> None:
        seq = self._next_seq()
        name = f"seg-{seq:010d}.jsonl"
        header = {"ring": RING_FORMAT, "version": RING_VERSION, "run": self.run, "boot_id": boot_id(),
                  "host": socket.gethostname(), "pid": os.getpid(), "created": round(time.time(), 6),
                  "mono": round(time.monotonic(), 6), "redacted": self.redacted}
        data = (json.dumps(header, sort_keys=True, separators=(",", ":")) + "\n").encode()
        fd = os.open(self.root / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        try:
            write_all(fd, data)
        except OSError:
            os.close(fd)
            os.unlink(self.root / name)
            raise
        self._fd = fd
        self._size = len(data)
        self._active = SegmentInfo(name=name, seq=seq, sealed=False, run=self.run, boot_id=boot_id(),
                                   redacted=self.redacted)
        self._opened_mono = time.monotonic()
        self._last_sync = self._opened_mono
        self._encoders = {}  # every segment decodes alone: its first line of each key is whole
        if self._state:
            self._write_lines([(t, mono, _unpack(line)) for t, mono, _, line in self._state.values()])

    # -- writing ----------------------------------------------------------------------------
    def append(self, records: Iterable[tuple[float, float, str, str, bytes]], remember: bool = True) -> int:
        """Append records ``(wall, mono, member, op, data)`` with one write; returns the bytes
        written. Raises OSError (ENOSPC...) after cutting any partial write, so the segment
        stays whole."""
        if self._fd is None:
            self._new_segment()
        lines: list[tuple[float, float, bytes]] = []
        writes = []
        for t, mono, member, op, data in records:
            if op == "append" and member in self.delta_members and data.endswith(b"\n"):
                enc = self._encoders.setdefault(member, DeltaEncoder())
                text = enc.encode(data.decode("utf-8", "surrogateescape"), mono)
                line = encode_record(t, mono, member, DELTA_OP, text.encode("utf-8", "surrogateescape"))
            else:
                line = encode_record(t, mono, member, op, data)
            lines.append((t, mono, line))
            if op == "write" and remember:
                writes.append(((t, mono, member, op, data), line))
        if not lines:
            return 0
        try:
            written = self._write_lines(lines)
        except OSError:
            self._encoders = {}  # what they saw last was not written: the next lines are whole
            raise
        for w, line in writes:
            self._remember(w, line)
        now = time.monotonic()
        if now - self._last_sync >= self.fsync_s and self._fd is not None:
            os.fdatasync(self._fd)
            self._last_sync = now
        if remember and (self._size >= self.segment_bytes or now - self._opened_mono >= self.segment_age_s):
            self.rotate()
        return written

    def _write_lines(self, lines: list[tuple[float, float, bytes]]) -> int:
        """Record lines ``(wall, mono, line)`` with one write, counted in the active segment."""
        assert self._fd is not None and self._active is not None
        blob = b"".join(line for _, _, line in lines)
        try:
            write_all(self._fd, blob)
        except OSError:
            try:  # a partial write must not leave half a line in the middle of the segment
                os.ftruncate(self._fd, self._size)
            except OSError:
                pass
            raise
        self._size += len(blob)
        info = self._active
        for t, mono, _ in lines:
            info.count(t, mono)
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
            write_synced(tmp, packed)
            os.replace(tmp, gz)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        fsync_dir(self.root)
        info.sealed = True
        info.name = gz.name
        info.sha256 = hashlib.sha256(packed).hexdigest()
        info.bytes = len(packed)
        info.raw_bytes = len(data)
        line = index_line(info)
        try:
            fd = os.open(self.root / INDEX_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                write_all(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            os.unlink(gz)
            raise
        self._sealed.append(info)
        os.unlink(path)

    def _rewrite_index(self) -> None:
        data = b"".join(index_line(s) for s in self._sealed)
        write_private(self.root / INDEX_FILE, data)

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

