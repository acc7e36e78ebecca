"""Benchmark: capture's docker collector against the loop a person would write, 50 containers.

    python bench/bench_docker_collector.py [--containers 50] [--repeat 3]

Starts (or reuses, via DOCKER_HOST) a real engine, runs N small busybox containers, then times
  A) ``run_capture`` with only the docker collector (inspect + top + one-shot stats of every
     container, image inspect, events, info, allocations, bundle written), and
  B) ``for c in $(docker ps -q); do docker inspect $c; docker top $c; done`` (less evidence),
each ``--repeat`` times, and prints the medians and the ratio B/A (target: at least 5), with
stats and without (``--set docker.stats=0``).

Two engine floors are printed beside them, measured with bare SDK calls and no evidence written:
  - ``engine: 50 tops``: the 50 ``top`` calls alone, 16 in parallel. dockerd asks containerd for
    the container's PIDs and runs ``ps`` per call; on a small host that engine CPU, not the
    client, bounds any collector that takes top of every container;
  - ``engine: 50 one-shot stats``: a one-shot stats call still waits for the engine's stats
    collector tick (moby's collector publishes to the subscribers it has, then sleeps 1 s; the
    first subscriber wakes it, the other 49 wait for the next tick), so stats put a floor of
    about 1 s under the collector. Before every run that takes stats the benchmark waits until
    the engine's collector is idle again, so no run rides on the previous run's tick.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from forensics.bundle.redact import Redactor  # noqa: E402
from forensics.bundle.sink import EvidenceSink  # noqa: E402
from forensics.capture.runner import run_capture  # noqa: E402
from forensics.collect.context import CaptureOptions, CollectContext  # noqa: E402
from forensics.collectors.docker.docker import COLLECTOR, DockerCollector  # noqa: E402
from tests.support.docker_engine import BUSYBOX_IMAGE, acquire_engine, release_engine  # noqa: E402

SHELL_LOOP = "for c in $(docker ps -q); do docker inspect $c; docker top $c; done > /dev/null"
STATS_IDLE_S = 1.5  # longer than the engine's stats interval (1 s): its collector is idle again


def engine_floor(docker_host: str, kind: str) -> float:
    """Wall time of the 50 top (or one-shot stats) calls alone, 16 in parallel, bare SDK."""
    import concurrent.futures as cf

    import docker

    from forensics.parsing.docker_top import TOP_PS_ARGS

    client = docker.APIClient(base_url=docker_host, max_pool_size=64)
    try:
        ids = [c["Id"] for c in client.containers()]
        if kind == "top":
            def call(cid: str) -> object:
                return client.top(cid, ps_args=TOP_PS_ARGS)
            workers = 16
        else:
            def call(cid: str) -> object:
                return client.stats(cid, stream=False, one_shot=True)
            workers = 64
        t = time.monotonic()
        with cf.ThreadPoolExecutor(workers) as ex:
            list(ex.map(call, ids))
        return time.monotonic() - t
    finally:
        client.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--containers", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    engine = acquire_engine()
    ids: list[str] = []
    try:
        t0 = time.monotonic()
        for i in range(args.containers):
            ids.append(engine.run_labelled("run", "-d", "--network", "none", "--name",
                                           f"bench-{i}", BUSYBOX_IMAGE, "sleep", "3600"))
        print(f"engine {engine.docker_host} ({'private' if engine.private else 'DOCKER_HOST'}); "
              f"{len(ids)} containers started in {time.monotonic() - t0:.1f} s")

        runs: dict[str, list[float]] = {"full": [], "nostats": [], "inproc": [],
                                        "inproc_nostats": [], "shell": [], "floor_top": [],
                                        "floor_stats": []}
        with tempfile.TemporaryDirectory() as out:
            for _ in range(args.repeat):
                for mode in ("full", "nostats"):
                    extra = {"docker.host": engine.docker_host}
                    if mode == "nostats":
                        extra["docker.stats"] = "0"
                    else:
                        time.sleep(STATS_IDLE_S)
                    t = time.monotonic()
                    result = run_capture(CaptureOptions(timeout_s=120, extra=extra), out,
                                         collectors=[COLLECTOR])
                    runs[mode].append(time.monotonic() - t)
                    st = result.manifest["collectors"][0]
                    if st["status"] != "ok":
                        print(f"collector status {st['status']}: {st['error']}", file=sys.stderr)
                        return 1
                    result.path.unlink()
                for mode, stats in (("inproc", "1"), ("inproc_nostats", "0")):
                    with tempfile.TemporaryDirectory() as staging:
                        extra = {"docker.host": engine.docker_host, "docker.stats": stats}
                        ctx = CollectContext(CaptureOptions(timeout_s=120, extra=extra),
                                             EvidenceSink(Path(staging)), Redactor())
                        if stats == "1":
                            time.sleep(STATS_IDLE_S)
                        t = time.monotonic()
                        DockerCollector().snapshot(ctx)
                        runs[mode].append(time.monotonic() - t)
                t = time.monotonic()
                subprocess.run(["bash", "-c", SHELL_LOOP], env=engine.env(), check=True)
                runs["shell"].append(time.monotonic() - t)
                runs["floor_top"].append(engine_floor(engine.docker_host, "top"))
                time.sleep(STATS_IDLE_S)
                runs["floor_stats"].append(engine_floor(engine.docker_host, "stats"))

        med = {k: statistics.median(v) for k, v in runs.items()}
        labels = {
            "full": "capture, docker collector (inspect+top+stats+images+events, bundle)",
            "nostats": "capture, docker collector with --set docker.stats=0",
            "inproc": "the collector's snapshot() alone, in process (no fork, no tarball)",
            "inproc_nostats": "snapshot() in process, --set docker.stats=0",
            "shell": "shell loop (docker inspect + docker top per container)",
            "floor_top": "engine: the 50 top calls alone, 16 in parallel (bare SDK)",
            "floor_stats": "engine: 50 one-shot stats calls from an idle stats collector",
        }
        for k in ("full", "nostats", "inproc", "inproc_nostats", "shell", "floor_top",
                  "floor_stats"):
            print(f"{labels[k]:<72} median {med[k]:6.2f} s  runs {[round(x, 2) for x in runs[k]]}")
        print(f"ratio shell/capture (full evidence):             {med['shell'] / med['full']:.1f}x")
        print(f"ratio shell/snapshot() (full evidence):          {med['shell'] / med['inproc']:.1f}x")
        print(f"ratio shell/capture (no stats, the loop's evidence and more): "
              f"{med['shell'] / med['nostats']:.1f}x   (target >= 5x)")
        print(f"ratio shell/snapshot() (no stats):               "
              f"{med['shell'] / med['inproc_nostats']:.1f}x")
        print(f"ceiling shell/(engine's 50 tops alone):          "
              f"{med['shell'] / med['floor_top']:.1f}x   (no collector that takes top of every "
              f"container can beat this on this host)")
        print(f"ceiling shell/(engine's one-shot stats tick):    "
              f"{med['shell'] / med['floor_stats']:.1f}x   (likewise for one taking stats)")
        return 0
    finally:
        for cid in ids:
            engine.cli("rm", "-f", cid, check=False)
        release_engine(engine)


if __name__ == "__main__":
    raise SystemExit(main())
