"""Pieces of the docker collector that need no engine: PIDs from cgroup files, redaction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forensics.bundle.redact import Redactor
from forensics.collectors.docker.pids import container_processes, merge_pids
from forensics.collectors.docker.redact import redact_container, redact_listing, redact_top
from forensics.collectors.docker.taken import parse_docker_time
from forensics.parsing.cgroup_mounts import parse_cgroup_mounts

CID = "1949ad951dca5b0e8155513647f7e531501f57d38c6cd0c2f60e40891dac83e1"
MOUNTINFO_HYBRID = """\
31 23 0:28 / {root}/sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / {root}/sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / {root}/sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / {root}/sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / {root}/sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""


class _Ctx:
    def __init__(self) -> None:
        self.redactor = Redactor(key=b"k" * 32)


def _fake_host(tmp: Path, procs: dict[str, list[int]]) -> tuple[Path, Any]:
    """A /proc/<pid>/cgroup and cgroup.procs files laid out like a hybrid cgroup host."""
    proc = tmp / "proc"
    (proc / "100").mkdir(parents=True)
    (proc / "100" / "cgroup").write_text(
        f"4:memory:/docker/{CID}\n1:cpu:/docker/{CID}\n9:name=systemd:/docker/{CID}\n0::/docker/{CID}\n")
    for hier, pids in procs.items():
        d = tmp / "sys/fs/cgroup" / hier / "docker" / CID
        d.mkdir(parents=True)
        (d / "cgroup.procs").write_text("".join(f"{p}\n" for p in pids))
    mounts = parse_cgroup_mounts(MOUNTINFO_HYBRID.format(root=tmp))
    return proc, mounts


def test_all_processes_of_every_hierarchy(tmp_path: Path) -> None:
    proc, mounts = _fake_host(tmp_path, {"memory": [100, 101, 150], "cpu": [100, 101, 150],
                                         "systemd": [100, 101, 150], "unified": [100, 101, 150, 151]})
    res = container_processes(100, mounts, proc_root=str(proc))
    assert set(res["cgroup_paths"]) == {"memory", "cpu", "name=systemd", "unified"}
    assert set(res["cgroup_paths"].values()) == {f"/docker/{CID}"}
    assert sorted(int(p) for p in res["pids"]) == [100, 101, 150, 151]
    assert len(res["pids"]["100"]) == 4 and len(res["pids"]["151"]) == 1
    assert res["errors"] == {}


def test_other_pid_namespace_is_refused(tmp_path: Path) -> None:
    proc, mounts = _fake_host(tmp_path, {"memory": [100]})
    res = container_processes(100, mounts, proc_root=str(proc), container_id="f" * 64)
    assert res["pids"] == {} and "does not name the container" in next(iter(res["errors"].values()))
    res = container_processes(100, mounts, proc_root=str(proc), container_id=CID)
    assert list(res["pids"]) == ["100"]


def test_missing_hierarchy_recorded_not_fatal(tmp_path: Path) -> None:
    proc, mounts = _fake_host(tmp_path, {"memory": [100]})
    res = container_processes(100, mounts, proc_root=str(proc))
    assert list(res["pids"]) == ["100"]
    assert any("cpu" in k for k in res["errors"])


def test_vanished_process(tmp_path: Path) -> None:
    res = container_processes(4242, (), proc_root=str(tmp_path))
    assert res["pids"] == {} and res["errors"]


def test_merge_with_top() -> None:
    procs = {"state_pid": 100, "cgroup_paths": {"memory": "/docker/x"}, "errors": {},
             "pids": {"100": ["/m/cgroup.procs"], "101": ["/m/cgroup.procs"]}}
    top = {"Titles": ["PID", "PPID", "USER", "%CPU", "RSS", "ELAPSED", "COMMAND"],
           "Processes": [["100", "90", "root", "0.0", "4", "10", "sleep 9"],
                         ["102", "100", "root", "0.0", "4", "1", "sleep 1"]]}
    out = merge_pids(procs, top, "2026-11-30T05:00:10.000000Z")
    assert out["pids"]["100"]["sources"] == ["/m/cgroup.procs", "top"]
    assert out["pids"]["100"]["start_time_approx"] == "2026-11-30T05:00:00.000000Z"
    assert out["pids"]["101"] == {"sources": ["/m/cgroup.procs"]}
    assert out["pids"]["102"]["ppid"] == 100


def test_redaction_of_inspect_top_and_list() -> None:
    ctx: Any = _Ctx()
    doc = {"Path": "python", "Args": ["train.py", "--api-token", "s3cr3t"],
           "Config": {"Env": ["NVIDIA_VISIBLE_DEVICES=all", "AWS_SECRET_ACCESS_KEY=abc", "PATH=/bin"],
                      "Cmd": ["python", "--password=hunter2"], "Entrypoint": None}}
    out = redact_container(doc, ctx)
    assert out["Config"]["Env"][0] == "NVIDIA_VISIBLE_DEVICES=all"
    assert out["Config"]["Env"][1].startswith("AWS_SECRET_ACCESS_KEY=<redacted:")
    assert "hunter2" not in str(out) and "s3cr3t" not in str(out)
    top = {"Titles": ["PID", "COMMAND"], "Processes": [["1", "python --password=hunter2 x"]]}
    assert "hunter2" not in str(redact_top(top, ctx))
    listing = [{"Command": "sh -c 'x --token=abcdef'"}]
    assert "abcdef" not in str(redact_listing(listing, ctx))


