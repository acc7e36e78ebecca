"""The summary of a ``cluster capture`` directory (``DIR/cluster.json``, forensics/bundle/cluster_dir.py)
when ``gpuforensics sanitize DIR`` copies its bundles: its node, pod and namespace names are learnt
with the bundles' (a node that gave no bundle is named only there), and a sanitised summary is
written beside the copies, its kept nodes pointing at the copies (file name, SHA-256, size), so
``analyze OUTDIR`` reads them in node order and says which nodes gave no bundle, as for the
original directory."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from forensics._version import __version__
from forensics.bundle.format import iso, utc_now
from forensics.bundle.sanitize_names import Names
from forensics.bundle.sanitize_text import Replacer
from forensics.errors import BundleInvalid

__all__ = ["learn_summary", "read_summary", "rewrite_summary"]


def read_summary(path: Path) -> tuple[bytes, dict[str, Any]]:
    """The summary's bytes and document (a list of ``nodes``), or :class:`BundleInvalid`."""
    try:
        raw = path.read_bytes()
        doc = json.loads(raw)
    except (OSError, ValueError, RecursionError) as exc:
        raise BundleInvalid(f"{path}: not a cluster capture summary ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise BundleInvalid(f"{path}: not a cluster capture summary (no list of nodes)")
    return raw, doc


def learn_summary(doc: dict[str, Any], names: Names) -> None:
    """Node names (``node``, the selection's ``nodes``) are host names; capture pods are pods."""
    for node in doc["nodes"]:
        if isinstance(node, dict):
            names.add("hostname", node.get("node"))
            names.add("pod", node.get("pod"))
            names.add("pod", node.get("job"))
    selection = doc.get("selection")
    if isinstance(selection, dict) and isinstance(selection.get("nodes"), list):
        for name in selection["nodes"]:
            names.add("hostname", name)


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def rewrite_summary(raw: bytes, doc: dict[str, Any], replacer: Replacer, copies: Mapping[str, Path]) -> bytes:
    """The summary with its names replaced, each kept node's bundle the copy of its bundle
    (``copies``: original file name -> copy), and a ``sanitized`` note."""
    new = json.loads(replacer.apply(raw))
    for before, after in zip(doc["nodes"], new["nodes"], strict=True):
        name = before.get("bundle") if isinstance(before, dict) else None
        copy = copies.get(name) if isinstance(name, str) else None
        if copy is not None and isinstance(after, dict):
            after.update(bundle=copy.name, bundle_name=copy.name.removesuffix(".tgz"),
                         sha256=_file_sha256(copy), bytes=copy.stat().st_size)
    new["sanitized"] = {"by": f"gpuforensics {__version__} sanitize", "at": iso(utc_now()),
                        "source_sha256": hashlib.sha256(raw).hexdigest()}
    return (json.dumps(new, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
