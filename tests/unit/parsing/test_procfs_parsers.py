"""/proc/<pid> parsers: documented examples, this process's own files, property tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.errors import ParseError
from forensics.parsing import procfs

STAT = ("4242 (python3 (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 150 30 0 0 20 0 7 0 "
        "123456 1048576000 25600 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n")
STATUS = ("Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\n"
          "Pid:\t4242\nPPid:\t1\nUid:\t1000\t1000\t1000\t1000\nNStgid:\t4242\t17\n"
          "NSpid:\t4242\t17\nVmSize:\t 1024000 kB\nVmHWM:\t  200000 kB\nVmRSS:\t  102400 kB\n"
          "RssAnon:\t  100000 kB\nVmSwap:\t       0 kB\nThreads:\t7\n")


def test_stat_comm_with_parens_and_spaces() -> None:
    stat = procfs.parse_stat(STAT)
    assert stat.comm == "python3 (x) y"
    assert (stat.pid, stat.state, stat.ppid, stat.num_threads) == (4242, "S", 1, 7)
    assert (stat.utime_ticks, stat.stime_ticks, stat.start_time_ticks) == (150, 30, 123456)
    assert stat.rss_pages == 25600 and stat.vsize_bytes == 1048576000


def test_status_nspid_maps_container_pid_to_host() -> None:
    status = procfs.parse_status(STATUS)
    assert status.nspid == (4242, 17) and status.innermost_pid == 17
    assert status.vm_rss_bytes == 102400 * 1024 and status.uid_real == 1000
    assert status.threads == 7 and status.state == "S"


def test_kernel_thread_status_has_no_memory() -> None:
    status = procfs.parse_status("Name:\tkthreadd\nState:\tS (sleeping)\nTgid:\t2\nPid:\t2\nPPid:\t0\n")
    assert status.vm_rss_bytes is None and status.nspid == ()


def test_own_process_files() -> None:
    stat = procfs.parse_stat(Path("/proc/self/stat").read_text())
    status = procfs.parse_status(Path("/proc/self/status").read_text())
    assert stat.pid == status.pid
    assert procfs.parse_cmdline(Path("/proc/self/cmdline").read_bytes())
    try:
        target = os.readlink("/proc/self/ns/pid")
    except PermissionError:  # some sandboxes forbid it; the collector records that case
        return
    kind, inode = procfs.parse_ns_link(target)
    assert kind == "pid" and inode > 0


def test_cmdline() -> None:
    assert procfs.parse_cmdline(b"python\0-c\0print(1)\0") == ["python", "-c", "print(1)"]
    assert procfs.parse_cmdline(b"") == []
    assert procfs.parse_cmdline(b"a\xff\0") == ["a\udcff"]


def test_start_time() -> None:
    assert procfs.start_time_unix(250, 100, 1000.0) == 1002.5
    with pytest.raises(ParseError):
        procfs.start_time_unix(1, 0, 0.0)


@pytest.mark.parametrize("bad", ["", "12 comm S", "x (a) S " + "1 " * 30, "1 (a) SS " + "1 " * 30,
                                 "1 (a) S " + "1 " * 5])
def test_bad_stat(bad: str) -> None:
    with pytest.raises(ParseError):
        procfs.parse_stat(bad)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([procfs.parse_stat, procfs.parse_status, procfs.parse_ns_link]),
       st.sampled_from([STAT, STATUS, "pid:[4026531836]"]), st.integers(0, 400),
       st.text(max_size=4), st.integers(0, 3))
def test_mutations_raise_only_parse_error(parse: object, sample: str, at: int, insert: str,
                                          drop: int) -> None:
    at %= len(sample) + 1
    try:
        parse(sample[:at] + insert + sample[at + drop:])  # type: ignore[operator]
    except ParseError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_cmdline_total(data: bytes) -> None:
    args = procfs.parse_cmdline(data)
    assert all("\0" not in a for a in args)
