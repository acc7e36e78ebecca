"""``host``: who and what this machine is, and when it booted (bundle members ``host/*``)."""

from __future__ import annotations

from forensics.specs.base import NoSettings, SourceSpec

__all__ = ["CLOCK", "FACTS", "OS_RELEASE", "SPEC", "proc_copy"]

FACTS = "host/host.json"
CLOCK = "host/clock.json"
OS_RELEASE = "host/etc/os-release"


def proc_copy(rel: str) -> str:
    """``host/proc/<rel with / as _>``: a verbatim copy of a small /proc file."""
    return f"host/proc/{rel.replace('/', '_')}"


SPEC = SourceSpec(name="host", order=90, collector="forensics.collectors.host", settings=NoSettings)
