"""deploy/: the manifests are valid Kubernetes objects, the RBAC rules are exactly the calls the
kubernetes collector makes (rbac.yaml) and the calls ``cluster capture`` makes (operator-rbac.yaml),
and the Job ``cluster capture --job`` creates has deploy/job.yaml's pod spec."""

from __future__ import annotations

import copy
import os
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from forensics.collectors.kubernetes.follow import KubeEventFollower
from forensics.collectors.kubernetes.kubernetes import KubernetesCollector
from forensics.collectors.podresources.client import DEFAULT_SOCKET
from forensics.hostfs.cgroupns import ENV_CGROUP_ROOT
from forensics.specs.cdi import CdiSettings
from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig
from tests.support.kube_objects import ClusterState, ContainerSpec, gpu_node_scenario, make_pod
from tests.support.kube_testing import clean_kube_env, make_ctx
from tests.support.nvmlsim import fixtures as nvf

__all__ = ["clean_kube_env"]
sim_lib = nvf.sim_lib

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
EXPECTED = {
    ("v1", "Namespace"), ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"), ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"), ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("apps/v1", "DaemonSet"), ("batch/v1", "Job"),
}
CAPTURE_ROLE = "gpuforensics-capture"


def documents() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                out.append((path.name, doc))
    return out


