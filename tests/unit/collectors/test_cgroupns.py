"""A capture pod in a private cgroup namespace, with the host's cgroup tree mounted elsewhere
(``--set cgroups.root`` / ``GPUFORENSICS_CGROUP_ROOT``): hierarchies are read under that root,
the capture's own cgroup is found by its PID in ``cgroup.procs``, and namespace-relative paths
(``0::/../../kubepods-...``) are resolved to host paths, on v2 and v1 layouts."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from forensics.collect.context import Tick
from forensics.collectors.cgroups import CgroupsCollector
from forensics.collectors.procfs import ProcfsCollector
from forensics.errors import SourceUnavailable
from forensics.hostfs.cgroupns import (
    ENV_CGROUP_ROOT,
    NamespaceResolver,
    cgroup_root_option,
    find_own_cgroup,
    host_hierarchies,
)
from forensics.parsing.attribution import relative_to
from tests.support.host_evidence import fake_process, make_context, read_json, read_jsonl

OWN = os.getpid()
CAP_UID = "11111111-2222-3333-4444-555555555555"
CAP_ID = "c" * 64
JOB_UID = "6a1f3c2e-9b4d-4e5f-8a7b-1c2d3e4f5a6b"
JOB_ID = "b7c2" + "2" * 60
PEER_UID = "99999999-8888-7777-6666-555555555555"
PEER_ID = "d" * 64


def _slice(qos: str, uid: str) -> str:
    return f"/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid.replace('-', '_')}.slice"


# v2, systemd driver: the capture pod (besteffort), a burstable GPU job, a besteffort peer
CAPTURE_V2 = f"{_slice('besteffort', CAP_UID)}/cri-containerd-{CAP_ID}.scope"
JOB_POD_V2 = _slice("burstable", JOB_UID)
JOB_V2 = f"{JOB_POD_V2}/cri-containerd-{JOB_ID}.scope"
PEER_V2 = f"{_slice('besteffort', PEER_UID)}/cri-containerd-{PEER_ID}.scope"
# v1, cgroupfs driver
CAPTURE_V1 = f"/kubepods/besteffort/pod{CAP_UID}/{CAP_ID}"
JOB_POD_V1 = f"/kubepods/burstable/pod{JOB_UID}"
JOB_V1 = f"{JOB_POD_V1}/{JOB_ID}"


def _cgroup(directory: Path, files: dict[str, str], procs: tuple[int, ...] = ()) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cgroup.procs").write_text("".join(f"{p}\n" for p in procs))
    for name, text in files.items():
        (directory / name).write_text(text)


def host_v2(tmp_path: Path, own_pid: int | None = OWN) -> Path:
    """A host cgroup v2 tree: root, system.slice, kubepods with three pods."""
    root = tmp_path / "host-cgroup"
    _cgroup(root, {"cgroup.controllers": "cpu io memory pids\n",
                   "cpu.stat": "usage_usec 1\nuser_usec 1\nsystem_usec 0\n"}, (1,))
    _cgroup(root / "system.slice" / "sshd.service", {}, (77,))
    for path, limit, procs in ((CAPTURE_V2, "1073741824", (own_pid,) if own_pid else ()),
                               (JOB_POD_V2, "4294967296", ()),
                               (JOB_V2, "2147483648", (5151, 5152)),
                               (PEER_V2, "max", (6161,))):
        _cgroup(root / path[1:], {
            "memory.max": f"{limit}\n", "memory.current": "1000\n",
            "cpu.stat": "usage_usec 5\nuser_usec 3\nsystem_usec 2\nnr_periods 10\n"
                        "nr_throttled 7\nthrottled_usec 70\n"}, procs)
    return root


def host_v1(tmp_path: Path) -> Path:
    """A host cgroup v1 tree (cgroupfs driver): cpu,cpuacct (with the usual symlinks), memory,
    pids and the named systemd hierarchy."""
    root = tmp_path / "host-cgroup-v1"
    per_controller = {
        "cpu,cpuacct": {"cpu.stat": "nr_periods 10\nnr_throttled 4\nthrottled_time 400\n",
                        "cpu.cfs_quota_us": "50000\n", "cpuacct.usage": "123\n"},
        "memory": {"memory.limit_in_bytes": "2147483648\n", "memory.usage_in_bytes": "1000\n"},
        "pids": {"pids.current": "2\n", "pids.max": "max\n"},
        "systemd": {},
    }
    for controller, files in per_controller.items():
        base = root / controller
        _cgroup(base, {}, (1,))
        _cgroup(base / CAPTURE_V1[1:], files, (OWN,))
        _cgroup(base / JOB_POD_V1[1:], files)
        _cgroup(base / JOB_V1[1:], files, (5151,))
    (root / "cpu").symlink_to("cpu,cpuacct")
    (root / "cpuacct").symlink_to("cpu,cpuacct")
    return root


def fake_pod_proc(tmp_path: Path, lines_for: dict[int, str]) -> Path:
    """/proc as seen from the capture pod: every cgroup relative to the namespace root."""
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "stat").write_text("cpu  1 2 3 4\nbtime 1796000000\n")
    for pid, text in lines_for.items():
        fake_process(proc, pid, text, comm=f"p{pid}")
    return proc


def v2_proc(tmp_path: Path) -> Path:
    return fake_pod_proc(tmp_path, {
        OWN: "0::/\n",
        5151: f"0::{relative_to(CAPTURE_V2, JOB_V2)}\n",
        6161: f"0::{relative_to(CAPTURE_V2, PEER_V2)}\n",
        77: f"0::{relative_to(CAPTURE_V2, '/system.slice/sshd.service')}\n",
    })


def test_namespace_views_look_like_the_kernels() -> None:
    assert relative_to(CAPTURE_V2, JOB_V2) == (
        f"/../../../kubepods-burstable.slice/{JOB_POD_V2.rsplit('/', 1)[1]}"
        f"/cri-containerd-{JOB_ID}.scope")
    assert relative_to(CAPTURE_V2, PEER_V2).startswith("/../../kubepods-besteffort-pod")


def test_v2_pod_procfs_resolves_and_records(tmp_path: Path) -> None:
    root = host_v2(tmp_path)
    proc = v2_proc(tmp_path)
    stage = tmp_path / "stage"
    ctx = make_context(stage, extra={"cgroups.root": str(root)})
    ProcfsCollector(str(proc)).snapshot(ctx)
    index = read_json(stage, "proc/index.json")
    by_pid = {p["pid"]: p for p in index["processes"]}
    assert set(by_pid) == {5151, 6161}
    job = by_pid[5151]
    # the attribution as read is kept (verbatim view), the host view is added beside it
    assert job["attribution"]["namespace_relative"] is True
    assert job["attribution"]["container_id"] == JOB_ID
    assert job["host_cgroup_paths"] == {"unified": JOB_V2}
    host = job["host_attribution"]
    assert (host["cgroup_path"], host["namespace_relative"], host["qos_class"], host["pod_uid"]) == (
        JOB_V2, False, "burstable", JOB_UID)
    assert by_pid[6161]["host_cgroup_paths"] == {"unified": PEER_V2}
    ns = index["cgroup_namespace"]
    assert ns["root"] == str(root) and ns["root_from"] == "--set cgroups.root"
    assert ns["layout"] == "v2" and ns["processes_resolved"] == 2
    assert ns["processes_unresolved"] == 0
    (own,) = ns["own_cgroup"]
    assert (own["hierarchy"], own["pid"], own["host_path"], own["namespace_path"],
            own["namespace_root"], own["error"]) == ("unified", OWN, CAPTURE_V2, "/",
                                                     CAPTURE_V2, None)
    assert "cgroup.procs" in own["method"]
    # hints keep the paths as read: the cgroups collector resolves them itself
    assert ctx.published["cgroup_paths"] == [relative_to(CAPTURE_V2, JOB_V2),
                                             relative_to(CAPTURE_V2, PEER_V2)]


def test_v2_pod_cgroups_reads_the_host_tree(tmp_path: Path) -> None:
    root = host_v2(tmp_path)
    proc = v2_proc(tmp_path)
    stage = tmp_path / "stage"
    job_rel = relative_to(CAPTURE_V2, JOB_V2)
    ctx = make_context(stage, {"cgroup_paths": [job_rel]},
                       extra={"cgroups.root": str(root)})
    # the mountinfo the pod would see: only its own subtree (must not be used)
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"30 1 0:27 / {tmp_path / 'nowhere'} rw - cgroup2 cgroup2 rw\n")
    pressure = tmp_path / "pressure"
    pressure.mkdir()
    CgroupsCollector(str(mountinfo), str(pressure), str(proc)).snapshot(ctx)
    index = read_json(stage, "cgroup/index.json")
    assert index["layout"] == "v2" and index["hierarchies_from"] == "--set cgroups.root"
    assert index["mounts"] == [{"mount_point": str(root), "version": 2, "controllers": [],
                                "root": "/"}]
    cgroups = {c["path"]: c for c in index["cgroups"]}
    assert list(cgroups) == ["/", JOB_POD_V2, JOB_V2]
    job = cgroups[JOB_V2]
    assert job["namespace_path"] == job_rel and job["present"] is True
    assert job["attribution"]["container_id"] == JOB_ID
    assert job["attribution"]["namespace_relative"] is False
    assert job["values"]["memory"]["limit_bytes"] == 2147483648
    assert job["values"]["cpu"]["nr_throttled"] == 7
    member = job["files"]["unified/memory.max"]["member"]
    assert member == f"cgroup/unified{JOB_V2}/memory.max"
    assert (stage / member).read_bytes() == (root / JOB_V2[1:] / "memory.max").read_bytes()
    pod = cgroups[JOB_POD_V2]
    assert pod["namespace_path"] == relative_to(CAPTURE_V2, JOB_POD_V2)
    assert pod["values"]["memory"]["limit_bytes"] == 4294967296
    assert cgroups["/"]["values"]["cpu"]["usage_ns"] == 1000
    ns = index["cgroup_namespace"]
    assert ns["resolved"] == [{"namespace_path": job_rel, "path": JOB_V2}]
    assert ns["own_cgroup"][0]["host_path"] == CAPTURE_V2
    assert index["skipped"] == []


def test_v2_sampling_uses_host_paths(tmp_path: Path) -> None:
    root = host_v2(tmp_path)
    proc = v2_proc(tmp_path)
    stage = tmp_path / "stage"
    ctx = make_context(stage, {"cgroup_paths": [relative_to(CAPTURE_V2, PEER_V2)]},
                       extra={"cgroups.root": str(root)})
    pressure = tmp_path / "pressure"
    pressure.mkdir()
    collector = CgroupsCollector(str(tmp_path / "no-mountinfo"), str(pressure), str(proc))
    collector.sample(ctx, Tick(0, time.time()))
    collector.end_sampling(ctx)
    lines = {line["cgroup"]: line for line in read_jsonl(stage, "cgroup/samples.jsonl")}
    assert set(lines) == {"/", PEER_V2, PEER_V2.rsplit("/", 1)[0]}
    assert lines[PEER_V2]["values"]["cpu"]["nr_throttled"] == 7


def test_discovery_without_hints_in_a_pod(tmp_path: Path) -> None:
    """No hints: the collector's own /proc scan finds relative paths and resolves them."""
    root = host_v2(tmp_path)
    proc = v2_proc(tmp_path)
    stage = tmp_path / "stage"
    ctx = make_context(stage, extra={"cgroups.root": str(root)})
    CgroupsCollector(str(tmp_path / "no-mountinfo"), str(tmp_path), str(proc)).snapshot(ctx)
    index = read_json(stage, "cgroup/index.json")
    assert index["targets_from"].startswith("scan")
    assert {c["path"] for c in index["cgroups"]} == {
        "/", JOB_POD_V2, JOB_V2, PEER_V2, PEER_V2.rsplit("/", 1)[0]}


