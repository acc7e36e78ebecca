"""Benchmark: the kubernetes collector on a full node, 110 pods and 2 000 events.

    python bench/bench_kubernetes.py [--pods 110] [--events 2000] [--repeat 5]

Serves a GPU node with ``--pods`` pods (the kubelet's default maximum is 110) and ``--events``
events from the loopback API server (tests/support/kube_apiserver.py), then runs the collector's
``snapshot`` with the real kubernetes client ``--repeat`` times into fresh staging directories.
Prints, per run and as medians: the collector's wall time, the server's own time (summed time
inside its request handlers: filtering, paging, JSON encoding), and the difference, the
collector's own cost (target: under 1 s). The first run includes importing the client.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from forensics.bundle.redact import Redactor  # noqa: E402
from forensics.bundle.sink import EvidenceSink  # noqa: E402
from forensics.collect.context import CaptureOptions, CollectContext  # noqa: E402
from forensics.collectors.kubernetes.kubernetes import KubernetesCollector  # noqa: E402
from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig  # noqa: E402
from tests.support.kube_objects import gpu_node_scenario  # noqa: E402

NODE = "gpu-node-07"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=110)
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    base = gpu_node_scenario(node_name=NODE)
    on_node = sum(1 for p in base.pods if p["spec"]["nodeName"] == NODE)
    state = gpu_node_scenario(node_name=NODE, extra_pods=max(0, args.pods - on_node),
                              extra_events=max(0, args.events - len(base.events)))
    pods = sum(1 for p in state.pods if p["spec"]["nodeName"] == NODE)
    print(f"node {NODE}: {pods} pods, {len(state.events)} events in the cluster")

    walls, servers = [], []
    with tempfile.TemporaryDirectory(prefix="bench-k8s-") as tmp, KubeAPIServer(state) as api:
        kubeconfig = write_kubeconfig(Path(tmp) / "kubeconfig", api.url)
        for i in range(args.repeat):
            root = Path(tmp) / f"run{i}"
            root.mkdir()
            options = CaptureOptions(kubeconfig=str(kubeconfig), node_name=NODE, timeout_s=60)
            ctx = CollectContext(options, EvidenceSink(root), Redactor(), collector_name="kubernetes")
            api.server_time_s = 0.0
            api.requests.clear()
            t0 = time.perf_counter()
            KubernetesCollector().snapshot(ctx)
            wall = time.perf_counter() - t0
            server = api.server_time_s
            kept = next((n for n in ctx.notes if "events kept" in n), "")
            size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
            print(f"run {i}: collector {wall:.3f} s, server {server:.3f} s, own {wall - server:.3f} s, "
                  f"{len(api.requests)} requests, {size / 1e6:.1f} MB written; {kept}"
                  + ("  (includes importing the client)" if i == 0 else ""))
            if ctx.partial_reasons:
                print("  partial:", ctx.partial_reasons)
            walls.append(wall)
            servers.append(server)
    own = [w - s for w, s in zip(walls, servers, strict=True)]
    warm = own[1:] or own
    print(f"median: collector {statistics.median(walls):.3f} s, server {statistics.median(servers):.3f} s, "
          f"own {statistics.median(own):.3f} s (warm runs: {statistics.median(warm):.3f} s); "
          f"worst own {max(own):.3f} s; target < 1 s beyond the server: "
          f"{'met' if max(own) < 1.0 else 'NOT met'}")
    return 0 if max(own) < 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
