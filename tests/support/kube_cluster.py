"""A simulated GPU cluster for ``cluster capture`` tests and benchmarks.

:class:`SimCluster` starts the loopback API server with an exec runtime and builds, per node, a
Node object, optionally a pod of the capture DaemonSet (deploy/daemonset.yaml's template), a
staging directory and its own simulated NVML scenario (distinct GPU serials and UUIDs, so each
bundle can be told apart), plus the kubeconfig of the person running ``cluster capture``::

    with SimCluster(tmp_path, sim_lib, [NodeSpec("gpu-01"), NodeSpec("gpu-02", capture_pod=False)]) as sim:
        run_cluster_capture(ClusterCaptureOptions(out_dir=..., kubeconfig=str(sim.kubeconfig)))

The nodes' captures reach the same server (``KUBECONFIG`` in their environment) for their
kubernetes collector, as a DaemonSet pod reaches its API server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.support import nvmlsim
from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig
from tests.support.kube_exec import ExecRuntime, SimNode
from tests.support.kube_objects import ClusterState, make_capture_pod, make_node

__all__ = ["NodeSpec", "SimCluster", "USER"]

USER = "alice@example.com"


@dataclass
class NodeSpec:
    name: str
    capture_pod: bool = True
    gpus: int = 2
    nvml_hang_s: float | None = None  # NVML init sleeps this long: a capture that hangs
    cut_after_bytes: int | None = None
    corrupt_at_byte: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class SimCluster:
    def __init__(self, root: Path, nvml_library: Path, nodes: list[NodeSpec], forbidden: set[str] | None = None,
                 job_pod_delay_s: float = 0.3) -> None:
        self.root = root
        self.now = datetime.now(UTC).replace(microsecond=0)
        self.specs = nodes
        self.runtime = ExecRuntime()
        pods = [make_capture_pod(n.name, self.now) for n in nodes if n.capture_pod]
        self.state = ClusterState(nodes=[make_node(n.name, self.now, gpus=n.gpus) for n in nodes], pods=pods)
        self.api = KubeAPIServer(self.state, forbidden=forbidden or set(), user=USER, exec_runtime=self.runtime,
                                 job_pod_delay_s=job_pod_delay_s)
        self.nvml_library = nvml_library
        self.kubeconfig = root / "kubeconfig"
        self.gpu_uuids: dict[str, list[str]] = {}

    def capture_pod(self, node: str) -> str:
        return next(p["metadata"]["name"] for p in self.state.pods
                    if p["spec"]["nodeName"] == node and p["metadata"]["namespace"] == "gpuforensics")

    def __enter__(self) -> SimCluster:
        self.api.start()
        write_kubeconfig(self.kubeconfig, self.api.url, namespace="ml")
        node_kubeconfig = write_kubeconfig(self.root / "node-kubeconfig", self.api.url, token="node-sa-token-0123456789")
        for i, spec in enumerate(self.specs):
            sc = nvmlsim.Scenario()
            for g in range(spec.gpus):
                sc.add_gpu(name="NVIDIA H100 80GB HBM3", serial=f"1650{i:04d}{g:04d}", gpu_util=[(0, 40), (1, 90)])
            self.gpu_uuids[spec.name] = sorted(sc.gpu_uuid(g) for g in range(spec.gpus))
            if spec.nvml_hang_s:
                sc.hang("nvmlInit", seconds=spec.nvml_hang_s)
            scenario = sc.write(self.root / f"{spec.name}.scenario.tsv")
            env = nvmlsim.subprocess_env(scenario, self.nvml_library)
            env = {k: env[k] for k in ("LD_LIBRARY_PATH", "NVMLSIM_SCENARIO")}
            env["KUBECONFIG"] = str(node_kubeconfig)
            self.runtime.add(SimNode(spec.name, self.root / "nodes" / spec.name, env,
                                     cut_after_bytes=spec.cut_after_bytes, corrupt_at_byte=spec.corrupt_at_byte))
        return self

    def __exit__(self, *exc: object) -> None:
        self.api.stop()
