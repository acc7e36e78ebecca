"""Log lines a container prints during a ``--duration`` window reach its ``logs.txt``, redacted.

The snapshot reads each container's log once; a container that prints a CUDA out-of-memory error
while the capture window runs must still have that line in the bundle. The container below waits
for a file the test creates only when the capture announces its sampling window (after the
snapshot), so its second line cannot have been read by the snapshot.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from forensics.bundle.reader import open_bundle
from forensics.capture.runner import run_capture
from forensics.collect.context import CaptureOptions
from forensics.collectors.docker.docker import COLLECTOR
from tests.support import log_lines as L
from tests.support.docker_engine import BUSYBOX_IMAGE, DockerEngine
from tests.support.polling import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SECRET = "hunter2-in-the-window"


def test_lines_printed_during_the_window_are_appended_redacted(docker_engine: DockerEngine,
                                                               tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    os.chmod(gate, 0o777)
    out = tmp_path / "out"
    out.mkdir()
    cid = docker_engine.run_labelled(
        "run", "-d", "--network", "none", "-v", f"{gate}:/gate", "-e", f"OOM={L.TORCH_OOM_NEW.text}",
        BUSYBOX_IMAGE, "sh", "-c",
        'echo "step 1 before the capture"; while [ ! -e /gate/go ]; do sleep 0.1; done; '
        f'echo "$OOM" >&2; echo "retrying with password={SECRET}"; exec sleep 600')
    try:
        client = docker_engine.client()
        try:
            wait_for(lambda: b"before the capture" in client.logs(cid))
        finally:
            client.close()

        def progress(message: str) -> None:
            if message.startswith("sampling "):  # the snapshot is over: the window begins
                (gate / "go").touch()

        result = run_capture(CaptureOptions(timeout_s=60.0, duration_s=3.0, interval_s=1.0,
                                            extra={"docker.host": docker_engine.docker_host}),
                             out, collectors=[COLLECTOR], progress=progress)
        assert (gate / "go").exists()
        bundle = open_bundle(result.path)
        record = next(c for c in bundle.collectors() if c["name"] == "docker")
        assert record["status"] == "ok", record

        data = bundle.read_bytes(f"docker/containers/{cid}/logs.txt")
        lines = data.decode().splitlines()
        stamp = r"^\d{4}-\d\d-\d\dT[0-9:.]+Z "
        assert all(re.match(stamp, ln) for ln in lines), lines
        # the snapshot's line once (not read again with the window's), then the window's lines
        assert [ln.split(" ", 1)[1] for ln in lines][:1] == ["step 1 before the capture"]
        assert sum("before the capture" in ln for ln in lines) == 1, lines
        assert any(ln.split(" ", 1)[1] == L.TORCH_OOM_NEW.text for ln in lines), lines
        retry = next(ln for ln in lines if "retrying with password=" in ln)
        assert SECRET not in data.decode() and "<redacted:" in retry

        report = bundle.read_json("docker/window/logs.json")[cid]
        assert report["error"] is None and report["already_kept_lines"] == 1, report
        assert report["boundary_lines_repeated"] == 0, report
        assert report["kept_bytes"] == report["received_bytes"] > len(L.TORCH_OOM_NEW.text), report
        assert report["dropped_oldest_bytes"] == 0, report

        # and the analysis reads it as the workload's own words
        from forensics.analysis import build_model
        from forensics.analysis.events import LogSignal
        from forensics.parsing.logsignals.cuda import CudaOom

        model = build_model([bundle.path])
        assert any(isinstance(s.signal, CudaOom) for s in model.series(LogSignal) if s.container_id == cid)
    finally:
        docker_engine.cli("rm", "-f", cid, check=False)
