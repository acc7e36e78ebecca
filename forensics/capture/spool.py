"""``capture -o -``: the bundle written to a stream (stdout) instead of a directory.

This is how ``cluster capture`` brings bundles back through ``kubectl exec``-style streams: the
capture runs as usual into a private spool directory (``0700``, in the working directory when it
is writable, so a DaemonSet pod's 4 GiB bundle volume is used rather than its small ``/tmp``; else
``$TMPDIR``), the finished bundle's bytes are copied to the stream in 1 MiB chunks, and the file
and spool directory are removed. The stream carries the bundle's bytes and nothing else: the
bundle's own name, size and SHA-256 are reported to the caller (the CLI prints them on stderr).
The receiver checks every member against the manifest (``gpuforensics verify``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from forensics.capture.context import CaptureOptions
from forensics.capture.runner import run_capture
from forensics.errors import CaptureError

__all__ = ["StreamedBundle", "capture_to_stream", "spool_parent"]

_CHUNK = 1 << 20
SPOOL_PREFIX = ".gpuforensics-spool-"


@dataclass(frozen=True)
class StreamedBundle:
    name: str
    size: int
    sha256: str
    manifest: dict[str, Any]
    interrupted: bool


def spool_parent() -> Path:
    """The working directory when writable, else the temporary directory."""
    cwd = Path.cwd()
    return cwd if os.access(cwd, os.W_OK | os.X_OK) else Path(tempfile.gettempdir())


def capture_to_stream(options: CaptureOptions, stream: BinaryIO,
                      progress: Callable[[str], None] | None = None,
                      collectors: list[Any] | None = None) -> StreamedBundle:
    """Capture, write the bundle's bytes to ``stream``, remove the spooled file."""
    parent = spool_parent()
    try:
        spool = Path(tempfile.mkdtemp(prefix=SPOOL_PREFIX, dir=parent))
    except OSError as exc:
        raise CaptureError(f"cannot spool the bundle in {parent}: {exc.strerror or exc}") from None
    try:
        os.chmod(spool, 0o700)
        result = run_capture(options, spool, collectors=collectors, progress=progress)
        h = hashlib.sha256()
        size = 0
        with open(result.path, "rb") as f:
            while chunk := f.read(_CHUNK):
                stream.write(chunk)
                h.update(chunk)
                size += len(chunk)
        stream.flush()
        return StreamedBundle(result.path.name, size, h.hexdigest(), result.manifest, result.interrupted)
    finally:
        shutil.rmtree(spool, ignore_errors=True)
