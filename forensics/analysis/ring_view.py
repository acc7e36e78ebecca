"""The flight recorder's history inside a bundle, read by the ordinary loaders.

``capture --since`` folds ring records into members under ``ring/`` that mirror the bundle's own
layout (``ring/nvml/samples.jsonl``, ``ring/proc/<pid>/cgroup``, ``ring/docker/containers/<id>/
inspect.json``...), byte for byte what the collectors wrote. :func:`ring_view` gives the loaders
a :class:`~forensics.analysis.source.Source` that sees those members under their usual names,
so ring samples and capture samples land in the model as one series; every evidence it builds
names the real member (``ring/...``), so a finding cites where its bytes are in the bundle.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from forensics.analysis.findings import Evidence, EvidenceRef
from forensics.analysis.source import Source
from forensics.specs.ring import PREFIX as RING_PREFIX

__all__ = ["RING_PREFIX", "RingSource", "ring_view"]


class _PrefixBundle:
    def __init__(self, bundle: Any, prefix: str) -> None:
        self._bundle = bundle
        self._prefix = prefix

    @property
    def manifest(self) -> dict[str, Any]:
        m = self._bundle.manifest
        return m if isinstance(m, dict) else {}

    def read_bytes(self, member: str) -> bytes:
        data: bytes = self._bundle.read_bytes(self._prefix + member)
        return data


class RingSource(Source):
    """A Source over the ``ring/`` members of another, evidence named by their real paths."""

    def __init__(self, src: Source, prefix: str = RING_PREFIX) -> None:
        super().__init__(_PrefixBundle(src.bundle, prefix), src.name,
                         (m[len(prefix):] for m in src.members if m.startswith(prefix)))
        self.prefix = prefix
        self.problems = src.problems  # one list: the bundle's problems

    def _real(self, ev: Evidence) -> Evidence:
        return replace(ev, member=self.prefix + ev.member)

    def ev_pointer(self, member: str, pointer: str, doc: Any = None) -> Evidence:
        return self._real(super().ev_pointer(member, pointer, doc))

    def ev_line(self, member: str, line_no: int, raw: str | bytes | None = None) -> Evidence:
        return self._real(super().ev_line(member, line_no, raw))

    def ev_member(self, member: str, excerpt: str) -> Evidence:
        return self._real(super().ev_member(member, excerpt))

    def ref(self, member: str, line: int, payload: Any, *paths: tuple[str | int, ...],
            pointer: str = "") -> EvidenceRef:
        r = super().ref(member, line, payload, *paths, pointer=pointer)
        return replace(r, member=self.prefix + r.member)

    def line_at(self, member: str, offset: int) -> bytes:
        return super().line_at(member.removeprefix(self.prefix), offset)


def ring_view(src: Source) -> RingSource | None:
    """The bundle's ring history as a Source, or None when the capture folded in no ring."""
    if not any(m.startswith(RING_PREFIX) for m in src.members):
        return None
    return RingSource(src)
