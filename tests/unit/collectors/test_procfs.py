"""procfs collector: PIDs of interest, attribution, redaction, hints, caps; fake and real /proc."""

from __future__ import annotations

import os
import time
from pathlib import Path

from forensics.collectors.procfs import ProcfsCollector
from forensics.hostfs.files import describe_os_error
from forensics.hostfs.proc import ScanStats, scan_proc_cgroups
from tests.support.host_evidence import (
    DOCKER_ID,
    DOCKER_SCOPE,
    POD_CONTAINER_ID,
    POD_SCOPE,
    POD_UID,
    fake_proc,
    fake_process,
    make_context,
    read_json,
)


def test_pids_of_interest_attribution_and_hints(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path)
    ctx = make_context(tmp_path / "stage", {"pids": [4242, 99999]})
    ProcfsCollector(str(proc)).snapshot(ctx)
    index = read_json(tmp_path / "stage", "proc/index.json")
    by_pid = {p["pid"]: p for p in index["processes"]}
    assert set(by_pid) == {4242, 5151, 99999}  # sshd (host) is not of interest
    assert by_pid[4242]["reasons"] == ["container", "hint"]
    assert by_pid[4242]["attribution"]["container_id"] == DOCKER_ID
    assert by_pid[4242]["nspid"] == [4242, 1]
    assert by_pid[5151]["attribution"]["pod_uid"] == POD_UID
    assert by_pid[5151]["comm"] == "python3, worker"
    assert by_pid[99999]["files"] == "absent"
    assert by_pid[4242]["start_time"].startswith("2026-")
    assert index["scan"]["scanned"] == 3
    assert ctx.published["cgroup_paths"] == [DOCKER_SCOPE, POD_SCOPE]
    assert [by_pid[p]["attribution"]["container_id"] for p in (4242, 5151)] == [DOCKER_ID, POD_CONTAINER_ID]
    assert set(ctx.published) == {"cgroup_paths", "procfs_recorded_pids"}  # ids and uids: nobody reads them


def test_raw_files_verbatim_and_cmdline_redacted(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path)
    stage = tmp_path / "stage"
    ProcfsCollector(str(proc)).snapshot(make_context(stage))
    assert (stage / "proc/4242/cgroup").read_bytes() == (proc / "4242/cgroup").read_bytes()
    assert (stage / "proc/4242/stat").read_bytes() == (proc / "4242/stat").read_bytes()
    cmdline = (stage / "proc/4242/cmdline").read_bytes()
    assert b"hunter2" not in cmdline and cmdline.startswith(b"python3\0train.py\0--password=")
    environ = (stage / "proc/4242/environ").read_bytes()
    assert b"NVIDIA_VISIBLE_DEVICES=GPU-8f2c\0" in environ and b"PATH=/usr/bin\0" in environ
    assert b"hf_abcdefghijklmnop" not in environ and b"HF_TOKEN=<redacted:" in environ
    entry = next(p for p in read_json(stage, "proc/index.json")["processes"] if p["pid"] == 4242)
    assert entry["gpu_env"] == {"NVIDIA_VISIBLE_DEVICES": "GPU-8f2c"}
    ns = read_json(stage, "proc/4242/ns.json")
    assert "error" in ns["pid"]  # a fake /proc has no namespace links: recorded, not fatal


def test_no_redact_keeps_cmdline(tmp_path: Path) -> None:
    from forensics.bundle.redact import Redactor

    proc = fake_proc(tmp_path)
    ctx = make_context(tmp_path / "stage", redact=False)
    ctx.redactor = Redactor(False)
    ProcfsCollector(str(proc)).snapshot(ctx)
    assert (tmp_path / "stage/proc/4242/cmdline").read_bytes() == (proc / "4242/cmdline").read_bytes()
    assert (tmp_path / "stage/proc/4242/environ").read_bytes() == (proc / "4242/environ").read_bytes()


def test_all_processes_includes_host_processes(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path)
    ctx = make_context(tmp_path / "stage", all_processes=True)
    ProcfsCollector(str(proc)).snapshot(ctx)
    pids = {p["pid"] for p in read_json(tmp_path / "stage", "proc/index.json")["processes"]}
    assert pids == {77, 4242, 5151}


def test_pid_cap_keeps_index_entries(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path)
    ctx = make_context(tmp_path / "stage", {"pids": [5151]}, extra={"procfs.max_pids": "1"})
    ProcfsCollector(str(proc)).snapshot(ctx)
    index = read_json(tmp_path / "stage", "proc/index.json")
    files = {p["pid"]: p["files"] for p in index["processes"]}
    assert files == {5151: "written", 4242: "omitted"}  # the hinted PID comes first
    assert ctx.partial_reasons and not (tmp_path / "stage/proc/4242").exists()


def test_ten_thousand_processes_in_one_container(tmp_path: Path) -> None:
    """A container with 10 000 processes: one linear scan, bounded member count."""
    proc = tmp_path / "proc"
    proc.mkdir()
    cgroup = f"0::{DOCKER_SCOPE}\n"
    for pid in range(1000, 11000):
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "cgroup").write_text(cgroup)
    stats = ScanStats()
    started = time.perf_counter()
    found = sum(1 for e in scan_proc_cgroups(str(proc), stats) if e.attribution.kind == "container")
    elapsed = time.perf_counter() - started
    assert found == 10_000 and stats.scanned == 10_000
    assert elapsed < 10.0
    ctx = make_context(tmp_path / "stage", extra={"procfs.max_pids": "50"})
    ProcfsCollector(str(proc)).snapshot(ctx)
    index = read_json(tmp_path / "stage", "proc/index.json")
    assert len(index["processes"]) == 10_000
    assert sum(p["files"] == "written" for p in index["processes"]) == 50
    assert ctx.published["cgroup_paths"] == [DOCKER_SCOPE]


