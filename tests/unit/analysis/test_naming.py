"""How findings and the verdict name their parties, in one natural sentence with the numbers.

Kubernetes: the parties of a finding are pods (``namespace/name``, UID), their containers further
subjects; the summary says why a pod's GPU use was unallocated in Kubernetes terms and whom the
kubelet assigned the GPU to (pod-resources), on Docker (kubelet-named containers) and on
containerd/CRI-O (the cgroup path names the pod UID). Docker: "Container notebook, which had no
GPU allocation, took GPU 0 (allocated to trainer): ...". Removed containers: "(no longer present)"."""

from __future__ import annotations

from typing import Any

from tests.support.analysis_bundles import GIB, T0, BundleSpec, cid_of
from tests.unit.analysis.conftest import Analyze, kinds, names, of_kind

T_UID, N_UID = "829bf74c-b567-4c5a-ab20-91434119aa6f", "c3afe0e9-aa88-42a8-9fce-5c93569e73b3"
TRAINER_DOCKER = f"k8s_trainer_trainer-0_ml_{T_UID}_0"
NOTEBOOK_DOCKER = f"k8s_jupyter_notebook-alice_research_{N_UID}_0"


def _labels(container: str, pod: str, namespace: str, uid: str) -> dict[str, str]:
    return {"io.kubernetes.container.name": container, "io.kubernetes.pod.name": pod,
            "io.kubernetes.pod.namespace": namespace, "io.kubernetes.pod.uid": uid}


def _takeover(b: BundleSpec, trainer_pid: int, notebook_pid: int) -> None:
    def gpu0(s: float) -> tuple[float, int, dict[int, tuple[int, float | None]]]:
        if s < 10:
            return 95, 30 * GIB, {trainer_pid: (30 * GIB, 94.0)}
        return 99, 74 * GIB, {trainer_pid: (30 * GIB, 10.0), notebook_pid: (44 * GIB, 88.0)}
    b.gpu_series(0, range(30), gpu0)


def kubelet_on_docker() -> BundleSpec:
    """dockershim/cri-dockerd: Docker containers named k8s_<container>_<pod>_<ns>_<uid>_0, with labels."""
    b = BundleSpec()
    uuid = b.gpu(0)
    b.gpu(1)
    trainer = b.container(TRAINER_DOCKER, image_env=["PATH=/bin"],
                          env=[f"NVIDIA_VISIBLE_DEVICES={uuid}"],
                          labels=_labels("trainer", "trainer-0", "ml", T_UID))
    notebook = b.container(NOTEBOOK_DOCKER, labels=_labels("jupyter", "notebook-alice", "research", N_UID))
    b.pod("ml", "trainer-0", T_UID, [("trainer", trainer, 1)])
    b.pod_devices("ml", "trainer-0", "trainer", [uuid])
    b.pod("research", "notebook-alice", N_UID, [("jupyter", notebook, 0)])
    b.process(4101, "python", container=trainer)
    b.process(4202, "python", container=notebook)
    _takeover(b, 4101, 4202)
    return b


