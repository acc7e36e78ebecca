#!/usr/bin/env python3
"""Build the sample bundles with the real capture command.

Each scenario starts real containers on a real Docker engine (a private ``dockerd`` unless
``DOCKER_HOST`` answers; default runtime "nvidia", which is runc here), writes a simulated-NVML
scenario naming those containers' real PIDs (``tests/support/nvmlsim``: a C ``libnvidia-ml.so.1``
driven by the scenario), starts a loopback Kubernetes API and kubelet pod-resources server where
the scenario needs them, then runs ``gpuforensics capture`` as an operator would, in a UTS
namespace whose host name is the scenario's node (``gpu-07``). The bundle is renamed to
``sample_bundles/<scenario>.tgz``.

    sudo python3 sample_bundles/build.py                 # every scenario
    sudo python3 sample_bundles/build.py xid-fault       # one

Needs root (cgroups, /dev/kmsg, unshare), docker.io, busybox-static and gcc.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import nvmlsim  # noqa: E402
from tests.support.docker_engine import (  # noqa: E402
    BUSYBOX_IMAGE,
    CUDA_LIKE_IMAGE,
    DockerEngine,
    acquire_engine,
    release_engine,
)

HOSTNAME = "gpu-07"
GIB = 1 << 30
DURATION_S = 12
SLEEP_FOREVER = ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]


@dataclass
class Stage:
    """What a scenario set up: containers by name, the NVML scenario, extra capture arguments."""

    engine: DockerEngine
    tmp: Path
    containers: dict[str, str] = field(default_factory=dict)
    capture_args: list[str] = field(default_factory=list)
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    def run(self, name: str, *args: str, image: str = BUSYBOX_IMAGE, cmd: list[str] | None = None) -> str:
        cid = self.engine.run_labelled("run", "-d", "--name", name, *args, image, *(cmd or SLEEP_FOREVER))
        self.containers[name] = cid
        return cid

    def pid(self, name: str) -> int:
        out = self.engine.cli("inspect", "-f", "{{.State.Pid}}", self.containers[name]).stdout.strip()
        return int(out)

    @property
    def nvml_scenario_file(self) -> Path:
        """Where :func:`build` writes the simulated NVML's scenario; the sampling child reads it
        again at its ``nvmlInit``, so a scenario can change what the GPUs say during the window."""
        return self.tmp / "nvml-scenario.tsv"

    def pod_container(self, pod: str, ns: str, uid: str, container: str, *args: str,
                      image: str = BUSYBOX_IMAGE) -> str:
        """A pod's container, named and labelled the way the kubelet (cri-dockerd) names it on Docker."""
        return self.run(f"k8s_{container}_{pod}_{ns}_{uid}_0", *args,
                        "--label", f"io.kubernetes.pod.name={pod}", "--label", f"io.kubernetes.pod.namespace={ns}",
                        "--label", f"io.kubernetes.pod.uid={uid}", "--label", f"io.kubernetes.container.name={container}",
                        image=image)


def two_gpus(sc: nvmlsim.Scenario, gpu0_util: Any = 0, gpu1_util: Any = 0) -> None:
    sc.add_gpu(name="NVIDIA H100 80GB HBM3", uuid="GPU-8f2c1d3e-5a6b-4c7d-9e0f-1a2b3c4d5e6f",
               pci_bus_id="00000000:3B:00.0", serial="1652923000001", gpu_util=gpu0_util,
               temperature_c=[(0, 61)], power_mw=[(0, 512_000)])
    sc.add_gpu(name="NVIDIA H100 80GB HBM3", uuid="GPU-2b7e9a10-c4d5-4e6f-8a9b-0c1d2e3f4a5b",
               pci_bus_id="00000000:86:00.0", serial="1652923000002", gpu_util=gpu1_util,
               temperature_c=[(0, 38)], power_mw=[(0, 98_000)])


