"""Where the cgroup hierarchies are and which directory holds a cgroup.

The mounts come from ``/proc/self/mountinfo``, or, with ``--set cgroups.root=DIR`` (a capture pod
reading the host's tree mounted elsewhere), from the hierarchies under that root. Every collector
that turns a cgroup path into a directory (cgroups, docker) asks :func:`cgroup_dir`.
"""

from __future__ import annotations

from forensics.collect.context import CollectContext
from forensics.errors import ParseError
from forensics.hostfs.cgroupns import NamespaceResolver, make_resolver
from forensics.hostfs.files import read_text
from forensics.parsing.attribution import parse_proc_cgroup
from forensics.parsing.cgroup_mounts import CgroupMount, parse_cgroup_mounts

__all__ = ["MOUNTINFO", "cgroup_dir", "cgroup_dirs", "host_cgroup_mounts", "mountinfo_mounts", "resolver_mounts"]

MOUNTINFO = "/proc/self/mountinfo"


def mountinfo_mounts(path: str = MOUNTINFO) -> tuple[CgroupMount, ...]:
    """The cgroup mounts ``path`` lists. Raises OSError or ParseError."""
    return parse_cgroup_mounts(read_text(path, 1 << 20))


def resolver_mounts(resolver: NamespaceResolver) -> tuple[CgroupMount, ...]:
    """The hierarchies under the ``cgroups.root`` tree, as mounts of the whole hierarchy."""
    return tuple(CgroupMount(h.directory, h.version, h.controllers, "/") for h in resolver.hierarchies)


def host_cgroup_mounts(ctx: CollectContext, proc_root: str = "/proc",
                       mountinfo: str = MOUNTINFO) -> tuple[tuple[CgroupMount, ...], NamespaceResolver | None]:
    """The mounts to read cgroups in, with the resolver when ``cgroups.root`` is set (no mounts
    when that root cannot be read or the mount table is unreadable: callers record it)."""
    resolver = make_resolver(ctx, proc_root)
    if resolver is not None:
        return (resolver_mounts(resolver) if resolver.error is None else ()), resolver
    try:
        return mountinfo_mounts(mountinfo), None
    except (OSError, ParseError):
        return (), None


def cgroup_dir(mount: CgroupMount, path: str) -> str | None:
    """The directory of cgroup ``path`` in ``mount``; None when the path is outside what this mount
    shows (we are inside a cgroup namespace)."""
    root = mount.root.rstrip("/")
    if root and not (path == root or path.startswith(root + "/")):
        return None
    return mount.mount_point.rstrip("/") + path[len(root):]


def cgroup_dirs(cgroup_text: str, mounts: tuple[CgroupMount, ...],
                resolver: NamespaceResolver | None = None) -> dict[str, tuple[str, str]]:
    """hierarchy label -> (cgroup path, directory) for every line of /proc/<pid>/cgroup; with a
    resolver, namespace-relative paths (``/../..``) are first resolved to host paths (a path that
    cannot be resolved is left out). Raises ParseError for a malformed file."""
    out: dict[str, tuple[str, str]] = {}
    for line in parse_proc_cgroup(cgroup_text):
        label = ",".join(line.controllers) if line.controllers else "unified"
        path = line.path
        if resolver is not None:
            resolved, _why = resolver.resolve(None if line.is_v2 else label, line.path)
            if resolved is None:
                continue
            path = resolved
        want = set(line.controllers)
        for m in mounts:
            if (line.is_v2 and m.version == 2) or (not line.is_v2 and m.version == 1
                                                   and want and want == set(m.controllers)):
                directory = cgroup_dir(m, path)
                if directory is None:
                    continue
                out[label] = (path, directory)
                break
    return out
