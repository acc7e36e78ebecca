"""Joining the spans of secrets that several finders found in one text."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["merge_spans"]


def merge_spans(spans: Iterable[tuple[int, int]], kept: Iterable[tuple[int, int]] = ()) -> list[tuple[int, int]]:
    """Sorted, disjoint spans covering every non-empty span given (overlapping or touching ones
    joined: one secret found by two finders is one pseudonym), less those that overlap a ``kept``
    span (a pseudonym already there: a text redacted twice is redacted once). One sweep over both
    sorted lists: n log n in the number of spans, whatever their layout."""
    keep = sorted(kept)
    k = 0
    out: list[tuple[int, int]] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        while k < len(keep) and keep[k][1] <= start:
            k += 1  # kept spans wholly before this one (spans come in order of their start)
        if k < len(keep) and keep[k][0] < end:
            continue  # overlaps keep[k] (kept spans are disjoint: the first not before it decides)
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out

