"""Attribution of cgroup paths: golden fixtures for every runtime format, and property tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.errors import ParseError
from forensics.parsing.attribution import (
    attribute_path,
    attribute_proc_cgroup,
    parse_proc_cgroup,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "cgroup" / "proc_cgroup"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
HEX = "0123456789abcdef"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_golden_proc_cgroup(name: str) -> None:
    """Each documented runtime format attributes to the expected runtime, container, pod, QoS."""
    attribution, lines = attribute_proc_cgroup((FIXTURES / name).read_text())
    expected = EXPECTED[name]
    got = {k: getattr(attribution, k) for k in expected}
    assert got == expected
    assert attribution.cgroup_path in {line.path for line in lines}


def test_every_fixture_has_an_expectation() -> None:
    assert {p.name for p in FIXTURES.glob("*.txt")} == set(EXPECTED)


def test_v1_lines_are_parsed_with_controllers() -> None:
    lines = parse_proc_cgroup("10:cpu,cpuacct:/docker/x\n1:name=systemd:/\n0::/a:b\n")
    assert lines[0].controllers == ("cpu", "cpuacct")
    assert lines[1].controllers == ("name=systemd",)
    assert lines[2].is_v2 and lines[2].path == "/a:b"


def test_container_line_beats_host_line_in_hybrid() -> None:
    h = "d" * 64
    attribution, _ = attribute_proc_cgroup(f"4:memory:/docker/{h}\n0::/\n")
    assert attribution.container_id == h and attribution.cgroup_path == f"/docker/{h}"


def test_nested_lists_every_container_innermost_last() -> None:
    outer, inner = "a" * 64, "b" * 64
    attribution = attribute_path(f"/docker/{outer}/kubepods/besteffort/pod{'1' * 32}/{inner}")
    assert [c.container_id for c in attribution.containers] == [outer, inner]
    assert attribution.container_id == inner and attribution.runtime == "cri"


def test_unknown_shape_is_kept() -> None:
    attribution = attribute_path("/weird/thing")
    assert attribution.kind == "unknown" and attribution.cgroup_path == "/weird/thing"


def test_short_hex_is_not_a_container() -> None:
    assert attribute_path("/docker/" + "a" * 12).kind == "unknown"


def test_to_json_is_plain() -> None:
    data = attribute_path(f"/docker/{'c' * 64}").to_json()
    assert json.loads(json.dumps(data)) == data


@pytest.mark.parametrize("bad", ["", "\n\n", "garbage", "x::/a", "1:cpu:relative", "1:cpu"])
def test_bad_proc_cgroup_raises_parse_error(bad: str) -> None:
    with pytest.raises(ParseError):
        parse_proc_cgroup(bad)


@pytest.mark.parametrize("bad", ["", "relative/path"])
def test_bad_path_raises_parse_error(bad: str) -> None:
    with pytest.raises(ParseError):
        attribute_path(bad)


segment = st.one_of(
    st.text(alphabet=HEX, min_size=1, max_size=70),
    st.sampled_from(["docker", "kubepods", "kubepods.slice", "burstable", "besteffort", "..",
                     "system.slice", "kubepods-burstable.slice", "init.scope"]),
    st.builds(lambda h: f"docker-{h}.scope", st.text(alphabet=HEX, min_size=60, max_size=66)),
    st.builds(lambda h: f"kubepods-burstable-pod{h}.slice", st.text(alphabet=HEX + "_", min_size=30, max_size=38)),
    st.text(min_size=1, max_size=20).filter(lambda s: "/" not in s),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(segment, max_size=8))
def test_attribute_path_is_total(segments: list[str]) -> None:
    """Any absolute path attributes without raising, and keeps the path it was given."""
    path = "/" + "/".join(segments)
    attribution = attribute_path(path)
    assert attribution.cgroup_path == path
    assert attribution.kind in {"container", "pod", "host", "unknown"}
    if attribution.kind == "container":
        assert attribution.container_id is not None and len(attribution.container_id) == 64
        assert attribution.container_id in path


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=300))
def test_parse_proc_cgroup_raises_only_parse_error(text: str) -> None:
    try:
        attribute_proc_cgroup(text)
    except ParseError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(EXPECTED)), st.integers(0, 400), st.text(max_size=5))
def test_mutated_fixtures_raise_only_parse_error(name: str, at: int, insert: str) -> None:
    text = (FIXTURES / name).read_text()
    at %= len(text) + 1
    try:
        attribute_proc_cgroup(text[:at] + insert + text[at + 1:])
    except ParseError:
        pass
