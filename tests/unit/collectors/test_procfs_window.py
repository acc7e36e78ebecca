"""Processes born during the sampling window are recorded too (a GPU job started mid-incident)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from forensics.bundle.reader import open_bundle


def test_process_started_mid_window_is_recorded(tmp_path: Path) -> None:
    cap = subprocess.Popen(
        [sys.executable, "-m", "forensics", "capture", "-o", str(tmp_path), "--quiet",
         "--only", "procfs", "--duration", "3", "--interval", "0.5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    late = subprocess.Popen(["sleep", "30"])  # not a child of the capture
    try:
        out, err = cap.communicate(timeout=60)
        assert cap.returncode == 0, err
        bundle = open_bundle(out.strip())
        assert bundle.has(f"proc/{late.pid}/cgroup"), "late process not recorded"
        assert bundle.read_bytes(f"proc/{late.pid}/cmdline").split(b"\0")[0] == b"sleep"
        window = [o for _, o in bundle.iter_jsonl("proc/window.jsonl")]
        mine = [o for o in window if o["pid"] == late.pid]
        assert mine and mine[0]["reasons"] == ["born-during-window"] and mine[0]["files"] == "written"
        # the capture's own collector processes (children of the capture) are not evidence
        assert not [o for o in window if o.get("ppid") == cap.pid]
    finally:
        late.kill()
        late.wait()