def test_log_driver_options_are_redacted() -> None:
    """``--log-opt splunk-token=...`` and a Loki URL with its API key are in the container's
    ``HostConfig.LogConfig.Config`` (they reached the bundle verbatim); other options stay."""
    ctx: Any = _Ctx()
    token, key = "176FCEBF-4CF5-4EDF-91BC-703796522D20", "eyJrIjoiYWJjZGVmZ2hpamtsbW5vcCJ9"
    doc = {"HostConfig": {"LogConfig": {"Type": "splunk", "Config": {
        "splunk-token": token, "loki-url": f"https://123456:{key}@logs.example.net/loki/api/v1/push",
        "max-size": "10m"}}}}
    out = redact_container(doc, ctx)
    assert token not in str(out) and key not in str(out)
    assert out["HostConfig"]["LogConfig"]["Config"]["max-size"] == "10m"


def test_docker_time() -> None:
    t = parse_docker_time("2026-11-30T05:31:14.123456789Z")
    assert t is not None and t.microsecond == 123456
    assert parse_docker_time("0001-01-01T00:00:00Z") is None
    assert parse_docker_time("garbage") is None


class _Resp:
    def __init__(self, status_code: int) -> None:
        self.status_code = status_code


class _TopRefused(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__(f"{status_code} Server Error")
        self.response = _Resp(status_code)


class _FakeTopClient:
    """Stands in for APIClient.top of an engine whose top rejects ps options (podman)."""

    def __init__(self, reject_with: int | None) -> None:
        self.reject_with = reject_with
        self.calls: list[str | None] = []

    def top(self, cid: str, ps_args: str | None = None) -> dict[str, Any]:
        self.calls.append(ps_args)
        if ps_args is not None and self.reject_with is not None:
            raise _TopRefused(self.reject_with)
        return {"Titles": ["PID"], "Processes": [["1"]]}


def test_top_falls_back_without_ps_args() -> None:
    from forensics.collectors.docker.engine import top
    from forensics.parsing.docker_top import TOP_PS_ARGS

    ok = _FakeTopClient(None)
    assert top(ok, CID)["Processes"] == [["1"]] and ok.calls == [TOP_PS_ARGS]
    podman = _FakeTopClient(500)
    assert top(podman, CID)["Titles"] == ["PID"] and podman.calls == [TOP_PS_ARGS, None]
    gone = _FakeTopClient(404)
    try:
        top(gone, CID)
    except _TopRefused:
        pass
    else:
        raise AssertionError("a 404 (no such container) must not be retried")


class _FakeLogsClient:
    """Stands in for the APIClient internals ``logs`` uses; any inspect is a failure."""

    def __init__(self) -> None:
        self.gets: list[tuple[str, dict[str, Any]]] = []
        self.tty: list[bool] = []

    def _url(self, path: str, *args: str) -> str:
        return path.format(*args)

    def _get(self, url: str, params: dict[str, Any], stream: bool) -> str:
        self.gets.append((url, params))
        return "response"

    def _get_result_tty(self, stream: bool, response: str, is_tty: bool) -> bytes:
        self.tty.append(is_tty)
        return b"2026-11-30T05:00:00.000000000Z hello\n"

    def inspect_container(self, cid: str) -> dict[str, Any]:
        raise AssertionError("logs must not inspect the container again")


def test_logs_uses_the_known_tty_and_no_second_inspect() -> None:
    from datetime import UTC, datetime

    from forensics.collectors.docker.engine import logs

    client = _FakeLogsClient()
    since = datetime(2026, 11, 30, 4, 0, tzinfo=UTC)
    assert logs(client, CID, since, 1000, tty=True).endswith(b"hello\n")
    assert client.tty == [True]
    url, params = client.gets[0]
    assert url == f"/containers/{CID}/logs"
    assert params == {"stderr": 1, "stdout": 1, "timestamps": 1, "follow": 0, "tail": 1000,
                      "since": int(since.timestamp())}


class _OldEngineStats:
    """An SDK client bound to API < 1.41: one_shot is refused before any request is made."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def stats(self, cid: str, **kw: Any) -> dict[str, Any]:
        self.calls.append(kw)
        if kw.get("one_shot"):
            raise ValueError("one_shot is not supported for API version < 1.41")
        return {"id": cid, "precpu_stats": {"cpu_usage": {"total_usage": 5}}}


def test_stats_without_one_shot_is_recorded() -> None:
    from forensics.collectors.docker.engine import stats

    client = _OldEngineStats()
    fallbacks: dict[str, str] = {}
    assert stats(client, CID, fallbacks)["id"] == CID
    assert client.calls == [{"stream": False, "one_shot": True}, {"stream": False}]
    assert "precpu_stats filled" in fallbacks[CID]
