"""``cluster capture`` end to end through the real kubernetes client and the real protocol.

The loopback API server upgrades ``pods/exec`` to a WebSocket (v5/v4 channel protocol) and runs
the real ``gpuforensics capture -o -`` as a child per simulated node, each with its own staging
directory, node name and simulated NVML (tests/support/kube_cluster.py): every bundle byte goes
through kubernetes.stream's client, to disk, and through verify.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forensics.analysis import analyze_bundles
from forensics.bundle.reader import open_bundle
from forensics.cluster import ClusterCaptureOptions, format_table, run_cluster_capture
from forensics.cluster.jobspec import JOB_POD_SPEC
from tests.support.kube_cluster import USER, NodeSpec, SimCluster
from tests.support.kube_exec import V5, session_members, wait_for
from tests.support.nvmlsim import fixtures as nvf

sim_lib = nvf.sim_lib
pytestmark = [pytest.mark.slow]


def _no_process_left(sim: SimCluster) -> None:
    """Every exec'd capture, and every collector it forked, is gone once its stream is (the
    runtime stops an abandoned one with SIGTERM, then SIGKILL after 3 s)."""
    for rec in sim.runtime.execs:
        assert rec.pid is None or wait_for(lambda pid=rec.pid: session_members(pid) == [], 10), \
            f"{rec.node}: processes left behind"


def _gpu_uuids(bundle: Path) -> list[str]:
    devices = open_bundle(bundle).read_json("nvml/devices.json")["devices"]
    return sorted(str(d["nvml"]["nvmlDeviceGetUUID"]["value"]) for d in devices)


def test_eight_nodes_in_parallel_then_one_cluster_analysis(tmp_path: Path, sim_lib: Path) -> None:
    names = [f"gpu-{i:02d}" for i in range(1, 9)]
    out = tmp_path / "incident"
    with SimCluster(tmp_path, sim_lib, [NodeSpec(n) for n in names]) as sim:
        res = run_cluster_capture(ClusterCaptureOptions(out_dir=out, kubeconfig=str(sim.kubeconfig), parallel=16))
        _no_process_left(sim)
    assert [n.node for n in res.nodes] == names
    assert res.all_ok, format_table(res)
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{n}.tgz" for n in names] + ["cluster.json"])
    # all eight ran at once: the wall time is far below the sum of the nodes' own durations
    started, finished = res.started, res.finished
    assert sum(n.duration_s for n in res.nodes) > 2.5 * max(n.duration_s for n in res.nodes)
    assert {r.subprotocol for r in sim.runtime.execs} == {V5}
    for node in res.nodes:
        exec_rec = next(r for r in sim.runtime.execs if r.node == node.node)
        assert exec_rec.command[:4] == ["gpuforensics", "capture", "--output", "-"]
        assert ["--node", node.node] == exec_rec.command[4:6]
        assert exec_rec.stdout_bytes == node.bytes == (out / node.bundle).stat().st_size
        bundle = open_bundle(out / node.bundle)
        assert bundle.manifest["host"]["node_name"] == node.node
        assert bundle.file_sha256 == node.sha256
        # its own node's NVML: the GPUs of that node's scenario, not another's
        assert _gpu_uuids(out / node.bundle) == sim.gpu_uuids[node.node]
        assert node.pod == sim.capture_pod(node.node)
        assert (out / node.bundle).stat().st_mode & 0o777 == 0o600
    summary = json.loads((out / "cluster.json").read_text())
    assert summary["all_ok"] is True and summary["counts"] == {"ok": 8}
    assert [n["sha256"] for n in summary["nodes"]] == [n.sha256 for n in res.nodes]
    assert started < finished

    doc = analyze_bundles(sorted(out.glob("*.tgz")))
    assert sorted(b["host"] for b in doc["bundles"]) == names  # eight nodes, by node name


def test_failed_nodes_are_listed_with_why_and_only_verified_bundles_are_kept(tmp_path: Path, sim_lib: Path) -> None:
    specs = [NodeSpec("gpu-ok"), NodeSpec("gpu-nopod", capture_pod=False), NodeSpec("gpu-denied"),
             NodeSpec("gpu-hung", nvml_hang_s=600), NodeSpec("gpu-cut", cut_after_bytes=20_000),
             NodeSpec("gpu-corrupt", corrupt_at_byte=30_000)]
    out = tmp_path / "incident"
    with SimCluster(tmp_path, sim_lib, specs) as sim:
        sim.api.forbidden.add(f"pods/exec:{sim.capture_pod('gpu-denied')}")
        res = run_cluster_capture(ClusterCaptureOptions(out_dir=out, kubeconfig=str(sim.kubeconfig),
                                                        node_timeout_s=15, capture_timeout_s=60))
        _no_process_left(sim)
    by = {n.node: n for n in res.nodes}
    assert sorted(by) == sorted(s.name for s in specs), "every node is a row, none dropped"
    assert not res.all_ok
    assert by["gpu-ok"].status == "ok"
    assert by["gpu-nopod"].status == "no-capture-pod" and "gpuforensics" in by["gpu-nopod"].error
    denied = by["gpu-denied"]
    assert denied.status == "forbidden"
    assert f'User "{USER}" cannot create resource "pods/exec"' in denied.error
    hung = by["gpu-hung"]
    assert hung.status == "timed-out" and "15 s" in hung.error
    assert 14 <= hung.duration_s < 25
    cut = by["gpu-cut"]
    assert cut.status == "failed" and "stream cut after 20000 bytes" in cut.error
    corrupt = by["gpu-corrupt"]
    assert corrupt.status == "failed" and "rejected" in corrupt.error
    assert sorted(p.name for p in out.iterdir()) == ["cluster.json", "gpu-ok.tgz"], "no partial, no unverified bundle"
    table = format_table(res)
    for node in by.values():
        assert node.node in table and node.status in table
    summary = json.loads((out / "cluster.json").read_text())
    assert summary["counts"] == {"ok": 1, "no-capture-pod": 1, "forbidden": 1, "timed-out": 1, "failed": 2}


def test_a_node_whose_evidence_is_incomplete_is_partial_not_ok(tmp_path: Path, sim_lib: Path) -> None:
    """A bundle that verifies can still hold a collector that timed out: that node is ``partial``,
    its bundle kept, the collector named, and the command does not say every node was ok (it did:
    a 16-node run whose every Kubernetes collector had timed out reported ``ok: 16``)."""
    specs = [NodeSpec("gpu-ok"), NodeSpec("gpu-nvml-hung", nvml_hang_s=600)]
    out = tmp_path / "incident"
    with SimCluster(tmp_path, sim_lib, specs) as sim:
        res = run_cluster_capture(ClusterCaptureOptions(out_dir=out, kubeconfig=str(sim.kubeconfig),
                                                        node_timeout_s=120, capture_timeout_s=40))
        _no_process_left(sim)
    by = {n.node: n for n in res.nodes}
    assert by["gpu-ok"].status == "ok" and by["gpu-ok"].incomplete == [] and by["gpu-ok"].error is None, by["gpu-ok"]
    hung = by["gpu-nvml-hung"]
    assert hung.exit_code == 0, hung  # the capture itself succeeded: the bundle was written
    assert hung.status == "partial" and hung.bundle == "gpu-nvml-hung.tgz", hung
    nvml = next(c for c in open_bundle(out / hung.bundle).collectors() if c["name"] == "nvml")
    assert nvml["status"] in ("partial", "failed")
    assert hung.incomplete == [f"nvml: {nvml['status']} ({nvml['error']})"]
    assert hung.error is not None and hung.error.startswith("evidence incomplete: nvml: ")
    assert not res.all_ok
    summary = json.loads((out / "cluster.json").read_text())
    assert summary["all_ok"] is False and summary["counts"] == {"ok": 1, "partial": 1}
    row = next(n for n in summary["nodes"] if n["node"] == "gpu-nvml-hung")
    assert row["incomplete"] == hung.incomplete
    assert any(line.split()[:3] == ["gpu-nvml-hung", hung.pod, "partial"] for line in format_table(res).splitlines())


def test_job_mode_creates_a_job_per_node_streams_and_deletes_it(tmp_path: Path, sim_lib: Path) -> None:
    specs = [NodeSpec("gpu-a", capture_pod=False), NodeSpec("gpu-b", capture_pod=False)]
    out = tmp_path / "incident"
    with SimCluster(tmp_path, sim_lib, specs) as sim:
        res = run_cluster_capture(ClusterCaptureOptions(out_dir=out, kubeconfig=str(sim.kubeconfig), job=True,
                                                        nodes=("gpu-a", "gpu-b"), image="registry.example.com/gpuforensics:0.1.0"))
        _no_process_left(sim)
        assert sim.state.jobs == [] and sim.state.pods == [], "Jobs deleted, and their pods with them"
        created = [json.loads(b) for b in sim.api.bodies]
    assert res.all_ok, format_table(res)
    assert {n.node: n.job.startswith(f"gpuforensics-capture-{n.node}-") for n in res.nodes} == {"gpu-a": True, "gpu-b": True}
    for job in created:
        spec = job["spec"]["template"]["spec"]
        node = spec["nodeName"]
        assert job["metadata"]["annotations"]["gpuforensics.io/node"] == node
        assert spec["containers"][0]["image"] == "registry.example.com/gpuforensics:0.1.0"
        container = {k: v for k, v in spec["containers"][0].items() if k not in ("command", "image")}
        expected = {k: v for k, v in JOB_POD_SPEC["containers"][0].items() if k != "image"}
        assert container == expected, "the container is deploy/job.yaml's"
        assert {k: v for k, v in spec.items() if k not in ("nodeName", "containers")} == \
            {k: v for k, v in JOB_POD_SPEC.items() if k != "containers"}
        assert job["spec"]["activeDeadlineSeconds"] > 0
    deletes = [(p, q) for m, p, q in sim.api.requests if m == "DELETE"]
    assert len(deletes) == 2 and all(q == {"propagationPolicy": "Background"} for _, q in deletes)
    for node in res.nodes:  # exec'd into the Job's own pod
        assert node.pod is not None and node.pod.startswith(f"{node.job}-")
    for node in res.nodes:
        assert open_bundle(out / node.bundle).manifest["host"]["node_name"] == node.node


def test_kubectl_plugin_then_analyze_the_directory(tmp_path: Path, sim_lib: Path) -> None:
    """``kubectl gpuforensics capture`` (the plugin entry point, kubectl's flags) exits 1 when a
    node gave no bundle, prints the table on stderr and the summary's path on stdout; ``analyze
    DIR`` reads the bundles cluster.json kept and names the node it lacks."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo), "HOME": str(tmp_path)}
    env.pop("KUBECONFIG", None)
    out = tmp_path / "incident"
    with SimCluster(tmp_path, sim_lib, [NodeSpec("gpu-01"), NodeSpec("gpu-02", capture_pod=False)]) as sim:
        proc = subprocess.run([sys.executable, "-c", "from forensics.cli import kubectl_main; kubectl_main()",
                               "capture", "--kubeconfig", str(sim.kubeconfig), "--context", "loopback",
                               "-n", "gpuforensics", "-o", str(out), "--", "--skip", "docker"],
                              env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.strip() == str(out / "cluster.json")
    table = proc.stderr.splitlines()
    assert table[0].split()[:3] == ["NODE", "POD", "STATUS"]
    assert any(line.split()[:3] == ["gpu-01", sim.capture_pod("gpu-01"), "ok"] for line in table)
    assert any(line.startswith("gpu-02") and "no-capture-pod" in line for line in table)
    assert json.loads((out / "cluster.json").read_text())["command"][-2:] == ["--skip", "docker"]

    analyzed = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(out), "-f", "json"],
                              env=env, capture_output=True, text=True, timeout=120)
    assert analyzed.returncode == 0, analyzed.stderr
    doc = json.loads(analyzed.stdout)
    assert [b["host"] for b in doc["bundles"]] == ["gpu-01"]
    assert "node gpu-02: no bundle (no-capture-pod" in analyzed.stderr
