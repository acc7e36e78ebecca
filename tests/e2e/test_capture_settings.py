"""``capture --set KEY=VALUE``: every key is known and every value checked before anything runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _capture(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", "capture", "-o", str(tmp_path), "--quiet",
                           "--only", "host", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("setting", "message"), [
    ("podresources.sockt=/x", "unknown setting 'podresources.sockt'"),
    ("kernel.max_bytes=-5", "expected a positive integer"),
    ("cgroups.max_cgroups=abc", "expected a positive integer"),
    ("docker.stats=maybe", "expected true or false"),
    ("kubernetes.budget_s=nan", "expected seconds"),
])
def test_bad_settings_are_usage_errors_and_nothing_is_written(tmp_path: Path, setting: str, message: str) -> None:
    proc = _capture(tmp_path, "--set", setting)
    assert proc.returncode == 2
    assert proc.stderr.startswith("gpuforensics: error:") and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_good_settings_pass(tmp_path: Path) -> None:
    proc = _capture(tmp_path, "--set", "procfs.max_pids=10", "--set", "docker.stats=false")
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).is_file()


def test_collectors_lists_every_setting() -> None:
    from forensics.capture.settings import SETTINGS

    out = subprocess.run([sys.executable, "-m", "forensics", "collectors", "--settings"], capture_output=True,
                         text=True, timeout=60).stdout
    for key in SETTINGS:
        assert key in out
