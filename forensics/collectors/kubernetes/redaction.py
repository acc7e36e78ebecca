"""Redaction of Pod objects before they are written (the rules: forensics.bundle.redact_kubernetes).

What carries secrets in a Pod as the API returns it (``GET /api/v1/pods``): its containers'
literal ``env`` values, its last-applied configuration, labels and annotations (the rules are
shared with the cri collector, which holds what the kubelet handed the runtime).

Allow-listed names (``NVIDIA_VISIBLE_DEVICES``, ``CUDA_*``, ...) stay verbatim: they are the
evidence of GPU grants. Secrets themselves are never fetched.
"""

from __future__ import annotations

from typing import Any

from forensics.bundle.redact import Redactor
from forensics.bundle.redact_kubernetes import (
    LAST_APPLIED,
    redact_object_metadata,
    redact_pod_spec_env,
)

__all__ = ["LAST_APPLIED", "redact_pod", "redact_pod_list"]


def redact_pod(pod: Any, redactor: Redactor) -> Any:
    """Redact one Pod object in place (no-op when redaction is off); returns it."""
    if not redactor.enabled or not isinstance(pod, dict):
        return pod
    redact_pod_spec_env(pod.get("spec"), redactor)
    redact_object_metadata(pod.get("metadata"), redactor)
    return pod


def redact_pod_list(pod_list: Any, redactor: Redactor) -> Any:
    """Redact every item of a PodList in place; returns it."""
    items = pod_list.get("items") if isinstance(pod_list, dict) else None
    if isinstance(items, list):
        for pod in items:
            redact_pod(pod, redactor)
    return pod_list
