"""Benchmark: ``cluster capture`` of 16 simulated nodes against one node's capture alone.

    python bench/bench_cluster_capture.py [--nodes 16] [--duration 5] [--pad-kb 2048] [--rss-steps 1,4,16]

Simulated cluster (tests/support/kube_cluster.py): the loopback API server runs the real
``gpuforensics capture -o -`` per node through the exec WebSocket, each node with its own
simulated NVML; ``--pad-kb`` adds, per node, a pod whose annotation is that many KiB of random
text, so each node's bundle carries that much incompressible evidence (kubernetes/pods.json).
The cluster command runs in a child process of its own (its peak RSS is its own, not the
server's or the nodes').

Prints:
- one node's capture on its own (the capture command with stdout to a file, no Kubernetes);
- the cluster command on one node (that capture plus the stream transfer and verification);
- the cluster command on ``--nodes`` nodes, and the ratio to the one-node run (target: < 1.5;
  the nodes' captures share this machine's CPUs, ``os.cpu_count()`` is printed beside it);
- the cluster command's peak RSS for each node count of ``--rss-steps`` (target: flat, as the
  bundles are streamed to disk and verified member by member, never held whole).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import nvmlsim  # noqa: E402
from tests.support.kube_cluster import NodeSpec, SimCluster  # noqa: E402
from tests.support.kube_objects import ContainerSpec, make_pod  # noqa: E402

_CLUSTER = """
import json, sys, time
sys.path.insert(0, {root!r})
from forensics.cluster import ClusterCaptureOptions, run_cluster_capture
t0 = time.perf_counter()
res = run_cluster_capture(ClusterCaptureOptions(out_dir=__import__("pathlib").Path({out!r}), kubeconfig={kc!r},
                          duration_s={duration}, interval_s=1, parallel=16))
print(json.dumps({{"wall_s": time.perf_counter() - t0, "ok": res.all_ok,
                   "bytes": sum(n.bytes for n in res.nodes), "statuses": res.counts()}}))
"""


def run_cluster(sim: SimCluster, out: Path, duration: float) -> dict[str, float]:
    code = _CLUSTER.format(root=str(ROOT), out=str(out), kc=str(sim.kubeconfig), duration=duration)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    stdout = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"cluster command failed: {stdout}")
    result = json.loads(stdout.strip().splitlines()[-1])
    if not result["ok"]:
        raise SystemExit(f"not every node succeeded: {result['statuses']}")
    result["max_rss_mib"] = usage.ru_maxrss / 1024
    return result


def pad(sim: SimCluster, kib: int) -> None:
    for spec in sim.specs:
        filler = base64.b64encode(os.urandom(kib * 768)).decode()  # 4/3 expansion: ~kib KiB of text
        sim.state.pods.append(make_pod(f"evidence-pad-{spec.name}", "ml", spec.name, sim.now,
                                       [ContainerSpec("app")], labels={"app": "pad"}))
        sim.state.pods[-1]["metadata"]["annotations"] = {"example.com/blob": filler}


def one_capture_alone(sim: SimCluster, root: Path, duration: float) -> float:
    node = sim.runtime.nodes[sim.specs[0].name]
    env = {**os.environ, "PYTHONPATH": str(ROOT), **node.env, "NODE_NAME": node.name}
    node.workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(root / "alone.tgz", "wb") as f:
        subprocess.run([sys.executable, "-m", "forensics", "capture", "-o", "-", "--node", node.name,
                        "--duration", f"{duration:g}", "--interval", "1"], cwd=node.workdir, env=env,
                       stdout=f, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--duration", type=float, default=5.0, help="capture --duration on each node")
    ap.add_argument("--pad-kb", type=int, default=2048)
    ap.add_argument("--rss-steps", default="1,4,16")
    args = ap.parse_args()
    steps = sorted({int(s) for s in args.rss_steps.split(",")} | {1, args.nodes})
    print(f"{os.cpu_count()} CPUs; capture --duration {args.duration:g}; ~{args.pad_kb} KiB of padding per bundle")
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        root = Path(tmp)
        lib = nvmlsim.build_library(root / "lib")
        walls: dict[int, dict[str, float]] = {}
        alone = 0.0
        for n in steps:
            sim_root = root / f"sim{n}"
            sim_root.mkdir()
            specs = [NodeSpec(f"gpu-{i:02d}") for i in range(1, n + 1)]
            with SimCluster(sim_root, lib, specs) as sim:
                pad(sim, args.pad_kb)
                if n == 1:
                    alone = one_capture_alone(sim, root, args.duration)
                walls[n] = run_cluster(sim, root / f"out{n}", args.duration)
            w = walls[n]
            print(f"cluster capture, {n:>2} node(s): {w['wall_s']:6.2f} s wall, {w['bytes'] / 2**20:7.1f} MiB received, "
                  f"peak RSS {w['max_rss_mib']:6.1f} MiB")
        one = walls[1]
        many = walls[args.nodes]
        print(f"one node's capture alone: {alone:.2f} s; with the stream transfer and verify (cluster, 1 node): "
              f"{one['wall_s']:.2f} s")
        print(f"ratio {args.nodes} nodes / 1 node: {many['wall_s'] / one['wall_s']:.2f} (target < 1.5; "
              f"{os.cpu_count()} CPUs shared by {args.nodes} captures)")
        print(f"peak RSS ratio {args.nodes} nodes / 1 node: {many['max_rss_mib'] / one['max_rss_mib']:.2f} "
              f"(target: flat, ~1.0; {many['bytes'] / 2**20:.0f} MiB of bundles went through it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
