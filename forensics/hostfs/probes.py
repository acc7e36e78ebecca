"""Kept descriptors re-read each tick and compared with the bytes they gave last, all in one pass.

A recorder source that writes a line only when a few small files changed (the cgroups collector's
quiet check: ``forensics.collectors.cgroups``) asks each kept descriptor, every tick, for the bytes
it gave for the owner's last line plus some slack, and compares. Done owner by owner in Python, the
loop costs about as much again as the preads' kernel side at 200 owners; :class:`ProbeBatch` keeps
every owner's descriptors, sizes and bytes in flat lists and reads them with one ``map`` over
``os.pread`` and compares with one list comparison, so that a tick on which nothing moved costs the
reads and almost nothing else. Only when the comparison fails (or a read failed) are the owners
looked at one by one. The reads are the ones the owner-by-owner loop makes when nothing moved: one
``pread`` per descriptor, each for the size the owner gave.
"""

from __future__ import annotations

import os

__all__ = ["Probe", "ProbeBatch"]

#: an owner's probe: per descriptor (fd, the bytes it gave for the owner's last line, the size to ask)
Probe = tuple[tuple[int, bytes, int], ...]


class ProbeBatch:
    """The probes of many owners (keyed by an int), read together by :meth:`read`."""

    def __init__(self) -> None:
        self._probes: dict[int, Probe] = {}
        self._slots: dict[int, tuple[int, int]] = {}  # key -> (start in the flat lists, count)
        self._fds: list[int] = []
        self._sizes: list[int] = []
        self._behind: list[bytes] = []
        self._offsets: list[int] = []  # zeros: pread's offset for each descriptor
        self._stale = False

    def __len__(self) -> int:
        return len(self._probes)

    def set(self, key: int, probe: Probe | None) -> None:
        """The owner's probe from now on (None: it has none, it leaves the batch). A probe of as many
        descriptors as the owner's last one takes its place in the flat lists (the common case: a
        line was written, its bytes are the new ones); any other change rebuilds them at the next read."""
        if probe is None:
            if self._probes.pop(key, None) is not None:
                self._stale = True
            return
        slot = self._slots.get(key) if not self._stale else None
        self._probes[key] = probe
        if slot is None or slot[1] != len(probe):
            self._stale = True
            return
        start = slot[0]
        for offset, (fd, data, size) in enumerate(probe, start):
            self._fds[offset], self._behind[offset], self._sizes[offset] = fd, data, size

    def clear(self) -> None:
        self._probes.clear()
        self._stale = True

    def _rebuild(self) -> None:
        self._slots.clear()
        fds: list[int] = []
        behind: list[bytes] = []
        sizes: list[int] = []
        for key, probe in self._probes.items():
            self._slots[key] = (len(fds), len(probe))
            for fd, data, size in probe:
                fds.append(fd)
                behind.append(data)
                sizes.append(size)
        self._fds, self._behind, self._sizes, self._offsets = fds, behind, sizes, [0] * len(fds)
        self._stale = False

    def read(self) -> dict[int, list[bytes] | None]:
        """One pread per descriptor of every owner; returns the owners whose bytes are not the ones
        behind their last line, with what was read now (in their probe's order; a read shorter than
        its asked size is the whole file), or None where a read failed (the owner's files are to be
        read again by the caller, which says why). An owner not returned read as its probe says.
        When a read fails, every owner's descriptors are read again owner by owner, to know whose
        failed: once per failure (a cgroup removed; its owner's next probe is None, it leaves)."""
        if self._stale:
            self._rebuild()
        pread, fds, sizes, offsets = os.pread, self._fds, self._sizes, self._offsets
        try:
            got: list[bytes] | None = list(map(pread, fds, sizes, offsets))
        except OSError:  # one failed (a cgroup removed): owner by owner, to know whose
            got = None
        if got == self._behind:
            return {}
        behind = self._behind
        moved: dict[int, list[bytes] | None] = {}
        for key, (start, count) in self._slots.items():
            end = start + count
            if got is None:
                try:
                    now = list(map(pread, fds[start:end], sizes[start:end], offsets[start:end]))
                except OSError:
                    moved[key] = None
                    continue
            else:
                now = got[start:end]
            if now != behind[start:end]:
                moved[key] = now
        return moved
