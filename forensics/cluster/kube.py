"""The Kubernetes client seam of ``cluster capture``: configuration as kubectl finds it, JSON
requests, and the ``exec`` WebSocket; client errors are mapped here and nowhere else.

- :func:`load_client_config`: ``--kubeconfig``, else ``$KUBECONFIG`` (a ``:``-separated list,
  merged as kubectl merges it), else ``~/.kube/config``, else the in-cluster service account
  (kubectl's order, not capture's: the person running ``cluster capture`` is usually outside the
  cluster); ``--context`` picks the context.
- :meth:`Kube.request`: ``GET``/``POST``/``DELETE`` through the client's ``ApiClient``
  (``param_serialize``/``call_api``: its auth, TLS, proxy and exec-plugin tokens), raw JSON in and
  out (the typed models are strict and slow to import), one attempt, a per-call timeout.
- :meth:`Kube.open_exec`: ``kubernetes.stream.ws_client.websocket_call``, the client's own
  WebSocket stream support (it offers ``v5.channel.k8s.io`` then ``v4.channel.k8s.io``), with
  ``capture_all=False`` and ``binary=True``: nothing is buffered by the client; the caller reads
  frames one at a time (:mod:`forensics.cluster.stream`).

Every failure is an :class:`APIError` with a ``kind``: ``forbidden`` (403, the message names
the user, verb and resource), ``not-found``, ``unauthorized``, ``unreachable``, ``timed-out``,
``http-error``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from forensics.errors import ClusterError

__all__ = ["APIError", "Kube", "load_client_config"]

SA_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


class APIError(Exception):
    """A request that gave no usable answer; ``kind`` says why, ``status`` is the HTTP status."""

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


@dataclass(frozen=True)
class ClientConfig:
    configuration: Any
    source: str
    context: str | None


def load_client_config(kubeconfig: str | None, context: str | None) -> ClientConfig:
    """The client configuration, found the way kubectl finds it; :class:`ClusterError` if none."""
    from kubernetes import client
    from kubernetes import config as _config
    from kubernetes.config.config_exception import ConfigException
    from yaml import YAMLError  # type: ignore[import-untyped]

    config: Any = _config
    cfg = client.Configuration()
    env = os.environ.get("KUBECONFIG", "")
    home = os.path.expanduser("~/.kube/config")
    try:
        if kubeconfig:
            where = kubeconfig
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg,
                                    persist_config=False)
        elif env or os.path.exists(home):
            where = env or home  # the client merges a KUBECONFIG list itself
            config.load_kube_config(config_file=None if env else home, context=context,
                                    client_configuration=cfg, persist_config=False)
        elif os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.exists(SA_TOKEN):
            if context:
                raise ClusterError("--context needs a kubeconfig; only the in-cluster service account was found")
            where = "in-cluster"
            config.load_incluster_config(client_configuration=cfg)
        else:
            raise ClusterError("no Kubernetes configuration: no --kubeconfig, KUBECONFIG or ~/.kube/config, "
                               "and not running in a cluster")
    except YAMLError as exc:
        raise ClusterError(f"kubeconfig {where}: not valid YAML: {' '.join(str(exc).split())[:200]}") from None
    except (ConfigException, OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ClusterError(f"kubeconfig {where}: {' '.join(str(exc).split())[:300]}") from None
    cfg.retries = False
    return ClientConfig(cfg, where, context)


def _status_message(body: bytes | str | None) -> str | None:
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


def _kind_of(status: int) -> str:
    return {401: "unauthorized", 403: "forbidden", 404: "not-found"}.get(status, "http-error")


class Kube:
    """Requests against one API server; safe to share between threads (urllib3 pools are)."""

    def __init__(self, loaded: ClientConfig, call_timeout_s: float = 15.0, connect_timeout_s: float = 5.0) -> None:
        from kubernetes.client.api_client import ApiClient

        self.configuration = loaded.configuration
        self.server = str(loaded.configuration.host)
        self.call_timeout_s = call_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._api: Any = ApiClient(loaded.configuration)
        # one connection per concurrent node (the default pool keeps 4 and warns past it)
        pool = getattr(getattr(self._api, "rest_client", None), "pool_manager", None)
        if pool is not None and isinstance(getattr(pool, "connection_pool_kw", None), dict):
            pool.connection_pool_kw["maxsize"] = 64

    def close(self) -> None:
        try:
            self._api.close()
        except Exception:  # noqa: BLE001 - closing must never mask the result
            pass

    def request(self, method: str, path: str, query: dict[str, str] | None = None,
                body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request; the JSON object answered, or :class:`APIError`."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        try:
            m, url, headers, data, post = self._api.param_serialize(
                method=method, resource_path=path, query_params=list((query or {}).items()),
                header_params={"Accept": "application/json",
                               **({"Content-Type": "application/json"} if body is not None else {})},
                body=body, auth_settings=["BearerToken"])
            response = self._api.call_api(m, url, header_params=headers, body=data, post_params=post,
                                          _request_timeout=(self.connect_timeout_s, self.call_timeout_s))
            raw: bytes = response.read() or b""
            status = int(response.status)
        except ApiException as exc:
            raise APIError("unreachable", f"{method} {path}: {str(exc.reason)[:300]}") from None
        except urllib3.exceptions.NewConnectionError as exc:
            raise APIError("unreachable", f"{self.server} unreachable: {_short(exc)}") from None
        except (urllib3.exceptions.TimeoutError, TimeoutError):
            raise APIError("timed-out", f"{method} {path}: no answer within {self.call_timeout_s:g} s") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise APIError("unreachable", f"{self.server} unreachable: {_short(exc)}") from None
        if not 200 <= status <= 299:
            message = _status_message(raw) or f"HTTP {status}"
            raise APIError(_kind_of(status), message, status)
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
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import ws_client as _ws

        ws_client: Any = _ws  # untyped
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/exec"
        _, url, headers, _, _ = self._api.param_serialize(method="GET", resource_path=path,
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


def _handshake_error(exc: BaseException) -> APIError:
    """The WebSocket client's refusal (wrapped by the kubernetes client) as an :class:`APIError`."""
    cause = exc.__context__
    status = getattr(cause, "status_code", None)
    body = getattr(cause, "resp_body", None)
    text = str(getattr(exc, "reason", "") or exc)
    if status is None:
        m = re.search(r"Handshake status (\d{3})", text)
        status = int(m.group(1)) if m else None
    if status is None:
        return APIError("unreachable", " ".join(text.split())[:300])
    message = _status_message(body) or " ".join(text.split("-+-+-")[0].split())[:300]
    return APIError(_kind_of(int(status)), message, int(status))


def _short(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return " ".join(str(reason if reason is not None else exc).split())[:300]
