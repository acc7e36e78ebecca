"""The ``docker`` source: the collector (docker.py, the only module that imports the Docker SDK,
lazily), the Engine API calls (engine.py), the bounded call pool (calls.py), container PIDs from cgroup
files (pids.py) and redaction
of inspect documents (redact.py)."""
