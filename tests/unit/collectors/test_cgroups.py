"""cgroups collector: a v2 fixture host (Docker systemd scope and a burstable pod), per-tick
sampling, discovery without hints, and this host's real (hybrid) hierarchy."""

from __future__ import annotations

import os
import time
from pathlib import Path

from forensics.collect.context import Tick
from forensics.collectors.cgroups import CgroupsCollector, interpret, member_path, pod_ancestor
from tests.support.env import need
from tests.support.host_evidence import (
    DOCKER_SCOPE,
    POD_SCOPE,
    POD_SLICE,
    fake_proc,
    fake_v2_host,
    make_context,
    read_json,
    read_jsonl,
)


def _collector(tmp_path: Path, proc: Path | None = None) -> CgroupsCollector:
    mountinfo, pressure = fake_v2_host(tmp_path)
    return CgroupsCollector(str(mountinfo), str(pressure), str(proc or tmp_path / "noproc"))


def _by_path(index: dict) -> dict:
    return {c["path"]: c for c in index["cgroups"]}


def test_snapshot_v2_values_and_verbatim_files(tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    ctx = make_context(stage, {"cgroup_paths": [DOCKER_SCOPE, POD_SCOPE]})
    _collector(tmp_path).snapshot(ctx)
    index = read_json(stage, "cgroup/index.json")
    assert index["layout"] == "v2" and index["targets_from"] == "hints"
    cgroups = _by_path(index)
    assert list(cgroups) == ["/", DOCKER_SCOPE, POD_SLICE, POD_SCOPE]
    docker = cgroups[DOCKER_SCOPE]
    assert docker["attribution"]["runtime"] == "docker"
    cpu, memory = docker["values"]["cpu"], docker["values"]["memory"]
    assert (cpu["nr_periods"], cpu["nr_throttled"], cpu["quota_usec"]) == (6000, 4200, 50000)
    assert cpu["throttled_ns"] == 4200 * 42000 * 1000
    assert memory["limit_bytes"] == 536870912 and memory["events"]["oom_kill"] == 3
    assert memory["oom_group"] is True and memory["high_bytes"] is None
    assert docker["values"]["pressure"]["cpu"]["some"]["avg10_pct"] == 35.2
    assert docker["values"]["procs"]["count"] == 2
    member = docker["files"]["unified/cpu.stat"]["member"]
    assert member == f"cgroup/unified{DOCKER_SCOPE}/cpu.stat"
    assert (stage / member).read_bytes() == (tmp_path / "sys-fs-cgroup" / DOCKER_SCOPE[1:] / "cpu.stat").read_bytes()
    pod = cgroups[POD_SLICE]
    assert pod["attribution"]["kind"] == "pod" and pod["values"]["memory"]["limit_bytes"] == 2147483648
    assert pod["files"]["unified/cpu.max"]["error"].startswith("absent")
    assert cgroups[POD_SCOPE]["values"]["cpu"]["quota_usec"] is None
    root = cgroups["/"]
    assert root["values"]["host_pressure"]["io"]["full"]["total_usec"] == 45678
    assert (stage / "cgroup/host/pressure/cpu").exists()


def test_sampling_reads_each_file_once_per_tick(tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    collector = _collector(tmp_path)
    ctx = make_context(stage, {"cgroup_paths": [DOCKER_SCOPE]})
    cpu_stat = tmp_path / "sys-fs-cgroup" / DOCKER_SCOPE[1:] / "cpu.stat"
    for index in range(3):
        if index == 2:  # counters move between ticks (same file, rewritten in place)
            with open(cpu_stat, "r+") as f:
                text = f.read().replace("nr_throttled 4200", "nr_throttled 4300")
                f.seek(0)
                f.write(text)
                f.truncate()
        collector.sample(ctx, Tick(index, time.time()))
    collector.end_sampling(ctx)
    lines = read_jsonl(stage, "cgroup/samples.jsonl")
    assert len(lines) == 3 * 2  # root and the container, each tick
    docker = [line for line in lines if line["cgroup"] == DOCKER_SCOPE]
    assert [d["values"]["cpu"]["nr_throttled"] for d in docker] == [4200, 4200, 4300]
    assert [d["tick"] for d in docker] == [0, 1, 2] and all("errors" not in d for d in docker)
    assert "limit_bytes" not in docker[0]["values"]["memory"]  # limits: snapshot only
    assert docker[0]["values"]["memory"]["events"]["oom_kill"] == 3


def test_a_tick_file_that_grows_past_one_read_is_read_to_its_end(tmp_path: Path) -> None:
    """The tick reads a kept descriptor with one pread while the file is short; an io.stat of 40
    devices (longer than half a page: maybe not the whole of a seq_file) goes through the kept
    file's read-to-the-end, and the short file after it through one pread again."""
    stage = tmp_path / "stage"
    collector = _collector(tmp_path)
    ctx = make_context(stage, {"cgroup_paths": [DOCKER_SCOPE]})
    io_stat = tmp_path / "sys-fs-cgroup" / DOCKER_SCOPE[1:] / "io.stat"
    short = "8:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0\n"
    long = "".join(f"259:{n} rbytes={n * 1000} wbytes=2 rios=3 wios=4 dbytes=0 dios=0\n" for n in range(40))
    assert len(long) > 2048
    for index, text in enumerate((short, long, short, long, short)):
        io_stat.write_text(text)  # the same file rewritten: the kept descriptor reads the new bytes
        collector.sample(ctx, Tick(index, time.time()))
    collector.end_sampling(ctx)
    docker = [line for line in read_jsonl(stage, "cgroup/samples.jsonl") if line["cgroup"] == DOCKER_SCOPE]
    stats = [d["values"].get("io", {}).get("stat") for d in docker]
    assert stats[0] == stats[2] == stats[4] == {"8:0": {"rbytes": 1, "wbytes": 2, "rios": 3, "wios": 4,
                                                         "dbytes": 0, "dios": 0}}
    assert stats[1] == stats[3] and len(stats[1]) == 40 and stats[1]["259:39"]["rbytes"] == 39000
    assert all("errors" not in d for d in docker)


def test_discovery_without_hints_scans_proc(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path)
    stage = tmp_path / "stage"
    ctx = make_context(stage)
    _collector(tmp_path, proc).snapshot(ctx)
    index = read_json(stage, "cgroup/index.json")
    assert index["targets_from"].startswith("scan")
    assert set(_by_path(index)) == {"/", DOCKER_SCOPE, POD_SLICE, POD_SCOPE}


def test_absent_cgroup_is_recorded(tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    gone = "/system.slice/docker-" + "9" * 64 + ".scope"
    _collector(tmp_path).snapshot(make_context(stage, {"cgroup_paths": [gone, "/../../escape"]}))
    index = read_json(stage, "cgroup/index.json")
    assert _by_path(index)[gone]["present"] is False
    assert index["skipped"] == [{"path": "/../../escape",
                                 "reason": "relative to a private cgroup namespace"}]


def test_cgroup_with_ten_thousand_processes(tmp_path: Path) -> None:
    collector = _collector(tmp_path)
    procs = tmp_path / "sys-fs-cgroup" / DOCKER_SCOPE[1:] / "cgroup.procs"
    procs.write_text("".join(f"{pid}\n" for pid in range(100_000, 110_000)))
    stage = tmp_path / "stage"
    collector.snapshot(make_context(stage, {"cgroup_paths": [DOCKER_SCOPE]}))
    docker = _by_path(read_json(stage, "cgroup/index.json"))[DOCKER_SCOPE]
    assert docker["values"]["procs"]["count"] == 10_000


def test_helpers() -> None:
    assert member_path("/a/b c/../x") is None
    assert member_path("/kubepods.slice/x:cri-containerd:y") == "kubepods.slice/x:cri-containerd:y"
    assert member_path("/a b") == "a_b"
    assert pod_ancestor(POD_SCOPE) == POD_SLICE
    assert pod_ancestor(DOCKER_SCOPE) is None
    assert interpret(1, "memory.limit_in_bytes", "9223372036854771712\n") == ("memory", {"limit_bytes": None})
    assert interpret(2, "cgroup.type", "domain\n") is None


def test_real_hierarchy_of_this_host(tmp_path: Path) -> None:
    """The real cgroup filesystems (hybrid here): root values parse, a tick works."""
    need(os.path.exists("/proc/self/mountinfo")
         and "cgroup" in Path("/proc/self/mountinfo").read_text(), "a mounted cgroup filesystem")
    stage = tmp_path / "stage"
    collector = CgroupsCollector()
    ctx = make_context(stage, {"cgroup_paths": ["/"]})
    collector.snapshot(ctx)
    index = read_json(stage, "cgroup/index.json")
    root = _by_path(index)["/"]
    assert index["layout"] in ("v1", "v2", "hybrid")
    assert "cpu" in root["values"] and not any(
        "parse_error" in f for f in root["files"].values())
    collector.sample(ctx, Tick(0, time.time()))
    collector.end_sampling(ctx)
    (line,) = read_jsonl(stage, "cgroup/samples.jsonl")
    assert line["cgroup"] == "/" and "cpu" in line["values"]


def test_tick_and_snapshot_parses_agree() -> None:
    """The per-tick cpu.stat view is the snapshot's parse; PSI ticks keep the totals."""
    from forensics.parsing import cgroupfs
    from tests.support.host_evidence import CGROUP_V2

    text = (CGROUP_V2 / DOCKER_SCOPE[1:] / "cpu.stat").read_text()
    stat = cgroupfs.parse_cpu_stat(text, 2)
    section, values = interpret(2, "cpu.stat", text, True) or ("", {})
    assert section == "cpu"
    assert values == stat and stat["nr_periods"] > 0 and stat["throttled_ns"] > 0
    v1 = "nr_periods 5\nnr_throttled 2\nthrottled_time 999\n"
    assert interpret(1, "cpu.stat", v1, True) == ("cpu", {
        "nr_periods": 5, "nr_throttled": 2, "throttled_ns": 999, "stat_version": 1})
    psi = (CGROUP_V2 / DOCKER_SCOPE[1:] / "io.pressure").read_text()
    assert interpret(2, "io.pressure", psi, True) == (
        "pressure", {"io": {"some_total_usec": 0, "full_total_usec": 0}})
    assert interpret(2, "io.pressure", psi)[1]["io"]["some"]["avg10_pct"] == 0.0  # type: ignore[index]


def test_interpret_raises_only_parse_error() -> None:
    """Every file the collector interprets, fed random and mutated text."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from forensics.errors import ParseError
    from forensics.parsing.cgroup_files import _FILE_VALUES as _INTERPRET
    from tests.support.host_evidence import CGROUP_V2

    samples = [p.read_text() for p in sorted(CGROUP_V2.rglob("*")) if p.is_file()]

    @settings(max_examples=300, deadline=None)
    @given(st.sampled_from(sorted(_INTERPRET)), st.booleans(),
           st.one_of(st.text(max_size=120), st.sampled_from(samples)), st.integers(0, 200),
           st.text(max_size=3))
    def check(key: tuple[int, str], tick: bool, text: str, at: int, insert: str) -> None:
        at %= len(text) + 1
        try:
            interpret(key[0], key[1], text[:at] + insert + text[at + 1:], tick)
        except ParseError:
            pass

    check()


def test_unparsable_file_is_kept_with_its_error(tmp_path: Path) -> None:
    collector = _collector(tmp_path)
    (tmp_path / "sys-fs-cgroup" / DOCKER_SCOPE[1:] / "memory.events").write_text("garbage here\n")
    stage = tmp_path / "stage"
    collector.snapshot(make_context(stage, {"cgroup_paths": [DOCKER_SCOPE]}))
    entry = _by_path(read_json(stage, "cgroup/index.json"))[DOCKER_SCOPE]["files"]["unified/memory.events"]
    assert "parse_error" in entry and (stage / entry["member"]).read_text() == "garbage here\n"


def test_hierarchy_mounted_with_a_non_root_view() -> None:
    """Inside a container, a cgroup mount shows only a subtree: paths outside it are skipped."""
    from forensics.collectors.cgroups import hierarchies
    from forensics.hostfs.mounts import cgroup_dir
    from forensics.parsing.cgroup_mounts import parse_cgroup_mounts

    mounts = parse_cgroup_mounts(
        "30 1 0:27 /kubepods.slice /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
        "31 1 0:28 / /host/memory rw - cgroup cgroup rw,memory\n")
    unified, memory = hierarchies(mounts)
    assert cgroup_dir(unified.mount, f"{POD_SLICE}/x") == f"/sys/fs/cgroup{POD_SLICE[len('/kubepods.slice'):]}/x"
    assert cgroup_dir(unified.mount, DOCKER_SCOPE) is None
    assert cgroup_dir(memory.mount, DOCKER_SCOPE) == f"/host/memory{DOCKER_SCOPE}"
    assert (memory.name, [f for f, _ in memory.files][:2]) == (
        "memory", ["memory.usage_in_bytes", "memory.limit_in_bytes"])
