"""What a sampler child sends of the per-tick lines it appends, so the live state never parses them.

A child's :class:`~forensics.record.child.RecordSink` calls a summariser on each object it appends
to a :data:`SUMMARIZED` member; the summaries travel in the frame's header
(:mod:`forensics.record.protocol`) and :meth:`LiveState.feed
<forensics.record.live.state.LiveState.feed>` folds them. The summaries themselves are the NVML
part's (:mod:`forensics.record.live.nvml`) and the cgroup part's (:mod:`forensics.record.live.cgroups`).
"""

from __future__ import annotations

from typing import Any

from forensics.record.live.cgroups import cgroup_summary
from forensics.record.live.nvml import NvmlSummarizer, nvml_summary
from forensics.specs import cgroups as cgroups_spec
from forensics.specs import nvml as nvml_spec

__all__ = ["SUMMARIZED", "Summarizer", "summarize"]


#: the per-tick members whose lines the sampler children summarise (:func:`summarize`) as they
#: append them: the live state then folds the summaries, never the lines' JSON
SUMMARIZED = (nvml_spec.SAMPLES, cgroups_spec.SAMPLES)


def summarize(member: str, line: Any) -> list[Any] | None:
    """What the live state takes from one appended line of a :data:`SUMMARIZED` member, as a
    JSON-able list (it travels from the sampler child in its frame's header); None for a line that
    changes nothing. The one reading of those lines: the live state's own parsing goes through it
    (a device line's whole summary: forensics.record.live.nvml; a sampler child sends
    :class:`Summarizer`'s, which names each GPU's process lists instead of repeating them)."""
    if type(line) is not dict:
        return None
    if member == nvml_spec.SAMPLES:
        return nvml_summary(line)
    if member == cgroups_spec.SAMPLES:
        return cgroup_summary(line)
    return None


class Summarizer:
    """A sampler child's :func:`summarize` (``RecordSink(summarize=Summarizer())``): the same
    summaries, except that a GPU's process lists are sent once while they stay the same
    (:class:`~forensics.record.live.nvml.NvmlSummarizer`); :meth:`LiveState.feed` takes both."""

    def __init__(self) -> None:
        self.nvml = NvmlSummarizer()

    def __call__(self, member: str, line: Any) -> list[Any] | None:
        if type(line) is not dict:
            return None
        if member == nvml_spec.SAMPLES:
            return self.nvml(line)
        if member == cgroups_spec.SAMPLES:
            return cgroup_summary(line)
        return None
