"""Helpers for the host-evidence tests (procfs, cgroups, kernel collectors): a collect context
writing to a temporary staging directory, a fake /proc tree and a mountinfo pointing at fixture
cgroup trees."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from forensics.bundle.redact import Redactor
from forensics.bundle.sink import EvidenceSink
from forensics.collect.context import CaptureOptions, CollectContext

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CGROUP_V2 = FIXTURES / "cgroup" / "v2"
DOCKER_ID = "3f9a" + "1" * 60
POD_CONTAINER_ID = "b7c2" + "2" * 60
POD_UID = "6a1f3c2e-9b4d-4e5f-8a7b-1c2d3e4f5a6b"
DOCKER_SCOPE = f"/system.slice/docker-{DOCKER_ID}.scope"
POD_SLICE = ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
             f"{POD_UID.replace('-', '_')}.slice")
POD_SCOPE = f"{POD_SLICE}/cri-containerd-{POD_CONTAINER_ID}.scope"


def make_context(root: Path, hints: dict[str, list[Any]] | None = None,
                 **options: Any) -> CollectContext:
    """A context whose sink writes under ``root`` (the staging directory)."""
    root.mkdir(parents=True, exist_ok=True)
    return CollectContext(CaptureOptions(**options), EvidenceSink(root), Redactor(True),
                          hints or {})


def read_json(root: Path, member: str) -> Any:
    return json.loads((root / member).read_text())


def read_jsonl(root: Path, member: str) -> list[Any]:
    return [json.loads(line) for line in (root / member).read_text().splitlines() if line]


def fake_process(proc: Path, pid: int, cgroup: str, comm: str = "python3",
                 argv: tuple[str, ...] = ("python3", "train.py"), nspid: tuple[int, ...] = ()) -> None:
    """A /proc/<pid> directory with cgroup, stat, status and cmdline in the kernel's formats."""
    base = proc / str(pid)
    base.mkdir(parents=True)
    (base / "cgroup").write_text(cgroup)
    (base / "stat").write_text(
        f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 12345 "
        "104857600 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n")
    ns = "\t".join(str(p) for p in (nspid or (pid,)))
    (base / "status").write_text(
        f"Name:\t{comm}\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t1\n"
        f"Uid:\t0\t0\t0\t0\nNStgid:\t{ns}\nNSpid:\t{ns}\nVmHWM:\t   20480 kB\n"
        "VmRSS:\t   10240 kB\nThreads:\t3\n")
    (base / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (base / "environ").write_bytes(b"PATH=/usr/bin\0NVIDIA_VISIBLE_DEVICES=GPU-8f2c\0"
                                   b"HF_TOKEN=hf_abcdefghijklmnop\0")


def fake_proc(root: Path) -> Path:
    """A /proc with a Docker process (v2 systemd driver), a pod process, a host process and
    /proc/stat (btime)."""
    proc = root / "proc"
    proc.mkdir(parents=True)
    (proc / "stat").write_text("cpu  1 2 3 4\nbtime 1796000000\n")
    fake_process(proc, 4242, f"0::{DOCKER_SCOPE}\n",
                 argv=("python3", "train.py", "--password=hunter2"), nspid=(4242, 1))
    fake_process(proc, 5151, f"0::{POD_SCOPE}\n", comm="python3, worker")
    fake_process(proc, 77, "0::/system.slice/sshd.service\n", comm="sshd")
    return proc


def fake_v2_host(root: Path) -> tuple[Path, Path]:
    """A copy of the v2 fixture tree mounted (per a fake mountinfo) as the unified hierarchy.

    Returns (mountinfo path, /proc/pressure directory)."""
    tree = root / "sys-fs-cgroup"
    shutil.copytree(CGROUP_V2, tree)
    mountinfo = root / "mountinfo"
    mountinfo.write_text(
        f"24 1 0:22 / {tree} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n"
        "25 1 0:5 / /proc rw - proc proc rw\n")
    pressure = root / "pressure"
    pressure.mkdir()
    for resource in ("cpu", "memory", "io"):
        shutil.copy(tree / f"{resource}.pressure", pressure / resource)
    return mountinfo, pressure
