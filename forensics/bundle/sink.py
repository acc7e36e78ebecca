"""Where collectors write evidence: a private staging directory, one file per bundle member.

Collectors run in child processes; each writes its members straight to disk, so whatever a
collector wrote before it hung, crashed or was killed at its deadline is still packed into the
bundle. The staging directory is mode 0700 and lives beside the final bundle.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from forensics.bundle.format import MANIFEST, check_member_name
from forensics.errors import BundleUnsafe, CaptureError

__all__ = ["EvidenceSink", "TEMP_PREFIX", "dumps_json"]

#: Prefix of the temporary files :meth:`EvidenceSink.replace_json` renames into place; one left
#: by a collector killed mid-write is not a member (the bundle writer skips it).
TEMP_PREFIX = ".gf-tmp-"


def dumps_json(obj: Any, indent: int | None = None) -> str:
    """Deterministic JSON: sorted keys, UTF-8 kept, non-JSON values stringified.

    Compact by default: the C encoder is several times faster than the indenting one, and capture
    CPU matters more than how a member looks without ``jq``.
    """
    return json.dumps(obj, sort_keys=True, indent=indent, ensure_ascii=False, default=str)


class EvidenceSink:
    """Writes members under ``root``; refuses unsafe names and stops at ``max_bytes`` in total."""

    def __init__(self, root: Path, max_bytes: int = 1 << 30) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.bytes_written = 0
        self.members: set[str] = set()
        self._dirs: set[Path] = set()
        self._replaced: dict[str, int] = {}

    def _path(self, member: str) -> Path:
        check_member_name(member)
        if member == MANIFEST:
            raise BundleUnsafe("collectors may not write manifest.json")
        path = self.root / member
        parent = path.parent
        if parent not in self._dirs:  # one mkdir per directory, not per member
            parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._dirs.add(parent)
        return path

    def _account(self, n: int) -> None:
        if self.bytes_written + n > self.max_bytes:
            raise CaptureError(
                f"evidence size cap reached ({self.max_bytes} bytes); member not written"
            )
        self.bytes_written += n

    def write_bytes(self, member: str, data: bytes) -> None:
        """Write one member verbatim (replacing it if this capture already wrote it)."""
        path = self._path(member)
        self._account(len(data))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        self.members.add(member)

    def write_text(self, member: str, text: str) -> None:
        self.write_bytes(member, text.encode("utf-8", "surrogateescape"))

    def write_json(self, member: str, obj: Any) -> None:
        self.write_bytes(member, (dumps_json(obj) + "\n").encode("utf-8", "surrogateescape"))

    def replace_json(self, member: str, obj: Any) -> None:
        """Write (or rewrite) one JSON member atomically: temporary file, then rename. A collector
        that saves what it has read so far, again and again as it reads more, uses this, so a
        kill at any moment leaves the last complete version, never half of one."""
        path = self._path(member)
        data = (dumps_json(obj) + "\n").encode("utf-8", "surrogateescape")
        self._account(len(data) - self._replaced.get(member, 0))
        tmp = path.with_name(f"{TEMP_PREFIX}{os.getpid()}-{path.name}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self._replaced[member] = len(data)
        self.members.add(member)

    def append_jsonl(self, member: str, obj: Any) -> None:
        """Append one JSON line (flushed, so a killed collector keeps every complete line)."""
        self.append_bytes(member, (dumps_json(obj, indent=None) + "\n").encode("utf-8", "surrogateescape"))

    def append_encoded_jsonl(self, member: str, obj: Any, data: bytes) -> None:
        """:meth:`append_jsonl` of ``obj`` whose line ``data`` the caller made (the same bytes, the
        nvml sampler's LineEncoder: tests/unit/collectors/test_nvml_fast_calls.py)."""
        self.append_bytes(member, data)

    def append_bytes(self, member: str, data: bytes) -> None:
        """Append raw bytes (verbatim logs and streams)."""
        path = self._path(member)
        self._account(len(data))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        self.members.add(member)
