"""The Engine API over a local unix socket for the docker snapshot, without the docker SDK.

Why: importing the SDK (``docker``, ``requests``, ``urllib3``) and its ``/version`` and ``/_ping``
round trips took 0.2-0.5 s of a 2-core node's CPU before the snapshot's first call; on an engine
at a unix socket (``DOCKER_HOST=unix://...``, ``--set docker.host``, or the SDK's default
``/var/run/docker.sock``) the snapshot's calls are plain HTTP/1.1 GETs that this module makes
with the standard library, so its first call (the list that the one-second wait of the stats
calls starts from) goes out as the collector starts.

:class:`UnixEngineClient` has the ``APIClient`` methods the snapshot calls (``info``, ``version``,
``containers(all=True)``, ``inspect_container``, ``inspect_image``, ``exec_inspect``, ``top``,
``stats``) with their results as the SDK returns them (the engine's JSON, decoded), and the raw
requests of :mod:`forensics.collectors.docker.engine` (``logs``, ``events``, podman's libpod
inspect). Requests are those the SDK makes, without its ``/v<api>`` prefix: an unversioned path
is served at the engine's own API version, the one the SDK's ``version="auto"`` would choose.
Errors are named as the SDK names them (``NotFound: 404 Client Error ...``, ``APIError``), so the
collector's index and race test (``calls.is_race``) read them alike.

Other addresses (tcp, TLS, ssh) and the sampling and follow paths keep the SDK.
"""

from __future__ import annotations

import http.client
import json
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode

__all__ = ["APIError", "DEFAULT_SOCKET", "NotFound", "UnixEngineClient", "unix_socket_path"]

DEFAULT_SOCKET = "/var/run/docker.sock"  # docker.constants.DEFAULT_UNIX_SOCKET
_MAX_BODY = 256 << 20
_ONE_SHOT_MIN_API = (1, 41)


