"""Bad input through the real command line: one clear line, a non-zero exit, never a traceback,
never exit 70 (internal error), and never a write over evidence.

Each case is a regression test for something a first user tripped on. Bundles are written by the
real BundleWriter (tests/support/hostile_bundles.py), so their hashes are right and only the one
thing the test is about is wrong.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.cli import main
from tests.support import hostile_bundles as hb


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``gpuforensics ARGS`` in this process; return (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 1), out, err


def run_cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``python -m forensics ARGS`` as a user would (for capture: signals, children)."""
    env = {k: v for k, v in os.environ.items() if k != "GPUFORENSICS_DEBUG"}
    return subprocess.run([sys.executable, "-m", "forensics", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def one_error_line(code: int, err: str, *needles: str) -> str:
    assert code not in (0, 70), f"exit {code}: {err!r}"
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one stderr line, got {err!r}"
    assert lines[0].startswith("gpuforensics: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    d = tmp_path / "bundles"
    d.mkdir()
    return hb.build_bundle(d)


class TestReportNeverReplacesEvidence:
    """``-o`` naming a bundle (the one analyzed, or any other) is refused; the bundle is intact."""

    @pytest.mark.parametrize("fmt", ["html", "json", "md"])
    def test_output_is_the_input_bundle(self, capsys: pytest.CaptureFixture[str], bundle: Path,
                                        fmt: str) -> None:
        before = bundle.read_bytes()
        code, out, err = cli(capsys, "analyze", str(bundle), "-f", fmt, "-o", str(bundle))
        one_error_line(code, err, "refusing", str(bundle))
        assert out == ""
        assert bundle.read_bytes() == before

    def test_output_is_another_bundle(self, capsys: pytest.CaptureFixture[str], bundle: Path,
                                      tmp_path: Path) -> None:
        other_dir = tmp_path / "other"
        other_dir.mkdir()
        other = hb.build_bundle(other_dir, hostname="gpu-08")
        before = other.read_bytes()
        code, _, err = cli(capsys, "analyze", str(bundle), "-f", "html", "-o", str(other))
        one_error_line(code, err, "refusing", "gzip")
        assert other.read_bytes() == before

    def test_an_existing_report_is_still_replaced(self, capsys: pytest.CaptureFixture[str],
                                                   bundle: Path, tmp_path: Path) -> None:
        target = tmp_path / "r.json"
        target.write_text("old report\n")
        code, out, err = cli(capsys, "analyze", str(bundle), "-f", "json", "-o", str(target))
        assert code == 0, err
        assert json.loads(target.read_text())["bundles"]
        assert out.strip() == str(target)