# -- scenarios ----------------------------------------------------------------------------------
def unallocated_gpu_use(st: Stage, sc: nvmlsim.Scenario) -> str:
    """A container with no GPU request takes GPU 0 (allocated to trainer) and starves it."""
    st.run("trainer", "-e", "NVIDIA_VISIBLE_DEVICES=0", "--cpus", "1")
    st.run("notebook", image=CUDA_LIKE_IMAGE)  # no GPU flag: the image's ENV + default nvidia runtime
    two_gpus(sc, gpu0_util=[(0, 97), (4, 99)], gpu1_util=0)
    sc.add_process(pid=st.pid("trainer"), gpu=0, used_memory_bytes=[(0, 14 * GIB), (4, 16 * GIB)],
                   sm_util=[(0, 95), (4, 9), (6, 7)], mem_util=[(0, 60), (4, 6)])
    sc.add_process(pid=st.pid("notebook"), gpu=0, start_s=4,
                   used_memory_bytes=[(4, 40 * GIB), (5, 62 * GIB)], sm_util=[(4, 86), (6, 88)],
                   mem_util=[(4, 70)])
    return "A container started without any GPU request (notebook, CUDA-like image under the default nvidia runtime) takes GPU 0, which was given to trainer, and starves it."


def cpu_throttled_loader(st: Stage, sc: nvmlsim.Scenario) -> str:
    """The data loader of a GPU job is CPU-throttled (--cpus 0.2), so its GPU sits idle."""
    st.run("loader", "-e", "NVIDIA_VISIBLE_DEVICES=1", "--cpus", "0.2",
           cmd=["sh", "-c", "while :; do :; done"])
    st.run("trainer", "-e", "NVIDIA_VISIBLE_DEVICES=0")
    two_gpus(sc, gpu0_util=94, gpu1_util=[(0, 9), (3, 4)])
    sc.add_process(pid=st.pid("trainer"), gpu=0, used_memory_bytes=38 * GIB, sm_util=92, mem_util=55)
    sc.add_process(pid=st.pid("loader"), gpu=1, used_memory_bytes=21 * GIB,
                   sm_util=[(0, 8), (3, 4)], mem_util=[(0, 3)])
    return "A data loader limited to 0.2 CPUs is throttled most of the time; its GPU 1 idles below 10%."


def memcg_oom(st: Stage, sc: nvmlsim.Scenario) -> str:
    """A preprocessing container under --memory 32m is really OOM-killed by the kernel."""
    st.run("trainer", "-e", "NVIDIA_VISIBLE_DEVICES=0")
    st.run("etl", "--memory", "32m", "--memory-swap", "32m",
           cmd=["sh", "-c", "sleep 4; x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo $x | wc -c"])
    two_gpus(sc, gpu0_util=93, gpu1_util=0)
    sc.add_process(pid=st.pid("trainer"), gpu=0, used_memory_bytes=30 * GIB, sm_util=91, mem_util=50)
    return "The etl container (memory limit 32 MiB) is killed by the kernel's memory-cgroup OOM killer."


def xid_fault(st: Stage, sc: nvmlsim.Scenario) -> str:
    """GPU 1 falls off the bus (Xid 79): hardware, not contention."""
    st.run("trainer", "-e", "NVIDIA_VISIBLE_DEVICES=0")
    st.run("inference", "-e", "NVIDIA_VISIBLE_DEVICES=1")
    two_gpus(sc, gpu0_util=90, gpu1_util=[(0, 64)])
    sc.add_process(pid=st.pid("trainer"), gpu=0, used_memory_bytes=33 * GIB, sm_util=90, mem_util=48)
    sc.add_process(pid=st.pid("inference"), gpu=1, used_memory_bytes=12 * GIB, sm_util=62, mem_util=20, end_s=5)
    sc.add_xid(gpu=1, at_s=4.5, code=79)
    sc.lose_gpu(gpu=1, at_s=5)
    return "GPU 1 reports Xid 79 (fallen off the bus) and is lost; its inference process dies. No contention."


def clean_host(st: Stage, sc: nvmlsim.Scenario) -> str:
    """Two jobs, each on its own allocated GPU, nothing wrong."""
    st.run("trainer", "-e", "NVIDIA_VISIBLE_DEVICES=0")
    st.run("inference", "-e", "NVIDIA_VISIBLE_DEVICES=1")
    two_gpus(sc, gpu0_util=88, gpu1_util=41)
    sc.add_process(pid=st.pid("trainer"), gpu=0, used_memory_bytes=35 * GIB, sm_util=86, mem_util=45)
    sc.add_process(pid=st.pid("inference"), gpu=1, used_memory_bytes=10 * GIB, sm_util=40, mem_util=15)
    return "Two containers, each on the GPU it was given; no contention, no fault."


