"""A container log line longer than ``logs.max_bytes`` keeps its end: the kept text can begin inside
a token, whose tail no longer has the token's shape. Captured as a user captures, through the
private engine (tests/support/docker_engine.py), none of the token reaches the bundle, in the
snapshot's ``logs.txt`` nor in the lines a ``--duration`` window appends; and a log not cut inside
a line keeps its first word (over-redaction throws evidence away).
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest

from forensics.bundle.reader import open_bundle
from forensics.capture.runner import run_capture
from forensics.collect.context import CaptureOptions
from forensics.collectors.docker.docker import COLLECTOR
from tests.support.docker_engine import BUSYBOX_IMAGE, DockerEngine
from tests.support.polling import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow]

GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # 36 characters after the prefix
HF = "hf_" + "Zq8Wx7Vc6Ub5Ta4Sz3Ry2Qx1Pw0Ov9Nu8Mt"  # 34 after the prefix
TAIL = " pushed " + "w" * 300
STAMP = re.compile(rb"\d{4}-\d\d-\d\dT[0-9:.]+Z ")


def _max_bytes(token: str, into: int) -> int:
    """The ``logs.max_bytes`` whose newest bytes of a log ending in ``token + TAIL + "\\n"`` begin
    ``into`` characters inside the token."""
    return len(token) - into + len(TAIL) + 1


def _pieces(secret: str, n: int = 6) -> list[bytes]:
    return [secret[i:i + n].encode() for i in range(len(secret) - n + 1)]


def _leaked(blob: bytes, *secrets: str) -> list[bytes]:
    return [p for s in secrets for p in _pieces(s) if p in blob]


def _script_dir(tmp_path: Path, **files: str) -> Path:
    d = tmp_path / "lines"
    d.mkdir()
    for name, text in files.items():
        (d / name).write_text(text)
    d.chmod(0o755)
    return d


def _wait_logged(engine: DockerEngine, cid: str, marker: bytes) -> None:
    client = engine.client()
    try:
        wait_for(lambda: marker in client.logs(cid), timeout=60)
    finally:
        client.close()


def test_a_line_cut_to_max_bytes_inside_a_token_leaves_no_part_of_it(docker_engine: DockerEngine,
                                                                     tmp_path: Path) -> None:
    e = docker_engine
    max_bytes = _max_bytes(GHP, 14)  # the kept text begins at GHP[14:]: "E5f6G7..."
    lines = _script_dir(tmp_path, long=f"starting\n{'z' * 20000} {GHP}{TAIL}\n",
                        many="".join(f"a1b2c3d4 step {i} {'y' * 40}\n" for i in range(40)),
                        short="a1b2c3d4 ready\n")
    name = f"gf-{uuid.uuid4().hex[:8]}"
    run = ("run", "-d", "--network", "none", "-v", f"{lines}:/lines:ro", BUSYBOX_IMAGE, "sh", "-c")
    cut = e.run_labelled(*run[:1], "--name", f"{name}-cut", *run[1:], "cat /lines/long; exec sleep 600")
    # many short lines: cut to max_bytes at a line start (the first kept line is whole)
    whole = e.run_labelled(*run[:1], "--name", f"{name}-whole", *run[1:], "cat /lines/many; exec sleep 600")
    # shorter than max_bytes: not cut at all
    short = e.run_labelled(*run[:1], "--name", f"{name}-short", *run[1:], "cat /lines/short; exec sleep 600")
    try:
        _wait_logged(e, cut, b"pushed")
        _wait_logged(e, whole, b"step 39")
        _wait_logged(e, short, b"ready")
        out = tmp_path / "out"
        out.mkdir()
        result = run_capture(CaptureOptions(timeout_s=120.0, lookback_s=600, extra={
            "docker.host": e.docker_host, "logs.max_bytes": str(max_bytes)}), out, collectors=[COLLECTOR])
        bundle = open_bundle(result.path)

        log = bundle.read_bytes(f"docker/containers/{cut}/logs.txt")
        logs = bundle.read_json("docker/index.json")["containers"][cut]["logs"]
        assert logs["dropped_oldest_bytes"] > 20000 and logs["kept_bytes"] == max_bytes, logs
        assert log.startswith(b"<redacted:") and log.endswith(TAIL.encode() + b"\n"), log[:80]
        # no part of the token anywhere: the log, the index's record of its last line, ...
        everything = b"".join(bundle.read_bytes(n) for n in bundle.names())
        assert not _leaked(everything, GHP[4:]), _leaked(everything, GHP[4:])
        # the record of the last line kept is the line's engine timestamp, not the cut text's first word
        assert STAMP.match(logs["last_line"]["time"].encode() + b" "), logs["last_line"]

        # the controls: a cut at a line start keeps that line's timestamp and first word ...
        many = bundle.read_bytes(f"docker/containers/{whole}/logs.txt")
        assert bundle.read_json("docker/index.json")["containers"][whole]["logs"]["dropped_oldest_bytes"] > 0
        assert re.match(STAMP.pattern + rb"a1b2c3d4 step \d+ y", many), many[:80]
        assert b"<redacted:" not in many
        # ... and an uncut log its own
        assert re.fullmatch(STAMP.pattern + rb"a1b2c3d4 ready\n",
                            bundle.read_bytes(f"docker/containers/{short}/logs.txt"))
    finally:
        e.cli("rm", "-f", cut, whole, short, check=False)


def test_a_window_line_cut_to_max_bytes_inside_a_token_leaves_no_part_of_it(docker_engine: DockerEngine,
                                                                            tmp_path: Path) -> None:
    """The lines a ``--duration`` window appends are cut to ``logs.max_bytes`` as the snapshot's."""
    e = docker_engine
    gate = tmp_path / "gate"
    gate.mkdir()
    os.chmod(gate, 0o777)
    lines = _script_dir(tmp_path, long=f"{'z' * 20000} {HF}{TAIL}\n")
    cid = e.run_labelled(
        "run", "-d", "--network", "none", "-v", f"{gate}:/gate", "-v", f"{lines}:/lines:ro", BUSYBOX_IMAGE,
        "sh", "-c", 'echo "a1b2c3d4 before the capture"; while [ ! -e /gate/go ]; do sleep 0.1; done; '
                    "cat /lines/long; exec sleep 600")
    try:
        _wait_logged(e, cid, b"before the capture")

        def progress(message: str) -> None:
            if message.startswith("sampling "):  # the snapshot is over: the window begins
                (gate / "go").touch()

        out = tmp_path / "out"
        out.mkdir()
        result = run_capture(CaptureOptions(timeout_s=60.0, duration_s=3.0, interval_s=1.0, extra={
            "docker.host": e.docker_host, "logs.max_bytes": str(_max_bytes(HF, 12))}),
            out, collectors=[COLLECTOR], progress=progress)
        assert (gate / "go").exists()
        bundle = open_bundle(result.path)
        report = bundle.read_json("docker/window/logs.json")[cid]
        assert report["error"] is None and report["dropped_oldest_bytes"] > 20000, report

        log = bundle.read_bytes(f"docker/containers/{cid}/logs.txt")
        first, appended = log.split(b"\n", 1)
        # the snapshot's line, not cut, keeps its first word; the window's begins redacted
        assert re.fullmatch(STAMP.pattern + rb"a1b2c3d4 before the capture", first), first
        assert appended.startswith(b"<redacted:") and appended.endswith(TAIL.encode() + b"\n"), appended[:80]
        everything = b"".join(bundle.read_bytes(n) for n in bundle.names())
        assert not _leaked(everything, HF[3:]), _leaked(everything, HF[3:])
    finally:
        e.cli("rm", "-f", cid, check=False)
