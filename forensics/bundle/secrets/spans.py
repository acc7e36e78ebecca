"""Joining the spans of secrets that several finders found in one text."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["merge_spans"]


def merge_spans(spans: Iterable[tuple[int, int]], kept: Iterable[tuple[int, int]] = ()) -> list[tuple[int, int]]:
    """Sorted, disjoint spans covering every non-empty span given (overlapping or touching ones
    joined: one secret found by two finders is one pseudonym), less those that overlap a ``kept``
    span (a pseudonym already there: a text redacted twice is redacted once)."""
    keep = sorted(kept)
    out: list[tuple[int, int]] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if any(k0 < end and start < k1 for k0, k1 in keep):
            continue
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out
