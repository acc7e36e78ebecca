"""cgroup file parsers: documented examples, the real files of this host, and property tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.errors import ParseError
from forensics.parsing import cgroup_mounts, cgroupfs, pressure
from tests.support.env import need

V2 = Path(__file__).resolve().parents[2] / "fixtures" / "cgroup" / "v2"
DOCKER = next(V2.glob("system.slice/docker-*.scope"))


def test_cpu_stat_v2_normalises_to_ns() -> None:
    stat = cgroupfs.parse_cpu_stat((DOCKER / "cpu.stat").read_text(), 2)
    assert (stat["nr_periods"], stat["nr_throttled"]) == (6000, 4200)
    assert stat["throttled_ns"] == 4200 * 42000 * 1000
    assert stat["usage_ns"] == 50_000_000_000
    assert stat["nr_throttled"] / stat["nr_periods"] == pytest.approx(0.7)
    assert stat["stat_version"] == 2


def test_cpu_stat_v1_keeps_ns() -> None:
    stat = cgroupfs.parse_cpu_stat("nr_periods 10\nnr_throttled 4\nthrottled_time 123456789\n", 1)
    assert stat["throttled_ns"] == 123456789 and "usage_ns" not in stat and stat["stat_version"] == 1


def test_cpu_stat_v2_without_cpu_controller() -> None:
    stat = cgroupfs.parse_cpu_stat("usage_usec 10\nuser_usec 6\nsystem_usec 4\n", 2)
    assert stat == {"usage_ns": 10_000, "user_ns": 6_000, "system_ns": 4_000}  # no periods: nothing throttled


def test_cpu_stat_missing_key() -> None:
    with pytest.raises(ParseError, match="throttled_time"):
        cgroupfs.parse_cpu_stat("nr_periods 1\nnr_throttled 1\n", 1)


@pytest.mark.parametrize(("text", "quota", "period", "cpus"), [
    ("max 100000\n", None, 100000, None),
    ("50000 100000\n", 50000, 100000, 0.5),
    ("200000 100000", 200000, 100000, 2.0),
])
def test_cpu_max(text: str, quota: int | None, period: int, cpus: float | None) -> None:
    parsed = cgroupfs.parse_cpu_max(text)
    assert (parsed.quota_usec, parsed.period_usec, parsed.cpus) == (quota, period, cpus)


def test_limits() -> None:
    assert cgroupfs.parse_limit("max\n") is None
    assert cgroupfs.parse_limit("536870912\n") == 536870912
    assert cgroupfs.parse_v1_limit_bytes("9223372036854771712\n") is None
    assert cgroupfs.parse_v1_limit_bytes("33554432\n") == 33554432
    assert cgroupfs.parse_v1_quota_usec("-1\n") is None
    assert cgroupfs.parse_v1_quota_usec("20000\n") == 20000


def test_memory_events_with_and_without_group_kill() -> None:
    events = cgroupfs.parse_memory_events((DOCKER / "memory.events").read_text())
    assert (events["max"], events["oom"], events["oom_kill"], events["oom_group_kill"]) == (120, 3, 3, 0)
    old = cgroupfs.parse_memory_events("low 0\nhigh 1\nmax 2\noom 3\noom_kill 4\n")
    assert old["oom_group_kill"] is None and old["oom_kill"] == 4
    with pytest.raises(ParseError, match="oom_kill"):
        cgroupfs.parse_memory_events("low 0\nhigh 1\nmax 2\noom 3\n")


def test_oom_control() -> None:
    parsed = cgroupfs.parse_oom_control("oom_kill_disable 0\nunder_oom 1\noom_kill 7\n")
    assert parsed == {"oom_kill_disable": False, "under_oom": True, "oom_kill": 7}
    assert cgroupfs.parse_oom_control("oom_kill_disable 1\nunder_oom 0\n")["oom_kill"] is None
    with pytest.raises(ParseError, match="under_oom"):
        cgroupfs.parse_oom_control("oom_kill_disable 1\n")


def test_pressure() -> None:
    parsed = pressure.parse_pressure((DOCKER / "cpu.pressure").read_text())
    assert parsed.some.avg10_pct == 35.2 and parsed.some.total_usec == 9876543
    assert parsed.full is not None and parsed.full.avg300_pct == 10.0
    host_cpu_old_kernel = pressure.parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    assert host_cpu_old_kernel.full is None


@pytest.mark.parametrize("bad", [
    "", "full avg10=0 avg60=0 avg300=0 total=0\n", "some avg10=x avg60=0 avg300=0 total=0",
    "some avg10=0 avg60=0 total=0", "some avg10=500 avg60=0 avg300=0 total=0",
    "some avg10=nan avg60=0 avg300=0 total=0", "some a\nsome avg10=0 avg60=0 avg300=0 total=0",
])
def test_bad_pressure(bad: str) -> None:
    with pytest.raises(ParseError):
        pressure.parse_pressure(bad)


def test_mountinfo_hybrid_and_v2() -> None:
    text = (
        "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
        "33 31 0:30 / /sys/fs/cgroup/memory rw shared:5 - cgroup cgroup rw,memory\n"
        "34 31 0:31 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate\n"
        "35 23 0:5 / /proc rw - proc proc rw\n"
    )
    mounts = cgroup_mounts.parse_cgroup_mounts(text)
    assert [(m.mount_point, m.version, m.controllers) for m in mounts] == [
        ("/sys/fs/cgroup/cpu,cpuacct", 1, ("cpu", "cpuacct")),
        ("/sys/fs/cgroup/memory", 1, ("memory",)),
        ("/sys/fs/cgroup/unified", 2, ()),
    ]
    assert cgroup_mounts.cgroup_layout(mounts) == "hybrid"
    assert cgroup_mounts.cgroup_layout(mounts[2:]) == "v2"
    assert cgroup_mounts.cgroup_layout(mounts[:2]) == "v1"


def test_real_host_files_parse() -> None:
    """This host's own cgroup files (v1 hybrid here; v2 elsewhere) parse with our parsers."""
    mounts = cgroup_mounts.parse_cgroup_mounts(Path("/proc/self/mountinfo").read_text())
    need(bool(mounts), "a mounted cgroup filesystem")
    checked = 0
    for mount in mounts:
        for name, parse in (
            ("cpu.stat", lambda t, m=mount: cgroupfs.parse_cpu_stat(t, m.version)),
            ("memory.oom_control", cgroupfs.parse_oom_control),
            ("memory.usage_in_bytes", cgroupfs.parse_int),
            ("cpu.pressure", pressure.parse_pressure),
            ("memory.stat", cgroupfs.parse_flat_keyed),
        ):
            path = os.path.join(mount.mount_point, name)
            if os.path.exists(path):
                parse(Path(path).read_text())
                checked += 1
    for resource in ("cpu", "memory", "io"):
        if os.path.exists(f"/proc/pressure/{resource}"):
            pressure.parse_pressure(Path(f"/proc/pressure/{resource}").read_text())
            checked += 1
    assert checked > 0


