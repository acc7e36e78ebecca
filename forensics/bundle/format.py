"""Constants and helpers of bundle format v1 (documented in docs/bundle-format.md)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from forensics.errors import BundleUnsafe
from forensics.parsing.timestamps import format_iso

FORMAT_NAME = "gpuforensics-bundle"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = frozenset({1})
MANIFEST = "manifest.json"
COLLECTOR_STATUSES = ("ok", "partial", "failed", "unavailable", "skipped")
#: the flight recorder's provenance in a bundle (source ``ring``): it lists the ring segments the
#: bundle carries (``segments``: ``member`` and ``sha256``, the ring index's), which
#: ``gpuforensics verify`` checks besides the manifest
RING_PROVENANCE = "ring/provenance.json"

_MEMBER_RE = re.compile(r"^[A-Za-z0-9._@:+=,-]+(/[A-Za-z0-9._@:+=,-]+)*$")


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(dt: datetime) -> str:
    """ISO 8601 UTC with a ``Z`` and microseconds, the one timestamp form used in bundles."""
    return _format_iso(dt)


def iso_from_unix(ts: float) -> str:
    """:func:`iso` of unix seconds."""
    return _format_iso(datetime.fromtimestamp(ts, UTC))


def _format_iso(dt: datetime) -> str:
    text = format_iso(dt, precision="micro")
    assert text is not None  # only None for None or a non-finite number
    return text


def bundle_stem(hostname: str, when: datetime) -> str:
    """``gpuforensics-<hostname>-<YYYYmmddTHHMMSSZ>``; the host name is made safe for a file name."""
    safe = re.sub(r"[^A-Za-z0-9.-]+", "_", hostname).strip("._-") or "host"
    return f"gpuforensics-{safe[:64]}-{when.astimezone(UTC).strftime('%Y%m%dT%H%M%SZ')}"


def check_member_name(name: str) -> str:
    """Validate a member path (relative, POSIX, no ``..``, a safe character set) and return it."""
    if not name or len(name) > 512 or not _MEMBER_RE.match(name):
        raise BundleUnsafe(f"unsafe member name: {name!r}")
    parts = name.split("/")  # not PurePosixPath(...).parts, which drops '.' silently
    if any(p in (".", "..") for p in parts):
        raise BundleUnsafe(f"unsafe member name: {name!r}")
    return name
