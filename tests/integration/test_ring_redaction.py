"""A ring recorded with ``record --no-redact`` and the captures that fold it: a redacted capture
carries none of its records (named, partial), ``capture --no-redact`` carries them, and a redacted
recorder run after it on the same ring starts clean (its segments are carried)."""

from __future__ import annotations

import gzip
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from forensics.ring import RingReader
from tests.support.nvmlsim import Scenario, subprocess_env
from tests.support.nvmlsim import fixtures as nvf

sim_lib = nvf.sim_lib
pytestmark = [pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SECRET = "hunter2-ring-s3cret-value"


def _cli(*args: str, env: dict[str, str], **kwargs) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "forensics", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, **kwargs)


def _record_until_environ(ring: Path, pid: int, env: dict[str, str], *extra: str) -> None:
    """``gpuforensics record`` until the ring holds a new record of ``proc/<pid>/environ``, then SIGTERM."""
    before = len(list(RingReader(ring).records(members=(f"proc/{pid}/environ",)))) if ring.exists() else 0
    proc = _cli("record", "--ring", str(ring), "--interval", "0.2", "--sources", "nvml,procfs", *extra, env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if ring.exists() and len(list(RingReader(ring).records(members=(f"proc/{pid}/environ",)))) > before:
                break
            time.sleep(0.2)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert len(list(RingReader(ring).records(members=(f"proc/{pid}/environ",)))) > before


def _capture(ring: Path, out: Path, env: dict[str, str], *extra: str) -> tuple[Path, str]:
    out.mkdir()
    proc = _cli("capture", "--ring", str(ring), "--since", "10m", "--only", "ring", "-o", str(out), *extra, env=env)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    return Path(stdout.strip().splitlines()[-1]), stderr


def _members(bundle: Path) -> dict[str, bytes]:
    """Every member's bytes, a gzip member inflated (a segment's records are inside it)."""
    out = {}
    with tarfile.open(bundle) as tar:
        for m in tar.getmembers():
            if m.isfile():
                data = tar.extractfile(m).read()  # type: ignore[union-attr]
                out[m.name] = gzip.GzipFile(fileobj=io.BytesIO(data)).read() if m.name.endswith(".gz") else data
    return out


def _ring_status(members: dict[str, bytes]) -> dict:
    manifest = json.loads(next(v for k, v in members.items() if k.endswith("manifest.json")))
    return next(c for c in manifest["collectors"] if c["name"] == "ring")


def _provenance(members: dict[str, bytes]) -> dict:
    return json.loads(next(v for k, v in members.items() if k.endswith("ring/provenance.json")))


def test_a_redacted_capture_carries_no_record_of_a_no_redact_ring(sim_lib: Path, tmp_path: Path) -> None:
    """A GPU process whose environment holds DB_PASSWORD; ``record --no-redact`` keeps it verbatim in
    the ring. ``capture --since 10m`` (redaction on) leaves those segments out, says so in one line
    naming ``--no-redact``, and no byte of the secret is in the bundle; ``capture --no-redact``
    carries them (the secret was really there). A later redacted recorder run on the same ring: its
    segments are carried, and the unredacted state of the run before was not copied into them."""
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                              env={**os.environ, "DB_PASSWORD": SECRET})
    try:
        sc = Scenario()
        sc.add_gpu(name="NVIDIA H100 80GB HBM3", gpu_util=[(0, 90)])
        sc.add_process(pid=worker.pid, gpu=0, used_memory_bytes=1 << 30, sm_util=[(0, 80)])
        env = subprocess_env(sc.write(tmp_path / "sc.tsv"), sim_lib, {**os.environ, "PYTHONPATH": str(ROOT)})
        ring = tmp_path / "ring"
        _record_until_environ(ring, worker.pid, env, "--no-redact")

        bundle, err = _capture(ring, tmp_path / "redacted", env)
        got = _members(bundle)
        assert not any(SECRET.encode() in data for data in got.values())
        status = _ring_status(got)
        assert status["status"] == "partial"
        line = next(e for e in [status.get("error") or "", *status.get("notes", [])] if "--no-redact" in e)
        assert "\n" not in line and "left out" in line
        assert "ring partial" in err
        prov = _provenance(got)
        assert prov["not_redacted"] and all(r["redacted"] is False for r in prov["not_redacted"])
        assert not prov["segments"]

        plain, _ = _capture(ring, tmp_path / "plain", env, "--no-redact")
        got = _members(plain)
        assert any(SECRET.encode() in data for k, data in got.items() if "/ring/segments/" in "/" + k)
        assert _ring_status(got)["status"] == "ok"

        _record_until_environ(ring, worker.pid, env)  # redaction on, the same ring
        bundle, _ = _capture(ring, tmp_path / "after", env)
        got = _members(bundle)
        assert not any(SECRET.encode() in data for data in got.values())
        prov = _provenance(got)
        assert prov["segments"], "the redacted run's segments are carried"
        environ = [data for k, data in got.items() if "/ring/segments/" in "/" + k and b"DB_PASSWORD" in data]
        assert environ and all(b"<redacted:" in data for data in environ)
    finally:
        worker.kill()
        worker.wait()
