"""Redaction of Kubernetes object metadata and pod specs, for every collector that holds them.

The kubernetes collector writes Pod objects; the cri collector writes what the kubelet handed the
runtime (a sandbox's annotations, a container's envs). Both carry the same secrets:

- ``spec.{containers,initContainers,ephemeralContainers}[].env[].value``: literal environment
  values (``valueFrom`` references name a Secret or ConfigMap key, never its value: kept);
- their ``command`` and ``args``: command lines, redacted as every command line is
  (``Redactor.argv``: ``--api-key X``, ``--token=X``, credentials in URLs, known credential shapes),
  as are their probes' and lifecycle hooks' ``exec.command``; those handlers' ``httpGet``
  ``httpHeaders[].value`` as label values under the header's name (``Authorization``, ``X-Api-Key``);
- ``metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]``: the JSON that
  ``kubectl apply`` sent, env values included; its env values are redacted the same way, and an
  annotation that is not JSON is replaced as a whole;
- ``metadata.labels`` and ``metadata.annotations`` (and those inside the last-applied JSON, of
  the object and of its pod template): values under secret-looking keys, and values shaped like
  credentials, through ``Redactor.label_map`` (category ``labels``; keys are kept).
"""

from __future__ import annotations

import json
from typing import Any

from forensics.bundle.redact import Redactor

__all__ = ["LAST_APPLIED", "redact_object_metadata", "redact_pod_spec", "redact_pod_spec_env"]

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def redact_pod_spec_env(spec: Any, redactor: Redactor) -> None:
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


def _redact_handler(handler: Any, redactor: Redactor) -> None:
    """A probe's or lifecycle hook's handler in place: ``exec.command`` (a command line) and
    ``httpGet.httpHeaders[].value`` (a header: ``X-Api-Key``, ``Authorization``)."""
    if not isinstance(handler, dict):
        return
    exec_ = handler.get("exec")
    if isinstance(exec_, dict):
        argv = exec_.get("command")
        if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            exec_["command"] = redactor.argv(argv)
    http = handler.get("httpGet")
    for header in (http.get("httpHeaders") or ()) if isinstance(http, dict) else ():
        if isinstance(header, dict) and isinstance(header.get("value"), str):
            header["value"] = redactor.label_value(str(header.get("name", "")), header["value"], "headers")


def redact_pod_spec(spec: Any, redactor: Redactor) -> None:
    """A pod spec in place: its containers' literal env values, commands and arguments, and their
    probes' and lifecycle hooks' commands and HTTP headers."""
    redact_pod_spec_env(spec, redactor)
    if not isinstance(spec, dict):
        return
    for key in _CONTAINER_LISTS:
        containers = spec.get(key)
        for container in containers if isinstance(containers, list) else ():
            if not isinstance(container, dict):
                continue
            for field in ("command", "args"):
                argv = container.get(field)
                if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
                    container[field] = redactor.argv(argv)
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                _redact_handler(container.get(probe), redactor)
            lifecycle = container.get("lifecycle")
            for hook in ("postStart", "preStop"):
                _redact_handler(lifecycle.get(hook) if isinstance(lifecycle, dict) else None, redactor)


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
        redact_pod_spec(applied.get("spec"), redactor)
        _redact_meta_labels(applied.get("metadata"), redactor)
        # a Deployment/StatefulSet/Job/... carries the pod spec in spec.template.spec
        spec = applied.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("template"), dict):
            redact_pod_spec(spec["template"].get("spec"), redactor)
            _redact_meta_labels(spec["template"].get("metadata"), redactor)
    annotations[LAST_APPLIED] = json.dumps(applied, separators=(",", ":"), sort_keys=True) + (
        "\n" if raw.endswith("\n") else ""
    )


def _redact_meta_labels(meta: Any, redactor: Redactor) -> None:
    if isinstance(meta, dict):
        redactor.label_map(meta.get("labels"))
        redactor.label_map(meta.get("annotations"))


def redact_object_metadata(meta: Any, redactor: Redactor) -> None:
    """An object's ``metadata`` in place: its last-applied configuration, labels and annotations."""
    _redact_last_applied(meta, redactor)
    _redact_meta_labels(meta, redactor)
