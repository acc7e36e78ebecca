"""The host's cgroup tree seen from a capture pod: a cgroup root override and the resolution of
namespace-relative cgroup paths (shared by the ``procfs`` and ``cgroups`` collectors; not a
collector itself).

In a pod on a cgroup v2 node the capture has a private cgroup namespace: ``/proc/<pid>/cgroup``
of other processes reads ``0::/../../kubepods-...-pod<uid>.slice/cri-containerd-<id>.scope``
(relative to the capture's own cgroup) and ``/sys/fs/cgroup`` shows only the pod's subtree. With
the host tree mounted elsewhere (the DaemonSet: ``/host/sys/fs/cgroup``) and named by
``--set cgroups.root=DIR`` or the environment variable ``GPUFORENSICS_CGROUP_ROOT``:

* hierarchies are read under that root: v2 when ``DIR/cgroup.controllers`` exists (the unified
  hierarchy is ``DIR`` itself), otherwise v1 ``DIR/<controllers>`` (plus ``DIR/unified`` on hybrid
  hosts when it holds ``cgroup.controllers``);
* the capture's own cgroup in host terms is found once per collector run: a breadth-first search
  of the hierarchy for the directory whose ``cgroup.procs`` lists the capture's PID (bounded:
  depth 6, 5000 directories); with the capture's own ``/proc/<pid>/cgroup`` (namespace view,
  normally ``/``) this gives the namespace root, and every path holding ``..`` is joined with it
  (:func:`forensics.parsing.attribution.resolve_relative`). When the search fails, the path is
  kept as read and reported unresolved, never guessed.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from forensics.collect.context import CollectContext
from forensics.errors import ParseError
from forensics.hostfs.files import describe_os_error, read_small
from forensics.parsing.attribution import namespace_root, parse_proc_cgroup, resolve_relative
from forensics.specs.cgroups import SPEC as CGROUPS

__all__ = [
    "ENV_CGROUP_ROOT",
    "OPTION_CGROUP_ROOT",
    "HostHierarchy",
    "NamespaceResolver",
    "OwnCgroup",
    "cgroup_root_option",
    "find_own_cgroup",
    "host_hierarchies",
]

OPTION_CGROUP_ROOT = "cgroups.root"  # the spec's setting, as --set spells it
ENV_CGROUP_ROOT = "GPUFORENSICS_CGROUP_ROOT"
DEFAULT_SEARCH_DEPTH = 6
DEFAULT_SEARCH_DIRS = 5000
# Which hierarchy to search for the capture's own cgroup first (v2, then the v1 controllers the
# cgroups collector reads).
_PREFERENCE = ("unified", "memory", "cpu,cpuacct", "cpu", "pids", "cpuacct")


def cgroup_root_option(ctx: CollectContext) -> tuple[str | None, str | None]:
    """The host cgroup root to read and where it came from: ``--set cgroups.root=DIR`` first,
    then the environment variable; ``(None, None)`` when neither is set (or both are empty)."""
    value = (CGROUPS.read_settings(ctx.options.extra).root or "").strip()
    if value:
        return value.rstrip("/") or "/", f"--set {OPTION_CGROUP_ROOT}"
    value = os.environ.get(ENV_CGROUP_ROOT, "").strip()
    if value:
        return value.rstrip("/") or "/", f"env {ENV_CGROUP_ROOT}"
    return None, None


@dataclass(frozen=True)
class HostHierarchy:
    """A hierarchy under the cgroup root: ``unified`` (v2) or a v1 controller directory."""

    name: str
    version: int
    directory: str
    controllers: tuple[str, ...]


def host_hierarchies(root: str) -> list[HostHierarchy]:
    """The hierarchies under ``root``: v2 when ``root/cgroup.controllers`` exists, else one per v1
    controller directory (symlinks such as ``cpu -> cpu,cpuacct`` skipped; ``systemd`` is the
    named ``name=systemd`` hierarchy) and ``unified`` when it is a v2 tree. Raises OSError when
    ``root`` cannot be listed."""
    if os.path.isfile(os.path.join(root, "cgroup.controllers")):
        return [HostHierarchy("unified", 2, root, ())]
    found: list[HostHierarchy] = []
    with os.scandir(root) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.is_symlink() or not entry.is_dir():
                continue
            directory = os.path.join(root, entry.name)
            if entry.name == "unified" and os.path.isfile(
                    os.path.join(directory, "cgroup.controllers")):
                found.append(HostHierarchy("unified", 2, directory, ()))
            elif os.path.isfile(os.path.join(directory, "cgroup.procs")):
                controllers = tuple(f"name={c}" if c == "systemd" else c
                                    for c in entry.name.split(",") if c)
                found.append(HostHierarchy(",".join(controllers), 1, directory, controllers))
    return found


@dataclass
class OwnCgroup:
    """Where the capture's own process sits in one hierarchy, and how that was found."""

    hierarchy: str
    pid: int
    host_path: str | None = None
    namespace_path: str | None = None
    namespace_root: str | None = None
    dirs_searched: int = 0
    truncated: bool = False
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The record written to ``cgroup/index.json`` and ``proc/index.json``."""
        return {
            "hierarchy": self.hierarchy,
            "pid": self.pid,
            "method": "breadth-first search for the directory whose cgroup.procs lists the pid",
            "host_path": self.host_path,
            "namespace_path": self.namespace_path,
            "namespace_root": self.namespace_root,
            "dirs_searched": self.dirs_searched,
            "truncated": self.truncated,
            "error": self.error,
        }


def find_own_cgroup(directory: str, pid: int, max_depth: int = DEFAULT_SEARCH_DEPTH,
                    max_dirs: int = DEFAULT_SEARCH_DIRS) -> tuple[str | None, int, bool]:
    """Breadth-first search of a hierarchy mounted at ``directory`` for the cgroup whose
    ``cgroup.procs`` lists ``pid``. Returns (path relative to the hierarchy root or None,
    directories searched, whether a bound stopped the search)."""
    wanted = str(pid)
    queue: deque[tuple[str, int]] = deque([("", 0)])
    searched = 0
    truncated = False
    while queue:
        relative, depth = queue.popleft()
        if searched >= max_dirs:
            truncated = True
            break
        searched += 1
        absolute = directory + relative
        try:
            procs = read_small(f"{absolute}/cgroup.procs", 1 << 22)
        except OSError:
            procs = b""
        if wanted in procs.decode("ascii", "replace").split():
            return relative or "/", searched, False
        if depth >= max_depth:
            truncated = truncated or _has_subdirs(absolute)
            continue
        try:
            with os.scandir(absolute) as entries:
                children = sorted(e.name for e in entries
                                  if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
        queue.extend((f"{relative}/{name}", depth + 1) for name in children)
    return None, searched, truncated


def _has_subdirs(directory: str) -> bool:
    try:
        with os.scandir(directory) as entries:
            return any(e.is_dir(follow_symlinks=False) for e in entries)
    except OSError:
        return False


@dataclass
class NamespaceResolver:
    """Resolves namespace-relative cgroup paths against the host tree under ``root``; the own
    cgroup is searched once per hierarchy, when first needed."""

    root: str
    origin: str
    proc_root: str = "/proc"
    pid: int = field(default_factory=os.getpid)
    max_depth: int = DEFAULT_SEARCH_DEPTH
    max_dirs: int = DEFAULT_SEARCH_DIRS
    hierarchies: list[HostHierarchy] = field(default_factory=list)
    error: str | None = None
    _own: dict[str, OwnCgroup] = field(default_factory=dict)
    _own_lines: dict[str, str] | None = None

    def __post_init__(self) -> None:
        if not self.hierarchies and self.error is None:
            try:
                self.hierarchies = host_hierarchies(self.root)
            except OSError as error:
                self.error = f"{self.root}: {describe_os_error(error)}"
            else:
                if not self.hierarchies:
                    self.error = f"{self.root}: no cgroup hierarchy found there"

    @property
    def layout(self) -> str:
        """``v2``, ``v1``, ``hybrid`` or ``none``, from the hierarchies found."""
        versions = {h.version for h in self.hierarchies}
        if versions == {2}:
            return "v2"
        if versions == {1}:
            return "v1"
        return "hybrid" if versions else "none"

    @property
    def primary(self) -> str | None:
        """The hierarchy searched first and used for a path not tied to one hierarchy."""
        names = [h.name for h in self.hierarchies]
        for name in _PREFERENCE:
            if name in names:
                return name
        return names[0] if names else None

    def _hierarchy(self, name: str) -> HostHierarchy | None:
        for hierarchy in self.hierarchies:
            if hierarchy.name == name:
                return hierarchy
        wanted = set(name.split(","))
        for hierarchy in self.hierarchies:
            if hierarchy.version == 1 and set(hierarchy.controllers) == wanted:
                return hierarchy
        return None

    def _own_namespace_paths(self) -> dict[str, str]:
        if self._own_lines is None:
            self._own_lines = {}
            try:
                text = read_small(f"{self.proc_root}/{self.pid}/cgroup", 1 << 16)
                lines = parse_proc_cgroup(text.decode("utf-8", "replace"))
            except (OSError, ParseError):
                return self._own_lines
            for line in lines:
                key = "unified" if line.is_v2 else ",".join(line.controllers)
                self._own_lines[key] = line.path
        return self._own_lines

    def own(self, name: str) -> OwnCgroup:
        """The capture's own cgroup in hierarchy ``name`` (searched once, then remembered)."""
        hierarchy = self._hierarchy(name)
        key = hierarchy.name if hierarchy is not None else name
        cached = self._own.get(key)
        if cached is not None:
            return cached
        own = OwnCgroup(key, self.pid)
        self._own[key] = own
        if hierarchy is None:
            own.error = f"no {name} hierarchy under {self.root}"
            return own
        found, own.dirs_searched, own.truncated = find_own_cgroup(
            hierarchy.directory, self.pid, self.max_depth, self.max_dirs)
        if found is None:
            bound = (f" (stopped at depth {self.max_depth} / {self.max_dirs} directories)"
                     if own.truncated else "")
            own.error = f"pid {self.pid} is in no cgroup.procs under {hierarchy.directory}{bound}"
            return own
        own.host_path = found
        lines = self._own_namespace_paths()
        own.namespace_path = lines.get(key) or (
            lines.get("unified") if hierarchy.version == 2 else None)
        if own.namespace_path is None:
            own.error = (f"{self.proc_root}/{self.pid}/cgroup is unreadable or has no "
                         f"{key} line")
            return own
        own.namespace_root = namespace_root(found, own.namespace_path)
        if own.namespace_root is None:
            own.error = (f"own cgroup {own.namespace_path!r} (namespace view) does not end "
                         f"the host path {found!r}")
        return own

    def resolve(self, name: str | None, path: str) -> tuple[str | None, str | None]:
        """``(host path, None)`` for a path read in hierarchy ``name`` (None: the primary one),
        or ``(None, why)`` when it cannot be resolved. Paths without ``..`` are returned as they
        are."""
        if ".." not in path.split("/"):
            return path, None
        if self.error is not None:
            return None, self.error
        hierarchy = name or self.primary
        if hierarchy is None:
            return None, f"no cgroup hierarchy under {self.root}"
        own = self.own(hierarchy)
        if own.namespace_root is None:
            return None, own.error or "own cgroup not found"
        try:
            return resolve_relative(own.namespace_root, path), None
        except ParseError as error:
            return None, str(error)

    def to_json(self) -> dict[str, Any]:
        """The resolution record: root, where it came from, layout and each own-cgroup search."""
        return {
            "root": self.root,
            "root_from": self.origin,
            "layout": self.layout,
            "hierarchies": [h.name for h in self.hierarchies],
            "error": self.error,
            "own_cgroup": [own.to_json() for own in self._own.values()],
        }


def make_resolver(ctx: CollectContext, proc_root: str, root: str | None = None,
                  pid: int | None = None) -> NamespaceResolver | None:
    """A resolver for the cgroup root of this capture (``root`` given by a test, else the option
    or the environment variable), or None when no root is set."""
    origin = "constructor"
    if root is None:
        root, origin_found = cgroup_root_option(ctx)
        if root is None:
            return None
        origin = origin_found or origin
    return NamespaceResolver(root, origin, proc_root, pid if pid is not None else os.getpid())