class APIError(Exception):
    """The engine answered with an error status (the SDK's ``docker.errors.APIError``)."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class NotFound(APIError):
    """404: no such container, image or exec (the SDK's ``docker.errors.NotFound``)."""


def unix_socket_path(host: str | None) -> str | None:
    """The socket path of a ``unix://`` Engine API address (no address: the SDK's default
    socket); None for any other scheme."""
    if not host:
        return DEFAULT_SOCKET
    for prefix in ("unix://", "http+unix://"):
        if host.startswith(prefix):
            path = host[len(prefix):]
            return path if path.startswith("/") else None
    return None


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def _raise_for_status(response: http.client.HTTPResponse, target: str, body: bytes) -> None:
    if response.status < 400:
        return
    try:
        message = json.loads(body).get("message", "")
    except (ValueError, AttributeError):
        message = body.decode("utf-8", "replace").strip()
    kind = NotFound if response.status == 404 else APIError
    side = "Client" if response.status < 500 else "Server"
    raise kind(f"{response.status} {side} Error for {target}: {response.reason} ({message!r})",
               response.status)


def demultiplex(data: bytes) -> bytes:
    """The payloads of the engine's multiplexed stdout/stderr stream (frames of an 8-byte header:
    stream, three zero bytes, big-endian length), joined in order, as the SDK's
    ``_multiplexed_buffer_helper`` joins them; a cut final frame keeps what arrived."""
    out = bytearray()
    pos = 0
    while pos + 8 <= len(data):
        (length,) = struct.unpack_from(">I", data, pos + 4)
        out += data[pos + 8:pos + 8 + length]
        pos += 8 + length
    return bytes(out)


class UnixEngineClient:
    """The snapshot's Engine API calls over a unix socket: one connection per call (a unix
    connect costs microseconds; nothing is shared between the pool's threads)."""

    def __init__(self, path: str, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self.api_version: tuple[int, int] | None = None

    # -- transport --------------------------------------------------------------------------
    def _request(self, url: str, params: dict[str, Any] | None = None,
                 timeout: float | None = None) -> tuple[http.client.HTTPResponse, _UnixConnection, str]:
        target = url + ("?" + urlencode(params) if params else "")
        conn = _UnixConnection(self.path, self.timeout if timeout is None else timeout)
        try:
            conn.request("GET", target, headers={"Accept": "application/json"})
            return conn.getresponse(), conn, target
        except BaseException:
            conn.close()
            raise

    def get_bytes(self, url: str, params: dict[str, Any] | None = None) -> bytes:
        """The whole body of ``GET url``; one over ``_MAX_BODY`` is an error, never a silent cut
        (a log cut there would keep its oldest lines and lose the newest: the incident's)."""
        response, conn, target = self._request(url, params)
        try:
            body = response.read(_MAX_BODY + 1)
        finally:
            conn.close()
        _raise_for_status(response, target, body)
        if len(body) > _MAX_BODY:
            raise APIError(f"the engine's answer to {target} is over {_MAX_BODY} bytes: not read")
        return body

    def get_json(self, url: str, params: dict[str, Any] | None = None) -> Any:
        return json.loads(self.get_bytes(url, params))

    def close(self) -> None:
        """Nothing held between calls."""

    # -- the APIClient methods the snapshot calls ---------------------------------------------
    def ping(self) -> None:
        """``GET /_ping``; learns the engine's API version from its ``API-Version`` header."""
        response, conn, target = self._request("/_ping")
        try:
            body = response.read(1 << 16)
        finally:
            conn.close()
        _raise_for_status(response, target, body)
        version = response.getheader("API-Version") or ""
        try:
            major, minor = version.split(".")[:2]
            self.api_version = (int(major), int(minor))
        except ValueError:
            self.api_version = None

    def info(self) -> Any:
        return self.get_json("/info")

    def version(self) -> Any:
        return self.get_json("/version")

    def containers(self, all: bool = False) -> Any:  # noqa: A002 - the SDK's name
        return self.get_json("/containers/json", {"limit": -1, "all": 1 if all else 0, "size": 0,
                                                  "trunc_cmd": 0})

    def inspect_container(self, cid: str) -> Any:
        return self.get_json(f"/containers/{quote(cid, safe='')}/json")

    def inspect_image(self, image: str) -> Any:
        return self.get_json(f"/images/{quote(image, safe='')}/json")

    def exec_inspect(self, exec_id: str) -> Any:
        return self.get_json(f"/exec/{quote(exec_id, safe='')}/json")

    def top(self, cid: str, ps_args: str | None = None) -> Any:
        return self.get_json(f"/containers/{quote(cid, safe='')}/top",
                             {"ps_args": ps_args} if ps_args else None)

    def stats(self, cid: str, stream: bool = False, one_shot: bool | None = None) -> Any:
        """One frame (``stream`` must be False). ``one_shot`` on an engine older than API 1.41
        fails before any request, as the SDK's does, so :func:`engine.stats` falls back alike."""
        if stream:
            raise ValueError("streaming stats are taken through the SDK")
        params: dict[str, Any] = {"stream": 0}
        if one_shot:
            if self.api_version is not None and self.api_version < _ONE_SHOT_MIN_API:
                raise APIError("one_shot is not supported for API version < 1.41")
            params["one-shot"] = 1
        return self.get_json(f"/containers/{quote(cid, safe='')}/stats", params)

    # -- the raw requests of forensics.collectors.docker.engine -------------------------------
    def logs(self, cid: str, params: dict[str, Any], tty: bool) -> bytes:
        """``GET /containers/{id}/logs``: the raw stream of a TTY container, else the payloads of
        the multiplexed frames."""
        data = self.get_bytes(f"/containers/{quote(cid, safe='')}/logs", params)
        return data if tty else demultiplex(data)

    def libpod_inspect(self, cid: str, api_version: str) -> Any:
        return self.get_json(f"/v{api_version}/libpod/containers/{quote(cid, safe='')}/json")

    def events(self, params: dict[str, Any], max_events: int, budget_end: float) -> list[Any]:
        """``GET /events?since=&until=``: the engine streams one JSON object a line until
        ``until``, then closes; read a line at a time under the per-call timeout, stopping at
        ``max_events`` or ``budget_end`` (monotonic)."""
        out: list[Any] = []
        response, conn, target = self._request("/events", params)
        try:
            if response.status >= 400:
                _raise_for_status(response, target, response.read(1 << 16))
            for event in _json_lines(response):
                out.append(event)
                if len(out) >= max_events or time.monotonic() > budget_end:
                    break
        finally:
            conn.close()
        return out


def _json_lines(response: http.client.HTTPResponse) -> Iterator[Any]:
    while line := response.readline(1 << 20):
        line = line.strip()
        if line:
            yield json.loads(line)
