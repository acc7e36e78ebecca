"""The flight recorder: ``gpuforensics record`` samples what capture samples into a bounded,
crash-safe ring on the node; ``capture --since`` folds the ring back into a bundle (the ``ring``
collector, forensics.collectors.ring).

This package drives collectors as capture does (both use the collector API below them,
:mod:`forensics.collect`: the context and the child's lifeline; record never imports capture) and
labels what it samples by the analysis' own code (:mod:`forensics.analysis.attribution`: a layer
above the analysis); the ring store it writes is :mod:`forensics.ring`.

- :mod:`forensics.record.recorder`: the loop (ticks, hint routing, the ring's writes, disk full,
  clock jumps).
- :mod:`forensics.record.supervisor`: the sources' children (start, kills, backoff, gaps per source).
- :mod:`forensics.record.protocol`: the typed messages between a child and the loop, encoded and decoded.
- :mod:`forensics.record.child`: one sampler process per source, the sink that turns collector
  writes into records.
- :mod:`forensics.record.sources`: which collector code each source runs per tick.
- :mod:`forensics.record.live`: the live view (the live state, the metrics exposition).
- :mod:`forensics.record.triggers`: captures started by rules over the live state.
- :mod:`forensics.record.status`: what ``gpuforensics ring`` shows.
"""

from forensics.record.recorder import RecordOptions, run_recorder
from forensics.record.sources import SOURCE_NAMES
from forensics.record.status import format_status, ring_status

__all__ = ["SOURCE_NAMES", "RecordOptions", "format_status", "ring_status", "run_recorder"]
