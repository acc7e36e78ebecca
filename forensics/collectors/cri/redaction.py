"""Redaction of CRI responses before they are written (uses ``ctx.redactor``).

What carries secrets in what the runtime returns:

- ``labels`` and ``annotations`` of a sandbox or container (list and status, and the verbose
  ``config``): the kubelet hands the runtime every pod label and annotation,
  ``kubectl.kubernetes.io/last-applied-configuration`` (the JSON ``kubectl apply`` sent, env
  values included) among them: redacted as the kubernetes collector redacts them
  (forensics.bundle.redact_kubernetes);
- the verbose ``info`` (a JSON string, containerd's and CRI-O's ``{"info": "..."}``):
  ``config.envs[].value`` (the kubelet's ``KeyValue`` list), ``config.command``/``config.args``
  and ``runtimeSpec.process.args`` (argv rules), ``runtimeSpec.process.env`` (``NAME=value``).

Allow-listed names (``NVIDIA_VISIBLE_DEVICES``, ``CUDA_*``, ...) stay verbatim: they are the
evidence of GPU grants. A verbose ``info`` value that is not JSON is replaced as a whole. The
``info`` string is re-serialised only when redaction is on (compact, key order kept).
"""

from __future__ import annotations

import json
from typing import Any

from forensics.bundle.redact import Redactor
from forensics.bundle.redact_kubernetes import redact_object_metadata

__all__ = ["redact_container_status", "redact_listing", "redact_sandbox_status"]


def _redact_annotations(holder: Any, redactor: Redactor) -> None:
    """A sandbox's or container's ``labels`` and ``annotations`` (the pod's, as the kubelet passed
    them), in place, as Kubernetes object metadata."""
    if isinstance(holder, dict):
        redact_object_metadata({"labels": holder.get("labels"), "annotations": holder.get("annotations")},
                               redactor)


def _redact_argv(holder: Any, key: str, redactor: Redactor) -> None:
    if isinstance(holder, dict) and isinstance(holder.get(key), list):
        holder[key] = redactor.argv([a for a in holder[key] if isinstance(a, str)])


def _redact_info_doc(info: dict[str, Any], redactor: Redactor) -> None:
    config = info.get("config")
    if isinstance(config, dict):
        _redact_annotations(config, redactor)
        for var in config.get("envs") or []:
            if isinstance(var, dict) and isinstance(var.get("value"), str):
                var["value"] = redactor.env_value(str(var.get("key", "")), var["value"])
        _redact_argv(config, "command", redactor)
        _redact_argv(config, "args", redactor)
    spec = info.get("runtimeSpec")
    if isinstance(spec, dict):
        process = spec.get("process")
        if isinstance(process, dict):
            if isinstance(process.get("env"), list):
                process["env"] = redactor.env_list(process["env"])
            _redact_argv(process, "args", redactor)
        _redact_annotations(spec, redactor)


def _redact_info_map(doc: dict[str, Any], redactor: Redactor,
                     parsed_info: dict[str, Any] | None) -> None:
    info = doc.get("info")
    if not isinstance(info, dict):
        return
    for key, raw in list(info.items()):
        if not isinstance(raw, str):
            continue
        if key == "info" and parsed_info:
            parsed: Any = parsed_info  # redacted in place: the caller is done with it
        else:
            try:
                parsed = json.loads(raw)
            except ValueError:
                info[key] = redactor.pseudonym(raw, "text")
                continue
        if isinstance(parsed, dict):
            _redact_info_doc(parsed, redactor)
            info[key] = json.dumps(parsed, separators=(",", ":"), ensure_ascii=False)


def redact_listing(doc: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
    """``ListPodSandbox`` (``items``) / ``ListContainers`` (``containers``): each one's
    annotations, in place."""
    if redactor.enabled:
        for key in ("items", "containers"):
            for item in doc.get(key) or []:
                _redact_annotations(item, redactor)
    return doc


def redact_sandbox_status(doc: dict[str, Any], redactor: Redactor,
                          parsed_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """``PodSandboxStatus`` (verbose): annotations and the ``info`` JSON, in place.

    ``parsed_info`` is ``info["info"]`` already parsed, to parse it once (it is redacted too).
    """
    if redactor.enabled:
        _redact_annotations(doc.get("status"), redactor)
        _redact_info_map(doc, redactor, parsed_info)
    return doc


def redact_container_status(doc: dict[str, Any], redactor: Redactor,
                            parsed_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """``ContainerStatus`` (verbose): annotations, the ``info`` JSON and the free-text ``message``
    (a terminated container's termination message: its termination log, or the end of its log),
    in place (see above)."""
    if redactor.enabled:
        status = doc.get("status")
        _redact_annotations(status, redactor)
        if isinstance(status, dict) and isinstance(status.get("message"), str):
            status["message"] = redactor.text(status["message"], "logs")
        _redact_info_map(doc, redactor, parsed_info)
    return doc
