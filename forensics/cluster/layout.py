"""Reading a ``cluster capture`` output directory back: which bundles ``analyze DIR`` reads.

With ``DIR/cluster.json``: the bundles it lists as kept (status ``ok`` or ``partial``), in node
order, each of which must exist; the nodes that gave none are returned too, so the caller can
say which nodes the analysis lacks. Without it: every ``*.tgz`` directly in ``DIR``, sorted.
"""

from __future__ import annotations

import json
from pathlib import Path

from forensics.cluster.run import CLUSTER_JSON
from forensics.errors import BundleInvalid, UsageError

__all__ = ["bundles_in_directory"]


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
        assert isinstance(nodes, list)
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as exc:
        raise BundleInvalid(f"{summary}: not a cluster capture summary ({exc})") from None
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
