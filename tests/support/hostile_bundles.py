"""Builders of hostile and broken bundles, for the reader, verify and CLI tests.

Every builder writes one file into a directory the test owns and returns its path. The good
bundle they start from is written by the real :class:`forensics.bundle.writer.BundleWriter`, so
a hostile bundle differs from a genuine one only in the one way the test is about.

Nothing here extracts anything; the builders only write archives.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import struct
import tarfile
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from forensics.bundle.writer import BundleWriter

__all__ = [
    "FIXED_WHEN",
    "Member",
    "add_member",
    "full",
    "manifest_of",
    "special_member",
    "sha256",
    "build_bundle",
    "gzip_bomb",
    "many_members",
    "pax_header_bomb",
    "read_members",
    "rewrite",
    "write_tar",
]

FIXED_WHEN = datetime(2026, 11, 29, 14, 5, 0, tzinfo=UTC)

# (name, data) for a regular file; (name, TarInfo) for anything else.
Member = tuple[str, bytes | tarfile.TarInfo]


def build_bundle(out_dir: Path, members: dict[str, bytes] | None = None,
                 hostname: str = "gpu-07", when: datetime = FIXED_WHEN,
                 manifest_fields: dict[str, Any] | None = None) -> Path:
    """A genuine bundle written by the real BundleWriter (default: two small host members)."""
    members = members if members is not None else {
        "host/host.json": b'{"hostname": "gpu-07"}\n',
        "host/proc/loadavg": b"0.01 0.02 0.03 1/100 4242\n",
    }
    writer = BundleWriter(out_dir, hostname, when=when)
    for name, data in members.items():
        writer.sink.write_bytes(name, data)
    fields = {"host": {"hostname": hostname},
              "capture": {"started": "2026-11-29T14:05:00.000000Z", "interrupted": False},
              "collectors": [{"name": "host", "status": "ok", "duration_s": 0.01, "error": None}]}
    fields.update(manifest_fields or {})
    return writer.finish(fields)


def read_members(bundle: Path) -> tuple[str, list[tuple[str, bytes]]]:
    """The top directory and ``(relative name, bytes)`` of every member of a bundle we wrote."""
    out: list[tuple[str, bytes]] = []
    top = ""
    with tarfile.open(bundle, "r:gz") as tar:
        for info in tar:
            top, _, rest = info.name.partition("/")
            f = tar.extractfile(info)
            out.append((rest, f.read() if f else b""))
    return top, out


def _file_info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o600
    info.mtime = int(FIXED_WHEN.timestamp())
    return info


def write_tar(path: Path, members: list[Member], compress: bool = True) -> Path:
    """A tar(.gz) holding exactly ``members`` in order; names are used as given (no top added)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, item in members:
            if isinstance(item, tarfile.TarInfo):
                item.name = name
                tar.addfile(item)
            else:
                tar.addfile(_file_info(name, len(item)), io.BytesIO(item))
    data = buf.getvalue()
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
    return path


def rewrite(src: Path, dst: Path,
            transform: Callable[[str, list[tuple[str, bytes]]], list[Member]]) -> Path:
    """Copy a genuine bundle into ``dst`` after ``transform(top, members)``.

    ``members`` are ``(name relative to the top directory, bytes)``; the transform returns full
    archive names (``f"{top}/{name}"`` for ordinary members), so it can also add names that escape.
    """
    top, members = read_members(src)
    return write_tar(dst, transform(top, members))


def full(top: str, members: list[tuple[str, bytes]]) -> list[Member]:
    """Members with their top directory put back (the identity transform's output)."""
    return [(f"{top}/{name}", data) for name, data in members]


def add_member(name: str, item: bytes | tarfile.TarInfo = b"x\n"
               ) -> Callable[[str, list[tuple[str, bytes]]], list[Member]]:
    """Transform: keep every member and append one more, whose archive name is used verbatim
    (``{top}`` in it is replaced by the bundle's top directory)."""
    def t(top: str, members: list[tuple[str, bytes]]) -> list[Member]:
        return [*full(top, members), (name.replace("{top}", top), item)]
    return t


def special_member(kind: str, name: str, target: str = "/etc/passwd") -> tarfile.TarInfo:
    """A TarInfo of type ``sym``, ``hard``, ``chr``, ``blk`` or ``fifo``."""
    info = tarfile.TarInfo(name)
    info.mtime = int(FIXED_WHEN.timestamp())
    if kind == "sym":
        info.type, info.linkname = tarfile.SYMTYPE, target
    elif kind == "hard":
        info.type, info.linkname = tarfile.LNKTYPE, target
    elif kind == "chr":
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3  # /dev/null
    elif kind == "blk":
        info.type, info.devmajor, info.devminor = tarfile.BLKTYPE, 8, 0
    elif kind == "fifo":
        info.type = tarfile.FIFOTYPE
    else:
        raise ValueError(kind)
    return info