def test_env_variable_is_the_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = host_v2(tmp_path)
    monkeypatch.setenv(ENV_CGROUP_ROOT, str(root))
    assert cgroup_root_option(make_context(tmp_path / "a")) == (
        str(root), f"env {ENV_CGROUP_ROOT}")
    assert cgroup_root_option(make_context(tmp_path / "b", extra={"cgroups.root": "/x/"})) == (
        "/x", "--set cgroups.root")
    proc = v2_proc(tmp_path)
    stage = tmp_path / "stage"
    ctx = make_context(stage, {"cgroup_paths": [relative_to(CAPTURE_V2, JOB_V2)]})
    CgroupsCollector(str(tmp_path / "no-mountinfo"), str(tmp_path), str(proc)).snapshot(ctx)
    index = read_json(stage, "cgroup/index.json")
    assert index["hierarchies_from"] == f"env {ENV_CGROUP_ROOT}"
    assert JOB_V2 in {c["path"] for c in index["cgroups"]}
    monkeypatch.setenv(ENV_CGROUP_ROOT, "")
    assert cgroup_root_option(make_context(tmp_path / "c")) == (None, None)


def test_own_pid_not_found_keeps_and_reports(tmp_path: Path) -> None:
    root = host_v2(tmp_path, own_pid=None)
    proc = v2_proc(tmp_path)
    rel = relative_to(CAPTURE_V2, JOB_V2)
    stage = tmp_path / "stage"
    ctx = make_context(stage, {"cgroup_paths": [rel]}, extra={"cgroups.root": str(root)})
    CgroupsCollector(str(tmp_path / "no-mountinfo"), str(tmp_path), str(proc)).snapshot(ctx)
    index = read_json(stage, "cgroup/index.json")
    (resolution,) = index["cgroup_namespace"]["resolved"]
    assert resolution["path"] is None and f"pid {OWN} is in no cgroup.procs" in resolution["error"]
    assert [s["path"] for s in index["skipped"]] == [rel.rsplit("/", 1)[0], rel]  # pod, container
    assert "not resolved" in index["skipped"][1]["reason"]
    assert JOB_V2 not in {c["path"] for c in index["cgroups"]}  # never guessed
    assert ctx.partial_reasons == ["1 namespace-relative cgroup paths not resolved to host paths"]
    stage2 = tmp_path / "stage2"
    ctx2 = make_context(stage2, extra={"cgroups.root": str(root)})
    ProcfsCollector(str(proc)).snapshot(ctx2)
    job = next(p for p in read_json(stage2, "proc/index.json")["processes"] if p["pid"] == 5151)
    assert "host_cgroup_paths" not in job and "host_attribution" not in job
    assert job["unresolved_cgroup_paths"]["unified"]["path"] == rel
    assert read_json(stage2, "proc/index.json")["cgroup_namespace"]["processes_unresolved"] == 2


