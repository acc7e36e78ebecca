"""The ``nvml`` source: the collector (nvml.py, the only module that imports pynvml, lazily, through
the seam it is handed), value decoding (decode.py) and the NVML error map (errors.py); the reads
(reads.py, through session.py), sampling (sampler.py) with its direct list calls (fast.py, on the
module it is handed) and its line encoder (encode.py)."""
