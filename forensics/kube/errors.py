"""The seam's error type: a Kubernetes client failure with a ``kind`` that says why.

Neutral on purpose: the wording a user reads is the caller's. The kubernetes collector calls a
failed API call ``CallFailed`` and words a configuration that cannot be loaded as
``SourceUnavailable``; cluster capture calls a failed call ``APIError`` and words the
configuration as ``ClusterError``. Both names are this one class.
"""

from __future__ import annotations

__all__ = ["ClientRefused", "KubeError"]


class KubeError(Exception):
    """A Kubernetes request (or configuration) that gave no usable answer; ``kind`` says why,
    ``status`` is the HTTP status where one came."""

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


class ClientRefused(KubeError):
    """The client would not send the request at all (TLS set-up, a request it cannot prepare):
    kind ``unreachable``; the message is the client's reason, at most 300 characters. Callers
    prefix it with what they were asking for."""

    def __init__(self, reason: str) -> None:
        super().__init__("unreachable", reason[:300])
