"""``capture -o -``: the bundle written to a stream (stdout) instead of a directory.

This is how ``cluster capture`` brings bundles back through ``kubectl exec``-style streams: the
capture runs as usual into a private spool directory (``0700``, in the working directory when it
is writable, so a DaemonSet pod's 4 GiB bundle volume is used rather than its small ``/tmp``; else
``$TMPDIR``), the finished bundle's bytes are copied to the stream in 1 MiB chunks, and the file
and spool directory are removed. The stream carries the bundle's bytes and nothing else: the
bundle's own name, size and SHA-256 are reported to the caller (the CLI prints them on stderr).
The receiver checks every member against the manifest (``gpuforensics verify``).

The spool directory is named like a capture's staging directory (``.gpuforensics-staging-`` and
the owner token of :mod:`forensics.bundle.leftovers`): when a capture is killed mid-stream (the
exec connection cut, the pod's process killed), the next ``capture -o -`` in that working
directory removes it once its owner is gone, as captures do with their own leftovers.
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

from forensics.bundle.leftovers import STAGING_PREFIX, owner_token, sweep_abandoned
from forensics.capture.runner import run_capture, stderr_notice
from forensics.collect.context import CaptureOptions
from forensics.errors import BundleNotWritten, CaptureError, write_failure

__all__ = ["StreamedBundle", "capture_to_stream", "spool_parent"]

_CHUNK = 1 << 20


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
                      collectors: list[Any] | None = None,
                      notice: Callable[[str], None] | None = None) -> StreamedBundle:
    """Capture, write the bundle's bytes to ``stream``, remove the spooled file. ``notice`` as
    for :func:`run_capture` (spools of killed captures removed; default: stderr)."""
    say = notice or stderr_notice
    parent = spool_parent()
    for left in sweep_abandoned(parent):
        say(f"removed {left.kind} {left.path.name} left by capture process {left.owner_pid}, which is gone")
    try:
        spool = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{owner_token()}-spool-", dir=parent))
    except OSError as exc:
        raise write_failure(f"cannot spool the bundle in {parent}", exc, BundleNotWritten, CaptureError) from None
    try:
        os.chmod(spool, 0o700)
        result = run_capture(options, spool, collectors=collectors, progress=progress, notice=say)
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
