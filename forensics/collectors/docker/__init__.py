"""The ``docker`` source: the collector (docker.py, the only module that imports the Docker SDK,
lazily), bounded API calls (calls.py), container PIDs from cgroup files (pids.py) and redaction
of inspect documents (redact.py)."""