def test_own_cgroup_below_the_namespace_root(tmp_path: Path) -> None:
    """The capture sits in a child of its namespace root: /proc/self/cgroup reads /sub."""
    root = host_v2(tmp_path, own_pid=None)
    _cgroup(root / CAPTURE_V2[1:] / "sub", {}, (OWN,))
    proc = fake_pod_proc(tmp_path, {OWN: "0::/sub\n"})
    resolver = NamespaceResolver(str(root), "test", str(proc), OWN)
    assert resolver.resolve(None, relative_to(CAPTURE_V2, JOB_V2)) == (JOB_V2, None)
    own = resolver.to_json()["own_cgroup"][0]
    assert (own["host_path"], own["namespace_root"]) == (f"{CAPTURE_V2}/sub", CAPTURE_V2)
    # a path climbing above the host root names nothing here: unresolved, not clamped
    host, why = resolver.resolve(None, "/../../../../../../x")
    assert host is None and why and "climbs above" in why


def test_v1_layout(tmp_path: Path) -> None:
    root = host_v1(tmp_path)
    names = [h.name for h in host_hierarchies(str(root))]
    assert names == ["cpu,cpuacct", "memory", "pids", "name=systemd"]  # symlinks skipped
    rel = relative_to(CAPTURE_V1, JOB_V1)
    assert rel == f"/../../../burstable/pod{JOB_UID}/{JOB_ID}"
    text = "".join(f"{n}:{c}:{rel}\n" for n, c in (
        (4, "memory"), (3, "cpu,cpuacct"), (2, "pids"), (1, "name=systemd")))
    own = "".join(f"{n}:{c}:/\n" for n, c in (
        (4, "memory"), (3, "cpu,cpuacct"), (2, "pids"), (1, "name=systemd")))
    proc = fake_pod_proc(tmp_path, {OWN: own, 5151: text})
    stage = tmp_path / "stage"
    ctx = make_context(stage, extra={"cgroups.root": str(root)})
    ProcfsCollector(str(proc)).snapshot(ctx)
    index = read_json(stage, "proc/index.json")
    (job,) = index["processes"]
    assert job["host_cgroup_paths"] == {h: JOB_V1 for h in
                                        ("memory", "cpu,cpuacct", "pids", "name=systemd")}
    assert job["host_attribution"]["runtime"] == "cri"
    assert index["cgroup_namespace"]["layout"] == "v1"
    CgroupsCollector(str(tmp_path / "no-mountinfo"), str(tmp_path), str(proc)).snapshot(
        make_context(stage, {"cgroup_paths": ctx.published["cgroup_paths"]},
                     extra={"cgroups.root": str(root)}))
    cg = read_json(stage, "cgroup/index.json")
    assert cg["layout"] == "v1" and cg["hierarchies_read"] == ["cpu,cpuacct", "memory", "pids"]
    cgroups = {c["path"]: c for c in cg["cgroups"]}
    assert list(cgroups) == ["/", JOB_POD_V1, JOB_V1]
    values = cgroups[JOB_V1]["values"]
    assert values["memory"]["limit_bytes"] == 2147483648
    assert values["cpu"]["quota_usec"] == 50000 and values["pids"]["current"] == 2
    member = cgroups[JOB_V1]["files"]["memory/memory.limit_in_bytes"]["member"]
    assert member == f"cgroup/memory{JOB_V1}/memory.limit_in_bytes"
    (own_memory,) = cg["cgroup_namespace"]["own_cgroup"]  # one search: the primary hierarchy
    assert (own_memory["hierarchy"], own_memory["host_path"]) == ("memory", CAPTURE_V1)


