"""Checking a sanitised copy the way its receiver and its sender would: the analysis of the copy
against the original's, names mapped through the private map by a mapping written independently of
the sanitiser (a plain whole-word replacement, longest original first), every excerpt re-read from
the copy's member at its locator, and every member's bytes (and path) scanned for the originals."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from forensics.analysis.excerpt import OMISSION
from forensics.analysis.ring_view import ring_view
from forensics.analysis.source import Source
from forensics.bundle.reader import open_bundle

__all__ = ["MapOracle", "assert_excerpts_reread", "assert_no_original_left", "comparable_findings",
           "json_field_names"]

_CUT = "..."


class MapOracle:
    """The originals and pseudonyms of a map file, and text mapped through them."""

    def __init__(self, map_path: Path) -> None:
        doc = json.loads(map_path.read_text())
        self.pairs: dict[str, str] = {}
        self.categories: dict[str, str] = {}
        for category, table in doc["names"].items():
            for original, pseudonym in table.items():
                self.pairs.setdefault(original, pseudonym)
                self.categories.setdefault(original, category)
        words = sorted(self.pairs, key=len, reverse=True)
        self._re = re.compile(
            r"(?<![A-Za-z0-9-])(" + "|".join(re.escape(w) for w in words) + r")(?![A-Za-z0-9-])") if words else None
        self._lower = {k.lower(): v for k, v in self.pairs.items()
                       if self.categories[k] in ("hostname", "domain")}

    def text(self, s: str) -> str:
        if self._re is None:
            return s
        return self._re.sub(lambda m: self.pairs[m.group(1)], s)

    def originals(self, *categories: str) -> list[str]:
        return sorted(o for o, c in self.categories.items() if not categories or c in categories)


def _subject(s: dict[str, Any], oracle: MapOracle) -> tuple[Any, ...]:
    return (s["role"], s["type"], oracle.text(str(s["id"])), oracle.text(str(s["name"])),
            oracle.text(str(s.get("node"))))


def comparable_findings(doc: dict[str, Any], oracle: MapOracle | None, bundle_names: dict[str, str]) -> list[Any]:
    """Each finding as (kind, severity, subjects, evidence member and locator), names mapped
    through ``oracle`` (None: the copy's own), bundle file names through ``bundle_names``; sorted."""
    def m(s: str) -> str:
        return oracle.text(s) if oracle is not None else s

    out = []
    for f in doc["findings"]:
        subjects = tuple(sorted(_subject(s, oracle) if oracle else
                                (s["role"], s["type"], str(s["id"]), str(s["name"]), str(s.get("node")))
                                for s in f["subjects"]))
        evidence = tuple((bundle_names.get(e["bundle"], e["bundle"]), m(e["member"]), m(e["locator"]))
                         for e in f["evidence"])
        out.append((f["kind"], f["severity"], f.get("confidence"), m(str(f.get("node"))), subjects, evidence))
    return sorted(out, key=repr)


def _strip_cut(s: str) -> str:
    return s[: -len(_CUT)] if s.endswith(_CUT) else s


def assert_excerpts_reread(original_doc: dict[str, Any], copy_doc: dict[str, Any], copies: Iterable[Path],
                           oracle: MapOracle) -> int:
    """Every excerpt of the copy's analysis is in the copy's member at its locator (``line N``: that
    line), and is the original's excerpt with its names mapped (up to where one of them was cut)."""
    opened = {p.name: open_bundle(p) for p in copies}
    views = {n: ring_view(Source(b, n, b.members)) for n, b in opened.items()}
    originals = {(oracle.text(e["member"]), oracle.text(e["locator"]), f["kind"]): e["excerpt"]
                 for f in original_doc["findings"] for e in f["evidence"]}
    checked = 0
    for f in copy_doc["findings"]:
        for e in f["evidence"]:
            if e["excerpt_normalised"]:
                continue
            bundle = opened[e["bundle"]]
            data = bundle.members.get(e["member"])
            if data is None and views[e["bundle"]] is not None:
                data = views[e["bundle"]].real_bytes(e["member"])  # type: ignore[union-attr]
            assert data is not None, e
            text = bytes(data).decode("utf-8")
            loc = e["locator"]
            if loc.startswith("line "):
                text = text.split("\n")[int(loc.split()[1]) - 1]
            for piece in _strip_cut(e["excerpt"]).split(OMISSION):
                assert piece and piece in text, f"{piece!r} not at {e['member']} {loc}"
            before = originals.get((e["member"], loc, f["kind"]))
            assert before is not None, f"no original evidence at {e['member']} {loc}"
            want, got = _strip_cut(oracle.text(before)), _strip_cut(e["excerpt"])
            n = min(len(want), len(got)) - 16  # a cut may fall inside a name in one of them
            assert want[:n] == got[:n], (want, got)
            checked += 1
    return checked


def assert_no_original_left(copy: Path, originals: Iterable[str], dns_names: Iterable[str] = (),
                            field_names: Iterable[str] = ()) -> int:
    """No original name in any member's bytes or path of ``copy`` where it begins a word (after
    anything but a letter, a digit or a hyphen), whatever follows but a letter or digit: so a name
    that begins a hyphenated word (a claim ``train-0-gpu-x7k2p``, a slice ``gpu-07-gpu.nvidia.com-x``)
    counts, one inside another word (``libnvidia-ml``) does not; ``dns_names`` (host and domain
    names) in any case. A name in ``field_names`` where it stands as a JSON key (``"server":``, a
    field's name) is allowed. Returns the number of members scanned."""
    import gzip

    def word(names: Iterable[str], flags: int = 0) -> re.Pattern[bytes] | None:
        words = sorted(set(names), key=len, reverse=True)
        return re.compile(rb"(?<![A-Za-z0-9-])(?:" + b"|".join(re.escape(w.encode()) for w in words)
                          + rb")(?![A-Za-z0-9])", flags) if words else None

    fields = set(field_names)
    patterns = [p for p in (word(originals), word(dns_names, re.IGNORECASE)) if p is not None]
    bundle = open_bundle(copy)
    members = {**bundle.members, "manifest.json": json.dumps(bundle.manifest).encode()}
    for name, data in members.items():
        raw = gzip.decompress(bytes(data)) if name.endswith(".gz") else bytes(data)
        for where, blob in ((f"{name} (path)", name.encode()), (name, raw), ("file name", copy.name.encode())):
            for pattern in patterns:
                hit = next((h for h in pattern.finditer(blob) if not (
                    h.group(0).decode() in fields and blob[h.start() - 1:h.start()] == b'"'
                    and blob[h.end():h.end() + 2] == b'":')), None)
                assert hit is None, f"{copy.name}: {where} still holds {hit.group(0)!r}: " \
                                    f"{blob[max(0, hit.start() - 60):hit.end() + 60]!r}"
    return len(members)


def json_field_names(bundle: Path) -> set[str]:
    """Every JSON object key of ``bundle``'s JSON and JSON-lines members (what a field is called)."""
    keys: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            keys.update(node)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for name, data in open_bundle(bundle).members.items():
        try:
            if name.endswith(".json"):
                walk(json.loads(data))
            elif name.endswith(".jsonl"):
                for line in bytes(data).splitlines():
                    walk(json.loads(line))
        except ValueError:
            continue
    return keys
