"""A CUDA out-of-memory error beside the GPU's memory, captured for real: two real containers on the
private dockerd share GPU 0 of the simulated NVML; ``hog``, started on trainer's GPU after it, holds
most of its memory; ``trainer`` prints
a PyTorch >= 2.4 out-of-memory error (the private-pools form) twice a second once hog came to its
GPU, as a trainer that retries its step does (the docker collector reads the logs of the capture's window at its
snapshot, beside NVML's snapshot of the GPU). ``gpuforensics capture --duration`` as an operator runs it, then ``gpuforensics analyze``.

What the on-call engineer checks: the OOM is trainer's, its own figures (allocated, of it in CUDA
graphs' private pools, reserved) are read, NVML's reading of the GPU at that moment says who held the
rest (hog), and hog's use of the GPU's memory (``gpu-memory-pressure``, hog its culprit) names
trainer's OOM as its harm, citing trainer's own line.

The message: PyTorch >= 2.4's CUDACachingAllocator wording, as pytorch/pytorch#124673 (merged for 2.4)
formats it (``... is allocated by PyTorch, with <pools> allocated in private pools (e.g., CUDA
Graphs), and <unallocated> is reserved by PyTorch but unallocated.``) with the other process and this
process lines of pytorch/pytorch#99699; the figures are this test's (the real lines of that form are
in tests/support/recent_lines.py, run through the parsers by tests/unit/parsing/test_recent_lines.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support import docker_engine as de
from tests.support.nvmlsim import Scenario, subprocess_env
from tests.support.nvmlsim import fixtures as nvf

sim_lib = nvf.sim_lib  # the fixture

ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30
DURATION_S = 8


def _oom_line(hog_pid: int) -> str:
    return ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
            "of 79.10 GiB of which 1.02 GiB is free. Process " + str(hog_pid) + " has 68.00 GiB memory in use. "
            "Including non-PyTorch memory, this process has 10.00 GiB memory in use. Of the allocated memory "
            "8.50 GiB is allocated by PyTorch, with 1.25 GiB allocated in private pools (e.g., CUDA Graphs), and "
            "512.00 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
            "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
            "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def _kind(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [f for f in doc["findings"] if f["kind"] == kind]


def test_a_pytorch_oom_linked_to_the_container_holding_the_gpu(docker_engine: de.DockerEngine, sim_lib: Path,
                                                               tmp_path: Path) -> None:
    tag = os.getpid()
    ids: dict[str, str] = {}
    try:
        # trainer first, on GPU 0; hog later, on the same GPU (the one that came to a GPU already given)
        ids["trainer"] = docker_engine.run_labelled(
            "run", "-d", "--name", f"trainer-{tag}", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=0",
            de.BUSYBOX_IMAGE, "sh", "-c",
            "while [ ! -f /tmp/oom ]; do sleep 0.1; done; while true; do cat /tmp/oom >&2; sleep 0.5; done")
        trainer_pid = int(docker_engine.cli("inspect", "-f", "{{.State.Pid}}", ids["trainer"]).stdout.strip())
        ids["hog"] = docker_engine.run_labelled("run", "-d", "--name", f"hog-{tag}", "--network", "none",
                                                "-e", "NVIDIA_VISIBLE_DEVICES=0", de.BUSYBOX_IMAGE, "sleep", "300")
        hog_pid = int(docker_engine.cli("inspect", "-f", "{{.State.Pid}}", ids["hog"]).stdout.strip())
        # now trainer's step runs out of memory (PyTorch names hog's process in its message), again and again
        docker_engine.cli("exec", "-e", f"OOM={_oom_line(hog_pid)}", ids["trainer"], "sh", "-c",
                          'echo "$OOM" > /tmp/oom.new && mv /tmp/oom.new /tmp/oom')
        sc = Scenario()
        sc.add_gpu(uuid="GPU-7e1c2a90-3b4d-4f5e-8a6b-1c2d3e4f5a6b", pci_bus_id="00000000:3B:00.0",
                   memory_total_bytes=84_934_656_000, gpu_util=97)
        sc.add_process(pid=hog_pid, gpu=0, used_memory_bytes=68 * GIB, sm_util=70, mem_util=40)
        sc.add_process(pid=trainer_pid, gpu=0, used_memory_bytes=10 * GIB, sm_util=20, mem_util=10)
        env = subprocess_env(sc.write(tmp_path / "nvml.tsv"), sim_lib, base=docker_engine.env())
        for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "NODE_NAME"):
            env.pop(var, None)
        env["HOME"] = str(tmp_path)
        out = tmp_path / "out"
        out.mkdir()
        proc = subprocess.run(
            [sys.executable, "-m", "forensics", "capture", "-o", str(out), "--quiet", "--duration", str(DURATION_S),
             "--interval", "1", "--timeout", "90", "--nvml-library", str(sim_lib),
             # the host's kernel log and cluster are no part of this test
             "--skip", "kernel,kubernetes,podresources"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stderr[-3000:]
        stdout = proc.stdout
        analyzed = subprocess.run([sys.executable, "-m", "forensics", "analyze", stdout.strip(), "-f", "json"],
                                  cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
        assert analyzed.returncode == 0, analyzed.stderr[-3000:]
        doc = json.loads(analyzed.stdout)
    finally:
        for cid in ids.values():
            docker_engine.cli("rm", "-f", cid, check=False)
    trainer, hog = f"trainer-{tag}", f"hog-{tag}"
    ooms = [f for f in _kind(doc, "workload-cuda-error") if f["metrics"]["error"] == "out-of-memory"]
    assert len(ooms) == 1, [(f["kind"], f["summary"]) for f in doc["findings"]]
    oom = ooms[0]
    assert [s["name"] for s in oom["subjects"] if s["role"] == "victim" and s["type"] == "container"] == [trainer]
    m = oom["metrics"]
    assert (m["allocated_bytes"], m["private_pool_bytes"]) == (int(8.5 * GIB), int(1.25 * GIB))
    assert m["reserved_bytes"] == int(8.5 * GIB) + 512 * (1 << 20) and m["process_used_bytes"] == 10 * GIB
    assert m["gpu_used_bytes"] == 78 * GIB and m["others_bytes"] == 68 * GIB, oom["summary"]
    assert "1.2 GiB of it in CUDA graphs' private pools" in oom["summary"]
    assert f"the rest held by {hog} 68.0 GiB" in oom["summary"], oom["summary"]
    assert [s["name"] for s in oom["subjects"] if s["role"] == "witness" and s["type"] == "container"] == [hog]
    # hog's use of the GPU's memory is the finding that names trainer's OOM as its harm
    (pressure,) = _kind(doc, "gpu-memory-pressure")
    assert [s["name"] for s in pressure["subjects"] if s["role"] == "culprit" and s["type"] == "container"] == [hog]
    assert [s["name"] for s in pressure["subjects"] if s["role"] == "victim" and s["type"] == "container"] == [trainer]
    assert f"{trainer}: hit a CUDA out-of-memory error at" in pressure["summary"], pressure["summary"]
    assert any(e["member"] == f"docker/containers/{ids['trainer']}/logs.txt" and "CUDA out of memory" in e["excerpt"]
               for e in pressure["evidence"]), pressure["evidence"]
    # trainer is accused of nothing
    accused = [(f["kind"], f["summary"]) for f in doc["findings"]
               if any(s["role"] == "culprit" and s.get("name") == trainer for s in f["subjects"])]
    assert not accused, accused
