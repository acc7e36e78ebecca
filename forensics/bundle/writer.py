"""Atomic bundle writer: staging directory -> ``<stem>.tgz`` with a manifest of every member.

The archive is written to a temporary file in the target directory (mode 0600), fsynced, then
hard-linked to its final name, which fails rather than replace an existing bundle; the temporary
name is removed. A capture killed at any point leaves no file under the final name; what it
leaves under temporary names carries its owner's token (forensics/bundle/leftovers.py), so the
next capture into that directory removes it.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import io
import os
import queue
import shutil
import tarfile
import tempfile
import threading
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from forensics._version import __version__
from forensics.bundle.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    bundle_stem,
    check_member_name,
    utc_now,
)
from forensics.bundle.leftovers import STAGING_PREFIX, owner_token
from forensics.bundle.sink import TEMP_PREFIX, EvidenceSink, dumps_json
from forensics.errors import BundleNotWritten, CaptureError, write_failure

__all__ = ["BundleWriter", "STAGING_PREFIX"]
_CHUNK = 1 << 20


def _walk_members(root: Path) -> Iterator[tuple[str, Path]]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for fn in sorted(filenames):
            if fn.startswith(TEMP_PREFIX):  # a rewrite cut short by a kill: the old version stands
                continue
            full = Path(dirpath) / fn
            rel = full.relative_to(root).as_posix()
            if full.is_symlink() or not full.is_file():
                continue
            yield rel, full


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False



def _hash_file(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


_HOLD_MEMBER = 1 << 20  # a staged member up to this size is read once, for its hash and the archive
_HOLD_TOTAL = 64 << 20  # and at most this much of them held at once


class _Unlinker:
    """Removes files handed to it, in a thread of its own, until stopped (then waits for it)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Path, bool] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="bundle-unlink", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            path, is_dir = item
            try:
                if is_dir:  # its directories, deepest first (those not empty stay, for rmtree)
                    for dirpath, _dirs, _files in os.walk(path, topdown=False):
                        if dirpath != str(path):
                            with contextlib.suppress(OSError):
                                os.rmdir(dirpath)
                else:
                    os.unlink(path)
            except OSError:
                pass

    def remove(self, path: Path) -> None:
        self._queue.put((path, False))

    def remove_directories(self, root: Path) -> None:
        """The directories under ``root`` (its files handed over before)."""
        self._queue.put((root, True))

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join()


