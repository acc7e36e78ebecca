"""What the engine integration tests (Docker, podman, containerd) poll for: a condition with a
deadline, and the host PIDs of a command inside a container's cgroup, found without the collector."""

from __future__ import annotations

import os
import time
from typing import Any

__all__ = ["host_pids_with_cmdline", "wait_for"]


def wait_for(predicate: Any, timeout: float = 30.0, interval: float = 0.25) -> Any:
    """``predicate()``'s first truthy value; AssertionError when none came within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


def host_pids_with_cmdline(argv: list[str], container_id: str) -> list[int]:
    """Independent of the collector: scan /proc for ``argv`` inside the container's cgroup."""
    want = ("\0".join(argv) + "\0").encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if f.read() != want:
                    continue
            with open(f"/proc/{entry}/cgroup", encoding="utf-8") as f:
                if container_id in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found
