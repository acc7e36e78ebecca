"""Reads a bundle as hostile input, without extracting anything to disk: :func:`open_bundle` reads
it once and holds its small members in memory and, of its big ones, only where they are: the
gzip stream's inflate state every 2 MiB (:mod:`forensics.bundle.inflate`), so a big member is
inflated again from the nearest such point when it is read, whole or in chunks, or when one of its
lines is quoted (an hour of 1 Hz samples is hundreds of MiB: holding them is what a laptop
notices); :func:`scan_bundle` hands members one at a time to a callback (``verify`` and the
cluster receiver hash them in chunks and keep nothing).

Guarantees: no member may escape (absolute paths, ``..``), link, device and FIFO members are
refused, total uncompressed size, per-member size and member count are capped (a gzip bomb stops
at the cap, not at the end of the stream), a truncated or non-gzip file is a clear error, malformed
JSON names its member, an unknown ``format_version`` is refused.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tarfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from forensics.bundle.format import FORMAT_NAME, MANIFEST, SUPPORTED_VERSIONS, check_member_name
from forensics.bundle.inflate import SPACING, Inflater, Point, Readable
from forensics.bundle.members import Members
from forensics.errors import BundleInvalid, BundleTooLarge, BundleUnsafe

__all__ = ["Bundle", "MemberSink", "Members", "ReadLimits", "open_bundle", "parse_manifest", "read_member_chunks",
           "scan_bundle"]



@dataclass(frozen=True)
class ReadLimits:
    """Caps applied while reading; exceeding one raises :class:`BundleTooLarge`."""

    max_total_bytes: int = 1 << 30  # uncompressed content
    max_member_bytes: int = 512 << 20
    max_members: int = 50_000
    #: :func:`open_bundle` holds a member up to this size in memory (while all it holds stay under
    #: ``held_total_bytes``); a bigger one is inflated again from the bundle file when it is read
    held_member_bytes: int = 4 << 20
    held_total_bytes: int = 64 << 20


class _CountingReader:
    """Wraps the decompressed stream; stops the read as soon as the size cap is passed."""

    def __init__(self, inner: Readable, cap: int) -> None:
        self.inner = inner
        self.cap = cap
        self.count = 0

    def read(self, n: int = -1) -> bytes:
        data = self.inner.read(n)
        self.count += len(data)
        if self.count > self.cap:
            raise BundleTooLarge(f"bundle expands past the cap of {self.cap} bytes (gzip bomb?)")
        return data


class _HashingReader:
    """Hashes the compressed bytes as they are read, for the bundle's own SHA-256."""

    def __init__(self, inner: BinaryIO) -> None:
        self.inner = inner
        self.hash = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.inner.read(n)
        self.hash.update(data)
        return data

    def drain(self) -> None:
        while self.read(1 << 20):
            pass


def _not_a_number(constant: str) -> None:
    """``NaN``/``Infinity``/``-Infinity`` are not JSON (RFC 8259), though Python writes and reads
    them: read them as null, so nothing downstream (``analyze -f json``, ``inspect -f json``, the
    JSON report) carries a value no strict JSON reader accepts."""
    return None


