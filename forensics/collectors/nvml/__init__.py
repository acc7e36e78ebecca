"""The ``nvml`` source: the collector (nvml.py, the only module that imports pynvml, lazily, through
the seam it is handed), value decoding (decode.py) and the NVML error map (errors.py)."""
