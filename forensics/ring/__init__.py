"""The flight recorder's ring on disk: the store both sides share.

``gpuforensics record`` (:mod:`forensics.record`) writes it, capture's ``ring`` collector
(:mod:`forensics.collectors.ring`) reads it back into a bundle, and the capture runner takes its
pseudonym key from it, so this store sits below all three (beside :mod:`forensics.bundle`, the
other on-disk evidence format). It imports nothing but :mod:`forensics.errors`.
"""

from forensics.ring.store import (
    DEFAULT_MAX_BYTES,
    DEFAULT_RETENTION_S,
    DEFAULT_RING_DIR,
    RING_FORMAT,
    RING_VERSION,
    RingReader,
    RingRecord,
    RingWriter,
    SegmentInfo,
    encode_record,
    load_key,
    resolve_ring_dir,
)

__all__ = [
    "DEFAULT_MAX_BYTES", "DEFAULT_RETENTION_S", "DEFAULT_RING_DIR", "RING_FORMAT", "RING_VERSION", "RingReader",
    "RingRecord", "RingWriter", "SegmentInfo", "encode_record", "load_key", "resolve_ring_dir",
]
