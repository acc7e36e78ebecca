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
    namespace_root,
    parse_proc_cgroup,
    relative_to,
    resolve_relative,
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


# ------------------------------------------------------------- namespace-relative resolution

name_segment = st.one_of(
    st.sampled_from(["kubepods.slice", "kubepods-besteffort.slice", "system.slice", "a", "b"]),
    st.text(alphabet=HEX + "-_.:", min_size=1, max_size=12).filter(lambda s: s not in (".", "..")),
)
host_path = st.lists(name_segment, max_size=6).map(lambda segs: "/" + "/".join(segs))


def test_resolve_relative_examples() -> None:
    assert resolve_relative("/a/b/c", "../../x") == "/a/x"
    assert resolve_relative("/a/b/c", "/../../x") == "/a/x"
    assert resolve_relative("/a/b/c", "/") == "/a/b/c"
    assert resolve_relative("/a/b/c", "/../../..") == "/"
    assert resolve_relative("/", "/x//./y/") == "/x/y"
    k = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podA.slice/cri-containerd-X.scope"
    assert resolve_relative(k, "/../../kubepods-besteffort-podB.slice/cri-containerd-Y.scope") == (
        "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podB.slice/"
        "cri-containerd-Y.scope")


@pytest.mark.parametrize(("own", "relative"), [
    ("/a", "/../../x"), ("/", "/.."), ("relative", "/x"), ("/a/../b", "/x"), ("", "/x")])
def test_resolve_relative_refuses(own: str, relative: str) -> None:
    with pytest.raises(ParseError):
        resolve_relative(own, relative)


@settings(max_examples=400, deadline=None)
@given(host_path, host_path)
def test_relative_to_round_trips(root: str, target: str) -> None:
    """The kernel's namespace view of a host path, joined back with the namespace root, is the
    host path again; and a view holds '..' exactly when the target is outside the root."""
    view = relative_to(root, target)
    assert view.startswith("/")
    assert resolve_relative(root, view) == target
    inside = target == root or target.startswith(root.rstrip("/") + "/")
    assert (".." in view.split("/")) == (not inside)


@settings(max_examples=400, deadline=None)
@given(host_path, st.lists(st.one_of(name_segment, st.sampled_from(["..", ".", ""])), max_size=8))
def test_resolve_relative_normalises_or_refuses(root: str, parts: list[str]) -> None:
    """The result is an absolute path with no empty, '.' or '..' segment; climbing past the
    host root raises ParseError (never clamped)."""
    relative = "/" + "/".join(parts)
    depth = len([s for s in root.split("/") if s])
    lowest = depth
    for part in parts:
        if part == "..":
            depth -= 1
            lowest = min(lowest, depth)
        elif part not in (".", ""):
            depth += 1
    try:
        resolved = resolve_relative(root, relative)
    except ParseError:
        assert lowest < 0
        return
    assert lowest >= 0
    segments = resolved.split("/")
    assert resolved.startswith("/") and (resolved == "/" or "" not in segments[1:])
    assert not {".", ".."} & set(segments)
    assert len([s for s in segments if s]) == depth


@settings(max_examples=300, deadline=None)
@given(host_path, st.lists(name_segment, max_size=3))
def test_namespace_root_strips_the_inner_path(root: str, inner: list[str]) -> None:
    own_host = (root.rstrip("/") + "/" + "/".join(inner)) if inner else root
    assert namespace_root(own_host, "/" + "/".join(inner)) == root


def test_namespace_root_refuses_inconsistent_views() -> None:
    assert namespace_root("/a/b", "/c") is None
    assert namespace_root("/a/b", "/../b") is None
    assert namespace_root("/a", "/a/b") is None
    assert namespace_root("/a/b", "/") == "/a/b"
    with pytest.raises(ParseError):
        namespace_root("/a", "b")
