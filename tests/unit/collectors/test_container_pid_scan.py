"""The recorder's repeated /proc scan (ContainerPidScan): the same container and pod paths as a full
scan of /proc/*/cgroup, reading again only the PIDs whose cgroup may have changed: a new process
(or a reused PID), a process at its second scan, and every process at least every ``reread_s``."""

from __future__ import annotations

import os
import time
from pathlib import Path

from forensics.hostfs.proc import ContainerPidScan, attributed_paths, scan_proc_cgroups
from tests.support.host_evidence import DOCKER_SCOPE, POD_SCOPE, fake_proc, fake_process

OTHER_SCOPE = "/system.slice/docker-" + "9c" * 32 + ".scope"


def _full_scan(proc: Path) -> list[str]:
    """What the recorder planned from before: every PID's container/pod paths, first seen first."""
    paths: list[str] = []
    for entry in scan_proc_cgroups(str(proc)):
        if entry.attribution.kind in ("container", "pod"):
            paths.extend(p for p in attributed_paths(entry) if p not in paths)
    return paths


def test_the_paths_of_a_full_scan_reading_settled_processes_no_more(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path)  # a Docker process, a pod process, sshd
    scan = ContainerPidScan(str(proc), reread_s=3600)
    first = scan.paths()
    assert first == _full_scan(proc) and set(first) == {DOCKER_SCOPE, POD_SCOPE}  # (in /proc's order)
    assert scan.reads == 3
    assert scan.paths() == first and scan.reads == 6  # each read again once
    assert scan.paths() == first and scan.reads == 6  # then settled: no read
    fake_process(proc, 6000, f"0::{OTHER_SCOPE}\n")  # a new container's process: read at once
    now = scan.paths()
    assert now == _full_scan(proc) and set(now) == {DOCKER_SCOPE, POD_SCOPE, OTHER_SCOPE}
    assert scan.reads == 7
    for name in os.listdir(proc / "4242"):  # the Docker process exits
        (proc / "4242" / name).unlink()
    (proc / "4242").rmdir()
    now = scan.paths()
    assert now == _full_scan(proc) and set(now) == {POD_SCOPE, OTHER_SCOPE}


def test_a_reused_pid_is_read_again_at_once(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path)
    scan = ContainerPidScan(str(proc), reread_s=3600)
    for _ in range(3):
        scan.paths()
    # sshd (PID 77) exits and a container's process gets PID 77: a new /proc/77 (another inode)
    fake_process(tmp_path / "next", 77, f"0::{OTHER_SCOPE}\n")
    for name in os.listdir(proc / "77"):
        (proc / "77" / name).unlink()
    (proc / "77").rmdir()
    (tmp_path / "next" / "77").rename(proc / "77")
    now = scan.paths()
    assert now == _full_scan(proc) and set(now) == {OTHER_SCOPE, DOCKER_SCOPE, POD_SCOPE}


def test_a_process_moved_after_its_first_sight_is_seen_moved(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path)
    scan = ContainerPidScan(str(proc), reread_s=0.5)
    fake_process(proc, 6000, "0::/system.slice/docker.service\n")  # runc's child, not yet moved
    assert OTHER_SCOPE not in scan.paths()
    (proc / "6000" / "cgroup").write_text(f"0::{OTHER_SCOPE}\n")  # moved into its container's cgroup
    assert OTHER_SCOPE in scan.paths()  # its second sight reads it again
    scan.paths()
    # a settled process moved later (cgclassify, systemd): seen within reread_s
    (proc / "77" / "cgroup").write_text(f"0::{POD_SCOPE.replace('b7c2', 'aaaa')}\n")
    started = time.monotonic()
    while POD_SCOPE.replace("b7c2", "aaaa") not in scan.paths():
        assert time.monotonic() - started < 0.5 + 5.0, "not seen after reread_s"
        time.sleep(0.05)
    assert scan.paths() == _full_scan(proc)
