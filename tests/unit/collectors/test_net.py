"""The net collector over a sysfs tree laid out as Documentation/ABI/stable/sysfs-class-infiniband
and the kernel's /sys/class/net describe, and a /proc tree with net/dev, diskstats and processes in
their own network namespaces; the block IO cgroup files; the parsers' refusals."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from forensics.collect.context import Tick
from forensics.collectors.cgroups import CgroupsCollector
from forensics.collectors.net import NetCollector
from forensics.errors import ParseError
from forensics.parsing import cgroup_files, cgroup_io, netstat
from tests.support.host_evidence import (
    DOCKER_ID,
    DOCKER_SCOPE,
    fake_v2_host,
    make_context,
    read_json,
    read_jsonl,
)

NET_DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: {lo} 10 0 0 0 0 0 0 {lo} 10 0 0 0 0 0 0
  eth0: {rx} 2000 {err} 3 0 0 0 5 {tx} 1500 0 0 0 0 0 0
"""
DISKSTATS = "   8       0 sda 100 0 {sectors} 50 10 0 80 20 0 60 70 0 0 0 0\n"
IB_COUNTERS = ("port_xmit_data", "port_rcv_data", "port_xmit_wait", "symbol_error", "link_downed",
               "port_rcv_errors", "port_xmit_discards", "link_error_recovery", "port_xmit_packets")


def _sysfs(root: Path, xmit: int = 1000, wait: int = 0) -> Path:
    sys = root / "sys"
    eth = sys / "class/net/eth0"
    (eth / "statistics").mkdir(parents=True, exist_ok=True)
    for name, value in (("speed", "25000"), ("operstate", "up"), ("mtu", "9000"), ("carrier_changes", "2")):
        (eth / name).write_text(value + "\n")
    for name in ("rx_bytes", "tx_bytes", "rx_errors"):
        (eth / "statistics" / name).write_text("7\n")
    port = sys / "class/infiniband/mlx5_0/ports/1"
    (port / "counters").mkdir(parents=True, exist_ok=True)
    (port / "hw_counters").mkdir(exist_ok=True)
    (port / "rate").write_text("200 Gb/sec (4X HDR)\n")
    (port / "state").write_text("4: ACTIVE\n")
    (port / "phys_state").write_text("5: LinkUp\n")
    (port / "link_layer").write_text("InfiniBand\n")
    for name in IB_COUNTERS:
        (port / "counters" / name).write_text(f"{xmit if name == 'port_xmit_data' else wait if name == 'port_xmit_wait' else 0}\n")
    (port / "hw_counters" / "out_of_buffer").write_text("0\n")
    return sys


