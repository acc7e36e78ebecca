"""The one seam between the prometheus collector and the HTTP API: ``GET /api/v1/...`` through urllib.

Every failure comes out as :class:`CallFailed` with a ``kind``:

- ``unreachable``: DNS, refused connection, TLS handshake or certificate failure;
- ``unauthorized`` (HTTP 401) and ``forbidden`` (HTTP 403): the token (or its absence) was refused;
- ``redirected``: a 3xx (a login page in front of Prometheus); redirects are never followed, so a
  bearer token cannot leak to another host;
- ``timed-out``: no byte for ``call_timeout_s``, or the collector's deadline came first;
- ``http-error``: any other non-2xx status (the body's ``error`` field, when Prometheus sent one,
  is in the reason);
- ``bad-response``: not JSON, or not Prometheus' ``{"status": ..., "data": ...}`` envelope.

A body larger than ``max_response_bytes`` is not an error: the reply comes back with
``truncated=True`` and only the bytes read up to the cap (the caller decides what to keep).

URLs given to the collector may carry ``user:password@``: that becomes a basic-auth header and is
never part of :attr:`PromClient.base_url`, which is what evidence records. The bearer token is read
from its file once and sent as ``Authorization: Bearer``; it is never written anywhere.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

__all__ = ["CallFailed", "PromClient", "Reply", "display_url"]

_CHUNK = 1 << 16


class CallFailed(Exception):
    """One API call that gave no usable answer; ``kind`` says how (see the module docstring)."""

    def __init__(self, kind: str, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        self.status = status


@dataclass(frozen=True)
class Reply:
    """The bytes of one answer, as received; ``url`` is without credentials."""

    url: str
    status: int
    body: bytes
    elapsed_s: float
    truncated: bool
    asked_at: float  # unix seconds when the request was sent

    def json(self) -> dict[str, Any]:
        """The Prometheus envelope, checked; raises :class:`CallFailed` ``bad-response``."""
        try:
            doc = json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise CallFailed("bad-response", f"{self.url}: not JSON ({exc})", self.status) from None
        if not isinstance(doc, dict) or doc.get("status") not in ("success", "error"):
            raise CallFailed("bad-response", f"{self.url}: not a Prometheus API answer", self.status)
        return doc


def display_url(url: str) -> str:
    """``url`` with any ``user:password@`` removed (what evidence and messages show)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        raise CallFailed("redirected", f"redirected ({code}) to {display_url(newurl)}; redirects are not followed",
                         code)


