"""The kubernetes collector's client: configuration in capture's order, one call under a deadline,
errors mapped once; over the shared seam :mod:`forensics.kube` (configuration, ``ApiClient``).

Every API call goes through :meth:`KubeAPI.get` (or :meth:`KubeAPI.watch`): raw JSON (the
client's v37 models are strict and reject real objects), a ``(connect, read)`` timeout capped by
the collector's total budget, no urllib3 retries, and each call logged (path, query, HTTP
status, duration, bytes) for ``kubernetes/requests.json``. Client and urllib3 errors become
:class:`CallFailed` with a kind (``forbidden``, ``not-found``, ``unreachable``, ``timed-out``,
``http-error``, ``gone``, ``budget``) here and nowhere else. ``kubernetes`` is imported lazily.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from forensics.errors import SourceUnavailable
from forensics.kube import (
    CAPTURE_ORDER,
    ClientRefused,
    ConfigError,
    KubeError,
    LoadedConfig,
    find_config,
)
from forensics.kube import load_config as load_config_at
from forensics.kube.client import ApiConnection, kind_of_status

__all__ = ["CallFailed", "CallRecord", "KubeAPI", "LoadedConfig", "load_config"]

CallFailed = KubeError  # the collector's name for the seam's error


@dataclass(frozen=True)
class CallRecord:
    """One API request, for ``kubernetes/requests.json``."""

    path: str
    query: dict[str, str]
    status: int | None
    outcome: str
    duration_s: float
    response_bytes: int
    error: str | None
    # the clock evidence of an answered call: the server's ``Date`` header (RFC 7231, whole
    # seconds) and this host's wall clock when the request went and the answer came back
    server_date: str | None = None
    sent_unix: float | None = None
    received_unix: float | None = None


def load_config(kubeconfig: str | None, context: str | None) -> LoadedConfig:
    """In order: ``--kubeconfig``; the in-cluster service account; ``KUBECONFIG``; ``~/.kube/config``
    (:data:`forensics.kube.CAPTURE_ORDER`).

    Raises ``SourceUnavailable`` when there is none, or when the one found cannot be loaded.
    """
    origin = find_config(kubeconfig, CAPTURE_ORDER)
    if origin is None:
        raise SourceUnavailable(
            "no Kubernetes configuration (not in a cluster; no --kubeconfig, KUBECONFIG "
            "or ~/.kube/config)"
        )
    where = {"kubeconfig-option": f" ({origin.path}, --kubeconfig)", "KUBECONFIG": f" ({origin.path}, from KUBECONFIG)",
             "home": f" ({origin.path})", "in-cluster": ""}[origin.place]  # which was tried, for the error
    try:
        return load_config_at(origin, context)
    except ConfigError as exc:
        if exc.kind == "not-yaml":  # a kubeconfig that is not YAML at all
            first = " ".join(exc.detail.split())[:200]
            raise SourceUnavailable(f"Kubernetes configuration not usable{where}: not valid YAML: {first}") from None
        raise SourceUnavailable(f"Kubernetes configuration not usable{where}: {exc.detail}") from None


class KubeAPI:
    """GET requests through the client's ``ApiClient`` returning raw JSON bytes.

    The typed ``CoreV1Api`` is not used: importing it builds ~250 pydantic models (0.4-0.7 s),
    and its models reject real objects anyway. ``param_serialize``/``call_api`` are the same
    machinery the typed methods call (auth, TLS, proxy, headers from the configuration).
    """

    def __init__(self, loaded: LoadedConfig, deadline: float, call_timeout_s: float = 10.0,
                 connect_timeout_s: float = 3.0) -> None:
        self.server = str(loaded.configuration.host)
        self.deadline = deadline
        self.call_timeout_s = call_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.log: list[CallRecord] = []
        self._api = ApiConnection(loaded)

    def close(self) -> None:
        self._api.close()

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def get(self, path: str, query: dict[str, str] | None = None) -> bytes:
        """``GET path?query``; the response body, or :class:`CallFailed`."""
        import urllib3

        query = dict(query or {})
        remaining = self.remaining()
        if remaining < 0.05:
            self.log.append(CallRecord(path, query, None, "budget", 0.0, 0,
                                       "not attempted: the collector's time budget is spent"))
            raise CallFailed("budget", f"{path}: not attempted, time budget spent")
        timeout = (min(self.connect_timeout_s, remaining), min(self.call_timeout_s, remaining))
        t0 = time.monotonic()
        sent = time.time()
        try:
            response = self._call(path, query, timeout)
            data: bytes = response.read() or b""
            status = int(response.status)
            received = time.time()
            date = response.getheader("Date")
        except (ClientRefused, urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._failed(exc, path, query, time.monotonic() - t0) from None
        took = time.monotonic() - t0
        if not 200 <= status <= 299:
            raise self._refused(path, query, status, data, took, _header(date), sent, received)
        self.log.append(CallRecord(path, query, status, "ok", took, len(data), None, _header(date), sent, received))
        return data

    def _call(self, path: str, query: dict[str, str], timeout: tuple[float, float]) -> Any:
        """One GET through the client's machinery; the unread response."""
        return self._api.send("GET", path, list(query.items()), timeout)

    def _refused(self, path: str, query: dict[str, str], status: int, data: bytes, took: float,
                 date: str | None = None, sent: float | None = None, received: float | None = None) -> CallFailed:
        """A non-2xx answer as :class:`CallFailed` (logged), its kind from the status."""
        message = _status_message(data) or f"HTTP {status}"
        kind = "gone" if status == 410 else kind_of_status(status)  # a watch's expired resourceVersion
        self.log.append(CallRecord(path, query, status, kind, took, len(data), message, date, sent, received))
        return CallFailed(kind, f"{path}: HTTP {status}: {message}", status)

    def watch(self, path: str, query: dict[str, str], idle_timeout_s: float) -> Iterator[dict[str, Any]]:
        """``GET path?watch=true&query``: the watch events (``{"type": ..., "object": ...}``) one
        JSON object a line as the server streams them, until it ends the stream (``timeoutSeconds``)
        or sends nothing for ``idle_timeout_s``; failures as :class:`CallFailed` (a ``410 Gone``
        answer or ``ERROR`` event is yielded as it came: the caller lists again)."""
        import urllib3

        query = dict(query, watch="true")
        t0 = time.monotonic()
        response: Any = None
        try:
            response = self._call(path, query, (self.connect_timeout_s, idle_timeout_s))
            status = int(response.status)
            if not 200 <= status <= 299:
                raise self._refused(path, query, status, response.read() or b"", time.monotonic() - t0)
            self.log.append(CallRecord(path, query, status, "ok", 0.0, 0, None))
            pending = b""
            for chunk in response.response.stream(amt=None, decode_content=False):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(obj, dict):
                        yield obj
        except (ClientRefused, urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._failed(exc, path, query, time.monotonic() - t0) from None
        finally:
            if response is not None:  # a stream is not reused: the server may end it any time
                try:
                    response.response.close()
                    response.response.release_conn()
                except Exception:  # noqa: BLE001 - closing must never mask the result
                    pass

    def _failed(self, exc: BaseException, path: str, query: dict[str, str], took: float) -> CallFailed:
        """The one mapping of a client or urllib3 error to :class:`CallFailed` (logged)."""
        import urllib3

        if isinstance(exc, ClientRefused):  # TLS errors and unpreparable requests
            kind, text = "unreachable", str(exc)
        # NewConnectionError subclasses ConnectTimeoutError: test it first
        elif isinstance(exc, urllib3.exceptions.NewConnectionError):
            kind, text = "unreachable", f"unreachable: {_short(exc)}"
        elif isinstance(exc, urllib3.exceptions.ConnectTimeoutError):
            kind, text = "unreachable", f"unreachable: connect timed out after {took:.1f} s"
        elif isinstance(exc, urllib3.exceptions.TimeoutError) or "timed out" in str(exc).lower():
            kind, text = "timed-out", f"timed out after {took:.1f} s"
        else:
            kind, text = "unreachable", f"unreachable: {_short(exc)}"
        self.log.append(CallRecord(path, query, None, kind, took, 0, text))
        return CallFailed(kind, f"{path}: {text}")

    def get_json(self, path: str, query: dict[str, str] | None = None) -> dict[str, Any]:
        data = self.get(path, query)
        try:
            obj = json.loads(data)
        except ValueError as exc:
            raise CallFailed("http-error", f"{path}: response is not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise CallFailed("http-error", f"{path}: response is not a JSON object")
        return obj

    def list_all(self, path: str, query: dict[str, str] | None = None,
                 page_size: int = 500) -> tuple[dict[str, Any], list[Any]]:
        """Follow ``continue`` tokens; returns the last page's list object and all items."""
        items: list[Any] = []
        token: str | None = None
        while True:
            q = dict(query or {}, limit=str(page_size))
            if token:
                q["continue"] = token
            page = self.get_json(path, q)
            page_items = page.get("items")
            if isinstance(page_items, list):
                items.extend(page_items)
            meta = page.get("metadata")
            token = meta.get("continue") if isinstance(meta, dict) else None
            if not token:
                return page, items


def _status_message(body: Any) -> str | None:
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str) or not body:
        return None
    try:
        status = json.loads(body)
    except ValueError:
        return body.strip()[:300]
    if isinstance(status, dict) and isinstance(status.get("message"), str):
        return str(status["message"])
    return None


def _header(value: Any) -> str | None:
    return value[:100] if isinstance(value, str) else None


def _short(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason if reason is not None else exc)[:300]