def _proc(root: Path, rx: int = 100, tx: int = 200, err: int = 0) -> Path:
    proc = root / "proc"
    (proc / "net").mkdir(parents=True, exist_ok=True)
    (proc / "net/dev").write_text(NET_DEV.format(lo=5, rx=rx, tx=tx, err=err))
    (proc / "diskstats").write_text(DISKSTATS.format(sectors=rx))
    (proc / "self/ns").mkdir(parents=True, exist_ok=True)
    if not (proc / "self/ns/net").is_symlink():
        os.symlink("net:[4026531840]", proc / "self/ns/net")
    for pid, ns, cgroup in ((4242, 4026532577, f"0::{DOCKER_SCOPE}\n"), (4243, 4026532577, "0::/\n"),
                            (1, 4026531840, "0::/init.scope\n")):
        base = proc / str(pid)
        (base / "ns").mkdir(parents=True, exist_ok=True)
        (base / "net").mkdir(exist_ok=True)
        if not (base / "ns/net").is_symlink():
            os.symlink(f"net:[{ns}]", base / "ns/net")
        (base / "cgroup").write_text(cgroup)
        (base / "net/dev").write_text(NET_DEV.format(lo=1, rx=rx // 2, tx=tx // 2, err=0))
    return proc


def test_snapshot_keeps_every_file_verbatim_and_parses_them(tmp_path: Path) -> None:
    sys, proc = _sysfs(tmp_path), _proc(tmp_path)
    stage = tmp_path / "stage"
    NetCollector(str(sys), str(proc)).snapshot(make_context(stage))
    port = "net/class/infiniband/mlx5_0/ports/1"
    assert (stage / port / "rate").read_bytes() == b"200 Gb/sec (4X HDR)\n"
    assert (stage / port / "counters/port_xmit_wait").read_bytes() == b"0\n"
    assert (stage / port / "hw_counters/out_of_buffer").exists()
    assert (stage / "net/proc/net_dev").read_bytes() == (proc / "net/dev").read_bytes()
    assert (stage / "net/class/net/eth0/statistics/rx_errors").read_bytes() == b"7\n"
    index = read_json(stage, "net/index.json")
    eth = index["interfaces"]["eth0"]
    assert (eth["speed_mbps"], eth["operstate"], eth["mtu"]) == (25000, "up", 9000)
    assert eth["counters"]["rx_bytes"] == 100 and eth["counters"]["rx_dropped"] == 3
    (ib,) = index["ib_ports"]
    assert (ib["device"], ib["port"], ib["state"], ib["phys_state"]) == ("mlx5_0", "1", "ACTIVE", "LinkUp")
    assert ib["rate_bytes_per_s"] == 25e9 and ib["counters"]["port_xmit_data"] == 1000
    assert index["disks"]["sda"]["read_bytes"] == 100 * 512
    (ns,) = index["namespaces"]  # one process per namespace; the capture's own namespace left out
    assert (ns["inode"], ns["pid"], ns["container_id"]) == (4026532577, 4242, DOCKER_ID)
    assert (stage / "net/netns/4026532577/dev").read_bytes() == (proc / "4242/net/dev").read_bytes()


def test_ticks_carry_counters_and_the_rates_beside_them(tmp_path: Path) -> None:
    sys, proc = _sysfs(tmp_path), _proc(tmp_path)
    stage = tmp_path / "stage"
    ctx = make_context(stage, {"pids": [4242]}, extra={"net.sysfs_root": str(sys), "net.proc_root": str(proc)})
    collector = NetCollector()
    t = time.time()
    collector.sample(ctx, Tick(0, t))
    _sysfs(tmp_path, xmit=1000 + 250_000_000, wait=40)  # 1 GB in words over 2 s
    _proc(tmp_path, rx=100 + 6_250_000_000, tx=200, err=2)
    collector.sample(ctx, Tick(1, t + 2.0))
    collector.end_sampling(ctx)
    first, second = read_jsonl(stage, "net/samples.jsonl")
    assert first["rates"] == {} and second["ib"]["mlx5_0/1"]["state"] == "ACTIVE"
    rates = second["rates"]
    assert rates["ib"]["mlx5_0/1"]["xmit_bytes_per_s"] == 500_000_000.0  # 4 bytes a word
    assert rates["ib"]["mlx5_0/1"]["xmit_wait_per_s"] == 20.0
    assert rates["ib"]["mlx5_0/1"]["utilisation"] == 0.02
    assert rates["interfaces"]["eth0"]["rx_bytes_per_s"] == 3_125_000_000.0
    assert rates["interfaces"]["eth0"]["utilisation"] == 1.0  # 25 Gb/s link, 25 Gb/s received
    # the interface's line of /proc/net/dev as the kernel wrote it: the rising error counter with it
    eth0 = next(x for x in (proc / "net/dev").read_text().splitlines() if x.strip().startswith("eth0:"))
    assert second["net_dev"] == {"eth0": eth0} and netstat.net_dev_line(eth0.encode()) == ("eth0", 100 + 6_250_000_000, 200)
    assert netstat.parse_net_dev(NET_DEV.format(lo=5, rx=1, tx=1, err=2))["eth0"]["rx_errors"] == 2 and " 2 3 " in eth0
    assert first["links"]["eth0"] == {"operstate": "up", "speed_mbps": 25000} and second["links"] == {}
    # rx errs moved in the aggregate: the interface's statistics/ read that tick, verbatim
    assert "statistics" not in first
    assert second["statistics"] == {"eth0": {"rx_bytes": "7\n", "rx_errors": "7\n", "tx_bytes": "7\n"}}
    assert rates["netns"]["4026532577"]["eth0"]["rx_bytes_per_s"] == 1_562_500_000.0
    assert rates["disks"]["sda"]["read_bytes_per_s"] > 0


def test_missing_trees_and_vanished_processes(tmp_path: Path) -> None:
    from forensics.errors import SourceUnavailable
    with pytest.raises(SourceUnavailable):
        NetCollector(str(tmp_path / "nosys"), str(tmp_path / "noproc")).snapshot(make_context(tmp_path / "s1"))
    sys, proc = _sysfs(tmp_path), _proc(tmp_path)
    ctx = make_context(tmp_path / "s2", {"pids": [4242]})
    collector = NetCollector(str(sys), str(proc))
    collector.sample(ctx, Tick(0, time.time()))
    (proc / "4242/net/dev").unlink()
    (sys / "class/infiniband/mlx5_0/ports/1/state").write_text("garbage\n")
    collector.sample(ctx, Tick(1, time.time() + 1))
    line = read_jsonl(tmp_path / "s2", "net/samples.jsonl")[-1]
    assert "absent" in line["errors"][f"{proc}/4242/net/dev"] and line["netns"] == {}
    assert line["ib"]["mlx5_0/1"]["state"] == "garbage"


def test_cgroup_block_io_files_are_read_and_parsed(tmp_path: Path) -> None:
    mountinfo, pressure = fake_v2_host(tmp_path)
    scope = tmp_path / "sys-fs-cgroup" / DOCKER_SCOPE.lstrip("/")
    (scope / "io.stat").write_text("8:0 rbytes=4194304 wbytes=0 rios=1024 wios=0 dbytes=0 dios=0\n")
    (scope / "io.max").write_text("8:0 rbps=1048576 wbps=max riops=max wiops=max\n")
    stage = tmp_path / "stage"
    ctx = make_context(stage, {"cgroup_paths": [DOCKER_SCOPE]})
    collector = CgroupsCollector(str(mountinfo), str(pressure), str(tmp_path / "noproc"))
    collector.snapshot(ctx)
    docker = next(c for c in read_json(stage, "cgroup/index.json")["cgroups"] if c["path"] == DOCKER_SCOPE)
    assert docker["values"]["io"]["max"] == {"8:0": {"rbps": 1048576, "wbps": None, "riops": None, "wiops": None}}
    assert docker["values"]["io"]["stat"]["8:0"]["rbytes"] == 4194304
    collector.sample(ctx, Tick(0, time.time()))
    collector.end_sampling(ctx)
    line = next(x for x in read_jsonl(stage, "cgroup/samples.jsonl") if x["cgroup"] == DOCKER_SCOPE)
    assert line["values"]["io"] == {"stat": {"8:0": {"rbytes": 4194304, "wbytes": 0, "rios": 1024, "wios": 0,
                                                      "dbytes": 0, "dios": 0}}}


def test_v1_blkio_files_parse() -> None:
    text = "8:0 Read 4194304\n8:0 Write 0\n8:0 Sync 4194304\n8:0 Async 0\n8:0 Discard 0\n8:0 Total 4194304\nTotal 4194304\n"
    assert cgroup_files.file_values(1, "blkio.throttle.io_service_bytes", text) == (
        "io", {"service_bytes": {"8:0": {"read": 4194304, "write": 0, "sync": 4194304, "async": 0, "discard": 0,
                                         "total": 4194304}}})
    assert cgroup_files.file_values(1, "blkio.throttle.read_bps_device", "8:0 1048576\n") == (
        "io", {"read_bps_device": {"8:0": 1048576}})
    assert cgroup_io.parse_blkio_stat("Total 0\n") == {}


@pytest.mark.parametrize(("fn", "text"), [
    (cgroup_io.parse_io_stat, "sda rbytes=1\n"), (cgroup_io.parse_io_stat, "8:0 rbytes\n"),
    (cgroup_io.parse_io_stat, "8:0 rbytes=-x\n"), (cgroup_io.parse_io_max, "8:0 speed=9\n"),
    (cgroup_io.parse_blkio_stat, "8:0 Sideways 4\n"), (cgroup_io.parse_blkio_limits, "8:0\n"),
    (netstat.parse_net_dev, "h\nh\neth0: 1 2 3\n"), (netstat.parse_net_dev, "h\nh\neth0 1\n"),
    (netstat.parse_diskstats, "8 0 sda 1 2\n"), (netstat.parse_speed_mbps, "fast"),
    (netstat.parse_ib_rate, "very fast"), (netstat.parse_ib_state, "ACTIVE"),
    (netstat.parse_net_dev, b"bytes"),
    (netstat.net_dev_bytes, "h\nh\neth0: 1 2 3\n"), (netstat.net_dev_bytes, "h\nh\neth0 1\n"),
    (netstat.net_dev_bytes, "h\nh\neth0: " + "1 " * 15 + "\u0663\n"), (netstat.net_dev_bytes, b"bytes"),
])
def test_parsers_refuse_garbage_with_parse_error(fn: object, text: object) -> None:
    with pytest.raises(ParseError):
        fn(text)  # type: ignore[operator]


@pytest.mark.parametrize("text", [
    NET_DEV.format(lo=1, rx=2, tx=3, err=0), NET_DEV.format(lo=1, rx=2, tx=3, err=0) + NET_DEV.split("\n")[1] + "\n",
    "lo: 1 2 3\n", "  eth0: " + "1 " * 16 + "\n  eth0: " + "2 " * 16, "\n\n\n", "", "h|\nh|\n" + "x: " + "1 " * 15 + "\u0663\n",
    "a|\nb|\n  eth0: " + "9" * 41 + " 1" * 15 + "\n", "a|\nb|\n  eth0: " + "1 " * 16 + "\n    : " + "1 " * 16 + "\n",
])
def test_a_namespaces_lines_parsed_once_read_as_net_dev_bytes_reads_them(text: str) -> None:
    from forensics.collectors.net.tick import _dev_counts
    memo: dict[bytes, tuple[str, int, int]] = {}
    data = text.encode()
    try:
        want: dict[str, tuple[int, int]] | None = {
            i: (c["rx_bytes"], c["tx_bytes"]) for i, c in netstat.net_dev_bytes(data).items()}
    except ParseError:
        want = None
    assert _dev_counts(data, memo) == want and _dev_counts(data, memo) == want  # the second from the memo


def test_net_dev_bytes_reads_what_parse_net_dev_reads() -> None:
    text = (tmp := "Inter-|   Receive |  Transmit\n face |bytes packets|bytes packets\n") + \
        "    lo: 5 1 0 0 0 0 0 0 6 1 0 0 0 0 0 0\n  eth0: 1050 10 2 0 0 0 0 0 200 3 0 0 0 0 0 0\n"
    full = netstat.parse_net_dev(text)
    assert netstat.net_dev_bytes(text) == {i: {"rx_bytes": c["rx_bytes"], "tx_bytes": c["tx_bytes"]}
                                           for i, c in full.items()} == {
        "lo": {"rx_bytes": 5, "tx_bytes": 6}, "eth0": {"rx_bytes": 1050, "tx_bytes": 200}}
    assert netstat.net_dev_bytes(tmp) == {}


def test_ib_rate_and_speed_values() -> None:
    assert netstat.parse_ib_rate("2.5 Gb/sec (1X SDR)\n") == 2.5e9 / 8
    assert netstat.parse_ib_rate("100 Gb/sec (4X EDR)") == 12.5e9
    assert netstat.parse_speed_mbps("-1\n") is None and netstat.parse_speed_mbps("10000\n") == 10000


def test_an_unchanged_namespace_is_named_not_repeated_and_its_rate_spans_the_idle_ticks(tmp_path: Path) -> None:
    sys, proc = _sysfs(tmp_path), _proc(tmp_path)
    stage = tmp_path / "stage"
    ctx = make_context(stage, {"pids": [4242]})
    collector = NetCollector(str(sys), str(proc))
    t = time.time()
    collector.sample(ctx, Tick(0, t))
    collector.sample(ctx, Tick(1, t + 1.0))  # nothing moved
    _proc(tmp_path, rx=100 + 2000, tx=200)  # the namespace's eth0 gets 1000 bytes (rx // 2)
    collector.sample(ctx, Tick(2, t + 2.0))
    collector.end_sampling(ctx)
    first, idle, busy = read_jsonl(stage, "net/samples.jsonl")
    assert "4026532577" in first["netns"] and "netns_unchanged" not in first
    assert idle["netns"] == {} and idle["netns_unchanged"] == [4026532577]
    assert idle["rates"]["netns"] == {}
    # the namespace's net/dev as the kernel wrote it, not its sixteen counters parsed
    assert busy["netns"]["4026532577"]["dev"] == (proc / "4242/net/dev").read_text()
    assert netstat.parse_net_dev(busy["netns"]["4026532577"]["dev"])["eth0"]["rx_bytes"] == 1050
    assert "netns_unchanged" not in busy
    assert list(busy["net_dev"]) == ["eth0"] and "statistics" not in busy  # bytes moved, no fault counter
    # against the counters last written (tick 0, the same at tick 1), over the last interval
    assert busy["rates"]["netns"]["4026532577"]["eth0"]["rx_bytes_per_s"] == 1000.0


def test_kept_files_read_a_seq_file_longer_than_a_page_to_its_end(tmp_path: Path) -> None:
    """A seq_file gives at most a page per read: one pread of /proc/net/dev on a host with a few
    dozen veths cut it mid-line. A real network namespace with 30 veth pairs (its net/dev about
    8 KiB) is read through a kept descriptor, twice, and compared with a plain read."""
    import shutil
    import subprocess

    from forensics.hostfs.files import KeptFiles
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs root, unshare(1) and ip(8)")
    child = subprocess.Popen(["unshare", "-n", "sh", "-c", "for i in $(seq 1 30); do ip link add gfa$i type veth "
                              "peer name gfb$i || exit 1; done; echo ready; exec sleep 60"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        path = f"/proc/{child.pid}/net/dev"
        whole = Path(path).read_bytes()
        assert len(whole) > 4096 and whole.count(b"gfa") == 30
        kept = KeptFiles(1 << 20)
        try:
            assert kept.read(path) == whole and kept.read(path) == whole  # the second pread starts at 0 again
        finally:
            kept.close()
        if hasattr(os, "pidfd_open"):  # the namespace reader's one-pread tick gives way to the read to the end
            from forensics.hostfs.netns import NamespaceFiles
            files = NamespaceFiles("/proc")
            try:
                inode = int(os.readlink(f"/proc/{child.pid}/ns/net")[5:-1])
                assert [files.read(child.pid, inode) for _ in range(3)] == [whole] * 3
                assert child.pid in files._kept and child.pid not in files._fds
            finally:
                files.close()
    finally:
        child.kill()
        child.wait()
    big = tmp_path / "big"
    big.write_bytes(b"x" * 100_000)
    bounded = KeptFiles(70_000)
    try:
        assert bounded.read(str(big)) == b"x" * 70_000  # never past the limit
    finally:
        bounded.close()


def test_a_namespace_file_is_kept_open_while_its_process_lives_and_closed_when_it_exits() -> None:
    """A real process in a network namespace of its own: its net/dev read through a kept
    descriptor equals a fresh read; once it exits, the next tick's reap closes the descriptor
    (nothing holds the namespace) and the read fails as for any vanished process. A namespace
    the process is not in (a reused PID) is never kept."""
    import shutil
    import subprocess

    from forensics.hostfs.netns import NamespaceFiles
    if os.geteuid() != 0 or shutil.which("unshare") is None or not hasattr(os, "pidfd_open"):
        pytest.skip("needs root, unshare(1) and pidfd_open")
    child = subprocess.Popen(["unshare", "-n", "sleep", "60"], stdin=subprocess.DEVNULL)
    files = NamespaceFiles("/proc")
    try:
        own = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{child.pid}/ns/net") == own and time.monotonic() < deadline:
            time.sleep(0.01)
        link = os.readlink(f"/proc/{child.pid}/ns/net")
        inode = int(link[5:-1])
        assert files.read(child.pid, inode) == Path(f"/proc/{child.pid}/net/dev").read_bytes()
        assert files.read(child.pid, inode).startswith(b"Inter-|") and len(files._kept) == 1
        assert list(files._fds) == [child.pid]  # the next tick: one bare pread
        files.read(os.getpid(), inode + 1)
        assert os.getpid() not in files._kept  # not the namespace discovery named: read, not kept
        child.kill()
        child.wait()
        deadline = time.monotonic() + 5
        while files._kept and time.monotonic() < deadline:
            files.reap()
            time.sleep(0.01)
        assert files._kept == {} and files._fds == {} and files._files.descriptors() == []
        with pytest.raises(OSError):
            files.read(child.pid, inode)
    finally:
        child.kill()
        child.wait()
        files.close()


def test_an_interface_is_written_when_its_line_or_its_state_moves(tmp_path: Path) -> None:
    """On a laid-out tree (no link notifications for it: every operstate read every tick), an idle
    interface costs nothing in the line; a line that moved is written verbatim, a state that moved
    is written with its speed read again, and an interface gone from /proc/net/dev is named."""
    sys, proc = _sysfs(tmp_path), _proc(tmp_path)
    stage = tmp_path / "stage"
    ctx = make_context(stage, {"pids": [4242]})
    collector = NetCollector(str(sys), str(proc))
    t = time.time()
    collector.sample(ctx, Tick(0, t))
    collector.sample(ctx, Tick(1, t + 1.0))  # nothing moved
    (sys / "class/net/eth0/operstate").write_text("down\n")
    (sys / "class/net/eth0/speed").write_text("10000\n")
    collector.sample(ctx, Tick(2, t + 2.0))
    (sys / "class/net/eth0/operstate").write_text("up\n")
    _proc(tmp_path, rx=1100, err=1)
    collector.sample(ctx, Tick(3, t + 3.0))
    (proc / "net/dev").write_text("".join(f"{x}\n" for x in NET_DEV.format(lo=5, rx=1, tx=1, err=0).splitlines()[:3]))
    collector.sample(ctx, Tick(4, t + 4.0))
    collector.end_sampling(ctx)
    first, idle, down, back, gone = read_jsonl(stage, "net/samples.jsonl")
    assert set(first["net_dev"]) == {"lo", "eth0"} and first["links"]["eth0"]["operstate"] == "up"
    assert idle["net_dev"] == {} and idle["links"] == {} and "net_dev_gone" not in idle
    assert idle["rates"]["interfaces"] == {}  # nothing moved: no rate written
    assert down["links"] == {"eth0": {"operstate": "down", "speed_mbps": 10000}} and down["net_dev"] == {}
    assert back["links"] == {"eth0": {"operstate": "up", "speed_mbps": 10000}}
    assert list(back["net_dev"]) == ["eth0"] and netstat.parse_net_dev(
        NET_DEV.splitlines()[0] + "\n" + NET_DEV.splitlines()[1] + "\n" + back["net_dev"]["eth0"])["eth0"]["rx_errors"] == 1
    assert back["rates"]["interfaces"]["eth0"]["rx_bytes_per_s"] == 1000.0  # against tick 0's, over the last second
    assert gone["net_dev_gone"] == ["eth0"] and gone["net_dev"] == {}


def test_an_unreadable_proc_net_dev_is_said_and_every_line_written_again(tmp_path: Path) -> None:
    sys, proc = _sysfs(tmp_path), _proc(tmp_path)
    stage = tmp_path / "stage"
    ctx = make_context(stage)
    collector = NetCollector(str(sys), str(proc))
    t = time.time()
    text = (proc / "net/dev").read_text()
    (proc / "net/dev").unlink()
    collector.sample(ctx, Tick(0, t))
    (proc / "net/dev").write_text(text)
    collector.sample(ctx, Tick(1, t + 1.0))
    (proc / "net/dev").write_text(text.replace("eth0:", "eth0 ", 1))
    collector.sample(ctx, Tick(2, t + 2.0))
    (proc / "net/dev").write_text(text)
    collector.sample(ctx, Tick(3, t + 3.0))
    collector.end_sampling(ctx)
    missing, first, garbled, again = read_jsonl(stage, "net/samples.jsonl")
    assert "net_dev" not in missing and "absent" in missing["errors"][f"{proc}/net/dev"]
    assert set(first["net_dev"]) == {"lo", "eth0"}
    # lo read as before; eth0's line does not parse: said, and not taken for its counters
    assert garbled["net_dev"] == {} and garbled["net_dev_gone"] == ["eth0"]
    assert "parse error" in garbled["errors"][f"{proc}/net/dev"]
    assert list(again["net_dev"]) == ["eth0"] and "errors" not in again


_WATCHED = r"""
import json, os, subprocess, sys, time
from forensics.collect.context import Tick
from forensics.collectors.net import NetCollector
from tests.support.host_evidence import make_context, read_jsonl
from pathlib import Path

def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True)

subprocess.run(["mount", "-t", "sysfs", "sysfs", "/sys"], check=True)  # this namespace's (this mount namespace only)
ip("link", "set", "lo", "up")
for i in range(3):
    ip("link", "add", f"gfh{i}", "type", "veth", "peer", "name", f"gfc{i}")
    ip("link", "set", f"gfh{i}", "up")
    ip("link", "set", f"gfc{i}", "up")
stage = Path(sys.argv[1])
ctx = make_context(stage)
collector = NetCollector()
reads = []
t = time.time()
def tick(i):
    reader = collector._tick
    if reader is None:
        collector.sample(ctx, Tick(i, t + i))
        reads.append(None)
        return
    files, seen = reader._files, []
    original = files.read
    files.read = lambda path: (seen.append(path), original(path))[1]
    try:
        collector.sample(ctx, Tick(i, t + i))
    finally:
        files.read = original
    reads.append(sorted(p.split("/")[-2] for p in seen if p.endswith("/operstate")))
tick(0)
tick(1)                                   # nothing moved
ip("link", "set", "gfc1", "down")         # the peer down: gfh1 says lowerlayerdown
time.sleep(0.2)
tick(2)
ip("link", "set", "gfc1", "up")
time.sleep(0.2)
tick(3)
ip("link", "del", "gfh2")                 # both ends gone
time.sleep(0.2)
tick(4)
tick(5)
watch = collector._tick._watch is not None
collector.end_sampling(ctx)
print(json.dumps({"watch": watch, "reads": reads, "lines": read_jsonl(stage, "net/samples.jsonl")}))
"""


def test_link_notifications_say_which_operstate_to_read_on_real_veths(tmp_path: Path) -> None:
    """Real veth pairs in a private network namespace (``unshare -n -m``, its own sysfs mounted on
    /sys in its own mount namespace: nothing of this host's network is touched), sampled with the
    collector's defaults: every operstate is read on the first tick; afterwards only the links the
    kernel announced are read, and a state that moved is written the tick after it moved."""
    import json
    import shutil
    import subprocess
    import sys as system

    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs root, unshare(1) and ip(8)")
    root = str(Path(__file__).resolve().parents[3])
    done = subprocess.run(["unshare", "-n", "-m", "--propagation", "private", system.executable, "-c", _WATCHED,
                           str(tmp_path / "stage")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["watch"] is True
    reads, lines = out["reads"], out["lines"]
    assert reads[1] == [] and lines[1]["links"] == {}  # nothing announced, nothing read or written
    assert "gfh1" in reads[2] and "gfh0" not in reads[2]
    assert lines[2]["links"]["gfh1"]["operstate"] == "lowerlayerdown" and lines[2]["links"]["gfc1"]["operstate"] == "down"
    assert "gfh0" not in lines[2]["links"]
    assert lines[3]["links"]["gfh1"]["operstate"] == "up" and lines[3]["links"]["gfc1"]["operstate"] == "up"
    # the pair deleted: announced, read, found absent, said once; its lines gone from /proc/net/dev
    assert lines[4]["links"]["gfh2"]["operstate"] is None and lines[4]["links"]["gfc2"]["operstate"] is None
    assert any("gfh2/operstate" in path for path in lines[4]["errors"])
    assert sorted(lines[4]["net_dev_gone"]) == ["gfc2", "gfh2"]
    # said once: no operstate error again (the host's other processes' namespaces are read too, and
    # one that exits meanwhile is an error of its own, not this test's)
    assert reads[5] == [] and not [p for p in lines[5].get("errors", {}) if "operstate" in p]


def test_link_watch_takes_interfaces_without_an_ethernet_address_by_name_and_index(tmp_path: Path) -> None:
    """This namespace's interfaces laid out as sysfs shows them, one with an IPoIB address (20 bytes
    in sysfs, 6 from SIOCGIFHWADDR) and one with none (tun, wireguard: the ioctl gives zeros): the
    watch still stands; a different Ethernet address or index still turns it off."""
    import socket

    from forensics.collectors.net.links import LinkWatch

    own = dict(socket.if_nameindex())
    addresses = {}
    for index, name in own.items():
        try:
            addresses[name] = (index, Path(f"/sys/class/net/{name}/address").read_text().strip().lower())
        except OSError:
            pytest.skip("no sysfs address for this namespace's interfaces")
    ether = [n for n, (_, a) in addresses.items() if n != "lo" and a.count(":") == 5 and a.strip("0:")]
    others = [n for n in addresses if n not in ether[:1]]
    if not ether or not others:
        pytest.skip("needs an Ethernet interface and another one in this namespace")
    ipoib = "80:00:02:08:fe:80:00:00:00:00:00:00:0c:42:a1:03:00:6b:4a:12"
    laid = {**addresses, others[0]: (addresses[others[0]][0], ipoib)}
    if len(others) > 1:
        laid[others[1]] = (addresses[others[1]][0], "")

    def lay(root: Path, entries: dict[str, tuple[int, str]]) -> str:
        for name, (index, address) in entries.items():
            base = root / "class" / "net" / name
            base.mkdir(parents=True)
            (base / "ifindex").write_text(f"{index}\n")
            (base / "address").write_text(f"{address}\n")
        return str(root)

    names = sorted(laid)
    assert LinkWatch._same_namespace(lay(tmp_path / "a", laid), names) == {i: n for n, (i, _) in laid.items()}
    wrong = {**laid, ether[0]: (laid[ether[0]][0], "02:00:00:00:00:99")}
    assert LinkWatch._same_namespace(lay(tmp_path / "b", wrong), names) is None
    moved = {**laid, others[0]: (laid[others[0]][0] + 1000, ipoib)}
    assert LinkWatch._same_namespace(lay(tmp_path / "c", moved), names) is None


def test_the_moved_lines_path_writes_what_reading_every_line_writes(tmp_path: Path) -> None:
    """/proc/net/dev looked at only where its lines moved (the common tick) gives the same samples
    lines, byte for byte, as reading it line by line, over ticks where lines move, fault counters
    rise, interfaces come and go, a line does not parse, a header line is out of place (and IB
    counters and states read bare and memoised, or through KeptFiles each time): two collectors
    over the same tree, one made to read every line every tick."""
    import random

    from forensics.collectors.net.tick import TickReader

    sys, proc = _sysfs(tmp_path), _proc(tmp_path)
    head = NET_DEV.split("\n", 2)
    ifaces = {"eth0": [5, 0], **{f"veth{i}": [i * 10, 0] for i in range(12)}}  # eth0: has statistics/
    rng = random.Random(21)
    stages = [tmp_path / "moved", tmp_path / "each"]
    ctxs = [make_context(stage, {"pids": [4242]}) for stage in stages]
    collectors = [NetCollector(str(sys), str(proc)) for _ in stages]
    t = time.time()
    taken: list[bool] = []
    for i in range(80):
        odd: list[str] = []
        for name, counts in list(ifaces.items()):
            roll = rng.random()
            if roll < 0.2:
                counts[0] += rng.randrange(1, 1000)
            elif roll < 0.23:
                counts[1] += 1  # rx errs
            elif roll < 0.25 and name != "eth0":
                del ifaces[name]
        if rng.random() < 0.15:
            ifaces[f"new{i}"] = [0, 0]
        if rng.random() < 0.05:
            odd.append("  bad0: 1 2 3")
        if rng.random() < 0.03:
            odd.append(head[1])
        body = "".join(f"{n:>7}: {c[0]} 10 {c[1]} 0 0 0 0 0 {c[0]} 10 0 0 0 0 0 0\n" for n, c in ifaces.items())
        (proc / "net/dev").write_text(head[0] + "\n" + head[1] + "\n" + body + "".join(x + "\n" for x in odd))
        port = sys / "class/infiniband/mlx5_0/ports/1"
        for name in IB_COUNTERS[:4]:
            if rng.random() < 0.3:
                (port / "counters" / name).write_text(rng.choice([f"{rng.randrange(10**6)}\n", "x\n", ""]))
        if rng.random() < 0.1:
            (port / "state").write_text(rng.choice(["4: ACTIVE\n", "1: DOWN\n", "weird\n"]))
        for n, (collector, ctx) in enumerate(zip(collectors, ctxs, strict=True)):
            collector.sample(ctx, Tick(i, t + i))
            reader = collector._tick
            assert isinstance(reader, TickReader)
            if i == 0 and n == 0:
                fast = reader._interfaces_moved
                reader._interfaces_moved = lambda *a, fast=fast: taken.append(fast(*a)) or taken[-1]  # type: ignore[method-assign]
            elif i == 0:
                reader._interfaces_moved = lambda *a: False  # type: ignore[method-assign]
                reader._read_kept = reader._files.read  # type: ignore[method-assign]  # IB: KeptFiles only
    for collector, ctx in zip(collectors, ctxs, strict=True):
        collector.end_sampling(ctx)
    moved, each = ((stage / "net/samples.jsonl").read_bytes() for stage in stages)
    assert moved == each and moved.count(b"\n") == 80
    lines = read_jsonl(stages[0], "net/samples.jsonl")
    assert any(x.get("net_dev_gone") for x in lines) and any("statistics" in x for x in lines)
    assert any("errors" in x and "parse error" in str(x["errors"]) for x in lines)
    assert taken.count(True) > 30 and taken.count(False) > 10  # both paths were taken


_GATED = r"""
import ctypes, json, os, socket, subprocess, sys, time
from pathlib import Path
from forensics.collect.context import Tick
from forensics.collectors.net import NetCollector
from tests.support.host_evidence import make_context, read_jsonl

def ip(*args):
    subprocess.run(["ip", *args], check=True)

def no_ipv6():  # no router solicitations or MLD reports moving the links on their own
    for name in ("all", "default"):
        Path(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6").write_text("1\n")

libc = ctypes.CDLL(None, use_errno=True)
def socket_in(pid):
    own, fd = os.open("/proc/self/ns/net", os.O_RDONLY), os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        assert libc.setns(fd, 0x40000000) == 0
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        return s
    finally:
        assert libc.setns(own, 0x40000000) == 0
        os.close(fd)
        os.close(own)

stage = Path(sys.argv[1])
no_ipv6()
ip("link", "set", "lo", "up")
setup = ("echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6; "
         "ip link set lo up; while ! ip link show eth0 >/dev/null 2>&1; do sleep 0.02; done; "
         "ip addr add 10.0.0.2/24 dev eth0 && ip link set eth0 up && exec sleep 60")
kids = {name: subprocess.Popen(["unshare", "-n", "sh", "-c", setup]) for name in ("veth", "extra", "lo")}
here = os.readlink("/proc/self/ns/net")
for kid in kids.values():
    while os.readlink(f"/proc/{kid.pid}/ns/net") == here:
        time.sleep(0.01)
try:
    for n, (name, kid) in enumerate(kids.items()):
        ip("link", "add", f"gfh{n}", "type", "veth", "peer", "name", "eth0", "netns", str(kid.pid))
        ip("link", "set", f"gfh{n}", "up")
    # "extra": a second pair with both ends inside: interfaces the host's /proc/net/dev does not show
    pid = str(kids["extra"].pid)
    ip("link", "add", "gfi0", "netns", pid, "type", "veth", "peer", "name", "gfi1", "netns", pid)
    for kid in kids.values():
        while not os.readlink(f"/proc/{kid.pid}/exe").endswith("/sleep"):
            time.sleep(0.01)
    sockets = {name: socket_in(kid.pid) for name, kid in kids.items()}
    inodes = {name: os.stat(f"/proc/{kid.pid}/ns/net").st_ino for name, kid in kids.items()}
    runs = {}
    for gated in (True, False):
        ctx = make_context(stage / str(gated), {"pids": [k.pid for k in kids.values()]}, interval_s=0.1,
                           extra={"net.idle_full_s": "0.5", "net.quiet_namespaces": str(gated).lower()})
        collector = NetCollector()  # gated as a user turns it on: --set net.quiet_namespaces=true
        runs[gated] = (collector, ctx)
    sent = {}
    t0 = time.time()
    for i in range(24):
        if i == 5:
            sockets["lo"].sendto(b"x", ("127.0.0.1", 9))  # lo only: the host end does not move
        if i == 9:
            sockets["veth"].sendto(b"x", ("10.0.0.255", 9))  # out of eth0: its host end moves
        if i in (5, 9, 14):
            sockets["extra"].sendto(b"x", ("127.0.0.1", 9))
        if i == 18:  # a veth pair made here: every namespace read that tick, its veth peers asked again
            ip("link", "add", "gfz0", "type", "veth", "peer", "name", "gfz1")
        t = t0 + 0.1 * i
        for collector, ctx in runs.values():
            collector.sample(ctx, Tick(i, t))
        time.sleep(max(0.0, t + 0.1 - time.time()))
    for collector, ctx in runs.values():
        collector.end_sampling(ctx)
    print(json.dumps({"inodes": inodes, "gated": read_jsonl(stage / "True", "net/samples.jsonl"),
                      "full": read_jsonl(stage / "False", "net/samples.jsonl")}))
finally:
    for kid in kids.values():
        kid.kill()
        kid.wait()
"""


def test_a_quiet_namespace_is_left_unread_while_its_veth_does_not_move_and_read_within_idle_full_s(
        tmp_path: Path) -> None:
    """Real namespaces in a private network namespace standing for the host (``unshare -n -m``):
    one with lo and a veth, one with a second veth pair inside it (interfaces the host end cannot
    stand for), one whose lo alone moves. Sampled at 10 Hz with ``net.idle_full_s`` 0.5 s by a gated
    and an ungated collector side by side: the first namespace is left unread while its veth's line
    stays, named in ``netns_quiet``, and read the tick its veth moves; the second is read every
    tick; the third's lo traffic is seen within idle_full_s, its entry says until when its veth was
    seen unchanged, and carries no rate (its previous reading is older than the interval); every
    namespace's text read equals the ungated collector's at that tick."""
    import json
    import shutil
    import subprocess
    import sys as system

    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None \
            or not hasattr(os, "pidfd_open"):
        pytest.skip("needs root, unshare(1), ip(8) and pidfd_open")
    root = str(Path(__file__).resolve().parents[3])
    done = subprocess.run(["unshare", "-n", "-m", "--propagation", "private", system.executable, "-c", _GATED,
                           str(tmp_path / "stage")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    inodes, gated, full = out["inodes"], out["gated"], out["full"]
    veth, extra, lo = (inodes[n] for n in ("veth", "extra", "lo"))
    last_dev: dict[int, str] = {}
    read_at: dict[int, list[float]] = {veth: [], extra: [], lo: []}
    for g, f in zip(gated, full, strict=True):
        quiet = g.get("netns_quiet", [])
        for inode, entry in f["netns"].items():
            last_dev[int(inode)] = entry["dev"]
        for inode in (veth, extra, lo):  # each one read, or named unread: never both, never neither
            where = [str(inode) in g["netns"], inode in g.get("netns_unchanged", []), inode in quiet]
            assert where.count(True) == 1, (g["tick"], inode, where)
            if not where[2]:
                read_at[inode].append(g["t"])
            if str(inode) in g["netns"]:
                assert g["netns"][str(inode)]["dev"] == last_dev[inode]  # what the ungated one read then
        assert "errors" not in g
    assert extra not in {i for g in gated for i in g.get("netns_quiet", [])}  # read every tick
    assert len(read_at[extra]) == len(gated)
    for inode in (veth, lo):
        assert len(read_at[inode]) < len(gated) / 2  # mostly left unread
        gaps = [b - a for a, b in zip(read_at[inode], read_at[inode][1:], strict=False)]
        assert max(gaps) <= 0.5 + 1e-6  # never unread for longer than idle_full_s
    # the tick after the datagram out of eth0: its veth moved, so it was read then
    assert str(veth) in gated[9]["netns"]
    # lo's datagram (before tick 5): seen at the first read after it, within idle_full_s
    first = next(g for g in gated[5:] if str(lo) in g["netns"])
    assert first["t"] - gated[5]["t"] <= 0.5 + 1e-6
    entry = first["netns"][str(lo)]
    if first["tick"] > 5:  # read after ticks that left it unread: until when its veth read the same
        assert entry["unchanged_until"] == first["t"] - 0.1 or abs(entry["unchanged_until"] - (first["t"] - 0.1)) < 1e-6
        assert str(lo) not in first["rates"].get("netns", {})
    assert "unchanged_until" not in json.dumps(full) and "netns_quiet" not in json.dumps(full)
    # the tick a veth pair appeared here: every namespace read; one left unread the tick before
    # says so (and has no rate), as after any quiet ticks
    made = gated[18]
    assert "gfz0" in made["net_dev"] and "netns_quiet" not in made
    for inode in gated[17].get("netns_quiet", []):
        assert inode in made.get("netns_unchanged", []) or \
            made["netns"][str(inode)]["unchanged_until"] == gated[17]["t"]
        assert str(inode) not in made["rates"]["netns"]
    assert gated[17].get("netns_quiet") and "netns_quiet" in gated[19]  # and gated again after it
