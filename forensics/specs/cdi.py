"""``cdi``: the node's CDI (Container Device Interface) spec files (bundle members ``cdi/*``).

A CDI device name (``nvidia.com/gpu=0``, given to ``docker run --device``, podman, containerd or
CRI-O, or the CDI names of a Kubernetes DRA claim) means what these files say: the analysis reads
which GPU a name stands for from the device's own ``containerEdits.deviceNodes``
(:mod:`forensics.parsing.cdi_spec`). The files are kept verbatim under ``cdi/<directory>/<file>``
(``cdi/etc/cdi/nvidia.yaml``), in the directories' order of precedence (a later one wins, as in the
CDI cache: ``/var/run/cdi`` over ``/etc/cdi``); ``cdi/index.json`` lists every directory and file
and what became of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from forensics.specs.base import SourceSpec, setting

__all__ = ["INDEX", "PREFIX", "SPEC", "SUFFIXES", "CdiSettings", "spec_member"]

PREFIX = "cdi/"
INDEX = "cdi/index.json"
SUFFIXES = (".json", ".yaml")  # the files the CDI cache reads; others are listed, not kept


def spec_member(directory: str, name: str) -> str:
    """``cdi/<directory without its leading slash>/<name>``: where a spec file is kept."""
    return f"{PREFIX}{directory.strip('/')}/{name}" if directory.strip("/") else f"{PREFIX}{name}"


@dataclass(frozen=True)
class CdiSettings:
    static_dir: str = setting("path", "CDI spec directory of lower precedence (the CDI default)", "/etc/cdi")
    dynamic_dir: str = setting("path", "CDI spec directory of higher precedence (the CDI default)",
                               "/var/run/cdi")
    max_bytes: int = setting("positive-int", "largest CDI spec file kept (bytes); a larger one is listed only",
                             4 << 20)
    max_files: int = setting("positive-int", "CDI spec files kept per directory", 64)


SPEC = SourceSpec(
    # slow-changing configuration: after the live sources, before the ring and the host facts
    name="cdi", order=80, collector="forensics.collectors.cdi", settings=CdiSettings,
    # no absence cost declared: bundles from before this source, and nodes without CDI, read a CDI
    # device name by NVIDIA's naming, and each such grant says so itself
)
