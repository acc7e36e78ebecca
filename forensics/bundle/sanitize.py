"""``gpuforensics sanitize``: a copy of one or more bundles for people outside the team, names and
addresses replaced by consistent pseudonyms (the approach of ``sos clean``: learn the names, then
replace them everywhere, keeping a private map).

::

    bundles ──> integrity check (a bundle that fails verify is refused: a copy would re-seal it)
            ──> names learnt from every bundle (forensics/bundle/sanitize_names.py) and addresses
                found by shape (sanitize_text.find_addresses) ──> the map (forensics/bundle/pseudonyms.py)
            ──> map written (``--map FILE``, 0600) ──> every member's bytes and path rewritten in one
                pass (sanitize_text.Replacer; gzip members inflated, rewritten, deflated)
            ──> the ring's provenance re-hashed, the manifest rebuilt ──> new bundle (atomic, 0600)

The copy is a bundle like any other: ``gpuforensics verify`` passes on it, ``analyze`` reads it
and finds what it finds in the original, with the pseudonyms, every excerpt at the same line or
JSON pointer (renamed where a name was a key). Its manifest says what was done (``sanitized``:
replacements and distinct names per category, the original bundle's SHA-256); the map never goes
into it. The output file is named by the pseudonym of the host.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import tempfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from forensics._version import __version__
from forensics.bundle.cluster_dir import CLUSTER_JSON
from forensics.bundle.format import RING_PROVENANCE, bundle_stem, check_member_name, iso, utc_now
from forensics.bundle.pseudonyms import PseudonymMap, load_map, save_map
from forensics.bundle.reader import Bundle, ReadLimits, open_bundle
from forensics.bundle.sanitize_cluster import learn_summary, read_summary, rewrite_summary
from forensics.bundle.sanitize_names import Names, names_in_member
from forensics.bundle.sanitize_text import Replacer, find_addresses
from forensics.bundle.sink import dumps_json
from forensics.bundle.verify import check_integrity
from forensics.bundle.writer import BundleWriter
from forensics.errors import (
    BundleIntegrityError,
    BundleInvalid,
    BundleNotWritten,
    CaptureError,
    UsageError,
    write_failure,
)

__all__ = ["SanitizedCopy", "sanitize_bundles"]

_STEM = re.compile(r"^gpuforensics-(?P<host>.+)-(?P<when>\d{8}T\d{6}Z)$")
#: bundles of at most this much content in all are read once and held; larger sets are read twice
#: (once to learn the names, once to rewrite), one bundle at a time
_HOLD_BYTES = 512 << 20


@dataclass(frozen=True)
class SanitizedCopy:
    """One copy written: from which bundle, where, and what was replaced (per category)."""

    source: Path
    output: Path
    counts: dict[str, int]
    names: dict[str, int] = field(default_factory=dict)


def _gunzip(member: str, data: bytes, cap: int) -> bytes:
    """A gzip member's content (one gzip member or several), at most ``cap`` bytes."""
    out = bytearray()
    rest = bytes(data)
    try:
        while rest:
            d = zlib.decompressobj(wbits=31)
            out += d.decompress(rest, max(1, cap + 1 - len(out)))
            if len(out) > cap:
                raise BundleInvalid(f"member {member} inflates past {cap} bytes: cannot be sanitised")
            if not d.eof:
                raise BundleInvalid(f"member {member} is a truncated gzip stream: cannot be sanitised")
            rest = d.unused_data.lstrip(b"\0")
    except zlib.error as exc:
        raise BundleInvalid(f"member {member} is not valid gzip ({exc}): cannot be sanitised") from None
    return bytes(out)


def _texts(bundle: Bundle) -> Iterator[tuple[str, bytes]]:
    """``(member, bytes as the evidence holds them)``: a ``.gz`` member inflated."""
    for name, data in bundle.members.items():
        if name.endswith(".gz"):
            yield name, _gunzip(name, data, bundle.limits.max_member_bytes)
        else:
            yield name, data


def _learn(bundle: Bundle, names: Names, addresses: dict[tuple[str, str], None]) -> None:
    manifest = dumps_json(bundle.manifest).encode("utf-8")
    names_in_member(names, "manifest.json", manifest)
    for category, text in find_addresses(manifest):
        addresses.setdefault((category, text), None)
    for member, data in _texts(bundle):
        names_in_member(names, member, data)
        for category, text in find_addresses(member.encode() + b"\n" + data):
            if category == "user":
                names.add("user", text)
            else:
                addresses.setdefault((category, text), None)


