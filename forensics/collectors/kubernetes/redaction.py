"""Redaction of Pod, Node and Event objects before they are written (the rules:
forensics.bundle.redact_kubernetes).

What carries secrets in a Pod as the API returns it (``GET /api/v1/pods``): its containers'
literal ``env`` values, commands and arguments, its last-applied configuration, labels and
annotations (the rules are shared with the cri collector, which holds what the kubelet handed the
runtime), and the free text of its status: the pod's and its conditions' ``message``, each
container's ``state``/``lastState`` ``message`` (a terminated container's message is its
termination log, or with ``FallbackToLogsOnError`` the end of its log): through the free-text
rules, as logs.

A Node carries labels and annotations too (cloud and tooling annotations can hold tokens); an
Event's free-text ``message`` (``note`` in events.k8s.io) can quote a failing command line or URL
with its credentials: it goes through the same free-text rules as container logs.

Allow-listed names (``NVIDIA_VISIBLE_DEVICES``, ``CUDA_*``, ...) stay verbatim: they are the
evidence of GPU grants. Secrets themselves are never fetched.
"""

from __future__ import annotations

import json
from typing import Any

from forensics.bundle.redact import Redactor
from forensics.bundle.redact_kubernetes import (
    LAST_APPLIED,
    redact_object_metadata,
    redact_pod_spec,
)

__all__ = ["LAST_APPLIED", "redact_events", "redact_node", "redact_pod", "redact_pod_list"]


def redact_pod(pod: Any, redactor: Redactor) -> Any:
    """Redact one Pod object in place (no-op when redaction is off); returns it."""
    if not redactor.enabled or not isinstance(pod, dict):
        return pod
    redact_pod_spec(pod.get("spec"), redactor)
    redact_object_metadata(pod.get("metadata"), redactor)
    _redact_status_text(pod.get("status"), redactor)
    return pod


_STATUS_LISTS = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")


def _redact_status_text(status: Any, redactor: Redactor) -> None:
    """A pod status' free text in place: its message, its conditions' and its containers' state
    messages (``waiting``, ``terminated``, in ``state`` and ``lastState``)."""
    if not isinstance(status, dict):
        return
    messages: list[dict[str, Any]] = [status]
    messages.extend(c for c in status.get("conditions") or () if isinstance(c, dict))
    for key in _STATUS_LISTS:
        for container in status.get(key) or ():
            for state_key in ("state", "lastState"):
                state = container.get(state_key) if isinstance(container, dict) else None
                if isinstance(state, dict):
                    messages.extend(s for s in state.values() if isinstance(s, dict))
    for holder in messages:
        if isinstance(holder.get("message"), str):
            holder["message"] = redactor.text(holder["message"], "logs")


def redact_pod_list(pod_list: Any, redactor: Redactor) -> Any:
    """Redact every item of a PodList in place; returns it."""
    items = pod_list.get("items") if isinstance(pod_list, dict) else None
    if isinstance(items, list):
        for pod in items:
            redact_pod(pod, redactor)
    return pod_list


def redact_node(raw: bytes, redactor: Redactor) -> bytes:
    """A Node as the API returned it: the same bytes when nothing in its metadata needs redacting,
    else the object with its labels, annotations and last-applied configuration redacted."""
    if not redactor.enabled:
        return raw
    try:
        node = json.loads(raw)
    except ValueError:
        return raw  # not JSON: the loader will say so; nothing structured to redact in it
    if not isinstance(node, dict):
        return raw
    before = json.dumps(node.get("metadata"), sort_keys=True)
    redact_object_metadata(node.get("metadata"), redactor)
    if json.dumps(node.get("metadata"), sort_keys=True) == before:
        return raw
    return json.dumps(node, separators=(",", ":")).encode() + b"\n"


def redact_events(events: list[Any], redactor: Redactor) -> list[Any]:
    """Events in place: metadata labels/annotations, and the free-text ``message``/``note``."""
    if not redactor.enabled:
        return events
    for event in events:
        if not isinstance(event, dict):
            continue
        redact_object_metadata(event.get("metadata"), redactor)
        for key in ("message", "note"):
            if isinstance(event.get(key), str):
                event[key] = redactor.text(event[key], "events")
    return events
