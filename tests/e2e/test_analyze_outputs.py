"""Where ``analyze`` writes its reports, as a user names them on the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[2] / "sample_bundles" / "memcg-oom.tgz"


@pytest.mark.skipif(not SAMPLE.exists(), reason="sample bundle not built")
def test_single_format_into_a_new_directory_named_with_a_slash(tmp_path: Path) -> None:
    target = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(SAMPLE), "-f", "md",
                           "-o", f"{target}/"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    written = target / "memcg-oom.report.md"
    assert proc.stdout.strip() == str(written)
    assert written.is_file() and "etl" in written.read_text()


@pytest.mark.skipif(not SAMPLE.exists(), reason="sample bundle not built")
def test_single_format_to_a_file_path(tmp_path: Path) -> None:
    target = tmp_path / "incident.md"
    proc = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(SAMPLE), "-f", "md",
                           "-o", str(target)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(target) and target.is_file()
