"""Requests through the kubernetes client's own machinery, for both callers.

:class:`ApiConnection` wraps the client's ``ApiClient``: ``param_serialize``/``call_api`` (the
configuration's auth, TLS, proxy and exec-plugin tokens) with raw bodies (``_preload_content``
off: the typed models are strict, slow to import, and reject real objects). :meth:`send`
answers the unread urllib3 response; urllib3's own errors pass through for the caller to word,
and the client's refusal to send at all is a :class:`ClientRefused`.

:meth:`ApiConnection.open_exec` opens ``pods/{pod}/exec`` with
``kubernetes.stream.ws_client.websocket_call``, the client's own WebSocket stream support (it
offers ``v5.channel.k8s.io`` then ``v4.channel.k8s.io``), with ``capture_all=False`` and
``binary=True``: nothing is buffered by the client; the caller reads frames one at a time
(:mod:`forensics.cluster.stream`).
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

from forensics.kube.config import LoadedConfig
from forensics.kube.errors import ClientRefused, KubeError

__all__ = ["ApiConnection", "kind_of_status", "status_message"]


class ApiConnection:
    """One API server's ``ApiClient``; safe to share between threads (urllib3 pools are)."""

    def __init__(self, loaded: LoadedConfig, pool_maxsize: int | None = None) -> None:
        from kubernetes.client.api_client import ApiClient

        self.configuration = loaded.configuration
        self.server = str(loaded.configuration.host)
        self.api_client: Any = ApiClient(loaded.configuration)  # the client's own, for what the seam does not wrap
        pool = getattr(getattr(self.api_client, "rest_client", None), "pool_manager", None)
        if pool_maxsize is not None and pool is not None \
                and isinstance(getattr(pool, "connection_pool_kw", None), dict):
            pool.connection_pool_kw["maxsize"] = pool_maxsize

    def close(self) -> None:
        try:
            self.api_client.close()
        except Exception:  # noqa: BLE001 - closing must never mask the result
            pass

    def send(self, method: str, path: str, query: list[tuple[str, str]], timeout: tuple[float, float],
             body: dict[str, Any] | None = None) -> Any:
        """One request accepting JSON (sending JSON when ``body`` is given); the unread response,
        whatever its status. Raises :class:`ClientRefused`, or urllib3's and the OS's errors."""
        from kubernetes.client.exceptions import ApiException

        try:
            m, url, headers, data, post = self.api_client.param_serialize(
                method=method, resource_path=path, query_params=query,
                header_params={"Accept": "application/json",
                               **({"Content-Type": "application/json"} if body is not None else {})},
                body=body, auth_settings=["BearerToken"])
            return self.api_client.call_api(m, url, header_params=headers, body=data, post_params=post,
                                      _request_timeout=timeout)
        except ApiException as exc:  # TLS errors and unpreparable requests
            raise ClientRefused(str(exc.reason)) from None

    def open_exec(self, namespace: str, pod: str, container: str | None, command: list[str],
                  connect_timeout_s: float) -> Any:
        """Open ``pods/{pod}/exec`` (stdout and stderr, no stdin, no TTY); the client's WSClient.

        Raises :class:`KubeError`: ``forbidden`` with the API server's message (the missing
        permission), ``not-found``, ``http-error`` (a pod not running: 400), ``unreachable``.
        """
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import ws_client as _ws

        ws_client: Any = _ws  # untyped
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/exec"
        _, url, headers, _, _ = self.api_client.param_serialize(method="GET", resource_path=path,
                                                          header_params={}, auth_settings=["BearerToken"])
        query: list[tuple[str, Any]] = [("command", list(command)), ("stdout", "true"), ("stderr", "true"),
                                        ("stdin", "false"), ("tty", "false")]
        if container:
            query.append(("container", container))
        try:
            return ws_client.websocket_call(self.configuration, "GET", url, query_params=query, headers=headers,
                                            _request_timeout=connect_timeout_s, _preload_content=False,
                                            capture_all=False, binary=True)
        except ApiException as exc:
            raise _handshake_error(exc) from None


def status_message(body: bytes | str | None) -> str | None:
    """The ``message`` of a ``Status`` answer; a body that is not JSON, blanks collapsed."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not body:
        return None
    try:
        obj = json.loads(body)
    except ValueError:
        return " ".join(body.split())[:300]
    if isinstance(obj, dict) and isinstance(obj.get("message"), str):
        return str(obj["message"])
    return None


def kind_of_status(status: int) -> str:
    return {401: "unauthorized", 403: "forbidden", 404: "not-found"}.get(status, "http-error")


def _handshake_error(exc: BaseException) -> KubeError:
    """The WebSocket client's refusal (wrapped by the kubernetes client) as a :class:`KubeError`."""
    cause = exc.__context__
    status = getattr(cause, "status_code", None)
    body = getattr(cause, "resp_body", None)
    text = str(getattr(exc, "reason", "") or exc)
    if status is None:
        m = re.search(r"Handshake status (\d{3})", text)
        status = int(m.group(1)) if m else None
    if status is None:
        return KubeError("unreachable", " ".join(text.split())[:300])
    message = status_message(body) or " ".join(text.split("-+-+-")[0].split())[:300]
    return KubeError(kind_of_status(int(status)), message, int(status))