def k8s_pod_without_gpu_limit(st: Stage, sc: nvmlsim.Scenario) -> str:
    """On a Kubernetes node, a pod with no nvidia.com/gpu limit uses the GPU given to another pod."""
    from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig
    from tests.support.kube_objects import (
        ClusterState,
        ContainerSpec,
        make_event,
        make_node,
        make_pod,
    )
    from tests.support.podresources_server import PodResourcesServer

    two_gpus(sc, gpu0_util=[(0, 96), (4, 99)], gpu1_util=0)
    uuid0, uuid1 = sc.gpu_uuid(0), sc.gpu_uuid(1)
    import uuid as uuidlib
    trainer_uid, notebook_uid = str(uuidlib.uuid4()), str(uuidlib.uuid4())

    trainer_cid = st.pod_container("trainer-0", "ml", trainer_uid, "trainer", "-e", f"NVIDIA_VISIBLE_DEVICES={uuid0}")
    notebook_cid = st.pod_container("notebook-alice", "research", notebook_uid, "jupyter", image=CUDA_LIKE_IMAGE)
    trainer_name = next(n for n in st.containers if n.startswith("k8s_trainer_"))
    notebook_name = next(n for n in st.containers if n.startswith("k8s_jupyter_"))
    sc.add_process(pid=st.pid(trainer_name), gpu=0, used_memory_bytes=20 * GIB,
                   sm_util=[(0, 94), (4, 10)], mem_util=[(0, 55), (4, 8)])
    sc.add_process(pid=st.pid(notebook_name), gpu=0, start_s=4, used_memory_bytes=44 * GIB,
                   sm_util=[(4, 85)], mem_util=[(4, 62)])

    from datetime import UTC, datetime
    now = datetime.now(UTC).replace(microsecond=0)
    node = make_node(HOSTNAME, now, gpus=2, product="NVIDIA-H100-80GB-HBM3")
    trainer = make_pod("trainer-0", "ml", HOSTNAME, now, [ContainerSpec(
        "trainer", command=["torchrun", "train.py"], runtime="docker",
        container_id=trainer_cid,
        requests={"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
        limits={"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
        env=[("NVIDIA_VISIBLE_DEVICES", uuid0), ("WANDB_API_KEY", "wb-5f1e9c0d2b7a4e3f")],
    )], owner=("StatefulSet", "trainer"), labels={"app": "trainer"}, uid=trainer_uid)
    notebook = make_pod("notebook-alice", "research", HOSTNAME, now, [ContainerSpec(
        "jupyter", command=["jupyter", "lab"], runtime="docker",
        container_id=notebook_cid,
        requests={"cpu": "2", "memory": "8Gi"},
        env=[("NVIDIA_VISIBLE_DEVICES", "all"), ("JUPYTER_TOKEN", "s3cr3t-notebook-token")],
    )], labels={"app": "notebook", "owner": "alice"}, last_applied=True, uid=notebook_uid)
    events = [make_event(notebook, "Started", "Started container jupyter", now, host=HOSTNAME,
                         field_path="spec.containers{jupyter}")]
    state = ClusterState(nodes=[node], pods=[trainer, notebook], events=events)
    api = KubeAPIServer(state).start()
    st.cleanups.append(api.stop)
    kubeconfig = write_kubeconfig(st.tmp / "kubeconfig", api.url)
    sock = st.tmp / "kubelet.sock"
    pr = PodResourcesServer(sock, pods=[trainer, notebook], gpu_ids=[uuid0, uuid1]).start()
    st.cleanups.append(pr.stop)
    st.capture_args += ["--kubeconfig", str(kubeconfig), "--node", HOSTNAME,
                        "--set", f"podresources.socket={sock}"]
    return "Kubernetes pod research/notebook-alice has no nvidia.com/gpu limit but sees every GPU (NVIDIA_VISIBLE_DEVICES=all) and takes GPU 0, assigned by the kubelet to ml/trainer-0."


def k8s_dra_node(st: Stage, sc: nvmlsim.Scenario) -> str:
    """A Kubernetes node whose GPUs NVIDIA's DRA driver grants (``resource.k8s.io/v1`` claims)."""
    import uuid as uuidlib
    from datetime import UTC, datetime

    from tests.support.dra_objects import (
        DraDevice,
        DraState,
        claim_pod,
        device_class,
        resource_claim,
        resource_slice,
    )
    from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig
    from tests.support.kube_objects import ClusterState, ContainerSpec, make_node, make_pod
    from tests.support.podresources_server import PodResourcesServer

    two_gpus(sc, gpu0_util=[(0, 97)], gpu1_util=[(0, 88)])
    sc.add_gpu(name="NVIDIA H100 80GB HBM3", uuid="GPU-5d0c7e21-9b3a-4f6e-8d1c-2e3f4a5b6c7d",
               pci_bus_id="00000000:AF:00.0", serial="1652923000003", gpu_util=0)
    uuids = [sc.gpu_uuid(i) for i in range(3)]
    now = datetime.now(UTC).replace(microsecond=0)
    pods, claims, pids = [], [], {}
    plan = [  # pod, namespace, container, claim name, device, runs on GPU
        ("train-0", "ml", "trainer", "train-0-gpu-x7k2p", "gpu-0", 0),
        ("train-1", "ml", "trainer", "train-1-gpu-q9z8w", "gpu-2", 0),
        ("nb-a", "research", "jupyter", "shared-gpu", "gpu-1", 1),
        ("nb-b", "research", "jupyter", "shared-gpu", "gpu-1", 1),
    ]
    uids = {name: str(uuidlib.uuid4()) for name, *_ in plan}
    for name, ns, container, claim, device, gpu in plan:
        cid = st.pod_container(name, ns, uids[name], container, "-e", "NVIDIA_VISIBLE_DEVICES=void")
        pids[name] = st.pid(next(n for n in st.containers if n.startswith(f"k8s_{container}_{name}_")))
        sc.add_process(pid=pids[name], gpu=gpu, used_memory_bytes=(30 if name == "train-0" else 12) * GIB,
                       sm_util=[(0, 60 if name != "train-1" else 45)], mem_util=[(0, 40)])
        pod = make_pod(name, ns, HOSTNAME, now, [ContainerSpec(container, runtime="docker", container_id=cid,
                                                                 requests={"cpu": "4", "memory": "16Gi"})],
                       uid=uids[name], labels={"app": name.split("-")[0]})
        pods.append(claim_pod(pod, {"gpu": claim}, {container: ["gpu"]}, template=claim != "shared-gpu"))
        if not any(c["metadata"]["name"] == claim for c in claims):
            claims.append(resource_claim(ns, claim, str(uuidlib.uuid4()), HOSTNAME, [("gpu", device)],
                                         sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}
                                         if claim == "shared-gpu" else None))
        next(c for c in claims if c["metadata"]["name"] == claim)["status"].setdefault("reservedFor", []).append(
            {"resource": "pods", "name": name, "uid": uids[name]})
    node = make_node(HOSTNAME, now, gpus=3, product="NVIDIA-H100-80GB-HBM3")
    for key in ("capacity", "allocatable"):  # no device plugin: DRA publishes the GPUs in a ResourceSlice
        node["status"][key].pop("nvidia.com/gpu", None)
    state = ClusterState(nodes=[node], pods=pods,
                         dra=DraState(slices=[resource_slice(HOSTNAME, [DraDevice(i, u) for i, u in enumerate(uuids)])],
                                      claims=claims, device_classes=[device_class()]))
    api = KubeAPIServer(state).start()
    st.cleanups.append(api.stop)
    kubeconfig = write_kubeconfig(st.tmp / "kubeconfig", api.url)
    sock = st.tmp / "kubelet.sock"
    pr = PodResourcesServer(sock, pods=pods, gpu_ids=uuids, claims=claims).start()
    st.cleanups.append(pr.stop)
    st.capture_args += ["--kubeconfig", str(kubeconfig), "--node", HOSTNAME,
                        "--set", f"podresources.socket={sock}"]
    return ("Kubernetes node whose GPUs NVIDIA's DRA driver grants through ResourceClaims (no nvidia.com/gpu "
            "limits; NVIDIA_VISIBLE_DEVICES=void): ml/train-0 runs on its claim's GPU 0, research/nb-a and nb-b "
            "time-slice one claim on GPU 1, ml/train-1's claim gave it GPU 2 but it runs on GPU 0.")


DEGRADE_AT_S = 6.0  # after the swap: the sampling child has registered for NVML events by then


def _degrading_gpus(sc: nvmlsim.Scenario, degraded: bool) -> None:
    """Two H100s; ``degraded``: from the swap on (times relative to it), GPU 0's PCIe link at x8 of
    x16 and replaying, NVLink 2 counting CRC errors, NVLink 3 down after two recoveries, a 3 s
    hardware thermal slowdown; GPU 1 an uncontained ECC error with a row remapping pending and the
    driver's recovery action GPU_RESET."""
    def during(healthy: float, bad: float, at: float = DEGRADE_AT_S) -> Any:
        return [(0, healthy), (at, bad)] if degraded else healthy

    links = ({"nvlink_crc_flit_2": [(0, 0), (3, 57)], "nvlink_state_3": [(0, 1), (DEGRADE_AT_S, 0)],
              "nvlink_recovery_3": [(0, 0), (DEGRADE_AT_S - 1, 2)]} if degraded else {})
    sc.add_gpu(name="NVIDIA H100 80GB HBM3", uuid="GPU-8f2c1d3e-5a6b-4c7d-9e0f-1a2b3c4d5e6f",
               pci_bus_id="00000000:3B:00.0", serial="1652923000001", gpu_util=96, power_mw=[(0, 612_000)],
               pcie_width_curr=during(16, 8, 2), pcie_replay_counter=[(0, 3), (3, 60), (8, 180)] if degraded else 3,
               clocks_event_reasons=[(0, 0), (DEGRADE_AT_S, 0x40), (DEGRADE_AT_S + 3, 0)] if degraded else 0,
               temperature_c=during(71, 89), nvlink_links=4, attrs=links)
    sc.add_gpu(name="NVIDIA H100 80GB HBM3", uuid="GPU-2b7e9a10-c4d5-4e6f-8a9b-0c1d2e3f4a5b",
               pci_bus_id="00000000:86:00.0", serial="1652923000002", gpu_util=during(41, 0),
               temperature_c=[(0, 52)], power_mw=[(0, 210_000)], nvlink_links=4,
               gpu_recovery_action=during(0, 1), ecc_uncorrected_volatile=during(0, 1), remapped_rows=None,
               attrs={"remapped_rows_correctable": 0, "remapped_rows_failure": 0,
                      "remapped_rows_uncorrectable": during(0, 1), "remapped_rows_pending": during(0, 1)})
    if degraded:
        sc.add_xid(gpu=1, at_s=DEGRADE_AT_S, code=95)
        sc.add_xid(gpu=1, at_s=DEGRADE_AT_S + 0.2, code=154)


def degraded_gpu_node(st: Stage, sc: nvmlsim.Scenario) -> str:
    """Silent degradation and a GPU the driver wants reset, on a Kubernetes node: healthy when the
    snapshot reads them, the GPUs degrade during the window (the NVML scenario is swapped once the
    kubernetes collector lists the pods, after the nvml snapshot) and the device plugin takes GPU 1
    out of the node's allocatable (seen by the Node's second read at the end of the window)."""
    import uuid as uuidlib
    from datetime import UTC, datetime

    from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig
    from tests.support.kube_objects import ClusterState, ContainerSpec, make_node, make_pod
    from tests.support.podresources_server import PodResourcesServer, allocatable_response

    _degrading_gpus(sc, degraded=False)
    uuid0, uuid1 = sc.gpu_uuid(0), sc.gpu_uuid(1)
    trainer_uid, inference_uid = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    trainer_cid = st.pod_container("trainer-0", "ml", trainer_uid, "trainer", "-e", f"NVIDIA_VISIBLE_DEVICES={uuid0}")
    inference_cid = st.pod_container("inference-0", "ml", inference_uid, "server", "-e", f"NVIDIA_VISIBLE_DEVICES={uuid1}")
    trainer_pid = st.pid(next(n for n in st.containers if n.startswith("k8s_trainer_")))
    inference_pid = st.pid(next(n for n in st.containers if n.startswith("k8s_server_")))

    def processes(s: nvmlsim.Scenario, degraded: bool) -> None:
        s.add_process(pid=trainer_pid, gpu=0, used_memory_bytes=52 * GIB, sm_util=94, mem_util=58)
        s.add_process(pid=inference_pid, gpu=1, used_memory_bytes=18 * GIB, sm_util=40, mem_util=22,
                      end_s=DEGRADE_AT_S + 0.5 if degraded else None)  # the ECC error kills it

    processes(sc, degraded=False)
    now = datetime.now(UTC).replace(microsecond=0)
    node = make_node(HOSTNAME, now, gpus=2, product="NVIDIA-H100-80GB-HBM3")
    pods = [make_pod(name, "ml", HOSTNAME, now, [ContainerSpec(
        container, command=cmd, runtime="docker", container_id=cid,
        requests={"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
        limits={"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
        env=[("NVIDIA_VISIBLE_DEVICES", gpu)])], owner=("StatefulSet", name.rsplit("-", 1)[0]),
        labels={"app": name.rsplit("-", 1)[0]}, uid=uid)
        for name, container, cmd, cid, gpu, uid in (
            ("trainer-0", "trainer", ["torchrun", "train.py"], trainer_cid, uuid0, trainer_uid),
            ("inference-0", "server", ["python", "serve.py"], inference_cid, uuid1, inference_uid))]
    api = KubeAPIServer(ClusterState(nodes=[node], pods=pods)).start()
    st.cleanups.append(api.stop)
    sock = st.tmp / "kubelet.sock"
    pr = PodResourcesServer(sock, pods=pods, gpu_ids=[uuid0, uuid1]).start()
    st.cleanups.append(pr.stop)
    swapped: list[float] = []

    def swap(_method: str, path: str, _query: dict[str, str]) -> None:
        if path == "/api/v1/pods" and not swapped:
            later = nvmlsim.Scenario()
            _degrading_gpus(later, degraded=True)
            processes(later, degraded=True)
            later.write(st.nvml_scenario_file)
            # the device plugin marks GPU 1 unhealthy: the Node and pod-resources, read again, say so
            node["status"]["allocatable"]["nvidia.com/gpu"] = "1"
            pr.allocatable_response = allocatable_response([uuid0])
            swapped.append(time.time())

    api.on_request = swap
    kubeconfig = write_kubeconfig(st.tmp / "kubeconfig", api.url)
    st.capture_args += ["--kubeconfig", str(kubeconfig), "--node", HOSTNAME, "--set", f"podresources.socket={sock}"]
    return ("Kubernetes node, GPUs healthy at the start of the window: during it GPU 0 (ml/trainer-0) drops to "
            "PCIe x8 of x16 with replays, NVLink 3 goes down and a thermal slowdown holds its clocks; GPU 1 "
            "(ml/inference-0) raises an uncontained ECC error (Xid 95, then 154): the driver asks for a GPU reset, "
            "a row remapping is pending, the server's process dies and the device plugin takes GPU 1 out of the "
            "node's allocatable nvidia.com/gpu (2 -> 1).")


OLDER_OOM_WAIT_S = 45  # how long before the capture the unrelated containers' kills happen


def busy_node(st: Stage, sc: nvmlsim.Scenario) -> str:
    """A busy shared node: unrelated containers were OOM-killed (and removed) before the capture, so
    the kernel log holds their kills; inside the window a data loader is CPU-throttled and another
    container is OOM-killed. Independent causes: one incident each, the in-window ones first."""
    for name in ("nightly-report", "cache-warmer"):
        cid = st.run(name, "--memory", "16m", "--memory-swap", "16m",
                     cmd=["sh", "-c", "x=$(head -c 100000000 /dev/zero | tr '\\0' a); echo $x | wc -c"])
        st.engine.cli("wait", cid, check=False, timeout=60)
        st.engine.cli("rm", "-f", cid, check=False)  # gone before the capture: only its events name it
    time.sleep(OLDER_OOM_WAIT_S)
    st.run("trainer", "-e", "NVIDIA_VISIBLE_DEVICES=0")
    st.run("loader", "--cpus", "0.2", cmd=["sh", "-c", "while :; do :; done"])
    st.run("etl", "--memory", "32m", "--memory-swap", "32m",
           cmd=["sh", "-c", "sleep 4; x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo $x | wc -c"])
    sc.epoch = time.time() + 1.0
    two_gpus(sc, gpu0_util=93, gpu1_util=0)
    sc.add_process(pid=st.pid("trainer"), gpu=0, used_memory_bytes=30 * GIB, sm_util=91, mem_util=50)
    return ("A busy shared node: nightly-report and cache-warmer were OOM-killed and removed before the capture; "
            "in the window, loader (0.2 CPUs) is CPU-throttled and etl (32 MiB) is OOM-killed.")


SCENARIOS: dict[str, Callable[[Stage, nvmlsim.Scenario], str]] = {
    "unallocated-gpu-use": unallocated_gpu_use,
    "cpu-throttled-loader": cpu_throttled_loader,
    "memcg-oom": memcg_oom,
    "xid-fault": xid_fault,
    "clean-host": clean_host,
    "k8s-pod-without-gpu-limit": k8s_pod_without_gpu_limit,
    "busy-node": busy_node,
    "degraded-gpu-node": degraded_gpu_node,
    "k8s-dra-node": k8s_dra_node,
}


def capture(stage: Stage, scenario_file: Path, library: Path, out: Path, since: float) -> Path:
    env = nvmlsim.subprocess_env(scenario_file, library)
    env = {**stage.engine.env(), **{k: v for k, v in env.items() if k in ("NVMLSIM_SCENARIO", "LD_LIBRARY_PATH")}}
    env.pop("KUBECONFIG", None)
    lookback = max(5, int(time.time() - since) + 2)
    cmd = [sys.executable, "-m", "forensics", "capture", "-o", str(out), "--quiet",
           "--duration", str(DURATION_S), "--interval", "1", "--timeout", "60",
           "--nvml-library", str(library), "--since", f"{lookback}s", "--lookback", str(lookback),
           *stage.capture_args]
    if shutil.which("unshare"):
        cmd = ["unshare", "--uts", "sh", "-c", f'hostname {HOSTNAME} && exec "$@"', "sh", *cmd]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"capture failed ({proc.returncode}): {proc.stderr.strip()}")
    return Path(proc.stdout.strip())


def build(name: str, engine: DockerEngine, library: Path, dest: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"gpuforensics-sample-{name}-") as tmpdir:
        tmp = Path(tmpdir)
        stage = Stage(engine=engine, tmp=tmp)
        since = time.time()
        try:
            sc = nvmlsim.Scenario(epoch=time.time() + 1.0)  # capture starts about a second later
            story = SCENARIOS[name](stage, sc)
            scenario_file = sc.write(stage.nvml_scenario_file)
            (tmp / "out").mkdir()
            bundle = capture(stage, scenario_file, library, tmp / "out", since)
            target = dest / f"{name}.tgz"
            target.unlink(missing_ok=True)
            shutil.copyfile(bundle, target)
            os.chmod(target, 0o644)  # shipped samples are world-readable; captures are 0600
        finally:
            for cleanup in reversed(stage.cleanups):
                cleanup()
            for cid in stage.containers.values():
                engine.cli("rm", "-f", cid, check=False)
    return {"scenario": name, "bundle": target.name, "story": story,
            "containers": sorted(stage.containers), "size_bytes": target.stat().st_size}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=f"one of: {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--dest", type=Path, default=ROOT / "sample_bundles")
    args = parser.parse_args(argv)
    names = args.scenarios or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)}")
    libdir = Path(tempfile.mkdtemp(prefix="gpuforensics-nvmlsim-"))
    library = nvmlsim.build_library(libdir)
    engine = acquire_engine(default_runtime="nvidia")
    results = []
    try:
        for name in names:
            print(f"building {name} ...", file=sys.stderr, flush=True)
            results.append(build(name, engine, library, args.dest))
    finally:
        release_engine(engine)
        shutil.rmtree(libdir, ignore_errors=True)
    index_path = args.dest / "scenarios.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    for r in results:
        index[r["scenario"]] = r
    index_path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    for r in results:
        print(f"{r['bundle']}: {r['size_bytes']} bytes - {r['story']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
