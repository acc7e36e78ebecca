"""Attribution: a cgroup path (or a whole ``/proc/<pid>/cgroup``) -> runtime, container, pod, QoS.

Source: ``/proc/<pid>/cgroup`` as read from the host's cgroup namespace (``man 7 cgroups``):
cgroup v1 has one ``ID:controllers:path`` line per hierarchy, cgroup v2 a single ``0::path``
line, hybrid hosts both. Path formats understood (see ../shared/REFERENCE.md):

====================  ===========================================================================
runtime               path shapes
====================  ===========================================================================
``docker``            ``/docker/<64hex>`` (cgroupfs driver), ``.../docker-<64hex>.scope`` (systemd)
``containerd``        ``.../cri-containerd-<64hex>.scope``, ``...slice:cri-containerd:<64hex>``
``cri-o``             ``.../crio-<64hex>.scope``, ``.../crio-<64hex>`` (``crio-conmon-*`` skipped)
``podman``            ``/libpod-<64hex>.scope[/container]``, ``/libpod-<64hex>`` (cgroupfs:
                      ``/libpod_parent/libpod-<64hex>``), ``.../libpod-payload-<64hex>``
                      (``--cgroups=split``; ``libpod-conmon-*`` skipped)
``cri``               ``/kubepods/<qos>/pod<uid>/<64hex>``: a CRI runtime the path does not name
``unknown``           a 64-hex segment in a shape not listed above (kept, never dropped)
====================  ===========================================================================

Kubernetes pods: ``kubepods-<qos>-pod<uid_with_underscores>.slice`` (``kubelet-kubepods-...`` in
kind nodes) / ``kubepods-pod<uid>.slice``
(systemd driver) and ``/kubepods/<qos>/pod<uid>`` / ``/kubepods/pod<uid>`` (cgroupfs driver); a pod
directly under ``kubepods`` is QoS ``guaranteed``. Nested runtimes (kind: Kubernetes inside a
Docker container) are attributed to the innermost container; every container seen is listed.

Namespace-relative paths: inside a private cgroup namespace (a pod on a cgroup v2 node) the
kernel shows other processes' cgroups relative to the namespace root, e.g.
``/../../kubepods-besteffort-pod<uid>.slice/cri-containerd-<id>.scope``. Given the namespace root
in host terms, :func:`resolve_relative` joins and normalises such a path into the host path;
:func:`namespace_root` derives that root from the capture's own cgroup (host and namespace view);
:func:`relative_to` is the inverse (the kernel's namespace view of a host path).

Everything here is pure and total: bad input raises :class:`forensics.errors.ParseError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from forensics.errors import ParseError

__all__ = [
    "Attribution",
    "CgroupLine",
    "ContainerRef",
    "attribute_path",
    "attribute_proc_cgroup",
    "namespace_root",
    "parse_proc_cgroup",
    "relative_to",
    "resolve_relative",
]

_HEX64 = r"[0-9a-f]{64}"
# A pod UID as it appears in a path: a UUID with dashes (cgroupfs) or underscores (systemd), or
# the 32-hex config hash of a static pod.
_POD_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"

# Segment patterns, tried in order; each yields (runtime, id) for a container segment.
_CONTAINER_SEGMENTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"^docker-({_HEX64})\.scope$"), "docker"),
    (re.compile(rf"^cri-containerd-({_HEX64})\.scope$"), "containerd"),
    (re.compile(rf"^crio-({_HEX64})(?:\.scope)?$"), "cri-o"),
    (re.compile(rf"^libpod-({_HEX64})(?:\.scope)?$"), "podman"),
    (re.compile(rf"^libpod-payload-({_HEX64})$"), "podman"),
    (re.compile(rf"^.*:cri-containerd:({_HEX64})$"), "containerd"),
    (re.compile(rf"^.*:crio:({_HEX64})$"), "cri-o"),
    (re.compile(rf"^.*:docker:({_HEX64})$"), "docker"),
)
_SKIPPED_SEGMENT = re.compile(
    r"^(?:crio-conmon-[0-9a-f]+\.scope|libpod-conmon-[0-9a-f]+\.scope|.*\.mount)$"
)
_BARE_HEX64 = re.compile(rf"^({_HEX64})$")
_POD_SLICE = re.compile(
    rf"^(?:kubelet-)?kubepods(?:-(burstable|besteffort))?-pod({_POD_UID})\.slice(?::.*)?$"
)
_POD_DIR = re.compile(rf"^pod({_POD_UID})$")
_QOS_SLICE = re.compile(r"^(?:kubelet-)?kubepods-(burstable|besteffort)\.slice$")
_HOST_TOP = frozenset({"system.slice", "user.slice", "init.scope", "machine.slice"})


@dataclass(frozen=True)
class CgroupLine:
    """One line of ``/proc/<pid>/cgroup``: ``hierarchy_id:controllers:path``.

    ``controllers`` is empty for the cgroup v2 line (``0::/path``); a named v1 hierarchy keeps its
    ``name=systemd`` entry.
    """

    hierarchy_id: int
    controllers: tuple[str, ...]
    path: str

    @property
    def is_v2(self) -> bool:
        """True for the unified (cgroup v2) hierarchy line."""
        return self.hierarchy_id == 0 and not self.controllers


@dataclass(frozen=True)
class ContainerRef:
    """A container seen in a cgroup path: its runtime and full 64-hex id."""

    runtime: str
    container_id: str


@dataclass(frozen=True)
class Attribution:
    """What a cgroup path says about its owner.

    ``kind`` is ``container`` (a container id was found), ``pod`` (a pod but no container, e.g.
    the pod slice or a conmon scope), ``host`` (the root or a systemd unit outside any runtime) or
    ``unknown`` (a shape none of the rules know: kept so that it can be reported).
    ``qos_class`` is ``guaranteed``, ``burstable``, ``besteffort`` or None outside Kubernetes.
    ``namespace_relative`` is set for paths such as ``/../x`` read from inside a private cgroup
    namespace: they cannot be joined with the host's hierarchy.
    """

    cgroup_path: str
    kind: str
    runtime: str | None = None
    container_id: str | None = None
    pod_uid: str | None = None
    qos_class: str | None = None
    containers: tuple[ContainerRef, ...] = field(default_factory=tuple)
    namespace_relative: bool = False

    def to_json(self) -> dict[str, object]:
        """A JSON-able dict with stable keys (used in proc/index.json and kernel/oom.json)."""
        return {
            "cgroup_path": self.cgroup_path,
            "kind": self.kind,
            "runtime": self.runtime,
            "container_id": self.container_id,
            "pod_uid": self.pod_uid,
            "qos_class": self.qos_class,
            "containers": [
                {"runtime": c.runtime, "container_id": c.container_id} for c in self.containers
            ],
            "namespace_relative": self.namespace_relative,
        }


def parse_proc_cgroup(text: str) -> tuple[CgroupLine, ...]:
    """Parse the whole text of ``/proc/<pid>/cgroup`` into its lines.

    Raises ParseError on a line that is not ``ID:controllers:path`` (the path itself may hold
    colons, as in ``...slice:cri-containerd:<id>``).
    """
    if not isinstance(text, str):
        raise ParseError(f"/proc/<pid>/cgroup: expected text, got {type(text).__name__}")
    lines: list[CgroupLine] = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        parts = raw.split(":", 2)
        if len(parts) != 3:
            raise ParseError(f"/proc/<pid>/cgroup line {number}: not ID:controllers:path: {raw[:80]!r}")
        ident, controllers, path = parts
        if not ident.isascii() or not ident.isdigit():
            raise ParseError(f"/proc/<pid>/cgroup line {number}: bad hierarchy id {ident[:20]!r}")
        if not path.startswith("/"):
            raise ParseError(f"/proc/<pid>/cgroup line {number}: path is not absolute: {path[:80]!r}")
        names = tuple(c for c in controllers.split(",") if c)
        lines.append(CgroupLine(int(ident), names, path))
    if not lines:
        raise ParseError("/proc/<pid>/cgroup: no lines")
    return tuple(lines)


def attribute_path(path: str) -> Attribution:
    """Attribute one cgroup path (relative to its hierarchy's root, starting with ``/``)."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise ParseError(f"cgroup path must start with '/': {str(path)[:80]!r}")
    segments = [s for s in path.split("/") if s]
    namespace_relative = ".." in segments
    containers: list[ContainerRef] = []
    pod_uid: str | None = None
    qos: str | None = None
    under_kubepods = False
    for index, seg in enumerate(segments):
        if seg in ("kubepods", "kubepods.slice", "kubelet-kubepods.slice"):
            under_kubepods = True
            continue
        qos_slice = _QOS_SLICE.match(seg)
        if qos_slice:
            under_kubepods = True
            qos = qos_slice.group(1)
            continue
        if under_kubepods and seg in ("burstable", "besteffort") and pod_uid is None:
            qos = seg
            continue
        pod = _POD_SLICE.match(seg) or _POD_DIR.match(seg)
        if pod and (under_kubepods or "kubepods" in seg):
            under_kubepods = True
            if pod.re is _POD_SLICE:
                qos = pod.group(1) or qos
                pod_uid = pod.group(2).replace("_", "-")
            else:
                pod_uid = pod.group(1).replace("_", "-")
            if qos is None:
                qos = "guaranteed"
            # The ``pod<uid>.slice:cri-containerd:<id>`` form carries its container too.
            if ":" in seg:
                ref = _match_container(seg)
                if ref is not None:
                    containers.append(ref)
            continue
        if _SKIPPED_SEGMENT.match(seg):
            continue
        ref = _match_container(seg)
        if ref is None:
            bare = _BARE_HEX64.match(seg)
            if bare:
                parent = segments[index - 1] if index else ""
                if parent == "docker":
                    ref = ContainerRef("docker", bare.group(1))
                elif pod_uid is not None:
                    ref = ContainerRef("cri", bare.group(1))
                else:
                    ref = ContainerRef("unknown", bare.group(1))
        if ref is not None:
            containers.append(ref)
    if containers:
        inner = containers[-1]
        return Attribution(
            cgroup_path=path,
            kind="container",
            runtime=inner.runtime,
            container_id=inner.container_id,
            pod_uid=pod_uid,
            qos_class=qos,
            containers=tuple(containers),
            namespace_relative=namespace_relative,
        )
    if pod_uid is not None:
        return Attribution(path, "pod", pod_uid=pod_uid, qos_class=qos,
                           namespace_relative=namespace_relative)
    if not segments or (segments[0] in _HOST_TOP and not under_kubepods and not namespace_relative):
        return Attribution(path, "host", namespace_relative=namespace_relative)
    return Attribution(path, "unknown", qos_class=qos if under_kubepods else None,
                       namespace_relative=namespace_relative)


def _match_container(segment: str) -> ContainerRef | None:
    for pattern, runtime in _CONTAINER_SEGMENTS:
        found = pattern.match(segment)
        if found:
            return ContainerRef(runtime, found.group(1))
    return None


# Which line of a v1/hybrid /proc/<pid>/cgroup to trust first: the unified line, then the
# controllers the cgroups collector reads, then systemd's named hierarchy.
_LINE_PREFERENCE = ("", "memory", "cpu", "pids", "name=systemd")


def _rank(line: CgroupLine) -> int:
    if line.is_v2:
        return 0
    for rank, name in enumerate(_LINE_PREFERENCE[1:], 1):
        if name in line.controllers:
            return rank
    return len(_LINE_PREFERENCE)


def attribute_proc_cgroup(text: str) -> tuple[Attribution, tuple[CgroupLine, ...]]:
    """Attribute a whole ``/proc/<pid>/cgroup``: the most specific line wins.

    A line naming a container beats one naming only a pod, which beats host/unknown; ties are
    broken by the line preference (v2, memory, cpu, pids, name=systemd, others). Returns the
    attribution and the parsed lines (so callers can find each hierarchy's path).
    """
    lines = parse_proc_cgroup(text)
    order = {"container": 0, "pod": 1, "unknown": 2, "host": 3}
    best: tuple[int, int, Attribution] | None = None
    for line in lines:
        attribution = attribute_path(line.path)
        key = (order[attribution.kind], _rank(line))
        if best is None or key < best[:2]:
            best = (key[0], key[1], attribution)
    assert best is not None  # parse_proc_cgroup never returns an empty tuple
    return best[2], lines


# ------------------------------------------------------------------ namespace-relative paths


def _host_segments(path: str, what: str) -> list[str]:
    if not isinstance(path, str) or not path.startswith("/"):
        raise ParseError(f"{what} must start with '/': {str(path)[:80]!r}")
    segments = [s for s in path.split("/") if s and s != "."]
    if ".." in segments:
        raise ParseError(f"{what} holds '..': {path[:80]!r}")
    return segments


def resolve_relative(own_path: str, relative_path: str) -> str:
    """Join a cgroup namespace's root (a host path) with a path read inside that namespace.

    ``resolve_relative("/a/b/c", "/../../x") == "/a/x"``; ``relative_path`` may start with ``/``
    (as in ``/proc/<pid>/cgroup``) or not. Empty and ``.`` segments are dropped. Raises ParseError
    when ``own_path`` is not an absolute path free of ``..``, or when ``relative_path`` climbs
    above the host root (the path then names nothing on this host: it is never clamped).
    """
    segments = _host_segments(own_path, "namespace root")
    if not isinstance(relative_path, str):
        raise ParseError(f"relative cgroup path: expected text, got {type(relative_path).__name__}")
    for seg in relative_path.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if not segments:
                raise ParseError(f"{relative_path[:80]!r} climbs above the root of "
                                 f"{own_path[:80]!r}")
            segments.pop()
        else:
            segments.append(seg)
    return "/" + "/".join(segments)


def relative_to(root: str, host_path: str) -> str:
    """The namespace view of ``host_path`` from a namespace rooted at ``root`` (both host paths),
    as the kernel writes it: ``/sub/dir`` below the root, ``/../../x`` elsewhere, ``/`` for the
    root itself. The inverse of :func:`resolve_relative`."""
    base = _host_segments(root, "namespace root")
    target = _host_segments(host_path, "host cgroup path")
    common = 0
    while common < min(len(base), len(target)) and base[common] == target[common]:
        common += 1
    return "/" + "/".join([".."] * (len(base) - common) + target[common:])


def namespace_root(own_host_path: str, own_namespace_path: str) -> str | None:
    """The host path of a cgroup namespace's root, from one process seen both ways: its host
    cgroup (``own_host_path``) and its cgroup as read inside the namespace (``own_namespace_path``,
    ``/`` when the process sits at the namespace root). None when the two cannot be the same
    cgroup (the namespace path holds ``..`` or is not a suffix of the host path)."""
    host = _host_segments(own_host_path, "host cgroup path")
    if not isinstance(own_namespace_path, str) or not own_namespace_path.startswith("/"):
        raise ParseError(f"namespace cgroup path must start with '/': "
                         f"{str(own_namespace_path)[:80]!r}")
    inner = [s for s in own_namespace_path.split("/") if s and s != "."]
    if ".." in inner or len(inner) > len(host) or host[len(host) - len(inner):] != inner:
        return None
    return "/" + "/".join(host[:len(host) - len(inner)])
