"""The kubernetes collector's ``resource.k8s.io`` reads, with the real kubernetes client against the
loopback API server (tests/support/kube_apiserver.py; objects from tests/support/dra_objects.py):
the version the server offers (v1, else v1beta2, else v1beta1), the node's slices, only the claims
of its pods (by name, generated from a template, an extended resource's, reserved for them), the
device classes they request; a group not served or refused is recorded, not fatal; the logs of
every container holding a GPU in any form."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from forensics.collectors.kubernetes.kubernetes import KubernetesCollector, gpu_holders
from tests.support.dra_objects import (
    DraDevice,
    DraState,
    claim_pod,
    device_class,
    extended_resource_pod,
    resource_claim,
    resource_slice,
)
from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig
from tests.support.kube_objects import ClusterState, ContainerSpec, gpu_node_scenario, make_pod
from tests.support.kube_testing import Staged, clean_kube_env, make_ctx

__all__ = ["clean_kube_env"]

NODE = "gpu-node-07"
U0, U1 = "GPU-8a74c1f2-0000-4000-8000-000000000000", "GPU-8a74c1f2-0000-4000-8000-000000000001"


def _state(versions: tuple[str, ...] = ("v1", "v1beta2", "v1beta1")) -> ClusterState:
    now = datetime.now(UTC)
    state = gpu_node_scenario(now)
    train = claim_pod(make_pod("train-0", "ml", NODE, now, [ContainerSpec("train")]),
                      {"gpu": "train-0-gpu-x7k2p"}, {"train": ["gpu"]}, template=True)
    full = extended_resource_pod(make_pod("gpu-full-pod", "ml", NODE, now, [ContainerSpec(
        "cuda-container", limits={"nvidia.com/gpu": "1"})]), "gpu-full-pod-extended-resources-x7k9m", "cuda-container")
    elsewhere = claim_pod(make_pod("other-0", "ml", "gpu-node-08", now, [ContainerSpec("c")]),
                          {"gpu": "other-0-gpu"}, {"c": ["gpu"]})
    state.pods += [train, full, elsewhere]
    state.dra = DraState(
        slices=[resource_slice(NODE, [DraDevice(0, U0), DraDevice(1, U1)]),
                resource_slice("gpu-node-08", [DraDevice(0, "GPU-99999999-0000-4000-8000-000000000000")],
                               uid="9d1f0a4e-5b7c-4e21-8f3a-1c2d3e4f5a61")],
        claims=[resource_claim("ml", "train-0-gpu-x7k2p", "c1a1c1a1-0000-4000-8000-000000000001", NODE,
                               [("gpu", "gpu-0")], reserved_for=[("train-0", train["metadata"]["uid"])]),
                resource_claim("ml", "gpu-full-pod-extended-resources-x7k9m", "c1a1c1a1-0000-4000-8000-000000000002",
                               NODE, [("container-0-request-0", "gpu-1")], extended_for="gpu-full-pod"),
                resource_claim("ml", "other-0-gpu", "c1a1c1a1-0000-4000-8000-000000000003", "gpu-node-08",
                               [("gpu", "gpu-0")], reserved_for=[("other-0", elsewhere["metadata"]["uid"])])],
        device_classes=[device_class(extended_resource_name="nvidia.com/gpu"), device_class("mig.nvidia.com")],
        versions=versions)
    return state


def _run(tmp_path: Path, state: ClusterState, **server: Any) -> tuple[Staged, KubeAPIServer]:
    with KubeAPIServer(state, **server) as api:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
        staged = make_ctx(tmp_path, kubeconfig=str(kubeconfig), node_name=NODE)
        KubernetesCollector(call_timeout_s=2.0).snapshot(staged.ctx)
    return staged, api


def test_slices_claims_and_classes_of_the_node(tmp_path: Path, clean_kube_env: None) -> None:
    staged, api = _run(tmp_path, _state())
    assert staged.ctx.partial_reasons == []
    assert staged.json("kubernetes/resource-api.json") == {
        "group": "resource.k8s.io", "offered": ["v1", "v1beta2", "v1beta1"], "preferred": "v1", "read": "v1",
        "error": None}
    slices = staged.json("kubernetes/resourceslices.json")
    assert slices["apiVersion"] == "resource.k8s.io/v1"
    assert [s["spec"]["nodeName"] for s in slices["items"]] == [NODE]
    assert slices["items"][0]["spec"]["devices"][0]["attributes"]["uuid"] == {"string": U0}
    claims = staged.json("kubernetes/resourceclaims.json")
    assert sorted(c["metadata"]["name"] for c in claims["items"]) == [
        "gpu-full-pod-extended-resources-x7k9m", "train-0-gpu-x7k2p"]  # not the other node's pod's
    classes = staged.json("kubernetes/deviceclasses.json")
    assert [c["metadata"]["name"] for c in classes["items"]] == ["gpu.nvidia.com"]
    assert ("/apis/resource.k8s.io/v1/resourceslices" in api.paths_requested()
            and ("GET", "/apis/resource.k8s.io/v1/resourceslices", {"fieldSelector": f"spec.nodeName={NODE}",
                                                                      "limit": "500"}) in api.requests)


def test_v1beta1_when_the_server_offers_only_it(tmp_path: Path, clean_kube_env: None) -> None:
    staged, _ = _run(tmp_path, _state(versions=("v1beta1",)))
    assert staged.json("kubernetes/resource-api.json")["read"] == "v1beta1"
    slices = staged.json("kubernetes/resourceslices.json")
    assert slices["apiVersion"] == "resource.k8s.io/v1beta1"
    assert slices["items"][0]["spec"]["devices"][0]["basic"]["attributes"]["uuid"] == {"string": U0}


def test_a_cluster_without_dra_is_recorded_not_a_failure(tmp_path: Path, clean_kube_env: None) -> None:
    staged, _ = _run(tmp_path, gpu_node_scenario(datetime.now(UTC)))
    assert staged.ctx.partial_reasons == []
    record = staged.json("kubernetes/resource-api.json")
    assert record["read"] is None and "404" in record["error"]
    assert "kubernetes/resourceclaims.json" not in staged.members()


def test_refused_claims_are_recorded_and_partial(tmp_path: Path, clean_kube_env: None) -> None:
    staged, _ = _run(tmp_path, _state(), forbidden={"resourceclaims.resource.k8s.io"})
    assert any("resourceclaims" in r and "403" in r for r in staged.ctx.partial_reasons), staged.ctx.partial_reasons
    assert "403" in staged.json("kubernetes/resource-api.json")["error"]
    assert "kubernetes/resourceslices.json" in staged.members() and "kubernetes/pods.json" in staged.members()


def test_claim_metadata_is_redacted_as_other_objects(tmp_path: Path, clean_kube_env: None) -> None:
    state = _state()
    state.dra.claims[0]["metadata"]["annotations"] = {"example.com/token": "s3cr3t-claim-token-0123456789"}
    staged, _ = _run(tmp_path, state)
    assert b"s3cr3t-claim-token" not in (staged.root / "kubernetes/resourceclaims.json").read_bytes()


def test_logs_of_every_gpu_holder_whatever_its_grant_form(tmp_path: Path, clean_kube_env: None) -> None:
    state = _state()
    now = datetime.now(UTC)
    state.pods.append(make_pod("nb-0", "research", NODE, now, [ContainerSpec(
        "jupyter", limits={"nvidia.com/gpu.shared": "1"})]))
    state.pods.append(make_pod("quiet-0", "research", NODE, now, [ContainerSpec("idle")]))
    with KubeAPIServer(state) as api:
        for ns, pod, c in (("ml", "train-0", "train"), ("ml", "gpu-full-pod", "cuda-container"),
                           ("research", "nb-0", "jupyter"), ("research", "quiet-0", "idle")):
            api.set_pod_log(ns, pod, c, [(now.timestamp() - 5, f"{c} says hello")])
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
        staged = make_ctx(tmp_path, kubeconfig=str(kubeconfig), node_name=NODE)
        KubernetesCollector(call_timeout_s=2.0).snapshot(staged.ctx)
    index = {(e["namespace"], e["pod"], e["container"]): e["why"]
             for e in staged.json("kubernetes/logs/index.json")["containers"]}
    assert index[("ml", "train-0", "train")] == "DRA claim"
    assert index[("ml", "gpu-full-pod", "cuda-container")] == "GPU limit"
    assert index[("research", "nb-0", "jupyter")] == "GPU limit"
    assert ("research", "quiet-0", "idle") not in index
    assert "kubernetes/logs/ml/train-0/train.log" in staged.members()


def test_a_container_whose_process_is_on_a_gpu_is_a_holder() -> None:
    pods = [{"metadata": {"namespace": "ml", "name": "p"}, "spec": {"containers": [{"name": "c"}]}, "status": {}}]
    index = {"container_ids": {"ab" * 32: {"pod": "ml/p", "container": "c", "pod_uid": "u", "instance": "current"}}}
    assert gpu_holders(pods, index, set()) == {}
    assert gpu_holders(pods, index, {"ab" * 32}) == {("ml", "p", "c"): "process on a GPU"}


def test_drivers_free_json_is_redacted_and_sharing_kept(tmp_path: Path, clean_kube_env: None) -> None:
    """What a driver or an administrator may fill with anything (a claim's and a DeviceClass's
    opaque ``parameters``, a device's status ``data``) reaches the bundle redacted; NVIDIA's
    GpuConfig sharing settings, which the grant model reads, stay as sent."""
    state = _state()
    claim = state.dra.claims[0]
    secret_params = {"apiVersion": "example.com/v1", "kind": "NicConfig", "auth": {"user": "svc", "psk": "hunter2-psk"},
                     "endpoint": "https://admin:s3cr3t-url-pw@fabric.example.com/api"}
    claim["spec"]["devices"]["config"] = [{"requests": ["gpu"], "opaque": {"driver": "nic.example.com",
                                                                           "parameters": secret_params}}]
    gpu_config = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                  "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50,
                                                               "defaultPinnedDeviceMemoryLimit": "8Gi"}}}
    claim["status"]["allocation"]["devices"]["config"] = [
        {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": "nic.example.com", "parameters": secret_params}},
        {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": "gpu.nvidia.com", "parameters": gpu_config}}]
    claim["status"]["devices"] = [{"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-0",
                                   "data": {"sessionToken": "tok-claim-status-0123456789"}}]
    state.dra.device_classes[0]["spec"]["config"] = [{"opaque": {"driver": "gpu.nvidia.com", "parameters": {
        "registryPassword": "class-pw-0123456789"}}}]
    staged, _ = _run(tmp_path, state)
    raw = (staged.root / "kubernetes/resourceclaims.json").read_bytes()
    for secret in (b"hunter2-psk", b"s3cr3t-url-pw", b"tok-claim-status-0123456789"):
        assert secret not in raw, secret
    assert b"class-pw-0123456789" not in (staged.root / "kubernetes/deviceclasses.json").read_bytes()
    (kept,) = [c for c in staged.json("kubernetes/resourceclaims.json")["items"]
               if c["metadata"]["name"] == "train-0-gpu-x7k2p"]
    assert kept["status"]["allocation"]["devices"]["config"][1]["opaque"]["parameters"] == gpu_config
    assert kept["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"]["auth"]["user"].startswith(
        "<redacted:")
