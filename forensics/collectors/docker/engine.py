"""The Docker Engine API calls the docker collector makes: connect (``/version``, ``/_ping``), ``top``,
``logs``, one-shot ``stats``, the streaming stats connection sampling keeps per container, and
``events``; and ``engine_essentials``, what ``/info`` and ``/version`` say of the engine.
Each call takes the low-level ``APIClient``; the collector schedules them on its call pool."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from forensics.collectors.docker.calls import (
    WIDE_WORKERS,
    describe_error,
    first_line,
)
from forensics.collectors.docker.unix_client import APIError as UnixAPIError
from forensics.collectors.docker.unix_client import UnixEngineClient, unix_socket_path
from forensics.errors import (
    SourcePermissionDenied,
    SourceTimeout,
    SourceUnavailable,
)
from forensics.hostfs.files import describe_os_error, read_small
from forensics.parsing.docker_top import TOP_PS_ARGS
from forensics.specs.docker import DockerSettings

__all__ = ["MAX_EVENTS", "STATS_REQUEST", "StatsStream", "connect", "connect_snapshot", "engine_essentials", "engine_product",
           "image_hex", "logs", "pool_call_timeout", "read_events", "stats", "top"]

MAX_EVENTS = 100_000

def connect(settings: DockerSettings) -> Any:
    """The ``APIClient`` of ``docker.from_env`` (``DOCKER_HOST`` and TLS variables honoured,
    ``--set docker.host=...`` overriding), after it has answered ``/version`` and ``/_ping``;
    raises SourceUnavailable, SourcePermissionDenied or SourceTimeout otherwise."""
    try:
        import docker
        import docker.errors
        import requests.exceptions
    except ImportError as exc:
        raise SourceUnavailable(f"the docker SDK is not installed ({exc}); pip install docker") from exc
    where = settings.host or "unix:///var/run/docker.sock (default)"
    try:
        env = dict(os.environ)
        if settings.host:
            env["DOCKER_HOST"] = settings.host
        client = docker.from_env(timeout=settings.call_timeout_s, environment=env,
                                 max_pool_size=settings.workers + WIDE_WORKERS).api
        client.ping()
    except (requests.exceptions.Timeout, TimeoutError) as exc:
        raise SourceTimeout(f"Docker engine at {where} did not answer within "
                            f"{settings.call_timeout_s:g} s") from exc
    except docker.errors.DockerException as exc:
        text = str(exc)
        if "Permission denied" in text or "PermissionError" in text:
            raise SourcePermissionDenied(f"Docker engine at {where}: {first_line(text)}") from exc
        if "Read timed out" in text or "timed out" in text.lower():
            raise SourceTimeout(f"Docker engine at {where} did not answer within "
                                f"{settings.call_timeout_s:g} s") from exc
        raise SourceUnavailable(f"no Docker engine at {where}: {first_line(text)}") from exc
    except (requests.exceptions.ConnectionError, OSError) as exc:
        raise SourceUnavailable(f"no Docker engine at {where}: {first_line(str(exc))}") from exc
    return client


def connect_snapshot(settings: DockerSettings) -> Any:
    """The snapshot's client: :class:`UnixEngineClient` (no SDK) for an engine at a unix socket,
    after it has answered ``/_ping``; else :func:`connect`'s SDK client. Raises as
    :func:`connect` does."""
    path = unix_socket_path(settings.host)
    if path is None:
        return connect(settings)
    where = settings.host or "unix:///var/run/docker.sock (default)"
    client = UnixEngineClient(path, settings.call_timeout_s)
    try:
        client.ping()
    except TimeoutError as exc:
        raise SourceTimeout(f"Docker engine at {where} did not answer within "
                            f"{settings.call_timeout_s:g} s") from exc
    except PermissionError as exc:
        raise SourcePermissionDenied(f"Docker engine at {where}: {describe_os_error(exc)}") from exc
    except (OSError, http.client.HTTPException, UnixAPIError) as exc:
        raise SourceUnavailable(f"no Docker engine at {where}: {describe_error(exc)}") from exc
    return client


# ---------------------------------------------------------------------------------------------
# the collector


def top(client: Any, cid: str) -> Any:
    """``GET /containers/{id}/top?ps_args=...``; engines whose top does not take ``ps`` options
    (podman's compatible API has its own descriptors) get a second call without them."""
    try:
        return client.top(cid, ps_args=TOP_PS_ARGS)
    except Exception as exc:  # noqa: BLE001 - narrowed below
        # ours carries the status; the SDK's APIError, on its response too
        status = getattr(exc, "status_code", None) or getattr(
            getattr(exc, "response", None), "status_code", None)
        if status not in (400, 500):
            raise
        return client.top(cid)


def logs(client: Any, cid: str, since: datetime | str, tail: int, tty: bool) -> bytes:
    """``GET /containers/{id}/logs?stdout=1&stderr=1&timestamps=1&tail=N&since=...``: the last
    lines of both streams, each prefixed by the engine's RFC 3339 nanosecond timestamp. A log
    driver that cannot be read back (syslog, fluentd...) gives empty bytes, not an error.

    The request the SDK's ``logs()`` makes, minus the container inspect it makes first to learn
    ``Config.Tty`` (raw stream, or stdout/stderr frames to demultiplex): the collector has the
    inspect already, and that second inspect per container cost as much as the logs call.
    """
    params: dict[str, Any] = {"stderr": 1, "stdout": 1, "timestamps": 1, "follow": 0,
                              "tail": tail}
    if isinstance(since, str):  # seconds.nanoseconds, as the engine's timestamps have it
        params["since"] = since
    elif int(since.timestamp()) > 0:
        params["since"] = int(since.timestamp())
    try:
        if isinstance(client, UnixEngineClient):
            return client.logs(cid, params, tty)
        response = client._get(client._url("/containers/{0}/logs", cid), params=params,
                               stream=False)
        data = client._get_result_tty(False, response, tty)
    except Exception as exc:  # noqa: BLE001 - narrowed below
        if "does not support reading" in str(exc) or "configured logging driver" in str(exc):
            return b""
        raise
    return data if isinstance(data, bytes) else b""


def libpod_version(version: Any) -> str:
    """The libpod API version of a podman ``/version`` answer (its ``Podman Engine`` component's
    ``APIVersion``, else its ``Version``); ``4.0.0`` when it names none. Podman serves its own API
    under ``/v<that version>/libpod/`` on the socket of the compatible one."""
    components = version.get("Components") if isinstance(version, dict) else None
    for c in components if isinstance(components, list) else []:
        if isinstance(c, dict) and "podman" in str(c.get("Name", "")).lower():
            details = c.get("Details")
            api = details.get("APIVersion") if isinstance(details, dict) else None
            for v in (api, c.get("Version")):
                if isinstance(v, str) and v[:1].isdigit() and v.replace(".", "").replace("-", "").isalnum():
                    return v
    return "4.0.0"


def libpod_inspect(client: Any, cid: str, api_version: str) -> Any:
    """Podman's own ``GET /v<api>/libpod/containers/{id}/json`` on the same socket: the OCI runtime
    really used (``OCIRuntime``; the compatible inspect says ``oci``), annotations and the command
    line that created the container (``Config.CreateCommand``), where its CDI devices are named (no
    field of either inspect holds them)."""
    if isinstance(client, UnixEngineClient):
        return client.libpod_inspect(cid, api_version)
    response = client._get(f"{client.base_url}/v{api_version}/libpod/containers/{cid}/json")
    return client._result(response, True)


OCI_CONFIG_MAX_BYTES = 4 << 20


def read_oci_config(libpod: Any) -> dict[str, Any] | str:
    """The OCI runtime spec podman started a container with, from the file its libpod inspect names
    (``OCIConfigPath``, ``.../userdata/config.json`` in podman's storage): the runtime, hooks,
    device nodes and environment the container really got. A reason string when it cannot be read
    (a capture in a pod does not see podman's storage, a stopped container's file may be gone)."""
    path = libpod.get("OCIConfigPath") if isinstance(libpod, dict) else None
    if not isinstance(path, str) or not path.startswith("/") or not path.endswith("/config.json"):
        return "no OCIConfigPath"
    try:
        data = read_small(path, OCI_CONFIG_MAX_BYTES + 1)
    except OSError as exc:
        return f"{path}: {describe_os_error(exc)}"
    if len(data) > OCI_CONFIG_MAX_BYTES:
        return f"{path}: larger than {OCI_CONFIG_MAX_BYTES} bytes"
    try:
        spec = json.loads(data)
    except ValueError:
        return f"{path}: not JSON"
    return spec if isinstance(spec, dict) else f"{path}: not a JSON object"


def image_hex(image_id: str) -> str:
    return image_id.split(":", 1)[-1]


STATS_REQUEST = ("GET /containers/{id}/stats?stream=0&one-shot=1: one frame; precpu_stats zeroed "
                  "and preread 0001-01-01 (no CPU delta; samples.jsonl has successive frames)")


def stats(client: Any, cid: str, fallbacks: dict[str, str] | None = None) -> Any:
    """One stats frame. ``one-shot=1`` (API >= 1.41) returns the engine's next frame without
    waiting for a second one to fill ``precpu_stats`` (zeroed, so no CPU delta). Engines that
    reject it get ``stream=0`` alone (two frames, a second more, ``precpu_stats`` filled); those
    containers are recorded in ``fallbacks``."""
    try:
        return client.stats(cid, stream=False, one_shot=True)
    except Exception as exc:  # noqa: BLE001 - older engines reject one_shot
        if "one_shot" not in str(exc) and "one-shot" not in str(exc):
            raise
        if fallbacks is not None:
            fallbacks[cid] = f"one-shot rejected ({first_line(str(exc))}): stream=0, precpu_stats filled"
        return client.stats(cid, stream=False)


class StatsStream:
    """A streaming ``GET /containers/{id}/stats`` connection read by a daemon thread, which keeps
    the newest frame. Ends when the container stops, the engine closes it, or ``close()``."""

    def __init__(self, cid: str) -> None:
        self.cid = cid
        self.lock = threading.Lock()
        self.frame: Any = None
        self.frames = 0
        self.error: str | None = "no frame yet"
        self.response: Any = None

    @classmethod
    def start(cls, client: Any, cid: str) -> StatsStream:
        self = cls(cid)
        threading.Thread(target=self._run, args=(client,), name=f"docker-stats-{cid[:12]}",
                         daemon=True).start()
        return self

    def _run(self, client: Any) -> None:
        try:
            self.response = client._get(client._url("/containers/{0}/stats", self.cid),
                                        params={"stream": True}, stream=True)
            client._raise_for_status(self.response)
            for frame in client._stream_helper(self.response, decode=True):
                with self.lock:
                    self.frame, self.error = frame, None
                    self.frames += 1
        except Exception as exc:  # noqa: BLE001 - recorded on the next tick's line
            with self.lock:
                self.error = describe_error(exc)
        else:
            with self.lock:
                self.error = "stats stream ended (container stopped?)"

    def close(self) -> None:
        """Ends the connection at once. The reading thread holds the response's buffer lock
        while it waits for the engine's next frame (up to a second), and ``response.close()``
        needs that lock: closing streams one after another cost ~0.5 s each (11 containers:
        5.3 s, past the sampling deadline). Shutting the socket down first wakes that read."""
        response = self.response
        if response is None:
            return
        sock = _response_socket(response)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(Exception):
            response.close()


def _response_socket(response: Any) -> socket.socket | None:
    """The socket under a streaming ``requests`` response over the Engine API (unix, tcp or
    tls), found the way the SDK's own ``_get_raw_response_socket`` does; None if the layers
    are not the expected ones."""
    raw = getattr(getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None), "raw", None)
    sock = getattr(raw, "_sock", raw)
    return sock if isinstance(sock, socket.socket) else None


