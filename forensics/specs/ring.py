"""``ring``: the flight recorder's history folded into the bundle (members ``ring/*``).

``gpuforensics record`` keeps a ring on the node (:mod:`forensics.ring`); capture's ``ring``
collector carries the ring's segments of its window verbatim (``ring/segments/seg-N.jsonl.gz``,
with ``ring/provenance.json``), and the analysis rebuilds from them members that mirror the
bundle's own layout (``ring/nvml/samples.jsonl``, ``ring/proc/<pid>/cgroup``, ...), so its loaders
read the history with their usual code (``forensics/analysis/ring_view.py``). Bundles of earlier
versions hold those members whole, and are read as they are. Without a ring the analysis
is what it was: the source's absence costs nothing (``absence`` is None), and the capture says so
once in its manifest note.
"""

from __future__ import annotations

from dataclasses import dataclass

from forensics.bundle.format import RING_PROVENANCE
from forensics.specs.base import SourceSpec, StandIn, setting

__all__ = ["LAYOUT", "PREFIX", "PROVENANCE", "RECORDER_EVENTS", "SEGMENTS", "SPEC", "RingSettings", "folded"]

PREFIX = "ring/"
PROVENANCE = RING_PROVENANCE
#: the ring's segments, carried verbatim (``seg-N.jsonl.gz`` sealed, ``seg-N.jsonl`` the active one)
SEGMENTS = "ring/segments/"
#: provenance.json's ``layout``: the members are the ring's segments, rebuilt at read time
LAYOUT = "segments"
#: the recorder's own events (start, stop, gap, clock-jump, source): a ring member, not a collector's
RECORDER_EVENTS = "recorder/events.jsonl"


def folded(member: str) -> str:
    """``ring/<member>``: where a ring record of ``member`` lands in the bundle."""
    return PREFIX + member


@dataclass(frozen=True)
class RingSettings:
    dir: str | None = setting("path", "flight recorder ring folded into the capture (also `capture --ring`)", None,
                              shown="$GPUFORENSICS_RING, then /var/lib/gpuforensics/ring")


SPEC = SourceSpec(
    # after the live sources (the ring keeps its records whatever happens now), before host facts
    name="ring", order=85, collector="forensics.collectors.ring", settings=RingSettings,
    # where the capture lacks a source the recorder records, its history is that source's evidence
    stand_in_label="the flight recorder's history",
    stands_in=(
        StandIn("nvml", "the GPUs, their utilisation and memory and the processes on them", folded("nvml/"), True),
        StandIn("procfs", "the GPU processes' cgroups, names and environments, as first seen", folded("proc/"), True),
        StandIn("cgroups", "the containers' CPU, memory and pressure counters", folded("cgroup/"), True),
        StandIn("kernel", "the OOM kills and Xids of the kernel log it followed", folded("kernel/"), True),
        StandIn("docker", "the container events, and inspects (their GPU grants) as first seen", folded("docker/"),
                True),
        StandIn("kubernetes", "the events of the node and its pods (not the pods' allocations)",
                folded("kubernetes/")),
    ),
)