def test_v1_hierarchies_with_different_namespace_roots(tmp_path: Path) -> None:
    """procfs resolves each v1 line against its own hierarchy's namespace root."""
    root = host_v1(tmp_path)
    # in the pids hierarchy the capture sits one level higher (pod level)
    (root / "pids" / CAPTURE_V1[1:] / "cgroup.procs").write_text("")
    (root / "pids" / CAPTURE_V1[1:]).parent.joinpath("cgroup.procs").write_text(f"{OWN}\n")
    rel = relative_to(CAPTURE_V1, JOB_V1)
    rel_pids = relative_to(CAPTURE_V1.rsplit("/", 1)[0], JOB_V1)
    assert rel != rel_pids
    proc = fake_pod_proc(tmp_path, {OWN: "4:memory:/\n2:pids:/\n",
                                    5151: f"4:memory:{rel}\n2:pids:{rel_pids}\n"})
    resolver = NamespaceResolver(str(root), "test", str(proc), OWN)
    assert resolver.resolve("memory", rel) == (JOB_V1, None)
    assert resolver.resolve("pids", rel_pids) == (JOB_V1, None)
    host, why = resolver.resolve("cpu,cpuacct", rel)  # no such line for the capture itself
    assert host is None and why and "no cpu,cpuacct line" in why
    stage = tmp_path / "stage"
    ProcfsCollector(str(proc)).snapshot(make_context(stage, extra={"cgroups.root": str(root)}))
    (job,) = read_json(stage, "proc/index.json")["processes"]
    assert job["host_cgroup_paths"] == {"memory": JOB_V1, "pids": JOB_V1}


