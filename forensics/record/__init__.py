"""The flight recorder: ``gpuforensics record`` samples what capture samples into a bounded,
crash-safe ring on the node; ``capture --since`` folds the ring back into a bundle.

- :mod:`forensics.record.ring`: the ring store (segments, index, key, reader).
- :mod:`forensics.record.child`: one sampler process per source, the sink that turns collector
  writes into records.
- :mod:`forensics.record.sources`: which collector code each source runs per tick.
- :mod:`forensics.record.recorder`: the loop (ticks, deadlines, gaps, disk full, clock jumps).
- :mod:`forensics.record.status`: what ``gpuforensics ring`` shows.
"""

from forensics.record.recorder import RecordOptions, run_recorder
from forensics.record.ring import RingReader, RingWriter

__all__ = ["RecordOptions", "RingReader", "RingWriter", "run_recorder"]