def by_kind(kind: str, name: str | None = None) -> dict[str, Any]:
    [doc] = [d for _, d in documents() if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return doc


def model_round_trip(doc: dict[str, Any]) -> Any:
    """Load through the client's model for this kind, serialize back (camelCase, no nulls)."""
    from kubernetes import client
    from kubernetes.client.api_client import ApiClient

    models = {"Namespace": client.V1Namespace, "ServiceAccount": client.V1ServiceAccount,
              "ClusterRole": client.V1ClusterRole, "ClusterRoleBinding": client.V1ClusterRoleBinding,
              "Role": client.V1Role, "RoleBinding": client.V1RoleBinding,
              "DaemonSet": client.V1DaemonSet, "Job": client.V1Job}
    model = models[doc["kind"]].from_dict(doc)
    return ApiClient().sanitize_for_serialization(model)


class TestValidObjects:
    def test_kinds_and_api_versions(self):
        assert {(d["apiVersion"], d["kind"]) for _, d in documents()} == EXPECTED

    @pytest.mark.parametrize(("name", "doc"), documents(), ids=lambda v: v if isinstance(v, str) else v["kind"])
    def test_model_accepts_and_round_trips_exactly(self, name, doc):
        # equal after the round trip: no unknown, misspelled or mistyped field anywhere
        assert model_round_trip(doc) == doc

    def test_round_trip_catches_a_misspelled_field(self):
        ds = copy.deepcopy(by_kind("DaemonSet"))
        ds["spec"]["template"]["spec"]["hostPid"] = True
        assert model_round_trip(ds) != ds

    def test_kustomization_lists_existing_files(self):
        kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
        for resource in kust["resources"]:
            assert (DEPLOY / resource).is_file()
        assert "job.yaml" not in kust["resources"], "the Job is a per-node template"

    def test_same_namespace_and_service_account_everywhere(self):
        sa = by_kind("ServiceAccount")["metadata"]
        binding = by_kind("ClusterRoleBinding", CAPTURE_ROLE)
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}]
        assert binding["roleRef"]["name"] == by_kind("ClusterRole", CAPTURE_ROLE)["metadata"]["name"]
        assert by_kind("Role")["metadata"]["namespace"] == sa["namespace"]
        assert by_kind("RoleBinding")["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                     "name": by_kind("Role")["metadata"]["name"]}
        assert by_kind("Namespace")["metadata"]["name"] == sa["namespace"]
        for kind in ("DaemonSet", "Job"):
            obj = by_kind(kind)
            assert obj["metadata"]["namespace"] == sa["namespace"]
            assert obj["spec"]["template"]["spec"]["serviceAccountName"] == sa["name"]


class TestPodSpecs:
    @pytest.mark.parametrize("kind", ["DaemonSet", "Job"])
    def test_host_access_is_read_only_and_minimal(self, kind):
        spec = by_kind(kind)["spec"]["template"]["spec"]
        assert spec["hostPID"] is True
        assert not spec.get("hostNetwork") and not spec.get("hostIPC")
        [container] = spec["containers"]
        sc = container["securityContext"]
        assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert set(sc["capabilities"]["add"]) == {"SYS_PTRACE", "DAC_READ_SEARCH", "SYSLOG"}
        host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
        ring = {n for n, p in host_paths.items() if p == "/var/lib/gpuforensics/ring"}
        assert len(ring) == (1 if kind == "DaemonSet" else 0)  # the recorder's ring: the one writable host path
        host_paths = {n: p for n, p in host_paths.items() if n not in ring}
        assert set(host_paths.values()) == {"/sys/fs/cgroup", "/proc", "/run/containerd",
                                            "/var/lib/kubelet/pod-resources", "/dev/kmsg", "/etc/cdi", "/var/run/cdi"}
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        for name in host_paths:
            assert mounts[name].get("readOnly") is True, name
        pod_resources = mounts[next(n for n, p in host_paths.items() if p.endswith("pod-resources"))]
        assert os.path.dirname(DEFAULT_SOCKET) == pod_resources["mountPath"], \
            "the collector's default socket path works in the pod without --set"
        # the CDI spec directories, where the cdi collector looks by default: CDI grants resolve in-cluster
        cdi = CdiSettings()
        for d in (cdi.static_dir, cdi.dynamic_dir):
            (name,) = [n for n, p in host_paths.items() if p == d]
            assert mounts[name]["mountPath"] == d and mounts[name]["readOnly"] is True, d
            # a node without CDI has no such directory: the pod must start there too
            assert next(v for v in spec["volumes"] if v["name"] == name)["hostPath"]["type"] == "DirectoryOrCreate"
        env = {e["name"]: e for e in container["env"]}
        assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
        cgroup_mount = mounts[next(n for n, p in host_paths.items() if p == "/sys/fs/cgroup")]
        assert env[ENV_CGROUP_ROOT]["value"] == cgroup_mount["mountPath"], \
            "the cgroup collectors read the host's tree, not the pod's own subtree"
        assert "nvidia.com/gpu" not in str(container["resources"]), "takes no GPU from the scheduler"

    def test_daemonset_targets_gpu_nodes_and_stays_ready(self):
        ds = by_kind("DaemonSet")
        spec = ds["spec"]["template"]["spec"]
        assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert {"operator": "Exists"} in spec["tolerations"]
        command = spec["containers"][0]["command"]
        assert command[:2] == ["gpuforensics", "record"] and "/var/lib/gpuforensics/ring" in command
        assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()

    def test_job_template_pins_a_node_and_captures(self):
        job = by_kind("Job")
        spec = job["spec"]["template"]["spec"]
        assert spec["nodeName"] == "NODE_NAME_HERE" and spec["restartPolicy"] == "Never"
        assert "gpuforensics capture" in spec["containers"][0]["command"][-1]
        assert job["spec"]["backoffLimit"] == 0 and job["spec"]["ttlSecondsAfterFinished"] > 0

    def test_dockerfile(self):
        text = (DEPLOY / "Dockerfile").read_text()
        assert re.search(r"^FROM python:3\.11", text, re.M)
        assert 'ENTRYPOINT ["gpuforensics"]' in text
        assert re.search(r"apt-get install .*\btar\b", text), "kubectl cp needs tar in the image"


# --------------------------------------------------------------------------------------------
# RBAC == the collector's calls
# --------------------------------------------------------------------------------------------
def is_discovery(path: str) -> bool:
    """``/apis/<group>`` and ``/apis/<group>/<version>``: non-resource URLs every authenticated user
    may read (the ``system:discovery`` ClusterRole), no rule of ours."""
    segs = path.strip("/").split("/")
    return segs[0] == "apis" and len(segs) <= 3


def rbac_of(path: str) -> tuple[str, str, str]:
    """(apiGroup, resource, verb) that authorizes ``GET path`` (the API server's own mapping)."""
    segs = path.strip("/").split("/")
    if segs[0] == "api":
        group, rest = "", segs[2:]
    elif segs[0] == "apis":
        group, rest = segs[1], segs[3:]
    else:
        raise AssertionError(f"not a resource path: {path}")
    if len(rest) >= 2 and rest[0] == "namespaces":
        rest = rest[2:] if len(rest) > 2 else ["namespaces", rest[1]]
    resource = rest[0]
    verb = "get" if len(rest) == 2 else "list"
    if len(rest) > 2:  # a subresource of a named object (pods/{name}/log): always get
        resource, verb = f"{rest[0]}/{rest[2]}", "get"
    return group, resource, verb


def granted(kind: str = "ClusterRole", name: str = CAPTURE_ROLE) -> set[tuple[str, str, str]]:
    rules = by_kind(kind, name)["rules"]
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def test_rbac_mapping_helper():
    assert rbac_of("/api/v1/nodes/n") == ("", "nodes", "get")
    assert rbac_of("/api/v1/namespaces/ml/events") == ("", "events", "list")
    assert rbac_of("/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods") == ("metrics.k8s.io", "pods", "list")
    assert rbac_of("/api/v1/namespaces/ml/secrets/x") == ("", "secrets", "get")
    assert rbac_of("/api/v1/namespaces/ml/pods/train-0/log") == ("", "pods/log", "get")


def test_rbac_covers_exactly_the_collector_calls(tmp_path, clean_kube_env, monkeypatch):
    """Every path the collector takes (node given; node found by host name; events listed
    cluster-wide when pods span many namespaces) needs only the granted rules, and every
    granted rule is used."""
    now = datetime.now(UTC)
    many = gpu_node_scenario(now)
    many.pods += [make_pod(f"p{i}", f"tenant-{i}", "gpu-node-07", now, [ContainerSpec("c")])
                  for i in range(25)]
    runs = [({"node_name": "gpu-node-07"}, gpu_node_scenario(now)),
            ({"node_name": None}, gpu_node_scenario(now)),
            ({"node_name": "gpu-node-07"}, many),
            ({"node_name": "gpu-node-07"}, dra_node_scenario(now))]
    monkeypatch.setattr("socket.gethostname", lambda: "gpu-node-07")
    used: set[tuple[str, str, str]] = set()
    for i, (options, state) in enumerate(runs):
        run_dir = tmp_path / f"run{i}"
        run_dir.mkdir()
        with KubeAPIServer(state) as api:
            kubeconfig = write_kubeconfig(run_dir / "kubeconfig", api.url)
            staged = make_ctx(run_dir, kubeconfig=str(kubeconfig), **options)
            KubernetesCollector().snapshot(staged.ctx)
        assert staged.ctx.partial_reasons == []
        used |= {rbac_of(p) for _, p, _ in api.requests if not is_discovery(p)}
    assert ("", "events", "list") in used and ("", "nodes", "list") in used
    assert ("resource.k8s.io", "resourceclaims", "list") in used and ("resource.k8s.io", "deviceclasses", "get") in used
    assert ("", "pods/log", "get") in used
    # the DaemonSet's `record` follows the node's events (collectors/kubernetes/follow.py): a list
    # then a watch per scope, with the same service account; and keeps the pods, their claims and
    # the node's slices (collectors/kubernetes/follow_objects.py) with the calls capture makes
    monkeypatch.setenv("GPUFORENSICS_RING", str(tmp_path / "no-ring"))
    with KubeAPIServer(dra_node_scenario(now)) as api:
        kubeconfig = write_kubeconfig(tmp_path / "follow-kubeconfig", api.url)
        follower = KubeEventFollower()
        (tmp_path / "follow").mkdir()
        follower.start(make_ctx(tmp_path / "follow", kubeconfig=str(kubeconfig), node_name="gpu-node-07").ctx)
        deadline = time.monotonic() + 30
        while api.watches < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        follower.stop()
    watched = {rbac_of(p)[:2] + ("watch",) if q.get("watch") == "true" else rbac_of(p)
               for _, p, q in api.requests if not is_discovery(p)}
    assert ("", "events", "watch") in watched
    assert ("resource.k8s.io", "resourceclaims", "list") in watched, watched
    used |= watched
    assert used == granted()


# --------------------------------------------------------------------------------------------
# operator-rbac.yaml == cluster capture's calls; cluster capture --job's Job == deploy/job.yaml
# --------------------------------------------------------------------------------------------
def rbac_of_request(method: str, path: str) -> set[tuple[str, str, str, str | None]]:
    """(apiGroup, resource, verb, namespace) that can authorize the request. The exec WebSocket
    upgrade is a GET authorized as ``create`` on pods/exec by API servers since 1.35 and as
    ``get`` before them."""
    segs = path.strip("/").split("/")
    group, rest = ("", segs[2:]) if segs[0] == "api" else (segs[1], segs[3:])
    ns = None
    if len(rest) >= 2 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    if len(rest) == 3 and rest[2] == "exec":
        return {(group, "pods/exec", "create", ns), (group, "pods/exec", "get", ns)}
    verb = {"POST": "create", "DELETE": "delete"}.get(method, "get" if len(rest) == 2 else "list")
    return {(group, rest[0], verb, ns)}


def test_operator_rbac_covers_exactly_the_cluster_capture_calls(tmp_path, clean_kube_env, sim_lib):
    """Every request of cluster capture (default node choice with a node lacking its capture
    pod, --selector, --pods-of, --job including a Job whose pod does not start) is allowed by the
    operator's Role (capture namespace) or read-only ClusterRole, and every rule is used."""
    from forensics.cluster import ClusterCaptureOptions, run_cluster_capture
    from tests.support.kube_cluster import NodeSpec, SimCluster

    role = {(g, r, v, "gpuforensics") for g, r, v in granted("Role", "gpuforensics-operator")}
    cluster_wide = granted("ClusterRole", "gpuforensics-operator-read")
    runs = [({}, 0.3), ({"selector": "nvidia.com/gpu.present=true"}, 0.3), ({"pods_of": "ml/app=trainer"}, 0.3),
            ({"job": True, "nodes": ("gpu-a",)}, 0.3), ({"job": True, "nodes": ("gpu-a",), "job_start_timeout_s": 1}, 30)]
    used: set[tuple[str, str, str, str | None]] = set()
    for i, (extra, delay) in enumerate(runs):
        root = tmp_path / f"run{i}"
        root.mkdir()
        with SimCluster(root, sim_lib, [NodeSpec("gpu-a"), NodeSpec("gpu-b", capture_pod=False)],
                        job_pod_delay_s=delay) as sim:
            sim.state.pods.append(make_pod("trainer-0", "ml", "gpu-a", datetime.now(UTC), [ContainerSpec("t")],
                                           labels={"app": "trainer"}))
            run_cluster_capture(ClusterCaptureOptions(out_dir=root / "out", kubeconfig=str(sim.kubeconfig),
                                                      capture_args=("--only", "host"), **extra))
        for method, path, _ in sim.api.requests:  # (the nodes' captures run --only host: no requests)
            options = rbac_of_request(method, path)
            allowed = {o for o in options if o in role or o[:3] in cluster_wide}
            assert allowed, f"{method} {path} needs one of {options}"
            used |= options
    assert role <= used, "a Role rule no call needs"
    assert cluster_wide <= {u[:3] for u in used}, "a ClusterRole rule no call needs"


def test_cluster_job_has_deploy_job_pod_spec():
    from forensics.cluster.jobspec import JOB_POD_SPEC

    spec = copy.deepcopy(by_kind("Job")["spec"]["template"]["spec"])
    spec.pop("nodeName")
    spec["containers"][0].pop("command")
    assert spec == JOB_POD_SPEC, "forensics/cluster/jobspec.py and deploy/job.yaml disagree"


def dra_node_scenario(now: datetime) -> ClusterState:
    """The GPU node with a pod whose GPU a DRA claim granted, and resource.k8s.io served."""
    from tests.support.dra_objects import (
        DraDevice,
        DraState,
        claim_pod,
        device_class,
        resource_claim,
        resource_slice,
    )

    state = gpu_node_scenario(now)
    pod = claim_pod(make_pod("dra-0", "ml", "gpu-node-07", now, [ContainerSpec("train")]),
                    {"gpu": "dra-0-gpu-x7k2p"}, {"train": ["gpu"]}, template=True)
    state.pods.append(pod)
    state.dra = DraState(
        slices=[resource_slice("gpu-node-07", [DraDevice(0, "GPU-8a74c1f2-0000-4000-8000-000000000000")])],
        claims=[resource_claim("ml", "dra-0-gpu-x7k2p", "5b6c7d8e-0000-4000-8000-00000000c1a1", "gpu-node-07",
                               [("gpu", "gpu-0")], reserved_for=[("dra-0", pod["metadata"]["uid"])])],
        device_classes=[device_class()])
    return state
