"""The Kubernetes client of ``cluster capture``: configuration as kubectl finds it, JSON
requests, and the ``exec`` WebSocket, over the shared seam :mod:`forensics.kube` (which alone
imports the client); its errors are worded here and nowhere else.

- :func:`load_client_config`: ``--kubeconfig``, else ``$KUBECONFIG`` (a ``:``-separated list,
  merged as kubectl merges it), else ``~/.kube/config``, else the in-cluster service account
  (:data:`forensics.kube.KUBECTL_ORDER`, not capture's order: the person running ``cluster
  capture`` is usually outside the cluster); ``--context`` picks the context.
- :meth:`Kube.request`: ``GET``/``POST``/``DELETE`` through the client's ``ApiClient``
  (:class:`forensics.kube.client.ApiConnection`: its auth, TLS, proxy and exec-plugin tokens),
  raw JSON in and out (the typed models are strict and slow to import), one attempt, a per-call
  timeout.
- :meth:`Kube.open_exec`: the client's own WebSocket stream support, nothing buffered by the
  client; the caller reads frames one at a time (:mod:`forensics.cluster.stream`).

Every failure is an :class:`APIError` (the seam's :class:`forensics.kube.KubeError`) with a
``kind``: ``forbidden`` (403, the message names the user, verb and resource), ``not-found``,
``unauthorized``, ``unreachable``, ``timed-out``, ``http-error``.
"""

from __future__ import annotations

import json
from typing import Any

from forensics.errors import ClusterError
from forensics.kube import (
    KUBECTL_ORDER,
    ClientRefused,
    ConfigError,
    KubeError,
    LoadedConfig,
    find_config,
    load_config,
)
from forensics.kube.client import ApiConnection, kind_of_status, status_message

__all__ = ["APIError", "Kube", "load_client_config"]

APIError = KubeError  # cluster capture's name for the seam's error


def load_client_config(kubeconfig: str | None, context: str | None) -> LoadedConfig:
    """The client configuration, found the way kubectl finds it; :class:`ClusterError` if none."""
    origin = find_config(kubeconfig, KUBECTL_ORDER)
    if origin is None:
        raise ClusterError("no Kubernetes configuration: no --kubeconfig, KUBECONFIG or ~/.kube/config, "
                           "and not running in a cluster")
    if origin.path is None and context:
        raise ClusterError("--context needs a kubeconfig; only the in-cluster service account was found")
    where = origin.path or "in-cluster"
    try:
        return load_config(origin, context)
    except ConfigError as exc:
        if exc.kind == "not-yaml":
            raise ClusterError(f"kubeconfig {where}: not valid YAML: {' '.join(exc.detail.split())[:200]}") from None
        raise ClusterError(f"kubeconfig {where}: {' '.join(exc.detail.split())[:300]}") from None


class Kube:
    """Requests against one API server; safe to share between threads (urllib3 pools are)."""

    def __init__(self, loaded: LoadedConfig, call_timeout_s: float = 15.0, connect_timeout_s: float = 5.0) -> None:
        self.configuration = loaded.configuration
        self.server = str(loaded.configuration.host)
        self.call_timeout_s = call_timeout_s
        self.connect_timeout_s = connect_timeout_s
        # one connection per concurrent node (the default pool keeps 4 and warns past it)
        self._api = ApiConnection(loaded, pool_maxsize=64)

    def close(self) -> None:
        self._api.close()

    def request(self, method: str, path: str, query: dict[str, str] | None = None,
                body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request; the JSON object answered, or :class:`APIError`."""
        import urllib3

        try:
            response = self._api.send(method, path, list((query or {}).items()),
                                      (self.connect_timeout_s, self.call_timeout_s), body)
            raw: bytes = response.read() or b""
            status = int(response.status)
        except ClientRefused as exc:
            raise APIError("unreachable", f"{method} {path}: {exc}") from None
        except urllib3.exceptions.NewConnectionError as exc:
            raise APIError("unreachable", f"{self.server} unreachable: {_short(exc)}") from None
        except (urllib3.exceptions.TimeoutError, TimeoutError):
            raise APIError("timed-out", f"{method} {path}: no answer within {self.call_timeout_s:g} s") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise APIError("unreachable", f"{self.server} unreachable: {_short(exc)}") from None
        if not 200 <= status <= 299:
            message = status_message(raw) or f"HTTP {status}"
            raise APIError(kind_of_status(status), message, status)
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            raise APIError("http-error", f"{method} {path}: the answer is not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise APIError("http-error", f"{method} {path}: the answer is not a JSON object")
        return obj

    def list_items(self, path: str, query: dict[str, str] | None = None, page_size: int = 500) -> list[dict[str, Any]]:
        """Every item of a list, following ``continue`` tokens."""
        items: list[dict[str, Any]] = []
        token = None
        while True:
            q = dict(query or {}, limit=str(page_size))
            if token:
                q["continue"] = token
            page = self.request("GET", path, q)
            items.extend(i for i in page.get("items") or [] if isinstance(i, dict))
            meta = page.get("metadata")
            token = meta.get("continue") if isinstance(meta, dict) else None
            if not token:
                return items

    def open_exec(self, namespace: str, pod: str, container: str | None, command: list[str],
                  connect_timeout_s: float) -> Any:
        """Open ``pods/{pod}/exec`` (stdout and stderr, no stdin, no TTY); the client's WSClient.

        Raises :class:`APIError`: ``forbidden`` with the API server's message (the missing
        permission), ``not-found``, ``http-error`` (a pod not running: 400), ``unreachable``.
        """
        return self._api.open_exec(namespace, pod, container, command, connect_timeout_s)


def _short(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return " ".join(str(reason if reason is not None else exc).split())[:300]