def _gzip_frame(deflate: bytes, crc: int, isize: int) -> bytes:
    header = b"\x1f\x8b\x08\x00" + struct.pack("<I", 0) + b"\x00\xff"
    return header + deflate + struct.pack("<II", crc & 0xFFFFFFFF, isize & 0xFFFFFFFF)


def _repeated_zero_stream(prefix: bytes, zero_mib: int, suffix: bytes) -> tuple[bytes, int, int]:
    """Raw deflate of ``prefix + zero_mib MiB of zeros + suffix`` built without compressing the zeros
    more than once: after a full flush a deflate block does not refer back, so the compressed MiB of
    zeros can be repeated. Returns (deflate bytes, crc32, uncompressed size)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH)
    mib = bytes(1 << 20)
    block = c.compress(mib) + c.flush(zlib.Z_FULL_FLUSH)
    tail = c.compress(suffix) + c.flush(zlib.Z_FINISH)
    crc = zlib.crc32(prefix)
    mib_crc_state = crc
    for _ in range(zero_mib):  # crc32 of zeros: fast, C, no allocation
        mib_crc_state = zlib.crc32(mib, mib_crc_state)
    crc = zlib.crc32(suffix, mib_crc_state)
    body = b"".join([head, block * zero_mib, tail])
    return body, crc, len(prefix) + (zero_mib << 20) + len(suffix)


def gzip_bomb(path: Path, zero_mib: int = 4096, top: str = "gpuforensics-bomb-20261129T140500Z") -> Path:
    """A tarball whose one member ``<top>/host/zeros`` is ``zero_mib`` MiB of zeros (4 GiB by default),
    in a file of a few MiB. The tar header declares the member's true size."""
    size = zero_mib << 20
    header = _file_info(f"{top}/host/zeros", size).tobuf(tarfile.PAX_FORMAT)
    end = bytes(1024)  # end-of-archive (member size is a multiple of 512: no padding)
    deflate, crc, isize = _repeated_zero_stream(header, zero_mib, end)
    path.write_bytes(_gzip_frame(deflate, crc, isize))
    return path


def pax_header_bomb(path: Path, zero_mib: int = 2048, top: str = "gpuforensics-bomb-20261129T140500Z") -> Path:
    """A tarball that starts with a PAX extended header of ``zero_mib`` MiB (zeros): a bomb that no
    declared member size reveals, so only a cap on the decompressed stream can stop it."""
    info = tarfile.TarInfo("././@PaxHeader")
    info.type = tarfile.XHDTYPE
    info.size = zero_mib << 20
    info.mtime = 0
    header = info.tobuf(tarfile.USTAR_FORMAT)
    deflate, crc, isize = _repeated_zero_stream(header, zero_mib, bytes(1024))
    path.write_bytes(_gzip_frame(deflate, crc, isize))
    return path


def many_members(path: Path, count: int = 100_000, top: str = "gpuforensics-many-20261129T140500Z") -> Path:
    """A tarball of ``count`` one-byte members under one top directory (plus a manifest), built from
    prepared header blocks (fast: no per-member TarInfo work beyond a name patch)."""
    manifest = json.dumps({"format": "gpuforensics-bundle", "format_version": 1, "members": []}).encode()
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    crc, isize = 0, 0
    parts: list[bytes] = []

    def feed(data: bytes) -> None:
        nonlocal crc, isize
        crc = zlib.crc32(data, crc)
        isize += len(data)
        parts.append(c.compress(data))

    mi = _file_info(f"{top}/manifest.json", len(manifest))
    feed(mi.tobuf(tarfile.USTAR_FORMAT) + manifest + bytes(-len(manifest) % 512))
    template = _file_info(f"{top}/m/000000", 1)
    base = bytearray(template.tobuf(tarfile.USTAR_FORMAT))
    name_at = base.index(b"000000")
    pad = b"x" + bytes(511)
    batch: list[bytes] = []
    for i in range(count):
        block = bytearray(base)
        block[name_at:name_at + 6] = b"%06d" % i
        block[148:156] = b"        "
        chk = sum(block)
        block[148:156] = b"%06o\x00 " % chk
        batch.append(bytes(block) + pad)
        if len(batch) == 2000:
            feed(b"".join(batch))
            batch = []
    if batch:
        feed(b"".join(batch))
    feed(bytes(1024))
    parts.append(c.flush())
    path.write_bytes(_gzip_frame(b"".join(parts), crc, isize))
    return path


def manifest_of(bundle: Path) -> dict[str, Any]:
    """The manifest of a bundle we wrote (trusted read)."""
    for name, data in read_members(bundle)[1]:
        if name == "manifest.json":
            loaded: dict[str, Any] = json.loads(data)
            return loaded
    raise KeyError("manifest.json")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
