"""Host evidence against the real kernel: cgroup v1 (hybrid host) memory and cpu cgroups made
here (``gpuforensics-test-*``, removed afterwards), a process really OOM-killed and one really
CPU-throttled, read back through the procfs, cgroups and kernel collectors, in-process and through
the capture runner into a bundle."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from forensics.bundle.reader import open_bundle
from forensics.capture.runner import run_capture
from forensics.collect.context import CaptureOptions, Tick
from forensics.collectors.cgroups import CgroupsCollector
from forensics.collectors.kernel import KernelCollector
from forensics.collectors.procfs import ProcfsCollector
from tests.support.env import is_root, need
from tests.support.host_evidence import make_context, read_json, read_jsonl

pytestmark = [pytest.mark.root, pytest.mark.slow]

V1_MEMORY = Path("/sys/fs/cgroup/memory")
V1_CPU = Path("/sys/fs/cgroup/cpu")
LIMIT_BYTES = 32 << 20


@dataclass
class Lab:
    """The cgroups and processes of one test run."""

    memory_path: str  # relative to the hierarchy root, as /proc/<pid>/cgroup shows it
    cpu_path: str
    memory_container: str
    cpu_container: str
    oom_pid: int
    oom_returncode: int
    busy: subprocess.Popen[bytes]
    started: datetime


def _enter_and_exec(procs_file: Path, code: str) -> list[str]:
    # The shell moves itself into the cgroup, then becomes Python: no window outside it.
    return ["sh", "-c", f'echo $$ > "{procs_file}" && exec "{sys.executable}" -c "{code}"']


def _rmdir_tree(path: Path) -> None:
    for child in sorted(path.rglob("*"), reverse=True):
        if child.is_dir():
            for _ in range(50):
                try:
                    child.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
    try:
        path.rmdir()
    except OSError:
        pass


@pytest.fixture
def lab() -> Iterator[Lab]:
    need(is_root(), "root (creates cgroups, reads /dev/kmsg)")
    need((V1_MEMORY / "memory.limit_in_bytes").exists() and (V1_CPU / "cpu.cfs_quota_us").exists(),
         "cgroup v1 memory and cpu hierarchies at /sys/fs/cgroup/{memory,cpu}")
    tag = f"gpuforensics-test-{os.getpid()}-{secrets.token_hex(3)}"
    memory_container = "feed" + secrets.token_hex(30)
    cpu_container = "beef" + secrets.token_hex(30)
    memory_dir = V1_MEMORY / tag / f"docker-{memory_container}.scope"
    cpu_dir = V1_CPU / tag / f"docker-{cpu_container}.scope"
    busy: subprocess.Popen[bytes] | None = None
    started = datetime.now(UTC) - timedelta(seconds=1)
    try:
        memory_dir.mkdir(parents=True)
        (memory_dir / "memory.limit_in_bytes").write_text(str(LIMIT_BYTES))
        if (memory_dir / "memory.memsw.limit_in_bytes").exists():
            (memory_dir / "memory.memsw.limit_in_bytes").write_text(str(LIMIT_BYTES))
        cpu_dir.mkdir(parents=True)
        (cpu_dir / "cpu.cfs_period_us").write_text("100000")
        (cpu_dir / "cpu.cfs_quota_us").write_text("10000")  # 0.1 CPU
        # Really OOM-killed: touches 256 MiB under a 32 MiB limit.
        oom = subprocess.Popen(_enter_and_exec(memory_dir / "cgroup.procs",
                                               "b = b'x' * (256 << 20)"),
                               stderr=subprocess.DEVNULL)
        oom_returncode = oom.wait(timeout=60)
        # Really throttled: a busy loop under 0.1 CPU, for at most 60 s.
        busy = subprocess.Popen(_enter_and_exec(
            cpu_dir / "cgroup.procs",
            "import time\nend = time.time() + 60\nwhile time.time() < end: pass"))
        time.sleep(1.0)
        yield Lab(f"/{tag}/docker-{memory_container}.scope", f"/{tag}/docker-{cpu_container}.scope",
                  memory_container, cpu_container, oom.pid, oom_returncode, busy, started)
    finally:
        if busy is not None and busy.poll() is None:
            os.kill(busy.pid, signal.SIGKILL)
            busy.wait(timeout=10)
        _rmdir_tree(V1_MEMORY / tag)
        _rmdir_tree(V1_CPU / tag)
        assert not (V1_MEMORY / tag).exists() and not (V1_CPU / tag).exists()


def test_real_oom_and_throttling_through_the_collectors(lab: Lab, tmp_path: Path) -> None:
    assert lab.oom_returncode == -signal.SIGKILL, "the memory hog was not OOM-killed"
    stage = tmp_path / "stage"

    # procfs: the throttled PID attributes to its (docker-shaped) cgroup from the kernel's view.
    procfs_ctx = make_context(stage, {"pids": [lab.busy.pid]})
    ProcfsCollector().snapshot(procfs_ctx)
    index = read_json(stage, "proc/index.json")
    busy = next(p for p in index["processes"] if p["pid"] == lab.busy.pid)
    assert busy["attribution"]["container_id"] == lab.cpu_container
    assert busy["attribution"]["runtime"] == "docker"
    assert lab.cpu_path in procfs_ctx.published["cgroup_paths"]
    assert busy["cgroup_paths"]["cpu"] == lab.cpu_path

    # cgroups: the memory cgroup's OOM counters and the cpu cgroup's throttling, read for real.
    hints = dict(procfs_ctx.published)
    hints["cgroup_paths"] = [*hints["cgroup_paths"], lab.memory_path]  # as Docker would hand it
    cgroups_ctx = make_context(stage, hints)
    collector = CgroupsCollector()
    collector.snapshot(cgroups_ctx)
    cgroups = {c["path"]: c for c in read_json(stage, "cgroup/index.json")["cgroups"]}
    memory = cgroups[lab.memory_path]["values"]["memory"]
    assert memory["limit_bytes"] == LIMIT_BYTES
    assert memory["oom_kill"] >= 1 and memory["failcnt"] >= 0  # memsw may fail first
    assert memory["peak_bytes"] >= LIMIT_BYTES - (1 << 20)
    cpu = cgroups[lab.cpu_path]["values"]["cpu"]
    assert cpu["quota_usec"] == 10000 and cpu["period_usec"] == 100000
    assert cpu["nr_throttled"] > 0 and cpu["throttled_ns"] > 0
    oom_control = (stage / f"cgroup/memory{lab.memory_path}/memory.oom_control").read_text()
    assert "oom_kill " in oom_control

    # sampling: throttling grows tick over tick; a removed cgroup is recorded as such.
    for index_ in range(2):
        collector.sample(cgroups_ctx, Tick(index_, time.time()))
        time.sleep(0.6)
    os.kill(lab.busy.pid, signal.SIGKILL)
    lab.busy.wait(timeout=10)
    cpu_dir = V1_CPU / lab.cpu_path.lstrip("/")
    for _ in range(50):
        try:
            cpu_dir.rmdir()
            break
        except OSError:
            time.sleep(0.1)
    collector.sample(cgroups_ctx, Tick(2, time.time()))
    collector.end_sampling(cgroups_ctx)
    samples = [s for s in read_jsonl(stage, "cgroup/samples.jsonl") if s["cgroup"] == lab.cpu_path]
    assert [s["tick"] for s in samples] == [0, 1, 2]
    assert samples[1]["values"]["cpu"]["nr_throttled"] > samples[0]["values"]["cpu"]["nr_throttled"]
    assert samples[2]["errors"]["cpu/cpu.stat"].startswith(("removed", "absent"))

    # kernel: the OOM kill, linked to the memory cgroup and so to its container.
    kernel_ctx = make_context(stage, since=lab.started)
    KernelCollector().snapshot(kernel_ctx)
    kills = [k for k in read_json(stage, "kernel/oom.json") if k["pid"] == lab.oom_pid]
    assert kills, "the OOM kill is not in the kernel log"
    kill = kills[-1]
    assert kill["scope"] == "memcg" and kill["task_memcg"] == lab.memory_path
    assert kill["task_attribution"]["container_id"] == lab.memory_container
    assert kill["memcg_limit_bytes"] == LIMIT_BYTES
    assert datetime.fromisoformat(kill["time"].replace("Z", "+00:00")) >= lab.started - timedelta(seconds=5)


def test_capture_runner_bundle(lab: Lab, tmp_path: Path) -> None:
    """The same host evidence through the capture runner: members land in a verified bundle."""
    options = CaptureOptions(only=("procfs", "cgroups", "kernel"), duration_s=1.0,
                             interval_s=0.5, timeout_s=60, since=lab.started)
    result = run_capture(options, tmp_path)
    statuses = {c["name"]: c["status"] for c in result.manifest["collectors"]}
    assert statuses.get("procfs") in ("ok", "partial")
    assert statuses.get("cgroups") in ("ok", "partial") and statuses.get("kernel") in ("ok", "partial")
    bundle = open_bundle(result.path)
    assert bundle.has("proc/index.json") and bundle.has("cgroup/index.json")
    assert bundle.has("kernel/kmsg.txt") and bundle.has("cgroup/samples.jsonl")
    samples = [obj for _, obj in bundle.iter_jsonl("cgroup/samples.jsonl")
               if obj["cgroup"] == lab.cpu_path]
    assert len(samples) >= 2
    kills = [k for k in bundle.read_json("kernel/oom.json") if k["pid"] == lab.oom_pid]
    assert kills and kills[0]["task_attribution"]["container_id"] == lab.memory_container


_UNPRIVILEGED = r'''
import json, os, sys
from pathlib import Path
from forensics.bundle.redact import Redactor
from forensics.bundle.sink import EvidenceSink
from forensics.collect.context import CaptureOptions, CollectContext
from forensics.collectors.kernel import KernelCollector
from forensics.collectors.procfs import ProcfsCollector
from forensics.errors import SourcePermissionDenied
os.setgid(65534)  # drop to nobody after the imports (the interpreter lives under /root)
os.setuid(65534)
stage = Path(sys.argv[1])
ctx = CollectContext(CaptureOptions(), EvidenceSink(stage), Redactor(True), {"pids": [1]})
ProcfsCollector().snapshot(ctx)
result = {"procfs_partial": ctx.partial_reasons}
try:
    KernelCollector().snapshot(CollectContext(CaptureOptions(), EvidenceSink(stage), Redactor(True), {}))
    result["kernel"] = "ok"
except SourcePermissionDenied as error:
    result["kernel"] = f"denied: {error}"
print(json.dumps(result))
'''


def test_unprivileged_user_records_permission_denied() -> None:
    """As an unprivileged user: what may not be read is recorded as permission denied, and the
    rest is still collected (here: PID 1's namespace links; the kernel log under
    kernel.dmesg_restrict=1)."""
    need(is_root(), "root (to drop to the nobody user)")
    import json
    import shutil
    import tempfile

    stage = Path(tempfile.mkdtemp(prefix="gpuforensics-test-unpriv-"))
    os.chmod(stage, 0o777)
    repo = Path(__file__).resolve().parents[2]
    try:
        done = subprocess.run(
            [sys.executable, "-c", _UNPRIVILEGED, str(stage)], cwd=repo, capture_output=True,
            text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(repo)})
        result_text = done.stdout
        index = read_json(stage, "proc/index.json") if done.returncode == 0 else {}
        ns = read_json(stage, "proc/1/ns.json") if done.returncode == 0 else {}
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    result = json.loads(result_text.splitlines()[-1])
    init = next(p for p in index["processes"] if p["pid"] == 1)
    assert init["files"] == "written"
    assert ns["pid"]["error"].startswith("permission denied")
    if Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() == "1":
        assert result["kernel"].startswith("denied:") and "/dev/kmsg" in result["kernel"]
