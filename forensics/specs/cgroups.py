"""``cgroups``: every container cgroup and the host root, then per-tick counters (members ``cgroup/*``)."""

from __future__ import annotations

from dataclasses import dataclass

from forensics.specs.base import Absence, SourceSpec, setting
from forensics.specs.hints import CGROUP_PATHS
from forensics.specs.roles import CGROUP_COUNTERS

__all__ = ["INDEX", "SAMPLES", "SPEC", "CgroupsSettings", "cgroup_member", "host_member"]

INDEX = "cgroup/index.json"
SAMPLES = "cgroup/samples.jsonl"


def host_member(file: str) -> str:
    """``cgroup/host/<file>``: a host-wide file (``/proc/pressure/*``)."""
    return f"cgroup/host/{file}"


def cgroup_member(hierarchy: str, cgroup: str, file: str) -> str:
    """``cgroup/<hierarchy>/<cgroup>/<file>``, empty parts left out."""
    return "/".join(p for p in ("cgroup", hierarchy, cgroup, file) if p)


@dataclass(frozen=True)
class CgroupsSettings:
    max_cgroups: int = setting("positive-int", "cgroups read", 1000)
    root: str | None = setting("path", "the host's cgroup tree when capture runs in a pod (e.g. /host/sys/fs/cgroup)",
                               None, shown="$GPUFORENSICS_CGROUP_ROOT, then /sys/fs/cgroup")
    idle_full_s: float = setting(
        "positive-seconds", "recorder only: a cgroup whose CPU and OOM counters did not move is read in full (and "
        "gets a samples line) at least this often; at or under the interval, every file every tick "
        "(docs/bundle-format/cgroups.md)", 10.0)


SPEC = SourceSpec(
    name="cgroups", order=35, collector="forensics.collectors.cgroups", settings=CgroupsSettings,
    absence=Absence("no cgroup data: CPU throttling and pressure cannot be assessed"),
    reads=(CGROUP_PATHS,), roles=(CGROUP_COUNTERS,),
)
