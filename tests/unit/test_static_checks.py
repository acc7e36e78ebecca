"""The layering and typing rules hold: ruff (incl. banned imports outside their layer), mypy strict, and the
import-linter layer and independence contracts of pyproject.toml (``lint-imports``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.env import need

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_including_layer_bans() -> None:
    need(shutil.which("ruff") is not None or _module("ruff"), "ruff not installed (test extra)")
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_mypy_strict_on_the_package(tmp_path: Path) -> None:
    need(_module("mypy"), "mypy not installed (test extra)")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_layer_contracts_hold() -> None:
    """cli on top; capture, analysis, report apart; collectors only under capture and independent."""
    need(_module("importlinter"), "import-linter not installed (test extra)")
    proc = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
                           "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout, proc.stdout[-6000:]


def _module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None