def test_hybrid_root_has_a_unified_hierarchy(tmp_path: Path) -> None:
    root = host_v1(tmp_path)
    _cgroup(root / "unified", {"cgroup.controllers": ""}, (1,))
    hierarchies = host_hierarchies(str(root))
    assert [(h.name, h.version) for h in hierarchies][-1] == ("unified", 2)
    resolver = NamespaceResolver(str(root), "test", str(tmp_path / "proc"), OWN)
    assert resolver.layout == "hybrid" and resolver.primary == "unified"


def test_search_is_bounded(tmp_path: Path) -> None:
    root = host_v2(tmp_path)
    assert find_own_cgroup(str(root), OWN) == (CAPTURE_V2, find_own_cgroup(str(root), OWN)[1],
                                               False)
    found, searched, truncated = find_own_cgroup(str(root), OWN, max_depth=2)
    assert found is None and truncated
    found, searched, truncated = find_own_cgroup(str(root), OWN, max_dirs=3)
    assert (found, searched, truncated) == (None, 3, True)
    assert find_own_cgroup(str(root), 1) == ("/", 1, False)
    found, _, truncated = find_own_cgroup(str(root), 424242)
    assert found is None and not truncated


def test_bad_root_is_unavailable(tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    ctx = make_context(stage, extra={"cgroups.root": str(tmp_path / "missing")})
    with pytest.raises(SourceUnavailable, match="cgroups.root"):
        CgroupsCollector(str(tmp_path / "m"), str(tmp_path), str(tmp_path)).snapshot(ctx)
    (tmp_path / "empty").mkdir()
    ctx = make_context(stage, extra={"cgroups.root": str(tmp_path / "empty")})
    with pytest.raises(SourceUnavailable, match="no cgroup hierarchy"):
        CgroupsCollector(str(tmp_path / "m"), str(tmp_path), str(tmp_path)).snapshot(ctx)


def test_absolute_hints_are_not_rewritten(tmp_path: Path) -> None:
    """Host paths (from the docker collector, say) are read as they are, even in a pod."""
    root = host_v2(tmp_path)
    proc = v2_proc(tmp_path)
    stage = tmp_path / "stage"
    ctx = make_context(stage, {"cgroup_paths": [JOB_V2]}, extra={"cgroups.root": str(root)})
    CgroupsCollector(str(tmp_path / "m"), str(tmp_path), str(proc)).snapshot(ctx)
    index = read_json(stage, "cgroup/index.json")
    job = {c["path"]: c for c in index["cgroups"]}[JOB_V2]
    assert "namespace_path" not in job and job["values"]["memory"]["limit_bytes"] == 2147483648
    assert index["cgroup_namespace"]["resolved"] == []


def test_processes_read_later_are_resolved_too(tmp_path: Path) -> None:
    """A PID read outside the /proc scan (a hinted PID, a process born during the window) goes
    through the same resolution."""
    from forensics.hostfs.cgroupns import make_resolver

    root = host_v2(tmp_path)
    proc = v2_proc(tmp_path)
    stage = tmp_path / "stage"
    ctx = make_context(stage, extra={"cgroups.root": str(root)})
    collector = ProcfsCollector(str(proc))
    collector._resolver = make_resolver(ctx, str(proc))
    record: dict[str, object] = {"pid": 6161}
    collector._collect_pid(ctx, 6161, None, record, 1796000000.0, 100, 4096)
    assert record["files"] == "written"
    assert record["host_cgroup_paths"] == {"unified": PEER_V2}
    assert record["host_attribution"]["cgroup_path"] == PEER_V2  # type: ignore[index]


def test_docker_container_pids_are_read_under_the_cgroup_root(tmp_path: Path) -> None:
    """The docker collector honours ``cgroups.root`` as procfs and cgroups do: a container's
    namespace-relative cgroup path is resolved and its ``cgroup.procs`` read in the host tree."""
    from forensics.collectors.docker.pids import container_processes
    from forensics.hostfs.mounts import host_cgroup_mounts

    root = host_v2(tmp_path)
    proc = v2_proc(tmp_path)
    ctx = make_context(tmp_path / "stage", extra={"cgroups.root": str(root)})
    mounts, resolver = host_cgroup_mounts(ctx, str(proc))
    assert resolver is not None and [m.mount_point for m in mounts] == [str(root)]
    res = container_processes(5151, mounts, proc_root=str(proc), container_id=JOB_ID, resolver=resolver)
    assert res["cgroup_paths"] == {"unified": JOB_V2}
    assert set(res["pids"]) == {"5151", "5152"} and res["errors"] == {}
    # without the root, the namespace view names no directory this capture can read
    res = container_processes(5151, (), proc_root=str(proc), container_id=JOB_ID)
    assert res["pids"] == {}
