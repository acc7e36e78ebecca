"""When the storage refuses the write (full disk, read-only file system), ``capture`` and
``analyze`` exit 4 with one line, and leave nothing half-written behind.

Real file systems, not monkeypatched errors: a small tmpfs mounted for the test (root only),
filled up or mounted read-only, and unmounted afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import hostile_bundles as hb
from tests.support.env import is_root, need

from .test_bad_input import REPO, one_error_line, run_cli

pytestmark = pytest.mark.root

EXIT_NOT_WRITTEN = 4


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """``mount(size_kib, read_only=False, fill_leaving_kib=None)``: a fresh tmpfs; unmounted after."""
    need(is_root(), "mounting a tmpfs needs root")
    mounted: list[Path] = []

    def mount(size_kib: int = 1024, read_only: bool = False, fill_leaving_kib: int | None = None) -> Path:
        where = tmp_path / f"fs{len(mounted)}"
        where.mkdir()
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0755", "tmpfs", str(where)],
                             capture_output=True, text=True, timeout=30)
        need(res.returncode == 0, f"cannot mount a tmpfs here: {res.stderr.strip()}")
        mounted.append(where)
        if fill_leaving_kib is not None:
            with open(where / "filler", "wb", buffering=0) as f:  # up to the last page, then free some
                try:
                    while True:
                        f.write(b"\0" * 4096)
                except OSError:
                    pass
            os.truncate(where / "filler", max(0, (where / "filler").stat().st_size - fill_leaving_kib * 1024))
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True, timeout=30)
        return where

    yield mount
    for where in reversed(mounted):
        if subprocess.run(["umount", str(where)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


def _left(where: Path) -> list[str]:
    return sorted(p.name for p in where.iterdir() if p.name not in ("filler", "lost+found"))


def test_capture_on_a_full_disk_exits_4_and_leaves_nothing(tmpfs: Callable[..., Path], tmp_path: Path) -> None:
    # no page left: a host-only bundle is ~4 KiB, and the writer frees each staged file as it
    # archives it, so 8 KiB free (the space this test left before) now holds the whole capture
    where = tmpfs(1024, fill_leaving_kib=0)
    proc = run_cli("capture", "-o", str(where), "--only", "host", "--quiet", cwd=tmp_path, timeout=120)
    assert proc.returncode == EXIT_NOT_WRITTEN, proc.stderr
    one_error_line(proc.returncode, proc.stderr, "cannot write", "No space left on device")
    assert proc.stdout == ""
    assert _left(where) == []  # no staging directory, no partial archive, no reservation


def test_capture_onto_a_read_only_file_system_exits_4(tmpfs: Callable[..., Path], tmp_path: Path) -> None:
    where = tmpfs(256, read_only=True)
    proc = run_cli("capture", "-o", str(where), "--only", "host", "--quiet", cwd=tmp_path, timeout=120)
    one_error_line(proc.returncode, proc.stderr, "Read-only file system")
    assert proc.returncode == EXIT_NOT_WRITTEN
    assert _left(where) == []


@pytest.mark.parametrize("fmt", ["html", "md", "json"])
def test_analyze_report_on_a_full_disk_exits_4(tmpfs: Callable[..., Path], tmp_path: Path, fmt: str) -> None:
    d = tmp_path / "bundles"
    d.mkdir()
    bundle = hb.build_bundle(d)
    where = tmpfs(1024, fill_leaving_kib=0)
    proc = run_cli("analyze", str(bundle), "-f", fmt, "-o", str(where / f"report.{fmt}"), cwd=tmp_path)
    one_error_line(proc.returncode, proc.stderr, "No space left on device")
    assert proc.returncode == EXIT_NOT_WRITTEN
    assert _left(where) == []  # the temporary file of the atomic write is gone too


def test_analyze_stdout_into_a_file_on_a_full_disk_exits_4(tmpfs: Callable[..., Path], tmp_path: Path) -> None:
    d = tmp_path / "bundles"
    d.mkdir()
    bundle = hb.build_bundle(d)
    where = tmpfs(1024, fill_leaving_kib=0)
    env = {k: v for k, v in os.environ.items() if k != "GPUFORENSICS_DEBUG"}
    env["PYTHONPATH"] = str(REPO)
    with open(where / "findings.json", "w") as out:
        proc = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(bundle), "-f", "json"],
                              cwd=tmp_path, env=env, stdout=out, stderr=subprocess.PIPE, text=True, timeout=60)
    one_error_line(proc.returncode, proc.stderr, "No space left on device")
    assert proc.returncode == EXIT_NOT_WRITTEN


def test_a_usage_error_is_still_2(tmp_path: Path) -> None:
    """Not every failure to write is the storage's: a missing directory stays a usage error."""
    proc = run_cli("capture", "-o", str(tmp_path / "missing"), "--only", "host", "--quiet", cwd=tmp_path)
    one_error_line(proc.returncode, proc.stderr, "does not exist")
    assert proc.returncode == 2
