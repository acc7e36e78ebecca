"""The private map of ``gpuforensics sanitize``: every name and address it replaced, with the
pseudonym it got, kept by the user in a file of their own (``--map FILE``, mode 0600) so that the
bundles of one incident, sanitised together or one at a time, get the same pseudonyms, and so that
a vendor's answer about ``host-0002`` can be traced back to the node. The map never goes into a copy.

The file is JSON::

    {"format": "gpuforensics-sanitize-map", "version": 1,
     "note": "PRIVATE: ...",
     "names": {"hostname": {"gpu-07": "host-0001"}, "pod": {"trainer-0": "pod-0001"}, ...,
               "ipv4": {"10.0.3.7": "198.18.0.1"}, "mac": {"3c:fd:fe:12:34:56": "02:00:00:00:00:01"}}}

One original string has one pseudonym, whatever its category (a byte of the copy cannot say whether
``trainer`` was a container or a pod): the first category it was met in names it. Pseudonyms are
drawn in order per category from ranges no real evidence uses: ``host-NNNN``, ``domain-NNNN.example``
(RFC 2606), ``user-NNNN``, ``ns-NNNN``, ``pod-NNNN``, ``ctr-NNNN``, ``obj-NNNN`` (other Kubernetes
objects whose names embed these: DRA ResourceClaims and ResourceSlices, a workload's name),
``registry.example/image-NNNN`` (a private image's repository; its tag and digest are kept), IPv4 in
198.18.0.0/15 (RFC 2544, benchmarking), IPv6 in 2001:db8::/32 (RFC 3849, documentation), MAC
addresses locally administered (``02:...``, the original's length kept: 6, 8 or 20 octets). A
pseudonym is never an original string of the same run (nor a string the map already gives).
"""

from __future__ import annotations

import ipaddress
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from forensics.errors import OutputNotWritten, UsageError, write_failure

__all__ = ["ADDRESS_CATEGORIES", "CATEGORIES", "MAP_FORMAT", "PseudonymMap", "load_map", "save_map"]

MAP_FORMAT = "gpuforensics-sanitize-map"
#: the categories, in the order a string met in several is named by (a host before a pod)
CATEGORIES = ("hostname", "domain", "user", "namespace", "pod", "container", "object", "image", "ipv4", "ipv6", "mac")
ADDRESS_CATEGORIES = frozenset({"ipv4", "ipv6", "mac"})
_NAME_FORMS = {"hostname": "host-{:04d}", "domain": "domain-{:04d}.example", "user": "user-{:04d}",
               "namespace": "ns-{:04d}", "pod": "pod-{:04d}", "container": "ctr-{:04d}", "object": "obj-{:04d}",
               "image": "registry.example/image-{:04d}"}
_IPV4_BASE = int(ipaddress.IPv4Address("198.18.0.0"))
_IPV4_SIZE = 1 << 17
_IPV6_BASE = int(ipaddress.IPv6Address("2001:db8::"))
_NOTE = ("PRIVATE: the originals of the pseudonyms in sanitised gpuforensics bundles. Keep it; never "
         "send it with the bundles. Reuse it (sanitize --map FILE) for every bundle of one incident.")


class PseudonymMap:
    """Originals -> pseudonyms per category, with the allocation of new ones."""

    def __init__(self, names: dict[str, dict[str, str]] | None = None) -> None:
        self.names: dict[str, dict[str, str]] = {c: dict((names or {}).get(c, {})) for c in CATEGORIES}
        self._used: set[str] = {p.lower() for table in self.names.values() for p in table.values()}
        self._next: dict[str, int] = dict.fromkeys(CATEGORIES, 1)
        #: strings a pseudonym must not be: the map's originals, and this run's (:meth:`reserve`)
        self._avoid: set[str] = {o.lower() for table in self.names.values() for o in table}

    def reserve(self, originals: Iterable[str]) -> None:
        """Strings met in the evidence: no new pseudonym may equal one of them."""
        self._avoid.update(o.lower() for o in originals)

    def category_of(self, original: str) -> str | None:
        for category in CATEGORIES:
            if original in self.names[category]:
                return category
        return None

    def name_categories(self) -> dict[str, str]:
        """original -> category of every name (not address) the map holds."""
        return {o: c for c in reversed(CATEGORIES) if c not in ADDRESS_CATEGORIES for o in self.names[c]}

    def lookup(self, original: str) -> str | None:
        for category in CATEGORIES:
            found = self.names[category].get(original)
            if found is not None:
                return found
        return None

    def get(self, category: str, original: str) -> str:
        """The pseudonym of ``original`` (allocated in ``category`` when the map has none yet)."""
        found = self.lookup(original)
        if found is not None:
            return found
        while True:
            candidate = self._candidate(category, original, self._next[category])
            self._next[category] += 1
            if candidate.lower() not in self._used and candidate.lower() not in self._avoid:
                break
        self._used.add(candidate.lower())
        self.names[category][original] = candidate
        return candidate

    @staticmethod
    def _candidate(category: str, original: str, n: int) -> str:
        if category in _NAME_FORMS:
            return _NAME_FORMS[category].format(n)
        if category == "ipv4":
            if n >= _IPV4_SIZE:
                raise UsageError("the map holds more IPv4 pseudonyms than 198.18.0.0/15 has addresses")
            return str(ipaddress.IPv4Address(_IPV4_BASE + n))
        if category == "ipv6":
            return str(ipaddress.IPv6Address(_IPV6_BASE + n))
        octets = original.count(":") + 1  # mac: 6, 8 or 20 octets, as the original
        tail = n.to_bytes(octets - 1, "big")
        return ":".join(f"{b:02x}" for b in (b"\x02" + tail))

    def as_json(self) -> dict[str, Any]:
        return {"format": MAP_FORMAT, "version": 1, "note": _NOTE,
                "names": {c: dict(sorted(t.items())) for c, t in self.names.items() if t}}

    def sizes(self) -> dict[str, int]:
        return {c: len(t) for c, t in self.names.items() if t}


def load_map(path: Path) -> PseudonymMap:
    """The map in ``path`` (an empty one when the file does not exist); a file that cannot be read
    or is not such a map is a :class:`UsageError` (exit 2) naming it."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return PseudonymMap()
    except OSError as exc:
        raise UsageError(f"--map {path}: cannot read: {exc.strerror or exc}") from None
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"--map {path}: not a sanitize map (not JSON: {exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != MAP_FORMAT or doc.get("version") != 1:
        raise UsageError(f"--map {path}: not a sanitize map (no \"format\": \"{MAP_FORMAT}\", version 1)")
    names = doc.get("names", {})
    if not isinstance(names, dict) or not all(
            c in CATEGORIES and isinstance(t, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                           for k, v in t.items())
            for c, t in names.items()):
        raise UsageError(f"--map {path}: not a sanitize map (\"names\" is not category -> original -> pseudonym)")
    return PseudonymMap(names)


def save_map(pmap: PseudonymMap, path: Path) -> None:
    """Write the map atomically (temporary file in its directory, fsync, rename), mode 0600."""
    data = (json.dumps(pmap.as_json(), indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise write_failure(f"--map {path}: cannot write", exc, OutputNotWritten, UsageError) from exc
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise write_failure(f"--map {path}: cannot write", exc, OutputNotWritten, UsageError) from exc