PARSERS = [
    lambda t: cgroupfs.parse_cpu_stat(t, 2), lambda t: cgroupfs.parse_cpu_stat(t, 1),
    cgroupfs.parse_cpu_max, cgroupfs.parse_int, cgroupfs.parse_limit,
    cgroupfs.parse_v1_limit_bytes, cgroupfs.parse_v1_quota_usec, cgroupfs.parse_flat_keyed,
    cgroupfs.parse_memory_events, cgroupfs.parse_oom_control, pressure.parse_pressure,
    cgroup_mounts.parse_cgroup_mounts, pressure.pressure_values, pressure.pressure_totals,
]
SAMPLES = [p.read_text() for p in sorted(V2.rglob("*")) if p.is_file()]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PARSERS), st.text(max_size=200))
def test_random_text_raises_only_parse_error(parse: object, text: str) -> None:
    try:
        parse(text)  # type: ignore[operator]
    except ParseError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PARSERS), st.sampled_from(SAMPLES), st.integers(0, 500),
       st.text(max_size=4), st.integers(0, 3))
def test_mutated_files_raise_only_parse_error(parse: object, sample: str, at: int,
                                              insert: str, drop: int) -> None:
    at %= len(sample) + 1
    try:
        parse(sample[:at] + insert + sample[at + drop:])  # type: ignore[operator]
    except ParseError:
        pass


def test_non_text_raises_parse_error() -> None:
    for parse in PARSERS:
        with pytest.raises(ParseError):
            parse(b"bytes")  # type: ignore[operator]


def test_pressure_forms_agree() -> None:
    text = (DOCKER / "memory.pressure").read_text()
    values = pressure.pressure_values(text)
    parsed = pressure.parse_pressure(text)
    assert values["some"]["total_usec"] == parsed.some.total_usec == 55555
    assert pressure.pressure_totals(text) == {"some_total_usec": 55555, "full_total_usec": 44444}


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(SAMPLES), st.integers(0, 300), st.text(alphabet="0123456789 \nsomefulltavg=.", max_size=4),
       st.integers(0, 2))
def test_per_tick_pressure_totals_agree_with_the_full_parse(sample: str, at: int, insert: str, drop: int) -> None:
    """The per-tick PSI totals give what the full pressure parse gives, or both refuse (cpu.stat,
    memory.events and memory.oom_control have one parser each, shared by snapshot and tick)."""
    text = sample[:at % (len(sample) + 1)] + insert + sample[at % (len(sample) + 1) + drop:]
    pairs = [
        (lambda t: pressure.pressure_totals(t),
         lambda t: {f"{k}_total_usec": v["total_usec"] for k, v in pressure.pressure_values(t).items()}),
    ]
    for fast, slow in pairs:
        try:
            expected = slow(text)
        except ParseError:
            expected = None
        try:
            got = fast(text)
        except ParseError:
            got = None
        if expected is not None:
            assert got == expected
