"""The cgroup filesystems mounted on a host or in a container, from ``/proc/self/mountinfo``.

Raises only :class:`forensics.errors.ParseError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from forensics.errors import ParseError
from forensics.parsing.cgroupfs import text_of

__all__ = ["CgroupMount", "cgroup_layout", "parse_cgroup_mounts"]


@dataclass(frozen=True)
class CgroupMount:
    """A cgroup filesystem mount from ``/proc/self/mountinfo``.

    ``version`` 1 or 2; ``controllers`` the v1 controllers bound to the hierarchy (``cpu``,
    ``cpuacct``, ``memory``, ``name=systemd``...; empty for v2); ``root`` the mount's root inside
    the hierarchy (``/`` on the host; something else inside a container).
    """

    mount_point: str
    version: int
    controllers: tuple[str, ...]
    root: str


_V1_OPTIONS_NOT_CONTROLLERS = frozenset({
    "rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "xattr", "clone_children",
    "noprefix", "cpuset_v2_mode", "favordynmods", "nsdelegate", "memory_recursiveprot",
    "memory_localevents", "memory_hugetlb_accounting", "pids_localevents",
})


def _unescape_mount(text: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def parse_cgroup_mounts(mountinfo: str) -> tuple[CgroupMount, ...]:
    """The cgroup and cgroup2 mounts in ``/proc/self/mountinfo`` text (``man 5 proc``: fields
    ``id parent major:minor root mount_point options [optional...] - fstype source super_options``).
    Lines of other filesystems are ignored; a malformed line raises ParseError."""
    mounts: list[CgroupMount] = []
    for number, line in enumerate(text_of(mountinfo, "mountinfo").splitlines(), 1):
        if number > 100_000:
            raise ParseError("mountinfo: too many lines")
        if not line.strip():
            continue
        head, sep, tail = line.partition(" - ")
        fields = head.split()
        rest = tail.split()
        if not sep or len(fields) < 6 or len(rest) < 2:
            raise ParseError(f"mountinfo line {number}: malformed: {line[:80]!r}")
        fstype = rest[0]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        super_options = rest[2].split(",") if len(rest) > 2 else []
        controllers: tuple[str, ...] = ()
        if fstype == "cgroup":
            controllers = tuple(o for o in super_options if o not in _V1_OPTIONS_NOT_CONTROLLERS
                                and not o.startswith("release_agent="))
        mounts.append(CgroupMount(_unescape_mount(fields[4]), 2 if fstype == "cgroup2" else 1,
                                  controllers, _unescape_mount(fields[3])))
    return tuple(mounts)


def cgroup_layout(mounts: tuple[CgroupMount, ...]) -> str:
    """``v2`` (unified only), ``v1`` (legacy only), ``hybrid`` (both) or ``none``."""
    versions = {m.version for m in mounts}
    if versions == {2}:
        return "v2"
    if versions == {1}:
        return "v1"
    return "hybrid" if versions else "none"