@dataclass
class Bundle:
    """An opened bundle: the manifest, every member by path (:class:`Members`: the small ones held,
    the big ones read again when asked for), and each member's SHA-256 and size as read."""

    path: Path
    manifest: dict[str, Any]
    members: Mapping[str, bytes]
    file_sha256: str
    top: str
    _manifest_index: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    #: the caps it was read under: a reader of what members hold (the flight recorder's segments,
    #: rebuilt at read time) applies the same
    limits: ReadLimits = field(default_factory=ReadLimits, repr=False)
    #: member -> (SHA-256, size) of the bytes read (the integrity check's, without reading them again)
    digests: dict[str, tuple[str, int]] = field(default_factory=dict, repr=False)

    def names(self) -> list[str]:
        return sorted(self.members)

    def has(self, member: str) -> bool:
        return member in self.members

    def read_bytes(self, member: str) -> bytes:
        try:
            return self.members[member]
        except KeyError:
            raise BundleInvalid(f"{self.path.name}: member {member!r} is missing") from None

    def read_text(self, member: str) -> str:
        return self.read_bytes(member).decode("utf-8", "replace")

    def read_chunks(self, member: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        """The member's bytes in pieces of at most ``chunk``: a big member is not held whole."""
        if member not in self.members:
            raise BundleInvalid(f"{self.path.name}: member {member!r} is missing")
        if isinstance(self.members, Members):
            yield from self.members.chunks(member, chunk)
        else:
            data = self.members[member]
            for pos in range(0, len(data), chunk):
                yield data[pos:pos + chunk]

    def read_at(self, member: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes of the member from byte ``offset`` (a big member's read again
        from the nearest resume point, not whole)."""
        if member not in self.members:
            raise BundleInvalid(f"{self.path.name}: member {member!r} is missing")
        if isinstance(self.members, Members):
            return self.members.read_at(member, offset, length)
        return bytes(self.members[member][offset:offset + length])

    def size(self, member: str) -> int:
        """The member's size in bytes."""
        if member in self.digests:
            return self.digests[member][1]
        return len(self.read_bytes(member))

    def read_json(self, member: str) -> Any:
        try:
            return json.loads(self.read_bytes(member), parse_constant=_not_a_number)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise BundleInvalid(f"{self.path.name}: member {member} is not valid JSON: {exc}") from None

    def iter_jsonl(self, member: str) -> Iterator[tuple[int, Any]]:
        """Yield ``(line_number, object)`` for each non-empty line (1-based)."""
        for n, line in enumerate(self.read_bytes(member).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                yield n, json.loads(line, parse_constant=_not_a_number)
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
                raise BundleInvalid(
                    f"{self.path.name}: member {member} line {n} is not valid JSON: {exc}"
                ) from None

    def manifest_entry(self, member: str) -> dict[str, Any] | None:
        if not self._manifest_index:
            for entry in self.manifest.get("members") or []:
                if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                    self._manifest_index[entry["path"]] = entry
        return self._manifest_index.get(member)

    def sha256(self, member: str) -> str:
        """The member's SHA-256 as the manifest records it (computed if the manifest lacks it)."""
        entry = self.manifest_entry(member)
        if entry and isinstance(entry.get("sha256"), str):
            return str(entry["sha256"])
        if member in self.digests:
            return self.digests[member][0]
        return hashlib.sha256(self.read_bytes(member)).hexdigest()

    def collectors(self) -> list[dict[str, Any]]:
        value = self.manifest.get("collectors")
        return [c for c in value if isinstance(c, dict)] if isinstance(value, list) else []


_META_TYPES = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE,
               tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
_META_CAP = 1 << 20


class _SafeTarInfo(tarfile.TarInfo):
    """Refuses a PAX or GNU long-name header over 1 MiB before tarfile reads it into memory
    (a compressed header of zeros would otherwise be a gzip bomb no member size reveals)."""

    def _proc_member(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _META_TYPES and self.size > _META_CAP:
            raise BundleTooLarge(f"tar metadata header of {self.size} bytes refused (over {_META_CAP})")
        info: tarfile.TarInfo = super()._proc_member(tar)  # type: ignore[misc]
        return info


def _read_member(tar: tarfile.TarFile, info: tarfile.TarInfo, bundle_name: str, member: str) -> bytes:
    """Read one member into a buffer of its exact size (no intermediate copies: a one-hour
    recording's samples are hundreds of MiB, and peak memory is what a laptop notices)."""
    f = tar.extractfile(info)
    buf = bytearray(info.size)
    view = memoryview(buf)
    pos = 0
    if f is not None:
        while pos < info.size:
            n = f.readinto(view[pos:pos + (1 << 20)])  # type: ignore[attr-defined]
            if not n:
                break
            pos += n
    view.release()
    if pos != info.size:
        raise BundleInvalid(f"{bundle_name}: member {member} is truncated")
    # a bytearray (bytes-like for every reader; mypy's strict_bytes is off for this) without a copy
    return buf


def _check_type(info: tarfile.TarInfo) -> None:
    if info.issym() or info.islnk():
        raise BundleUnsafe(f"link member refused: {info.name!r} -> {info.linkname!r}")
    if info.ischr() or info.isblk() or info.isfifo() or info.isdev():
        raise BundleUnsafe(f"device or FIFO member refused: {info.name!r}")
    if not (info.isfile() or info.isdir()):
        raise BundleUnsafe(f"member of unsupported type refused: {info.name!r}")


def _split_top(name: str) -> tuple[str, str]:
    if name.startswith("/") or "\\" in name:
        raise BundleUnsafe(f"member with an absolute or unsafe path refused: {name!r}")
    parts = name.split("/")
    if any(p == ".." for p in parts):
        raise BundleUnsafe(f"member escaping the bundle refused: {name!r}")
    parts = [p for p in parts if p not in ("", ".")]
    if not parts:
        raise BundleUnsafe(f"member with an empty path refused: {name!r}")
    return parts[0], "/".join(parts[1:])


MemberSink = Callable[[str, tarfile.TarFile, tarfile.TarInfo], None]


def scan_bundle(path: Path | str, limits: ReadLimits | None, take: MemberSink,
                points: list[Point] | None = None, keep: list[Any] | None = None) -> tuple[str, str]:
    """Read the bundle file once, front to back, with every safety check of :func:`open_bundle`,
    handing each file member to ``take(member, tar, info)`` (which reads it from the stream, or
    not at all); return ``(top directory, SHA-256 of the file)``. Memory: what ``take`` keeps.

    ``points``: filled with the gzip stream's resume points (a member's ``info.offset_data`` is
    its offset in their output); ``keep``: with the file open again (a duplicate of the descriptor
    read, so the same file) and its size and mtime as it was opened."""
    limits = limits or ReadLimits()
    path = Path(path)
    try:
        raw_file = open(path, "rb")
    except IsADirectoryError:
        raise BundleInvalid(f"{path}: is a directory, not a bundle") from None
    except FileNotFoundError:
        raise BundleInvalid(f"{path}: no such file") from None
    except OSError as exc:
        raise BundleInvalid(f"{path}: cannot open: {exc.strerror or exc}") from None
    with raw_file:
        if raw_file.read(2) != b"\x1f\x8b":
            raise BundleInvalid(f"{path.name}: not a gpuforensics bundle (not gzip-compressed)")
        raw_file.seek(0)
        if keep is not None:
            st = os.fstat(raw_file.fileno())
            keep[:] = [open(os.dup(raw_file.fileno()), "rb"), (st.st_size, st.st_mtime_ns)]  # noqa: SIM115
        hashing = _HashingReader(raw_file)
        seen: set[str] = set()
        top: str | None = None
        total = 0
        try:
            gz = Inflater(hashing, spacing=None if points is None else SPACING)
            counting = _CountingReader(gz, limits.max_total_bytes + (limits.max_members + 16) * 1024)
            with tarfile.open(fileobj=counting, mode="r|", tarinfo=_SafeTarInfo) as tar:  # type: ignore[call-overload]
                for info in tar:
                    _check_type(info)
                    first, rest = _split_top(info.name)
                    if top is None:
                        top = first
                    elif first != top:
                        raise BundleInvalid(
                            f"{path.name}: members under two top directories ({top!r}, {first!r})"
                        )
                    if info.isdir():
                        continue
                    if not rest:
                        raise BundleInvalid(f"{path.name}: file at the top level: {info.name!r}")
                    check_member_name(rest)
                    if len(seen) >= limits.max_members:
                        raise BundleTooLarge(
                            f"{path.name}: more than {limits.max_members} members"
                        )
                    if info.size > limits.max_member_bytes:
                        raise BundleTooLarge(
                            f"{path.name}: member {rest} is {info.size} bytes, over the cap of {limits.max_member_bytes}"
                        )
                    total += info.size
                    if total > limits.max_total_bytes:
                        raise BundleTooLarge(
                            f"{path.name}: content exceeds the cap of {limits.max_total_bytes} bytes"
                        )
                    if rest in seen:
                        raise BundleInvalid(f"{path.name}: duplicate member {rest}")
                    seen.add(rest)
                    take(rest, tar, info)
            # inflate to the end, so gzip checks its CRC and length (a cut-off trailer is an error)
            while chunk := counting.read(1 << 16):
                if chunk.strip(b"\0"):
                    raise BundleInvalid(f"{path.name}: data after the end of the tar archive")
            hashing.drain()
            if points is not None:
                points[:] = gz.points
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise BundleInvalid(f"{path.name}: truncated or corrupt gzip stream ({exc})") from None
        except tarfile.TarError as exc:
            raise BundleInvalid(f"{path.name}: not a valid tar archive ({exc})") from None
        except RecursionError:  # a chain of thousands of PAX/GNU headers
            raise BundleInvalid(f"{path.name}: not a valid tar archive (header chain too deep)") from None
        except OSError as exc:
            raise BundleInvalid(f"{path.name}: cannot read: {exc.strerror or exc}") from None
    if top is None or MANIFEST not in seen:
        raise BundleInvalid(f"{path.name}: not a gpuforensics bundle (no manifest.json)")
    return top, hashing.hash.hexdigest()


def read_member_chunks(tar: tarfile.TarFile, info: tarfile.TarInfo, bundle_name: str, member: str,
                       chunk: int = 1 << 20) -> Iterator[bytes]:
    """The member's bytes in chunks of at most ``chunk`` (for hashing without holding it)."""
    f = tar.extractfile(info)
    got = 0
    while f is not None and got < info.size:
        data = f.read(min(chunk, info.size - got))
        if not data:
            break
        got += len(data)
        yield data
    if got != info.size:
        raise BundleInvalid(f"{bundle_name}: member {member} is truncated")


def parse_manifest(bundle_name: str, data: bytes) -> dict[str, Any]:
    """``manifest.json``'s bytes -> the manifest, checked for format, version and member list."""
    try:
        manifest = json.loads(data, parse_constant=_not_a_number)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise BundleInvalid(f"{bundle_name}: manifest.json is not valid JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise BundleInvalid(f"{bundle_name}: not a gpuforensics bundle (manifest format is not {FORMAT_NAME!r})")
    version = manifest.get("format_version")
    if version not in SUPPORTED_VERSIONS:
        raise BundleInvalid(
            f"{bundle_name}: unsupported bundle format_version {version!r} "
            f"(this gpuforensics reads {', '.join(map(str, sorted(SUPPORTED_VERSIONS)))}; upgrade the tool)"
        )
    if not isinstance(manifest.get("members"), list):
        raise BundleInvalid(f"{bundle_name}: manifest.json has no list of members")
    return manifest


def open_bundle(path: Path | str, limits: ReadLimits | None = None) -> Bundle:
    """Read and validate a bundle; raise a :class:`forensics.errors.BundleError` on any problem.

    Every member is read and hashed once; those up to ``limits.held_member_bytes`` are held (while
    all held stay under ``limits.held_total_bytes``), the others read again from the file when
    asked for."""
    path = Path(path)
    limits = limits or ReadLimits()
    members = Members(path, {})
    digests: dict[str, tuple[str, int]] = {}
    held = [0]

    def keep(member: str, tar: tarfile.TarFile, info: tarfile.TarInfo) -> None:
        if member == MANIFEST or (info.size <= limits.held_member_bytes
                                  and held[0] + info.size <= limits.held_total_bytes):
            data = _read_member(tar, info, path.name, member)
            members.held[member] = data
            held[0] += len(data)
            if member != MANIFEST:
                digests[member] = (hashlib.sha256(data).hexdigest(), len(data))
            return
        h = hashlib.sha256()
        for piece in read_member_chunks(tar, info, path.name, member, chunk=256 << 10):
            h.update(piece)
        members.spans[member] = (info.offset_data, info.size)
        digests[member] = (h.hexdigest(), info.size)

    kept: list[Any] = []
    try:
        top, file_sha256 = scan_bundle(path, limits, keep, members.points, kept)
    except BaseException:
        if kept:
            kept[0].close()
        raise
    members.file, members.identity = kept
    manifest = parse_manifest(path.name, members.held.pop(MANIFEST))
    return Bundle(path=path, manifest=manifest, members=members, file_sha256=file_sha256, top=top,
                  limits=limits, digests=digests)
