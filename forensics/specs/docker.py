"""``docker``: the engine's containers, their processes, stats and events (bundle members ``docker/*``)."""

from __future__ import annotations

from dataclasses import dataclass

from forensics.specs.base import Absence, Excuse, SourceSpec, setting
from forensics.specs.hints import CGROUP_PATHS, PIDS
from forensics.specs.logs import LOGS
from forensics.specs.roles import CONTAINER_RUNTIME

__all__ = [
    "ALLOCATIONS", "CONTAINERS", "CONTAINERS_DIR", "ENGINE", "EVENTS", "INDEX", "INFO", "LIBPOD_INSPECT", "OCI_CONFIG", "PREFIX", "SAMPLES", "SPEC",
    "VERSION", "WINDOW_EVENTS", "WINDOW_LOGS", "DockerSettings", "container_member", "exec_member", "image_inspect",
]

PREFIX = "docker/"
INDEX = "docker/index.json"
INFO = "docker/info.json"
VERSION = "docker/version.json"
ENGINE = "docker/engine.json"
CONTAINERS = "docker/containers.json"
CONTAINERS_DIR = "docker/containers/"
EVENTS = "docker/events.jsonl"
WINDOW_EVENTS = "docker/window/events.jsonl"
WINDOW_LOGS = "docker/window/logs.json"  # the log lines of the window appended to logs.txt: per container
ALLOCATIONS = "docker/allocations.json"
SAMPLES = "docker/samples.jsonl"
LIBPOD_INSPECT = "libpod-inspect.json"  # podman's own inspect, beside the compatible one
OCI_CONFIG = "oci-config.json"  # podman: the OCI runtime spec it started the container with


def container_member(container: str, name: str) -> str:
    """``docker/containers/<id>/<name>``: ``inspect.json``, ``top.json``, ``stats.json``,
    ``processes.json``, ``inspect-end.json``, ``logs.txt``, and on podman ``libpod-inspect.json`` and
    ``oci-config.json``."""
    return f"{CONTAINERS_DIR}{container}/{name}"


def exec_member(container: str, exec_id: str) -> str:
    return f"{CONTAINERS_DIR}{container}/execs/{exec_id}.json"


def image_inspect(image_hex: str) -> str:
    return f"docker/images/{image_hex}/inspect.json"


@dataclass(frozen=True)
class DockerSettings:
    host: str | None = setting("url", "Docker Engine URL", None, shown="$DOCKER_HOST, then the local socket")
    call_timeout_s: float = setting("positive-seconds", "deadline of each Docker Engine API call", 5.0)
    workers: int = setting("positive-int", "parallel Docker Engine API calls", 8)
    logs_tail: int = setting("non-negative-int", "container log lines kept per container, 0 for none", 1000)
    stats: bool = setting("bool", "collect one-shot stats per container", True)


SPEC = SourceSpec(
    name="docker", order=20, collector="forensics.collectors.docker.docker", settings=DockerSettings,
    absence=Absence("no Docker data: container GPU allocations unknown", (
        Excuse(frozenset({"unavailable", "skipped"}),
               "a containerd/CRI-O Kubernetes node: allocations come from the pods", when_ok="kubernetes"),
        Excuse(frozenset({None, "unavailable", "skipped"}),
               "a containerd/CRI-O node: the runtime describes its containers (cri)", when_ok="cri"))),
    publishes=(PIDS, CGROUP_PATHS), shared=(LOGS,),
    roles=(CONTAINER_RUNTIME,),  # podman too: the collector reads it through its Docker-compatible API
)
