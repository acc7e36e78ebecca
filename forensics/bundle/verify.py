"""``gpuforensics verify``: every member against the manifest's SHA-256 and size, and the flight
recorder's segments a bundle carries against the SHA-256 its ``ring/provenance.json`` lists (the
ring index's, written by the recorder when it sealed the segment).

:func:`verify_bundle` streams the bundle (each member hashed in chunks, nothing held but the
manifest), so verifying a 1 GiB bundle, or sixteen at once as ``cluster capture`` does, costs a
few MiB; :func:`check_integrity` checks a bundle already read into memory (``analyze``).
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forensics.bundle.format import MANIFEST, RING_PROVENANCE
from forensics.bundle.reader import (
    Bundle,
    ReadLimits,
    parse_manifest,
    read_member_chunks,
    scan_bundle,
)
from forensics.errors import BundleIntegrityError

__all__ = ["VerifyResult", "check_integrity", "verify_bundle"]

_CHUNK = 256 << 10  # per member read: sixteen verifications at once stay within a few MiB
_PROVENANCE_CAP = 16 << 20  # ring/provenance.json is kept to check the segments (a few KiB; past this, invalid)


@dataclass(frozen=True)
class VerifyResult:
    path: Path
    members_checked: int
    bytes_checked: int
    file_sha256: str
    top: str = ""
    manifest: dict[str, Any] | None = None


def _problems(manifest: dict[str, Any], found: dict[str, tuple[str, int]]) -> list[str]:
    """Compare the manifest's member table with ``found`` (member -> (sha256, size))."""
    problems: list[str] = []
    listed: dict[str, dict[str, object]] = {}
    for entry in manifest.get("members") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            problems.append(f"malformed manifest entry: {entry!r}"[:200])
            continue
        listed[entry["path"]] = entry
    for name, entry in sorted(listed.items()):
        got = found.get(name)
        if got is None:
            problems.append(f"missing member: {name}")
            continue
        digest, size = got
        if entry.get("size") != size:
            problems.append(f"size mismatch: {name} (manifest {entry.get('size')}, found {size})")
        if digest != entry.get("sha256"):
            problems.append(f"hash mismatch: {name}")
    for name in sorted(set(found) - set(listed)):
        problems.append(f"extra member not in manifest: {name}")
    return problems


RING_SEGMENTS = RING_PROVENANCE.rsplit("/", 1)[0] + "/segments/"  # forensics.specs.ring.SEGMENTS


def _segment_problems(provenance: bytes | None, found: dict[str, tuple[str, int]]) -> list[str]:
    """The ring segments ``ring/provenance.json`` lists against ``found``: each one's SHA-256 is the
    ring index's (sealed) or the one computed when capture copied it (the active segment); when it
    lists any, every segment member in the bundle is one of them."""
    if provenance is None:
        return []
    try:
        prov = json.loads(provenance)
    except (ValueError, RecursionError):
        return [f"{RING_PROVENANCE} is not valid JSON: the ring segments cannot be checked"]
    segments = prov.get("segments") if isinstance(prov, dict) else None
    problems: list[str] = []
    listed: set[str] = set()
    for entry in segments if isinstance(segments, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("member"), str):
            continue  # an older layout's entries name segments of the node's ring, not members
        member = entry["member"]
        listed.add(member)
        got = found.get(member)
        if got is None:
            problems.append(f"ring segment missing: {member} (listed in {RING_PROVENANCE})")
        elif got[0] != entry.get("sha256"):
            problems.append(f"ring segment hash mismatch: {member} (not the SHA-256 {RING_PROVENANCE} lists"
                            f"{', the ring index' if entry.get('sealed') else ''}'s)")
    if listed:  # a segment capture did not copy: the analysis leaves it out
        problems += [f"ring segment not listed in {RING_PROVENANCE}: {m}"
                     for m in sorted(m for m in found if m.startswith(RING_SEGMENTS) and m not in listed)]
    return problems


def check_integrity(bundle: Bundle) -> list[str]:
    """Problems found: hash or size mismatches, members missing or not in the manifest, ring
    segments that are not what their provenance lists."""
    found = {name: (hashlib.sha256(data).hexdigest(), len(data)) for name, data in bundle.members.items()}
    return _problems(bundle.manifest, found) + _segment_problems(bundle.members.get(RING_PROVENANCE), found)


def verify_bundle(path: Path | str, limits: ReadLimits | None = None) -> VerifyResult:
    """Raise :class:`BundleIntegrityError` (exit 1) listing every problem; return a summary if intact.

    Unreadable or unsafe bundles raise the reader's errors (exit 2), as :func:`open_bundle` does.
    """
    path = Path(path)
    found: dict[str, tuple[str, int]] = {}
    manifest_bytes = bytearray()
    provenance = bytearray()

    def take(member: str, tar: tarfile.TarFile, info: tarfile.TarInfo) -> None:
        h = hashlib.sha256()
        size = 0
        for chunk in read_member_chunks(tar, info, path.name, member, chunk=_CHUNK):
            if member == MANIFEST:
                manifest_bytes.extend(chunk)
            else:
                h.update(chunk)
                size += len(chunk)
                if member == RING_PROVENANCE and len(provenance) < _PROVENANCE_CAP:
                    provenance.extend(chunk)
        if member != MANIFEST:
            found[member] = (h.hexdigest(), size)

    top, file_sha256 = scan_bundle(path, limits, take)
    manifest = parse_manifest(path.name, bytes(manifest_bytes))
    problems = _problems(manifest, found)
    if RING_PROVENANCE in found:
        problems += _segment_problems(bytes(provenance), found)
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise BundleIntegrityError(f"{path.name}: integrity check failed: {shown}", problems)
    return VerifyResult(
        path=path,
        members_checked=len(found),
        bytes_checked=sum(size for _, size in found.values()),
        file_sha256=file_sha256,
        top=top,
        manifest=manifest,
    )
