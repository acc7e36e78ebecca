"""cluster capture and ``capture -o -`` on the local disk: what the storage refuses is exit 4
(errors.OutputNotWritten, as for capture and analyze), and what a killed run left behind is
removed by the next one once its owner is gone (bundle/leftovers.py's owner tokens)."""

from __future__ import annotations

import errno
import io
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import forensics.cluster
import forensics.cluster.run as run_mod
from forensics.bundle.leftovers import STAGING_PREFIX, owner_token
from forensics.capture import CaptureOptions, capture_to_stream
from forensics.cli import main
from forensics.cluster import ClusterCaptureOptions, ClusterResult, NodeResult, run_cluster_capture
from forensics.cluster.run import _NodeRun, _prepare_dir
from forensics.errors import BundleNotWritten, OutputNotWritten
from tests.support.kube_cluster import NodeSpec, SimCluster
from tests.unit.capture.capture_helpers import FnCollector, dead_owner_token


class _OneExec:
    """The one thing _NodeRun asks of the client before it reads the stream."""

    def open_exec(self, *args: Any, **kwargs: Any) -> object:
        return object()


def _node_with_receive_failing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int) -> NodeResult:
    def receive(ws: Any, out_path: Path, deadline: float, cancel: threading.Event) -> Any:
        raise OSError(err, "simulated " + errno.errorcode[err])

    monkeypatch.setattr(run_mod, "receive", receive)
    res = NodeResult("gpu-01")
    runner = _NodeRun(_OneExec(), ClusterCaptureOptions(out_dir=tmp_path), threading.Event(), lambda _m: None)  # type: ignore[arg-type]
    runner.capture_in_pod(res, "capture-pod", time.monotonic())
    return res


def test_a_bundle_the_disk_refuses_is_a_failed_node_and_exit_4(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = _node_with_receive_failing(tmp_path, monkeypatch, errno.ENOSPC)
    assert res.status == "failed" and res.not_written and not res.kept
    assert "cannot write the received bundle" in (res.error or "") and "ENOSPC" in (res.error or "")
    refused = ClusterResult(tmp_path, "t0", "t1", [res, NodeResult("gpu-02", status="ok")]).write_failure()
    assert isinstance(refused, BundleNotWritten) and refused.exit_code == 4
    assert "gpu-01" in str(refused) and "gpu-02" not in str(refused)


def test_another_local_write_error_is_the_nodes_failure_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = _node_with_receive_failing(tmp_path, monkeypatch, errno.EACCES)
    assert res.status == "failed" and not res.not_written
    assert ClusterResult(tmp_path, "t0", "t1", [res]).write_failure() is None


def test_a_summary_the_disk_refuses_still_prints_the_table_then_exits_4(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def refuse(result: ClusterResult, opts: ClusterCaptureOptions) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(run_mod, "write_summary", refuse)
    out = tmp_path / "incident"
    with SimCluster(tmp_path, tmp_path / "no-nvml.so", [NodeSpec("gpu-nopod", capture_pod=False)]) as sim:
        result = run_cluster_capture(ClusterCaptureOptions(out_dir=out, kubeconfig=str(sim.kubeconfig)))
        assert result.path is None and isinstance(result.summary_error, OutputNotWritten)
        assert "cluster.json: No space left on device" in str(result.summary_error)
        monkeypatch.setattr(forensics.cluster, "run_cluster_capture", lambda opts, progress=None: result)
        with pytest.raises(SystemExit) as ei:
            main(["cluster", "capture", "-o", str(out), "--kubeconfig", str(sim.kubeconfig)])
    assert ei.value.code == 4
    captured = capsys.readouterr()
    assert "gpu-nopod" in captured.err and "no-capture-pod" in captured.err  # the table came first
    assert captured.err.splitlines()[-1].startswith("gpuforensics: error: cannot write")
    assert captured.out == ""


def test_the_partials_of_a_killed_run_are_removed_by_the_next(tmp_path: Path) -> None:
    dead, live = dead_owner_token(), owner_token()
    out = tmp_path / "incident"
    out.mkdir()
    (out / f".gpuforensics-gpu-01.{dead}.0a1b2c3d.tgz.partial").write_bytes(b"half a bundle")
    (out / f".gpuforensics-gpu-02.{live}.0a1b2c3d.tgz.partial").write_bytes(b"in flight elsewhere")
    (out / "gpu-03.tgz").write_bytes(b"kept")
    said: list[str] = []
    _prepare_dir(out, said.append)
    assert sorted(p.name for p in out.iterdir()) == sorted([f".gpuforensics-gpu-02.{live}.0a1b2c3d.tgz.partial", "gpu-03.tgz"])
    assert len(said) == 1 and "gpu-01" in said[0] and "which is gone" in said[0]


def test_capture_to_stdout_removes_the_spool_of_a_killed_capture_and_leaves_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = dead_owner_token()
    abandoned = tmp_path / f"{STAGING_PREFIX}{dead}-spool-x1y2"
    abandoned.mkdir()
    (abandoned / "evidence").write_text("unredacted")
    (tmp_path / f"{STAGING_PREFIX}nopid-spool-x").mkdir()  # no token: not ours to judge
    monkeypatch.chdir(tmp_path)
    stream = io.BytesIO()
    said: list[str] = []
    streamed = capture_to_stream(CaptureOptions(timeout_s=10), stream, notice=said.append,
                                 collectors=[FnCollector("probe", lambda ctx: ctx.sink.write_json("probe/x.json", {}))])
    assert streamed.size == len(stream.getvalue()) > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{STAGING_PREFIX}nopid-spool-x"]
    assert any(abandoned.name in line for line in said)
