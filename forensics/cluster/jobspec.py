"""The Job that ``cluster capture --job`` creates on a node without the capture DaemonSet.

Its pod spec is deploy/job.yaml's (tests/unit/test_deploy_manifests.py keeps the two equal),
with two differences: the container waits, bounded, instead of capturing by itself (the capture
is then run through ``exec`` and streamed back, exactly as in a DaemonSet pod), and the Job
carries ``activeDeadlineSeconds`` just over that wait, so a Job whose ``cluster capture`` died
is ended by Kubernetes instead of idling on (``ttlSecondsAfterFinished`` then removes it).
"""

from __future__ import annotations

import copy
import re
import secrets
from typing import Any

from forensics._version import __version__

__all__ = ["JOB_POD_SPEC", "job_manifest", "job_name"]

#: deploy/job.yaml's pod spec without its command and node (filled per Job).
JOB_POD_SPEC: dict[str, Any] = {
    "serviceAccountName": "gpuforensics",
    "restartPolicy": "Never",
    "tolerations": [{"operator": "Exists"}],
    "hostPID": True,
    "enableServiceLinks": False,
    "containers": [{
        "name": "capture",
        "image": f"gpuforensics:{__version__}",
        "imagePullPolicy": "IfNotPresent",
        "workingDir": "/var/lib/gpuforensics/bundles",
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
            {"name": "GPUFORENSICS_CGROUP_ROOT", "value": "/host/sys/fs/cgroup"},
        ],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsUser": 0,
            "runAsNonRoot": False,
            "capabilities": {"drop": ["ALL"], "add": ["SYS_PTRACE", "DAC_READ_SEARCH", "SYSLOG"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "host-cgroup", "mountPath": "/host/sys/fs/cgroup", "readOnly": True},
            {"name": "host-proc", "mountPath": "/host/proc", "readOnly": True},
            {"name": "containerd", "mountPath": "/run/containerd", "readOnly": True},
            {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True},
            {"name": "kmsg", "mountPath": "/dev/kmsg", "readOnly": True},
            {"name": "cdi-static", "mountPath": "/etc/cdi", "readOnly": True},
            {"name": "cdi-dynamic", "mountPath": "/var/run/cdi", "readOnly": True},
            {"name": "bundles", "mountPath": "/var/lib/gpuforensics/bundles"},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }],
    "volumes": [
        {"name": "host-cgroup", "hostPath": {"path": "/sys/fs/cgroup", "type": "Directory"}},
        {"name": "host-proc", "hostPath": {"path": "/proc", "type": "Directory"}},
        {"name": "containerd", "hostPath": {"path": "/run/containerd", "type": "Directory"}},
        {"name": "pod-resources", "hostPath": {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}},
        {"name": "kmsg", "hostPath": {"path": "/dev/kmsg", "type": "CharDevice"}},
        {"name": "cdi-static", "hostPath": {"path": "/etc/cdi", "type": "DirectoryOrCreate"}},
        {"name": "cdi-dynamic", "hostPath": {"path": "/var/run/cdi", "type": "DirectoryOrCreate"}},
        {"name": "bundles", "emptyDir": {"sizeLimit": "4Gi"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
    ],
}

JOB_LABELS = {"app.kubernetes.io/name": "gpuforensics", "app.kubernetes.io/component": "capture-job"}
NODE_ANNOTATION = "gpuforensics.io/node"


def job_name(node: str) -> str:
    """``gpuforensics-capture-<node>-<5 random>``: a DNS label (the Job's pods carry it as the
    ``job-name`` label value, so 63 characters at most)."""
    safe = re.sub(r"[^a-z0-9-]+", "-", node.lower()).strip("-")[:30].strip("-") or "node"
    return f"gpuforensics-capture-{safe}-{secrets.token_hex(3)[:5]}"


def job_manifest(node: str, namespace: str, name: str, wait_s: int, image: str | None = None) -> dict[str, Any]:
    """The Job for ``node``: its pod pinned there (``nodeName``: no scheduler decision), idle for
    at most ``wait_s`` seconds while the capture is exec'd into it."""
    spec = copy.deepcopy(JOB_POD_SPEC)
    spec["nodeName"] = node
    container = spec["containers"][0]
    if image:
        container["image"] = image
    container["command"] = [
        "/bin/sh", "-c",
        # idle until the exec'd capture is done and the Job deleted, at most wait_s seconds
        f"trap 'exit 0' TERM INT; i=0; while [ \"$i\" -lt {int(wait_s)} ]; do sleep 1 & wait $!; i=$((i + 1)); done",
    ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(JOB_LABELS),
                     "annotations": {NODE_ANNOTATION: node}},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": int(wait_s) + 60,
            "ttlSecondsAfterFinished": 600,
            "template": {"metadata": {"labels": dict(JOB_LABELS)}, "spec": spec},
        },
    }