class PromClient:
    """GET requests against one Prometheus (or a compatible API: Thanos, Mimir, VictoriaMetrics)."""

    def __init__(self, url: str, *, deadline: float, call_timeout_s: float = 10.0,
                 max_response_bytes: int = 16 << 20, token_file: str | None = None,
                 ca_file: str | None = None) -> None:
        parts = urllib.parse.urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CallFailed("unreachable", f"not an http(s) URL: {display_url(url)!r}")
        self.base_url = display_url(url.strip()).rstrip("/")
        self.deadline = deadline
        self.call_timeout_s = call_timeout_s
        self.max_response_bytes = max_response_bytes
        self.headers = {"Accept": "application/json", "User-Agent": "gpuforensics"}
        if parts.username is not None:
            raw = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            self.headers["Authorization"] = "Basic " + base64.b64encode(raw.encode()).decode("ascii")
        if token_file:
            try:
                with open(token_file, encoding="utf-8") as f:
                    token = f.read().strip()
            except OSError as exc:
                raise CallFailed("unauthorized", f"cannot read the token file {token_file}: {exc.strerror}") from None
            if not token:
                raise CallFailed("unauthorized", f"the token file {token_file} is empty")
            self.headers["Authorization"] = f"Bearer {token}"
        handlers: list[Any] = [_NoRedirect()]
        if parts.scheme == "https":
            try:
                context = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
            except (OSError, ssl.SSLError) as exc:
                raise CallFailed("unreachable", f"cannot load the CA file {ca_file}: {exc}") from None
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self._opener = urllib.request.build_opener(*handlers)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def get(self, path: str, params: list[tuple[str, str]] | None = None) -> Reply:
        """``GET base_url + path?params``: the reply's bytes up to the size cap, or :class:`CallFailed`."""
        query = urllib.parse.urlencode(params or [])
        url = f"{self.base_url}{path}" + (f"?{query}" if query else "")
        timeout = min(self.call_timeout_s, self.remaining())
        if timeout <= 0.05:
            raise CallFailed("timed-out", f"{url}: no time left before the collector's deadline")
        # the credentials travel in headers only: the URL asked is the one recorded
        parts = urllib.parse.urlsplit(self.base_url)
        request = urllib.request.Request(url, headers=self.headers, method="GET")
        asked_at, t0 = time.time(), time.monotonic()
        try:
            resp = self._opener.open(request, timeout=timeout)
        except CallFailed:
            raise
        except urllib.error.HTTPError as exc:
            body = _read_some(exc, 4096)
            raise _http_failure(url, exc.code, body) from None
        except TimeoutError:
            raise CallFailed("timed-out", f"{url}: no answer within {timeout:.1f} s") from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, TimeoutError):
                raise CallFailed("timed-out", f"{url}: no answer within {timeout:.1f} s") from None
            raise CallFailed("unreachable", f"{parts.scheme}://{parts.netloc}: {_reason(reason)}") from None
        except (OSError, ValueError) as exc:  # connection reset, bad status line, ...
            raise CallFailed("unreachable", f"{parts.scheme}://{parts.netloc}: {_reason(exc)}") from None
        with resp:
            status = int(resp.status)
            chunks: list[bytes] = []
            size, truncated = 0, False
            try:
                while True:
                    left = self.remaining()
                    if left <= 0:
                        raise CallFailed("timed-out", f"{url}: the collector's deadline came after {size} bytes")
                    if resp.fp is not None and getattr(resp.fp, "raw", None) is not None:
                        sock = getattr(resp.fp.raw, "_sock", None)
                        if sock is not None:
                            sock.settimeout(min(self.call_timeout_s, left))
                    chunk = resp.read(min(_CHUNK, self.max_response_bytes + 1 - size))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > self.max_response_bytes:
                        truncated = True
                        break
            except TimeoutError:
                raise CallFailed("timed-out", f"{url}: the answer stalled after {size} bytes") from None
            except OSError as exc:
                raise CallFailed("unreachable", f"{url}: connection lost after {size} bytes: {_reason(exc)}") from None
        body = b"".join(chunks)[: self.max_response_bytes]
        return Reply(url, status, body, time.monotonic() - t0, truncated, asked_at)


def _read_some(exc: urllib.error.HTTPError, n: int) -> bytes:
    try:
        data: bytes = exc.read(n)
        return data
    except Exception:  # noqa: BLE001 - the status alone is enough
        return b""


def _reason(reason: object) -> str:
    if isinstance(reason, ssl.SSLCertVerificationError):
        return f"TLS certificate not trusted ({reason.verify_message}); give the CA with --prometheus-ca"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return str(reason) or type(reason).__name__


def _http_failure(url: str, code: int, body: bytes) -> CallFailed:
    detail = ""
    try:
        doc = json.loads(body)
        if isinstance(doc, dict) and doc.get("error"):
            detail = f": {doc.get('errorType', 'error')}: {str(doc['error'])[:300]}"
    except (ValueError, UnicodeDecodeError):
        text = body.decode("utf-8", "replace").strip().splitlines()
        detail = f": {text[0][:200]}" if text else ""
    if code == 401:
        return CallFailed("unauthorized", f"HTTP 401 Unauthorized from {url}{detail} (give a token with "
                          "--prometheus-token-file)", code)
    if code == 403:
        return CallFailed("forbidden", f"HTTP 403 Forbidden from {url}{detail}", code)
    return CallFailed("http-error", f"HTTP {code} from {url}{detail}", code)