def _refuse_altered(bundle: Bundle) -> None:
    problems = check_integrity(bundle)
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        raise BundleIntegrityError(f"{bundle.path.name}: integrity check failed, not sanitised "
                                   f"(a copy would hide it): {shown}", problems)


def _refuse_unredacted(bundle: Bundle) -> None:
    """A bundle captured with ``--no-redact`` holds its secrets verbatim; sanitising replaces
    names, not secrets, so a copy for outside would carry them: refused."""
    redaction = bundle.manifest.get("redaction")
    if isinstance(redaction, dict) and redaction.get("enabled") is False:
        raise UsageError(f"{bundle.path.name} was captured with --no-redact: its secrets are in it verbatim, "
                         "and sanitize replaces names, not secrets; not sanitised (capture it again with "
                         "redaction to hand it outside)")


def _when(bundle: Bundle) -> datetime:
    m = _STEM.match(bundle.top)
    if m:
        return datetime.strptime(m["when"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    started = (bundle.manifest.get("capture") or {}).get("started") if isinstance(bundle.manifest.get("capture"), dict) else None
    try:
        return datetime.fromisoformat(str(started).replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return utc_now()


def _host(manifest: dict[str, Any]) -> str:
    host = manifest.get("host")
    if isinstance(host, dict):
        for key in ("node_name", "hostname"):
            if isinstance(host.get(key), str) and host[key]:
                return str(host[key])
    return "host"


def _rehash_provenance(members: dict[str, bytes]) -> None:
    """The ring segments' SHA-256 in ``ring/provenance.json`` made those of the rewritten segments
    (``verify`` checks them); ``sha256_of`` says so."""
    raw = members.get(RING_PROVENANCE)
    if raw is None:
        return
    try:
        prov = json.loads(raw)
    except (ValueError, RecursionError):
        return  # the integrity check passed without a readable provenance: nothing to re-hash
    changed = False
    for entry in prov.get("segments") or [] if isinstance(prov, dict) else []:
        if isinstance(entry, dict) and isinstance(entry.get("member"), str) and entry["member"] in members:
            data = members[entry["member"]]
            entry["sha256"] = hashlib.sha256(data).hexdigest()
            entry["sha256_of"] = "the segment as rewritten by gpuforensics sanitize"
            if "bytes" in entry:
                entry["bytes"] = len(data)
            changed = True
    if changed:  # written as capture writes it (one line), so a line locator into it still holds
        indent = 1 if raw.count(b"\n") > 1 else None
        members[RING_PROVENANCE] = (dumps_json(prov, indent=indent) + ("\n" if raw.endswith(b"\n") else "")).encode()


def _rewrite(bundle: Bundle, replacer: Replacer) -> tuple[dict[str, bytes], dict[str, Any]]:
    members: dict[str, bytes] = {}
    for member, data in _texts(bundle):
        new_name = check_member_name(replacer.text(member))
        new = replacer.apply(data)
        members[new_name] = gzip.compress(new, compresslevel=6, mtime=0) if member.endswith(".gz") else new
    _rehash_provenance(members)
    manifest = json.loads(replacer.apply(dumps_json(bundle.manifest).encode("utf-8")))
    manifest.pop("members", None)
    return members, manifest


def _target(bundle: Bundle, replacer_text: Callable[[str], str], out_dir: Path) -> Path:
    host = replacer_text(_host(bundle.manifest))
    return out_dir / f"{bundle_stem(host, _when(bundle))}.tgz"


def sanitize_bundles(paths: Sequence[Path], out_dir: Path, map_path: Path | None = None,
                     limits: ReadLimits | None = None, summary: Path | None = None) -> list[SanitizedCopy]:
    """Write a sanitised copy of every bundle in ``paths`` into ``out_dir`` (created if absent),
    with the pseudonyms of ``map_path`` (created if absent, updated with the new ones, 0600).
    ``summary``: the ``cluster.json`` of the cluster capture directory ``paths`` come from, written
    sanitised beside the copies (forensics/bundle/sanitize_cluster.py).

    Raises the reader's errors for an unreadable bundle (exit 2), :class:`BundleIntegrityError`
    for one that fails its integrity check (exit 1), :class:`UsageError` for a map that cannot be
    read or a bundle captured with ``--no-redact`` (exit 2), :class:`CaptureError` when an output exists (exit 2), and the writer's errors."""
    limits = limits or ReadLimits()
    pmap = load_map(map_path) if map_path is not None else PseudonymMap()
    names = Names()
    addresses: dict[tuple[str, str], None] = {}
    held: dict[Path, Bundle] = {}
    held_bytes = 0
    summary_doc = read_summary(summary) if summary is not None else None
    if summary_doc is not None:
        learn_summary(summary_doc[1], names)
        for category, text in find_addresses(summary_doc[0]):
            if category == "user":
                names.add("user", text)
            else:
                addresses.setdefault((category, text), None)
    for path in paths:
        bundle = open_bundle(path, limits)
        _refuse_altered(bundle)
        _refuse_unredacted(bundle)
        _learn(bundle, names, addresses)
        size = sum(bundle.size(m) for m in bundle.members)
        if held_bytes + size <= _HOLD_BYTES:
            held[path] = bundle
            held_bytes += size
    for path in paths:  # the domains that follow a host name, once every bundle's host names are known
        for _, data in _texts(held.get(path) or open_bundle(path, limits)):
            names.learn_domains(data)
    # every name the map knows is replaced too: a node named only in another bundle's text
    originals = {**pmap.name_categories(), **names.by_original()}
    pmap.reserve([*originals, *(text for _, text in addresses)])
    replacer = Replacer(pmap, originals, names.field_names)
    for category, text in addresses:  # allocated in the order met: stable for a given input
        pmap.get(category, text)

    out_dir = Path(out_dir)
    targets: dict[Path, Path] = {}
    for path in paths:
        bundle = held.get(path) or open_bundle(path, limits)
        target = _target(bundle, replacer.text, out_dir)
        if target in targets.values():
            raise UsageError(f"two bundles of one host and capture second would both be copied to {target}")
        if target.exists():
            raise CaptureError(f"refusing to overwrite existing output: {target}")
        targets[path] = target
    if summary_doc is not None and (out_dir / CLUSTER_JSON).exists():
        raise CaptureError(f"refusing to overwrite existing output: {out_dir / CLUSTER_JSON}")
    if map_path is not None:
        save_map(pmap, map_path)
    saved = pmap.sizes()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CaptureError(f"cannot create output directory {out_dir}: {exc.strerror or exc}") from None

    copies: list[SanitizedCopy] = []
    for path in paths:
        bundle = held.pop(path) if path in held else open_bundle(path, limits)
        replacer.counts = Counter()
        replacer.used = {}
        members, manifest = _rewrite(bundle, replacer)
        counts = dict(sorted(replacer.counts.items()))
        distinct = {c: len(v) for c, v in sorted(replacer.used.items())}
        manifest["sanitized"] = {
            "by": f"gpuforensics {__version__} sanitize", "at": iso(utc_now()),
            "source_sha256": bundle.file_sha256, "replacements": counts, "names": distinct,
            "kept": "GPU and MIG UUIDs, PCI bus ids, container, image, pod and boot ids, hashes",
            "map": "private: kept by whoever sanitised the bundle, never in it",
        }
        host = _host(manifest)
        writer = BundleWriter(out_dir, host, when=_when(bundle), max_bytes=limits.max_total_bytes)
        try:
            output = writer.finish(manifest, held=members)
        finally:
            writer.cleanup()
        copies.append(SanitizedCopy(path, output, counts, distinct))
    if summary_doc is not None:
        data = rewrite_summary(*summary_doc, replacer, {c.source.name: c.output for c in copies})
        _write_new(out_dir / CLUSTER_JSON, data)
    if map_path is not None and pmap.sizes() != saved:  # an address met only while rewriting
        save_map(pmap, map_path)
    return copies


def _write_new(path: Path, data: bytes) -> None:
    """``path`` written atomically (temporary file, fsync, hard link: never over a file), 0600."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    except FileExistsError:
        raise CaptureError(f"refusing to overwrite existing output: {path}") from None
    except OSError as exc:
        raise write_failure(f"cannot write {path}", exc, BundleNotWritten, CaptureError) from exc
    finally:
        Path(tmp).unlink(missing_ok=True)