def test_real_proc_own_process(tmp_path: Path) -> None:
    """The real /proc: this test process, hinted, is collected with parsed essentials."""
    stage = tmp_path / "stage"
    ctx = make_context(stage, {"pids": [os.getpid()]})
    ProcfsCollector().snapshot(ctx)
    index = read_json(stage, "proc/index.json")
    mine = next(p for p in index["processes"] if p["pid"] == os.getpid())
    assert mine["files"] == "written" and mine["threads"] >= 1 and mine["rss_bytes"] > 0
    assert (stage / f"proc/{os.getpid()}/cgroup").read_bytes() == Path("/proc/self/cgroup").read_bytes()
    assert index["boot_time_unix"] and index["clock_ticks_per_s"] > 0


def test_exited_process_between_scan_and_read(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path)
    fake_process(proc, 31337, f"0::{DOCKER_SCOPE}\n")
    collector = ProcfsCollector(str(proc))
    ctx = make_context(tmp_path / "stage")
    (proc / "31337" / "stat").unlink()
    collector.snapshot(ctx)
    entry = next(p for p in read_json(tmp_path / "stage", "proc/index.json")["processes"]
                 if p["pid"] == 31337)
    assert entry["errors"]["stat"].startswith("absent")


def test_describe_os_error() -> None:
    assert describe_os_error(PermissionError(13, "Permission denied")).startswith("permission denied")
    assert describe_os_error(FileNotFoundError(2, "No such file")).startswith("absent")
    assert describe_os_error(OSError(19, "No such device")).startswith("removed")


def test_processes_stuck_in_d_state_holding_the_gpu(tmp_path: Path) -> None:
    """A process in state D with /dev/nvidia* open is recorded with its wchan and the device files;
    one in D without them is counted; a sleeping one holding the GPU is not a D-state holder."""
    proc = fake_proc(tmp_path)
    fake_process(proc, 6001, "0::/system.slice/x.service\n", comm="python")
    fake_process(proc, 6002, "0::/system.slice/y.service\n", comm="kworker")
    for pid, state in ((6001, "D"), (6002, "D")):
        stat = proc / str(pid) / "stat"
        stat.write_text(stat.read_text().replace(") S ", f") {state} ", 1))
    (proc / "6001" / "wchan").write_text("uvm_va_space_destroy")
    fds = proc / "6001" / "fd"
    fds.mkdir()
    os.symlink("/dev/nvidiactl", fds / "3")
    os.symlink("/dev/nvidia1", fds / "7")
    os.symlink("/tmp/log.txt", fds / "9")
    (proc / "6002" / "fd").mkdir()
    sleeping = proc / "4242" / "fd"
    sleeping.mkdir()
    os.symlink("/dev/nvidia0", sleeping / "5")
    stage = tmp_path / "stage"
    ctx = make_context(stage)
    ProcfsCollector(str(proc)).snapshot(ctx)
    doc = read_json(stage, "proc/dstate.json")
    assert doc["scanned"] == 5 and doc["dstate_processes"] == 2 and doc["gpu_holders"] == [6001]
    (held,) = [p for p in doc["processes"] if p["pid"] == 6001]
    assert held["wchan"] == "uvm_va_space_destroy" and held["comm"] == "python"
    assert held["nvidia_fds"] == [{"fd": 3, "target": "/dev/nvidiactl"}, {"fd": 7, "target": "/dev/nvidia1"}]
    # no wchan file in the fake /proc for 6002: the error is recorded, not fatal
    (other,) = [p for p in doc["processes"] if p["pid"] == 6002]
    assert other["nvidia_fds"] == [] and "wchan_error" in other


def test_rank_identity_kept_verbatim_and_indexed(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path)
    (proc / "5151/environ").write_bytes(b"RANK=5\0LOCAL_RANK=1\0WORLD_SIZE=8\0MASTER_ADDR=train-0.train.ml.svc\0"
                                        b"NODE_RANK=2\0GROUP_RANK=2\0WANDB_API_KEY=0123456789abcdef\0")
    stage = tmp_path / "stage"
    ProcfsCollector(str(proc)).snapshot(make_context(stage))
    environ = (stage / "proc/5151/environ").read_bytes()
    assert b"RANK=5\0" in environ and b"MASTER_ADDR=train-0.train.ml.svc\0" in environ
    assert b"0123456789abcdef" not in environ  # the rest of the environment still redacted
    entry = next(p for p in read_json(stage, "proc/index.json")["processes"] if p["pid"] == 5151)
    assert entry["rank_env"] == {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8",
                                 "MASTER_ADDR": "train-0.train.ml.svc", "NODE_RANK": "2", "GROUP_RANK": "2"}
    assert "rank_env" not in next(p for p in read_json(stage, "proc/index.json")["processes"] if p["pid"] == 4242)
