"""Several nodes on one clock: each node's offset to the first node's, from the clock references
the bundles recorded (the Kubernetes API server's ``Date`` headers, ``kubernetes/clock.json``; an
NTP-synchronised clock's maximum error, ``host/clock.json``).

For a reference ``r`` both nodes were compared with, ``t_r = t_node + offset_node`` and
``t_r = t_first + offset_first``, so ``t_first = t_node + offset_node - offset_first``, uncertain by
the sum of both uncertainties; the reference with the smallest sum is used. A node sharing no
reference with the first keeps an unknown offset (None), as before any clock evidence existed.
"""

from __future__ import annotations

from forensics.analysis.model import Model

__all__ = ["align_clocks"]


def align_clocks(model: Model) -> list[str]:
    """Set each node's ``clock_offset_s``/``clock_uncertainty_s`` against the first node (sorted
    by name); returns the nodes that could not be aligned."""
    nodes = sorted(model.nodes)
    if not nodes:
        return []
    first = model.nodes[nodes[0]]
    first.clock_offset_s, first.clock_uncertainty_s = 0.0, 0.0
    unaligned: list[str] = []
    for name in nodes[1:]:
        info = model.nodes[name]
        best: tuple[float, float, str] | None = None
        for ref, (off, unc, _) in info.clock_refs.items():
            base = first.clock_refs.get(ref)
            if base is None:
                continue
            candidate = (unc + base[1], off - base[0], ref)
            if best is None or candidate[0] < best[0]:
                best = candidate
        if best is None:
            info.clock_offset_s, info.clock_uncertainty_s = None, None
            unaligned.append(name)
        else:
            info.clock_uncertainty_s, info.clock_offset_s = round(best[0], 6), round(best[1], 6)
            info.clock_reference = best[2]
    return unaligned
