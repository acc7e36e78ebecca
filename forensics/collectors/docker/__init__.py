"""The ``docker`` source: the collector (docker.py), the Engine API calls (engine.py, the only
module that imports the Docker SDK, lazily), the bounded call pool (calls.py), container PIDs
from cgroup files (pids.py) and redaction of inspect documents (redact.py)."""
