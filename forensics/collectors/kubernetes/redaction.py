"""Redaction of Pod objects before they are written.

What carries secrets in a Pod as the API returns it (``GET /api/v1/pods``):

- ``spec.{containers,initContainers,ephemeralContainers}[].env[].value``: literal environment
  values (``valueFrom`` references name a Secret or ConfigMap key, never its value: kept);
- ``metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]``: the JSON that
  ``kubectl apply`` sent, env values included; its env values are redacted the same way, and an
  annotation that is not JSON is replaced as a whole;
- ``metadata.labels`` and ``metadata.annotations`` (and those inside the last-applied JSON, of
  the object and of its pod template): values under secret-looking keys, and values shaped like
  credentials, through ``Redactor.label_map`` (category ``labels``; keys are kept).

Allow-listed names (``NVIDIA_VISIBLE_DEVICES``, ``CUDA_*``, ...) stay verbatim: they are the
evidence of GPU grants. Secrets themselves are never fetched.
"""

from __future__ import annotations

import json
from typing import Any

from forensics.bundle.redact import Redactor

__all__ = ["LAST_APPLIED", "redact_pod", "redact_pod_list"]

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def _redact_spec_env(spec: Any, redactor: Redactor) -> None:
    if not isinstance(spec, dict):
        return
    for key in _CONTAINER_LISTS:
        containers = spec.get(key)
        if not isinstance(containers, list):
            continue
        for container in containers:
            env = container.get("env") if isinstance(container, dict) else None
            if not isinstance(env, list):
                continue
            for var in env:
                if isinstance(var, dict) and isinstance(var.get("value"), str):
                    var["value"] = redactor.env_value(str(var.get("name", "")), var["value"])


def _redact_last_applied(meta: Any, redactor: Redactor) -> None:
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict) or not isinstance(annotations.get(LAST_APPLIED), str):
        return
    raw = annotations[LAST_APPLIED]
    try:
        applied = json.loads(raw)
    except ValueError:
        annotations[LAST_APPLIED] = redactor.pseudonym(raw, "env")
        return
    if isinstance(applied, dict):
        _redact_spec_env(applied.get("spec"), redactor)
        _redact_meta_labels(applied.get("metadata"), redactor)
        # a Deployment/StatefulSet/Job/... carries the pod spec in spec.template.spec
        spec = applied.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("template"), dict):
            _redact_spec_env(spec["template"].get("spec"), redactor)
            _redact_meta_labels(spec["template"].get("metadata"), redactor)
    annotations[LAST_APPLIED] = json.dumps(applied, separators=(",", ":"), sort_keys=True) + (
        "\n" if raw.endswith("\n") else ""
    )


def _redact_meta_labels(meta: Any, redactor: Redactor) -> None:
    if isinstance(meta, dict):
        redactor.label_map(meta.get("labels"))
        redactor.label_map(meta.get("annotations"))


def redact_pod(pod: Any, redactor: Redactor) -> Any:
    """Redact one Pod object in place (no-op when redaction is off); returns it."""
    if not redactor.enabled or not isinstance(pod, dict):
        return pod
    _redact_spec_env(pod.get("spec"), redactor)
    _redact_last_applied(pod.get("metadata"), redactor)
    _redact_meta_labels(pod.get("metadata"), redactor)
    return pod


def redact_pod_list(pod_list: Any, redactor: Redactor) -> Any:
    """Redact every item of a PodList in place; returns it."""
    items = pod_list.get("items") if isinstance(pod_list, dict) else None
    if isinstance(items, list):
        for pod in items:
            redact_pod(pod, redactor)
    return pod_list
