"""The docker snapshot of an engine at a unix socket runs without the docker SDK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.docker_engine import BUSYBOX_IMAGE, DockerEngine

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_docker_snapshot_without_sdk(docker_engine: DockerEngine, tmp_path: Path) -> None:
    """The snapshot of an engine at a unix socket never imports the docker SDK (0.2-0.5 s of a
    small node's CPU before the first call, when it did), and still takes every running container."""
    host = docker_engine.docker_host
    cid = docker_engine.run_labelled("run", "-d", "--network", "none", BUSYBOX_IMAGE, "sleep", "600")
    try:
        _snapshot_without_sdk(host, cid, tmp_path)
    finally:
        docker_engine.cli("rm", "-f", cid, check=False)


def _snapshot_without_sdk(host: str, cid: str, tmp_path: Path) -> None:
    script = f"""
import json, sys
from pathlib import Path
from forensics.bundle.redact import Redactor
from forensics.bundle.sink import EvidenceSink
from forensics.collect.context import CaptureOptions, CollectContext
from forensics.collectors.docker.docker import DockerCollector
ctx = CollectContext(CaptureOptions(timeout_s=60, extra={{"docker.host": {host!r}}}),
                     EvidenceSink(Path({str(tmp_path)!r})), Redactor())
DockerCollector().snapshot(ctx)
print(json.dumps({{"sdk": sorted(m for m in sys.modules if m == "docker" or m.startswith(("docker.", "requests"))),
                  "partial": ctx.partial_reasons}}))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                         timeout=120, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"sdk": [], "partial": []}, (result, out.stderr[-2000:])
    index = json.loads((tmp_path / "docker" / "index.json").read_text())
    running = [c for c in json.loads((tmp_path / "docker" / "containers.json").read_text())
               if c.get("State") == "running"]
    assert cid in {c["Id"] for c in running} and all((tmp_path / "docker" / "containers" / c["Id"] / "top.json").is_file()
                           and (tmp_path / "docker" / "containers" / c["Id"] / "stats.json").is_file()
                           for c in running)
    assert not [c for c in index["calls"] if c["error"] and not c["race"]], index["calls"]