class BundleWriter:
    """Collects members in a private staging directory, then writes the bundle atomically.

    ``BundleWriter(out_dir, hostname)`` creates ``out_dir/.gpuforensics-staging-*`` (0700); write
    members through ``writer.sink``; ``finish(manifest_fields)`` packs them and returns the path.
    """

    def __init__(
        self,
        out_dir: Path,
        hostname: str,
        when: datetime | None = None,
        max_bytes: int = 1 << 30,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.when = when or utc_now()
        self.stem = bundle_stem(hostname, self.when)
        if not self.out_dir.is_dir():
            raise CaptureError(f"output directory does not exist: {self.out_dir}")
        if not os.access(self.out_dir, os.W_OK):
            if _read_only(self.out_dir):
                raise BundleNotWritten(f"cannot write into {self.out_dir}: Read-only file system")
            raise CaptureError(f"output directory is not writable: {self.out_dir}")
        self.final_path = self.out_dir / f"{self.stem}.tgz"
        if self.final_path.exists():
            raise CaptureError(f"refusing to overwrite existing bundle: {self.final_path}")
        self.owner = owner_token()
        try:  # /proc, /sys, a full disk: access() said yes, the file system says no
            self.staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{self.owner}-", dir=self.out_dir))
        except OSError as exc:
            raise write_failure(f"cannot write into {self.out_dir}", exc, BundleNotWritten, CaptureError) from exc
        os.chmod(self.staging, 0o700)
        self.sink = EvidenceSink(self.staging, max_bytes=max_bytes)

    def member_table(self, contents: dict[str, bytes] | None = None) -> list[dict[str, Any]]:
        """SHA-256 and size of every staged member, sorted by path. With ``contents``, the bytes
        of the small members read for their hash are kept there (up to ``_HOLD_TOTAL`` bytes),
        so the archive is written without reading them a second time."""
        table = []
        held = 0
        for rel, full in _walk_members(self.staging):
            if not check_member_name(rel):
                continue
            data = None
            if contents is not None and held < _HOLD_TOTAL:
                with open(full, "rb") as f:
                    data = f.read(_HOLD_MEMBER + 1)
                    if len(data) > _HOLD_MEMBER:
                        data = None
            if data is None or contents is None:
                digest, size = _hash_file(full)
            else:
                digest, size = hashlib.sha256(data).hexdigest(), len(data)
                contents[rel] = data
                held += size
            table.append({"path": rel, "sha256": digest, "size": size})
        return table

    def finish(self, manifest_fields: dict[str, Any], held: Mapping[str, bytes] | None = None) -> Path:
        """Write the manifest and archive atomically; remove the staging directory. ``held``:
        members given in memory instead of staged (``sanitize``: its copy is in memory already)."""
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "tool": {"name": "gpuforensics", "version": __version__},
            **manifest_fields,
        }
        contents: dict[str, bytes] = {}
        members: list[dict[str, Any]] = self.member_table(contents) if held is None else [
            {"path": check_member_name(name), "sha256": hashlib.sha256(held[name]).hexdigest(), "size": len(held[name])}
            for name in sorted(held)]
        manifest["members"] = members
        manifest_bytes = (dumps_json(manifest, indent=1) + "\n").encode("utf-8")
        mtime = int(self.when.timestamp())
        try:
            fd, tmp_name = tempfile.mkstemp(prefix=f".{self.stem}.{self.owner}.",
                                           suffix=".tgz.partial", dir=self.out_dir)
        except OSError as exc:
            raise write_failure(f"cannot write bundle {self.final_path}", exc, BundleNotWritten, CaptureError) from exc
        tmp = Path(tmp_name)
        # each staged file is removed once archived, by a thread, while the next ones are
        # compressed (a capture's hundreds of small members cost 0.1-0.2 s to unlink afterwards);
        # the staging directory goes in any case once finish returns or fails (the runner's cleanup)
        unlinker = _Unlinker()
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as raw:
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=mtime) as gz:
                    with tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                        self._add(tar, MANIFEST, io.BytesIO(manifest_bytes), len(manifest_bytes), mtime)
                        for m in members:
                            if held is not None:
                                self._add(tar, m["path"], io.BytesIO(held[m["path"]]), m["size"], mtime)
                                continue
                            path = self.staging / m["path"]
                            data = contents.pop(m["path"], None)
                            if data is not None:
                                self._add(tar, m["path"], io.BytesIO(data), m["size"], mtime)
                            else:
                                with open(path, "rb") as f:
                                    self._add(tar, m["path"], f, m["size"], mtime)
                            unlinker.remove(path)
                if held is None:  # emptied while the archive is flushed and fsynced
                    unlinker.remove_directories(self.staging)
                raw.flush()
                os.fsync(raw.fileno())
            self._publish(tmp)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise write_failure(f"cannot write bundle {self.final_path}", exc, BundleNotWritten, CaptureError) from exc
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            unlinker.stop()
        self.cleanup()
        return self.final_path

    def _add(self, tar: tarfile.TarFile, name: str, f: Any, size: int, mtime: int) -> None:
        info = tarfile.TarInfo(f"{self.stem}/{name}")
        info.size = size
        info.mode = 0o600
        info.mtime = mtime
        info.uname = info.gname = ""
        tar.addfile(info, f)

    def _publish(self, tmp: Path) -> None:
        try:
            os.link(tmp, self.final_path)
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                raise CaptureError(f"refusing to overwrite existing bundle: {self.final_path}") from exc
            if exc.errno not in (errno.EPERM, errno.EXDEV, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
            if self.final_path.exists():  # no hard links here: rename after a check
                raise CaptureError(f"refusing to overwrite existing bundle: {self.final_path}") from exc
            os.rename(tmp, self.final_path)
        else:
            tmp.unlink()
        dfd = os.open(self.out_dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def cleanup(self) -> None:
        """Remove the staging directory (after finish, or when abandoning a capture)."""
        shutil.rmtree(self.staging, ignore_errors=True)