def pool_call_timeout(client: Any) -> float:
    timeout = getattr(client, "timeout", None)
    return float(timeout) if isinstance(timeout, (int, float)) else 5.0


def engine_product(version: Any) -> str | None:
    """Which engine answered the Engine API: ``"podman"`` (its ``/version`` names a ``Podman
    Engine`` component or platform), ``"docker"`` (any other answer), None (no answer)."""
    if not isinstance(version, dict) or not version:
        return None
    names = [c.get("Name") for c in version.get("Components") or [] if isinstance(c, dict)]
    platform = version.get("Platform")
    if isinstance(platform, dict):
        names.append(platform.get("Name"))
    if any(isinstance(n, str) and "podman" in n.lower() for n in names):
        return "podman"
    return "docker"


def read_events(client: Any, since: datetime, until: datetime, budget_end: float) -> list[Any]:
    """``GET /events?since=&until=``: the engine streams past events, then closes.

    The SDK's ``events()`` reads with no timeout at all (a frozen engine would hold it
    forever), so the same request is made with the client's per-call read timeout.
    """
    out: list[Any] = []
    # seconds.nanoseconds: a whole-second "until" in the future would hold the stream open
    params = {"since": f"{since.timestamp():.9f}", "until": f"{until.timestamp():.9f}"}
    if isinstance(client, UnixEngineClient):
        return client.events(params, MAX_EVENTS, budget_end)
    response = client._get(client._url("/events"), params=params, stream=True,
                           timeout=pool_call_timeout(client))
    try:
        client._raise_for_status(response)
        for event in client._stream_helper(response, decode=True):
            out.append(event)
            if len(out) >= MAX_EVENTS or time.monotonic() > budget_end:
                break
    finally:
        response.close()
    return out


