"""``gpuforensics verify``: every member against the manifest's SHA-256 and size, and the flight
recorder's segments a bundle carries against the SHA-256 its ``ring/provenance.json`` lists (the
ring index's, written by the recorder when it sealed the segment).

:func:`verify_bundle` streams the bundle (each member hashed in chunks, nothing held but the
manifest), so verifying a 1 GiB bundle, or sixteen at once as ``cluster capture`` does, costs a
few MiB; :func:`check_integrity` checks a bundle already opened (``analyze``), by the digests the
reader took as it read each member. The ring
segments' check against their provenance is one function, :func:`segment_faults`, whose facts the
analysis states once (its integrity limitation), with what its ring view does about each.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Mapping
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

__all__ = ["Integrity", "SegmentFault", "VerifyResult", "check_bundle", "check_integrity", "segment_faults",
           "verify_bundle"]

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


@dataclass(frozen=True)
class SegmentFault:
    """One fact about the flight recorder's segments a bundle carries, against the SHA-256 its
    ``ring/provenance.json`` lists: ``problem`` as verify and analyze's integrity check report it,
    ``effect`` what the analysis' ring view does about it (``left_out``: the segment's records are
    not read). ``member``: the segment member ("" when the fact is about all of them). The one
    check of segments against their provenance: verify, analyze's integrity check and the ring
    view (forensics.analysis.ring_view) all take it from :func:`segment_faults`."""

    member: str
    problem: str
    effect: str
    left_out: bool = True

    def stated(self) -> str:
        """The fact and its effect, as the analysis states it (once)."""
        return f"{self.problem}: {self.effect}"


def segment_faults(provenance: bytes | None, found: Mapping[str, tuple[str, int]]) -> list[SegmentFault]:
    """The ring segments in ``found`` (member -> (SHA-256, size)) against ``provenance`` (the bytes
    of ``ring/provenance.json``, None when the bundle has none). Each segment listed there must be
    in the bundle with the SHA-256 it lists (the ring index's for a sealed one, the one computed
    when capture copied it for the active one); every segment member in the bundle must be listed
    there: capture lists every segment it copies (an empty list: it copied none), so one not listed
    cannot be checked and is left out, as one that does not match. Without a readable provenance,
    no segment can be checked: they are read unverified (and unclipped), and said to be."""
    segments_found = sorted(m for m in found if m.startswith(RING_SEGMENTS))
    if provenance is None:
        if not segments_found:
            return []
        return [SegmentFault("", f"{len(segments_found)} ring segment(s) without {RING_PROVENANCE} (such as "
                                 f"{segments_found[0]}): their SHA-256 cannot be checked",
                             "their records are read unverified, and without the capture window (unclipped)",
                             left_out=False)]
    try:
        prov = json.loads(provenance)
    except (ValueError, RecursionError):
        return [SegmentFault("", f"{RING_PROVENANCE} is not valid JSON: the ring segments cannot be checked",
                             "their records are read unverified, and without the capture window (unclipped)",
                             left_out=False)]
    segments = prov.get("segments") if isinstance(prov, dict) else None
    faults: list[SegmentFault] = []
    listed: set[str] = set()
    for entry in segments if isinstance(segments, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("member"), str):
            continue  # an older layout's entries name segments of the node's ring, not members
        member = entry["member"]
        listed.add(member)
        got = found.get(member)
        if got is None:
            faults.append(SegmentFault(member, f"ring segment missing: {member} (listed in {RING_PROVENANCE})",
                                       "its records are missing"))
        elif got[0] != entry.get("sha256"):
            faults.append(SegmentFault(
                member, f"ring segment hash mismatch: {member} (SHA-256 {got[0]}, not the {entry.get('sha256')} "
                        f"{RING_PROVENANCE} lists{', the ring index' + chr(39) + 's' if entry.get('sealed') else ''})",
                "the segment was altered after capture; its records are left out"))
    faults += [SegmentFault(m, f"ring segment not listed in {RING_PROVENANCE}: {m}",
                            "capture did not copy it (its SHA-256 cannot be checked); its records are left out")
               for m in segments_found if m not in listed]
    return faults


@dataclass(frozen=True)
class Integrity:
    """What :func:`check_bundle` found: every problem, and the ring segment facts among them."""

    problems: list[str]
    segments: list[SegmentFault]


def check_bundle(bundle: Bundle) -> Integrity:
    """Hash or size mismatches, members missing or not in the manifest, and ring segments that are
    not what their provenance lists (:func:`segment_faults`)."""
    # the digests taken as the bundle was read (a big member is not read again for them)
    found = {name: bundle.digests.get(name) or (hashlib.sha256(bundle.members[name]).hexdigest(),
                                               len(bundle.members[name])) for name in bundle.members}
    segments = segment_faults(bundle.members.get(RING_PROVENANCE), found)
    return Integrity(_problems(bundle.manifest, found) + [f.problem for f in segments], segments)


def check_integrity(bundle: Bundle) -> list[str]:
    """Problems found: hash or size mismatches, members missing or not in the manifest, ring
    segments that are not what their provenance lists."""
    return check_bundle(bundle).problems


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
    problems += [f.problem for f in segment_faults(bytes(provenance) if RING_PROVENANCE in found else None, found)]
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
