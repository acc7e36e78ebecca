"""Reading a ``cluster capture`` output directory back: which bundles ``analyze DIR`` reads.

With ``DIR/cluster.json``: the bundles it lists as kept (status ``ok`` or ``partial``), in node
order, each of which must exist; the nodes that gave none are returned too, so the caller can
say which nodes the analysis lacks. Without it: every ``*.tgz`` directly in ``DIR``, sorted.

In the bundle layer, beside the reader: ``analyze`` expands a directory argument without importing
cluster capture (forensics.cluster writes this layout; its summary's name and format are here).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from forensics.errors import BundleInvalid, UsageError

__all__ = ["CLUSTER_FORMAT", "CLUSTER_JSON", "bundles_in_directory", "expand_bundle_arguments"]

#: the summary ``cluster capture`` writes into its output directory, and its ``format``
CLUSTER_JSON = "cluster.json"
CLUSTER_FORMAT = "gpuforensics-cluster-capture"


def bundles_in_directory(directory: Path) -> tuple[list[Path], list[str]]:
    """``(bundle paths, one line per node without a bundle)``."""
    summary = directory / CLUSTER_JSON
    if not summary.is_file():
        found = sorted(p for p in directory.glob("*.tgz") if p.is_file())
        if not found:
            raise UsageError(f"{directory}: no bundle (*.tgz) and no {CLUSTER_JSON} in this directory")
        return found, []
    try:
        doc = json.loads(summary.read_text(encoding="utf-8"))
        nodes = doc["nodes"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BundleInvalid(f"{summary}: not a cluster capture summary ({exc})") from None
    if not isinstance(nodes, list):
        raise BundleInvalid(f"{summary}: not a cluster capture summary (nodes is not a list)")
    paths, missing = [], []
    for node in nodes:
        if not isinstance(node, dict):
            continue
        name = node.get("bundle")
        if node.get("status") in ("ok", "partial") and isinstance(name, str) and "/" not in name:
            path = directory / name
            if not path.is_file():
                raise BundleInvalid(f"{summary}: lists {name}, which is not in {directory}")
            paths.append(path)
        else:
            missing.append(f"node {node.get('node')}: no bundle ({node.get('status')}: {node.get('error')})")
    if not paths:
        raise UsageError(f"{directory}: the cluster capture kept no bundle ({'; '.join(missing)[:300]})")
    return paths, missing


def expand_bundle_arguments(given: Iterable[Path]) -> tuple[list[Path], list[str]]:
    """``analyze``'s arguments as bundle paths: a directory stands for its bundles
    (:func:`bundles_in_directory`), anything else is a bundle for the reader to judge. Returns
    ``(paths, one note per node a directory's capture left without a bundle)``."""
    paths: list[Path] = []
    notes: list[str] = []
    for path in given:
        try:
            is_dir = path.is_dir()
        except OSError:  # a name over NAME_MAX: the reader says so in its own words
            is_dir = False
        if not is_dir:
            paths.append(path)
            continue
        found, missing = bundles_in_directory(path)
        paths.extend(found)
        notes.extend(f"{path}: {line}" for line in missing)
    return paths, notes
