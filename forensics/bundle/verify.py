"""``gpuforensics verify``: every member against the manifest's SHA-256 and size."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from forensics.bundle.reader import Bundle, ReadLimits, open_bundle
from forensics.errors import BundleIntegrityError

__all__ = ["VerifyResult", "verify_bundle", "check_integrity"]


@dataclass(frozen=True)
class VerifyResult:
    path: Path
    members_checked: int
    bytes_checked: int
    file_sha256: str


def check_integrity(bundle: Bundle) -> list[str]:
    """Problems found: hash or size mismatches, members missing or not in the manifest."""
    problems: list[str] = []
    listed: dict[str, dict[str, object]] = {}
    for entry in bundle.manifest.get("members") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            problems.append(f"malformed manifest entry: {entry!r}"[:200])
            continue
        listed[entry["path"]] = entry
    for name, entry in sorted(listed.items()):
        data = bundle.members.get(name)
        if data is None:
            problems.append(f"missing member: {name}")
            continue
        if entry.get("size") != len(data):
            problems.append(f"size mismatch: {name} (manifest {entry.get('size')}, found {len(data)})")
        if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
            problems.append(f"hash mismatch: {name}")
    for name in sorted(set(bundle.members) - set(listed)):
        problems.append(f"extra member not in manifest: {name}")
    return problems


def verify_bundle(path: Path | str, limits: ReadLimits | None = None) -> VerifyResult:
    """Raise :class:`BundleIntegrityError` (exit 1) listing every problem; return a summary if intact."""
    bundle = open_bundle(path, limits)
    problems = check_integrity(bundle)
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise BundleIntegrityError(f"{Path(path).name}: integrity check failed: {shown}", problems)
    return VerifyResult(
        path=Path(path),
        members_checked=len(bundle.members),
        bytes_checked=sum(len(v) for v in bundle.members.values()),
        file_sha256=bundle.file_sha256,
    )
