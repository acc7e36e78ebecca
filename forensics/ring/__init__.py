"""The flight recorder's ring on disk: the store both sides share.

``gpuforensics record`` (:mod:`forensics.record`) writes it, capture's ``ring`` collector
(:mod:`forensics.collectors.ring`) reads it back into a bundle, and the capture runner takes its
pseudonym key from it, so this store sits below all three (beside :mod:`forensics.bundle`, the
other on-disk evidence format). It imports nothing but :mod:`forensics.errors`.

- :mod:`forensics.ring.files`: the directory's layout, synced writes, the key;
- :mod:`forensics.ring.segment`: the line format of segments and of the index (what a whole line is);
- :mod:`forensics.ring.writer`: the one writer (recovery, appends, seals, caps);
- :mod:`forensics.ring.reader`: reading while the writer writes (hash checks, torn tails).
"""

from forensics.ring.files import (
    DEFAULT_MAX_BYTES,
    DEFAULT_RETENTION_S,
    DEFAULT_RING_DIR,
    load_key,
    resolve_ring_dir,
)
from forensics.ring.reader import RingReader
from forensics.ring.segment import RING_FORMAT, RING_VERSION, RingRecord, SegmentInfo, encode_record
from forensics.ring.writer import RingWriter

__all__ = [
    "DEFAULT_MAX_BYTES", "DEFAULT_RETENTION_S", "DEFAULT_RING_DIR", "RING_FORMAT", "RING_VERSION", "RingReader",
    "RingRecord", "RingWriter", "SegmentInfo", "encode_record", "load_key", "resolve_ring_dir",
]