def engine_essentials(info: Any, version: Any, index: Mapping[str, Any]) -> dict[str, Any]:
    """``docker/engine.json``: the facts of ``/info`` and ``/version`` the analyzer reads first."""
    info = info if isinstance(info, dict) else {}
    version = version if isinstance(version, dict) else {}
    runtimes = info.get("Runtimes") if isinstance(info.get("Runtimes"), dict) else {}
    return {
        "docker_host": index.get("docker_host"),
        "engine": engine_product(version),
        "name": info.get("Name"),
        "server_version": version.get("Version") or info.get("ServerVersion"),
        "api_version": version.get("ApiVersion"),
        "min_api_version": version.get("MinAPIVersion"),
        "os": info.get("OperatingSystem"),
        "kernel_version": info.get("KernelVersion"),
        "cgroup_version": info.get("CgroupVersion"),
        "cgroup_driver": info.get("CgroupDriver"),
        "storage_driver": info.get("Driver"),
        "default_runtime": info.get("DefaultRuntime"),
        "runtimes": {name: (v or {}).get("path") for name, v in sorted(runtimes.items())
                     if isinstance(v, dict) or v is None},
        "containers": {k: info.get(k) for k in ("Containers", "ContainersRunning",
                                                  "ContainersPaused", "ContainersStopped")},
        "ncpu": info.get("NCPU"),
        "mem_total_bytes": info.get("MemTotal"),
        "info_available": bool(info),
        "version_available": bool(version),
    }
