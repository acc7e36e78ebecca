"""``stalled-rank`` across four bundles made by the real capture, one per node of one training job.

``cluster capture`` runs the real ``gpuforensics capture -o - --node N`` for each simulated node
(tests/support/kube_cluster.py): its own simulated NVML, the kubernetes collector reading that
node's pods and their logs through the loopback API server (``pods/{name}/log?timestamps=true``),
its clock against the API server's ``Date`` header, and the prometheus collector reading
dcgm-exporter's history from a real Prometheus, where gpu-03's GPU steps to Xid 79 (fallen off the
bus) 330 s ago. Rank 2 (pod train-2 on gpu-03) logs its last step 30 s after that and never reports
a timeout; ranks 0, 1 and 3 time out in ALLREDUCE SeqNum 1234 180 s after it stopped. The log lines
are the formats PyTorch 2.4 and NCCL 2.20 print (ProcessGroupNCCL's watchdog, NCCL INFO's
communicator line), with the ``[rankN]:`` prefix.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from forensics.analysis import analyze_bundles
from forensics.bundle.reader import open_bundle
from forensics.cluster import ClusterCaptureOptions, format_table, run_cluster_capture
from forensics.humanize import format_clock
from tests.support.kube_cluster import NodeSpec, SimCluster
from tests.support.kube_objects import ContainerSpec, make_pod
from tests.support.nvmlsim import fixtures as nvf
from tests.support.prometheus_server import Family, PrometheusServer, Series, prometheus_factory

sim_lib = nvf.sim_lib
pytestmark = [pytest.mark.slow]
__all__ = ["prometheus_factory"]

NODES = [f"gpu-0{i}" for i in range(1, 5)]
STALLED = 2
PCI = "00000000:18:00.0"  # the simulated NVML's first GPU; NCCL prints it as busId 18000
COMM = ("[rank{r}]:{host}:{pid}:{pid} [0] NCCL INFO comm 0x55d5e{r}0 rank {r} nranks 4 cudaDev 0 nvmlDev 0 "
        "busId 18000 commId 0x7d5c3e9a1f20b64e - Init COMPLETE")
STEP = "[rank{r}]: step {s} loss 2.{s:03d}"
WATCHDOG = ("[rank{r}]:[E1201 00:10:07.000000000 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, "
            "Timeout(ms)=180000) ran for 180043 milliseconds before timing out.")
PROGRESS = ("[rank{r}]:[E1201 00:10:07.000000000 ProcessGroupNCCL.cpp:1664] [PG ID 0 PG GUID 0(default_pg) "
            "Rank {r}] Exception (either an error or timeout) detected by watchdog at work: 1234, last "
            "enqueued NCCL work: 1234, last completed NCCL work: 1233.")


def _logs(r: int, node: str, stop: float) -> list[tuple[float, str]]:
    lines = [(stop - 600, COMM.format(r=r, host=node, pid=4100 + r))]
    lines += [(stop - 10 * (12 - s), STEP.format(r=r, s=s)) for s in range(13)]  # the last step at `stop`
    if r != STALLED:  # blocked in the ALLREDUCE rank 2 never joined, until the watchdog gives up
        lines += [(stop + 180.04, WATCHDOG.format(r=r)), (stop + 180.05, PROGRESS.format(r=r))]
    return lines


def _xid_history(node: str, uuid: str, xid_at: float, now: float) -> Family:
    """dcgm-exporter's ``DCGM_FI_DEV_XID_ERRORS`` (the last Xid seen) for the node's GPU 0."""
    labels = {"gpu": "0", "UUID": uuid, "pci_bus_id": PCI, "device": "nvidia0", "modelName": "NVIDIA H100 80GB HBM3",
              "Hostname": node, "DCGM_FI_DRIVER_VERSION": "550.54.15", "job": "nvidia-dcgm-exporter",
              "instance": "10.42.7.13:9400", "container": "trainer", "namespace": "ml", "pod": f"train-{STALLED}"}
    points = [(t, 79.0 if t >= xid_at else 0.0) for t in (now - 1800 + 15 * i for i in range(120))]
    return Family("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.",
                  [Series("DCGM_FI_DEV_XID_ERRORS", labels, points)])


def test_the_rank_that_stalled_after_an_xid_across_four_captured_nodes(tmp_path: Path, sim_lib: Path,
                                                                       prometheus_factory: Callable[..., PrometheusServer]) -> None:
    now = time.time()
    xid_at, stop = now - 330, now - 300
    sim = SimCluster(tmp_path, sim_lib, [NodeSpec(n, gpus=1) for n in NODES])
    for r, node in enumerate(NODES):
        trainer = ContainerSpec("trainer", limits={"nvidia.com/gpu": "1"},
                                env=[("RANK", str(r)), ("WORLD_SIZE", "4"), ("MASTER_ADDR", "train-0")])
        sim.state.pods.append(make_pod(f"train-{r}", "ml", node, sim.now, [trainer], pod_ip=f"192.168.7.{20 + r}"))
        sim.api.set_pod_log("ml", f"train-{r}", "trainer", _logs(r, node, stop))
    out = tmp_path / "incident"
    with sim:
        api_url = sim.api.url
        prom = prometheus_factory(families=[_xid_history("gpu-03", sim.gpu_uuids["gpu-03"][0], xid_at, now)])
        # the four "nodes" are this one host: its own kernel log (whatever Xid lines it holds) is no node's
        res = run_cluster_capture(ClusterCaptureOptions(out_dir=out, kubeconfig=str(sim.kubeconfig), parallel=4,
                                                        capture_args=("--prometheus", prom.url, "--skip", "kernel")))
    assert res.all_ok, format_table(res)
    bundles = sorted(out.glob("*.tgz"))
    assert [open_bundle(b).manifest["host"]["node_name"] for b in bundles] == NODES
    for b in bundles:  # each node's own pod, its log read through the API with the kubelet's timestamps
        node = open_bundle(b).manifest["host"]["node_name"]
        assert open_bundle(b).has(f"kubernetes/logs/ml/train-{NODES.index(node)}/trainer.log")

    doc = analyze_bundles(bundles)
    stalls = [f for f in doc["findings"] if f["kind"] == "stalled-rank"]
    assert len(stalls) == 1, [f["summary"] for f in doc["findings"]]
    (f,) = stalls
    assert f["node"] == "gpu-03" and f["metrics"]["rank"] == STALLED and f["metrics"]["method"] == "no-timeout"
    # on the API server's clock (gpu-03's offset to it is read from Date headers, whole seconds)
    heads = [f"rank 2 (pod ml/train-2 on gpu-03, GPU 0) stopped at {format_clock(stop + d, '?', zone='Z')}, "
             for d in (-2, -1, 0, 1, 2)]
    head = next((h for h in heads if h in f["summary"]), None)
    assert head is not None and f["summary"].startswith("before capture (5 min earlier): "), f["summary"]
    # placed at the first 15 s Prometheus step that shows the Xid: 15 to 30 s before the last line
    assert any(f"{d} s after Xid 79 on its GPU (" in f["summary"] for d in range(14, 32)), f["summary"]
    # 180 s on one clock; across nodes each offset has the Date header's whole-second resolution
    assert any(f"; ranks 0, 1 and 3 timed out in ALLREDUCE SeqNum 1234, {d} s after it stopped" in f["summary"]
               for d in (178, 179, 180, 181, 182)), f["summary"]
    # the four nodes' clocks are aligned through the API server's Date headers: no caveat
    assert "could not be aligned" not in f["summary"] and f["metrics"]["order_uncertain"] == "no"
    nodes = {n["host"]: n for n in doc["nodes"]}
    assert nodes["gpu-01"]["clock_offset_s"] == 0.0  # the reference node; the others aligned to it through the API server
    assert {nodes[n]["clock_reference"] for n in NODES[1:]} == {"Kubernetes API server " + api_url}, nodes
    assert all(abs(nodes[n]["clock_offset_s"]) <= 1.0 and nodes[n]["clock_uncertainty_s"] <= 2.0 for n in NODES)
    victims = [s["name"] for s in f["subjects"] if s["role"] == "victim" and s["type"] == "pod"]
    witnesses = sorted(s["name"] for s in f["subjects"] if s["role"] == "witness" and s["type"] == "container")
    assert victims == ["ml/train-2"] and witnesses == [f"ml/train-{r}/trainer" for r in (0, 1, 3)], f["subjects"]
    members = {e["member"] for e in f["evidence"]}
    assert "prometheus/query_range/DCGM_FI_DEV_XID_ERRORS.json" in members
    assert any(m.startswith("kubernetes/logs/") for m in members), members
    # the GPU lost on gpu-03 is the cause, and the verdict tells the story in that order
    (lost,) = [x for x in doc["findings"] if x["kind"] == "gpu-lost"]
    assert lost["node"] == "gpu-03" and f["id"] in lost["causes"]
    verdict = doc["verdict"]["headline"]
    assert 0 <= verdict.find("fell off the bus; ") < verdict.find(head), verdict
    assert "s after it stopped" in verdict and "s later" not in verdict, verdict