def _pod_parties(f: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [s for s in f["subjects"] if s["role"] == role and s["type"] in ("pod", "container")]


def test_kubelet_docker_containers_are_reported_as_their_pods(analyze: Analyze) -> None:
    doc = analyze(kubelet_on_docker())
    (f,) = of_kind(doc, "unallocated-gpu-use")
    culprits = _pod_parties(f, "culprit")
    # the pod first (type pod, namespace/name, UID), its container a further subject
    assert culprits[0] == {"role": "culprit", "type": "pod", "id": N_UID, "name": "research/notebook-alice",
                           "node": "gpu-07"}
    assert [s["name"] for s in culprits[1:]] == [NOTEBOOK_DOCKER]
    assert _pod_parties(f, "victim")[0]["name"] == "ml/trainer-0"
    # the summary in Kubernetes terms, with the container and the kubelet's assignment
    assert f["summary"].startswith("pod research/notebook-alice (container jupyter) (pid 4202, python) used GPU 0")
    assert "has no nvidia.com/gpu limit" in f["summary"]
    assert "sees every GPU through NVIDIA_VISIBLE_DEVICES=all" in f["summary"]
    assert "the kubelet assigned GPU 0 to pod ml/trainer-0 (container trainer)" in f["summary"]
    assert {"member": "kubernetes/podresources/list.json", "locator": "/pod_resources/0/containers/0/devices/0"} \
        in [{"member": e["member"], "locator": e["locator"]} for e in f["evidence"]]
    assert "k8s_" not in f["summary"]
    # the verdict names pods only, and reads as one sentence with the numbers
    v = doc["verdict"]
    assert [(s["type"], s["name"]) for s in v["culprits"]] == [("pod", "research/notebook-alice")]
    assert [(s["type"], s["name"]) for s in v["victims"]] == [("pod", "ml/trainer-0")]
    assert v["headline"].startswith("Pod research/notebook-alice, which has no nvidia.com/gpu limit, "
                                    "took GPU 0 from pod ml/trainer-0: 9"), v["headline"]
    assert "pod ml/trainer-0 fell from 94% to 10% SM" in v["headline"]
    assert "k8s_" not in v["headline"] and "k8s_" not in v["impact"]
    assert not [e["text"] for e in doc["timeline"] if "k8s_" in e["text"]]
    (hog,) = of_kind(doc, "gpu-compute-hog")
    assert names(hog, "culprit") == ["research/notebook-alice", NOTEBOOK_DOCKER]


def test_containerd_pod_without_gpu_limit_is_named_by_its_pod(analyze: Analyze) -> None:
    b = BundleSpec()
    uuid = b.gpu(0)
    trainer, notebook = cid_of("trainer"), cid_of("jupyter")
    b.pod("ml", "trainer-0", T_UID, [("trainer", trainer, 1)])
    b.pod_devices("ml", "trainer-0", "trainer", [uuid])
    b.pod("research", "notebook-alice", N_UID, [("jupyter", notebook, 0)])
    b.process(31, "torchrun", container=trainer, pod_uid=T_UID)
    b.process(32, "python", container=notebook, pod_uid=N_UID,
              environ=["PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=all"])
    _takeover(b, 31, 32)
    b.status["docker"] = "unavailable"
    doc = analyze(b)
    (f,) = of_kind(doc, "unallocated-gpu-use")
    assert _pod_parties(f, "culprit")[0]["type"] == "pod"
    assert "pod research/notebook-alice (container jupyter)" in f["summary"]
    assert "sees every GPU through NVIDIA_VISIBLE_DEVICES=all in its process 32's environment" in f["summary"]
    assert [s["name"] for s in doc["verdict"]["culprits"]] == ["research/notebook-alice"]
    assert doc["verdict"]["headline"].startswith(
        "Pod research/notebook-alice, which has no nvidia.com/gpu limit, took GPU 0 from pod ml/trainer-0")


def test_containerd_join_by_cgroup_pod_uid_alone(analyze: Analyze) -> None:
    """Pod statuses without container ids (not reported yet): the cgroup's pod UID still joins."""
    b = BundleSpec()
    uuid = b.gpu(0)
    b.pod("ml", "trainer-0", T_UID, [("trainer", cid_of("trainer"), 1)])
    b.pod_devices("ml", "trainer-0", "trainer", [uuid])
    b.pod("research", "notebook-alice", N_UID, [("jupyter", cid_of("jupyter"), 0)])
    for pod in b.pods:
        for status in pod["status"]["containerStatuses"]:
            del status["containerID"]
    b.process(31, "torchrun", container=cid_of("trainer-running"), pod_uid=T_UID)
    b.process(32, "python", container=cid_of("jupyter-running"), pod_uid=N_UID)
    _takeover(b, 31, 32)
    b.status["docker"] = "unavailable"
    doc = analyze(b)
    (f,) = of_kind(doc, "unallocated-gpu-use")
    assert names(f, "culprit") == ["research/notebook-alice"]
    assert names(f, "victim") == ["ml/trainer-0"]
    assert "has no nvidia.com/gpu limit" in f["summary"]
    assert any(e["member"] == "kubernetes/podresources/list.json" for e in f["evidence"])
    assert "gpu-compute-hog" in kinds(doc)


def test_oom_of_a_removed_container_says_so(analyze: Analyze) -> None:
    b = BundleSpec()
    b.gpu(0)
    gone = cid_of("etl-removed")
    b.kernel_oom(T0 + 12, 23936, "dd", f"/system.slice/docker-{gone}.scope", 32768, 32768)
    doc = analyze(b)
    (f,) = of_kind(doc, "oom-kill")
    assert f"of container {gone[:12]} (no longer present)" in f["summary"], f["summary"]
    assert f"container {gone[:12]} (no longer present): OOM-killed" in doc["verdict"]["impact"]
    assert [s["id"] for s in f["subjects"] if s["type"] == "container"] == [gone]
    assert any(e["kind"] == "oom-kill" and f"in container {gone[:12]} (no longer present)" in e["text"]
               for e in doc["timeline"]), doc["timeline"]


def test_index_only_process_keeps_comm_start_and_gpu_env(analyze: Analyze) -> None:
    """``proc/index.json`` entries whose files were not written (over the cap) still give the
    process name, its start tick and NVIDIA_VISIBLE_DEVICES (``gpu_env``), as the collector wrote them."""
    b = BundleSpec()
    uuid = b.gpu(0)
    trainer, notebook = cid_of("trainer"), cid_of("jupyter")
    b.pod("ml", "trainer-0", T_UID, [("trainer", trainer, 1)])
    b.pod_devices("ml", "trainer-0", "trainer", [uuid])
    b.pod("research", "notebook-alice", N_UID, [("jupyter", notebook, 0)])
    b.process(31, "torchrun", container=trainer, pod_uid=T_UID)
    b.add_json("proc/index.json", {"boot_time_unix": T0 - 86_400, "processes": [
        {"pid": 32, "reasons": ["hint"], "files": "omitted", "comm": "python", "start_time_ticks": 777,
         "attribution": {"kind": "container", "runtime": "containerd", "container_id": notebook,
                         "pod_uid": N_UID, "cgroup_path": "/kubepods.slice/x.scope", "namespace_relative": False},
         "gpu_env": {"NVIDIA_VISIBLE_DEVICES": "all"}}]})
    _takeover(b, 31, 32)
    b.status["docker"] = "unavailable"
    (f,) = of_kind(analyze(b), "unallocated-gpu-use")
    assert "(pid 32, python)" in f["summary"], f["summary"]
    assert "sees every GPU through NVIDIA_VISIBLE_DEVICES=all in its process 32's environment" in f["summary"]
    assert {"member": "proc/index.json", "locator": "/processes/0/gpu_env/NVIDIA_VISIBLE_DEVICES"} in \
        [{"member": e["member"], "locator": e["locator"]} for e in f["evidence"]]


class TestDockerHeadlines:
    """Verdict headlines read as one natural sentence with the numbers (issue 7 follow-up)."""

    def test_container_with_other_gpus_also_took_one(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        b.gpu(1)
        trainer = b.container("trainer", image_env=["PATH=/bin"], env=["NVIDIA_VISIBLE_DEVICES=0"])
        greedy = b.container("greedy", image_env=["PATH=/bin"], env=["NVIDIA_VISIBLE_DEVICES=1"])
        b.process(1, "python", container=trainer)
        b.process(2, "python", container=greedy)
        b.process(3, "python", container=greedy)
        b.gpu_series(0, range(20), lambda s: (99, 50 * GIB, {1: (30 * GIB, 90.0), 3: (20 * GIB, 5.0)}))
        b.gpu_series(1, range(20), lambda s: (90, 20 * GIB, {2: (20 * GIB, 90.0)}))
        doc = analyze(b)
        (f,) = of_kind(doc, "unallocated-gpu-use")
        assert f["summary"].startswith("container greedy (pid 3, python) used GPU 0 without an allocation of it: "
                                       "it was allocated GPU 1"), f["summary"]
        assert doc["verdict"]["headline"] == ("Container greedy, which was allocated GPU 1, also took GPU 0 "
                                              "(allocated to trainer), holding 20.0 GiB at 5% SM")

    def test_unowned_gpu_is_used_not_taken(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        notebook = b.container("notebook")
        b.process(2, "python", container=notebook)
        b.gpu_series(0, range(20), lambda s: (80, 10 * GIB, {2: (10 * GIB, 80.0)}))
        (f,) = of_kind(analyze(b), "unallocated-gpu-use")
        assert f["severity"] == "medium"
        assert "GPU 0 was allocated to no container or pod" in f["summary"]

    def test_host_process_headline_has_its_numbers(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        trainer = b.container("trainer", image_env=["PATH=/bin"], env=["NVIDIA_VISIBLE_DEVICES=0"])
        b.process(1, "python", container=trainer)
        b.process(9, "stress")
        b.gpu_series(0, range(20), lambda s: (99, 40 * GIB, {1: (30 * GIB, 50.0), 9: (10 * GIB, 45.0)}))
        doc = analyze(b)
        (f,) = of_kind(doc, "unattributed-gpu-process")
        assert any(c["text"] == "Host process 9 (stress) used GPU 0 outside any container, holding 10.0 GiB"
                   for c in doc["chain"]), doc["chain"]
