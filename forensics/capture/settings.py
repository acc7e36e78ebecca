"""The collector settings ``capture --set KEY=VALUE`` accepts, checked before anything runs.

Collectors read their settings from ``CaptureOptions.extra``; this table is the one list of what
exists, of what type, and what it does, so that a typo (``podresources.sockt=``) or a bad value
(``kernel.max_bytes=-5``) is a usage error instead of a silently ignored or absurd setting.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from forensics.errors import UsageError

__all__ = ["SETTINGS", "Setting", "validate_settings"]


@dataclass(frozen=True)
class Setting:
    kind: str  # "path", "positive-int", "non-negative-int", "positive-seconds", "bool", "url"
    help: str


SETTINGS: dict[str, Setting] = {
    "docker.host": Setting("url", "Docker Engine URL (default: $DOCKER_HOST, then the local socket)"),
    "docker.call_timeout_s": Setting("positive-seconds", "deadline of each Docker Engine API call"),
    "docker.workers": Setting("positive-int", "parallel Docker Engine API calls (default 8)"),
    "docker.logs_tail": Setting("non-negative-int", "container log lines kept per container (default 1000; 0: none)"),
    "docker.stats": Setting("bool", "collect one-shot stats per container (default true)"),
    "kubernetes.call_timeout_s": Setting("positive-seconds", "deadline of each Kubernetes API call"),
    "kubernetes.budget_s": Setting("positive-seconds", "total time for all Kubernetes API calls"),
    "podresources.socket": Setting("path", "kubelet pod-resources socket (default /var/lib/kubelet/pod-resources/kubelet.sock)"),
    "podresources.call_timeout_s": Setting("positive-seconds", "deadline of each pod-resources call"),
    "nvml.call_timeout_s": Setting("positive-seconds", "how long one NVML call may hang before the GPU is taken as wedged (default 10)"),
    "procfs.max_pids": Setting("positive-int", "processes whose /proc files are stored (default 2000)"),
    "procfs.max_window_pids": Setting("positive-int", "processes born during the window that are stored (default 2000)"),
    "cgroups.max_cgroups": Setting("positive-int", "cgroups read (default: see docs)"),
    "cgroups.root": Setting("path", "the host's cgroup tree when capture runs in a pod (e.g. /host/sys/fs/cgroup)"),
    "kernel.max_bytes": Setting("positive-int", "bytes of kernel log kept"),
}

_BOOLS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def _check(kind: str, value: str) -> str | None:
    """Why ``value`` is not a valid ``kind``, or None."""
    checks: dict[str, Callable[[str], bool]] = {
        "positive-int": lambda v: v.isdigit() and int(v) > 0,
        "non-negative-int": lambda v: v.isdigit(),
        "bool": lambda v: v.lower() in _BOOLS,
        "path": lambda v: bool(v.strip()) and "\0" not in v,
        "url": lambda v: bool(v.strip()),
    }
    if kind == "positive-seconds":
        try:
            f = float(value)
        except ValueError:
            return "expected a number of seconds"
        return None if 0 < f < 86400 and f == f else "expected seconds between 0 and 86400"
    ok = checks[kind](value)
    return None if ok else {"positive-int": "expected a positive integer",
                            "non-negative-int": "expected an integer >= 0",
                            "bool": "expected true or false",
                            "path": "expected a path", "url": "expected a URL"}[kind]


def validate_settings(extra: Mapping[str, str]) -> None:
    """Raise :class:`UsageError` for an unknown key or a value of the wrong kind."""
    for key, value in extra.items():
        setting = SETTINGS.get(key)
        if setting is None:
            raise UsageError(f"--set: unknown setting {key!r} (known: {', '.join(sorted(SETTINGS))})")
        problem = _check(setting.kind, value)
        if problem:
            raise UsageError(f"--set {key}={value!r}: {problem}")
