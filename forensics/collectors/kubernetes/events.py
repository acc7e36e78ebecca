"""Which Events belong in the bundle: those about the node's pods or the node, in the window.

Source: core/v1 Event objects (``GET /api/v1/namespaces/{ns}/events``). An event's time is the
newest of ``lastTimestamp``, ``eventTime`` (events.k8s.io writers such as the scheduler set only
this one), ``series.lastObservedTime`` and ``metadata.creationTimestamp``.
An event is kept when it names a pod of this node (by UID), a pod whose event came from this
node's kubelet (``source.host``: pods deleted since), or the Node itself.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from forensics.errors import ParseError
from forensics.parsing.timestamps import parse_iso

__all__ = ["event_time", "parse_time", "select_events"]


def parse_time(value: Any) -> datetime:
    """metav1.Time / MicroTime (RFC 3339, ``Z`` or offset, optional fraction) -> aware UTC."""
    if not isinstance(value, str) or not value:
        raise ParseError(f"not a timestamp: {value!r}")
    t = parse_iso(value, require_zone=True)
    if t is None:
        if parse_iso(value) is not None:
            raise ParseError(f"timestamp without a zone: {value!r}")
        raise ParseError(f"not a timestamp: {value!r}")
    return t


def event_time(event: Any) -> datetime | None:
    """The newest time an event carries, or None when it carries none."""
    if not isinstance(event, dict):
        raise ParseError("event is not an object")
    candidates: list[Any] = [event.get("lastTimestamp"), event.get("eventTime")]
    series = event.get("series")
    if isinstance(series, dict):
        candidates.append(series.get("lastObservedTime"))
    meta = event.get("metadata")
    if isinstance(meta, dict):
        candidates.append(meta.get("creationTimestamp"))
    times = [parse_time(c) for c in candidates if c not in (None, "")]
    return max(times) if times else None


def select_events(
    items: Any,
    node_name: str,
    pod_uids: Collection[str],
    since: datetime | None,
) -> list[dict[str, Any]]:
    """The events (verbatim objects, in their order) about the node's pods or the node since ``since``."""
    if not isinstance(items, list):
        raise ParseError("event items is not a list")
    kept: list[dict[str, Any]] = []
    for event in items:
        if not isinstance(event, dict):
            raise ParseError("event is not an object")
        involved = event.get("involvedObject")
        if not isinstance(involved, dict):
            raise ParseError("event without involvedObject")
        kind = involved.get("kind")
        source = event.get("source") if isinstance(event.get("source"), dict) else {}
        host = source.get("host") if isinstance(source, dict) else None
        if kind == "Node":
            ours = involved.get("name") == node_name
        elif kind == "Pod":
            uid = involved.get("uid")  # not a string (no API server sends one): matches no pod
            ours = (isinstance(uid, str) and uid in pod_uids) or (host is not None and host == node_name)
        else:
            ours = False
        if not ours:
            continue
        if since is not None:
            t = event_time(event)
            if t is not None and t < since:
                continue
        kept.append(event)
    return kept
