"""Fixtures for the capture tests (helpers in capture_helpers.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from forensics.capture.runner import CaptureResult
from forensics.collect.context import CaptureOptions

from .capture_helpers import ChildCapture


@pytest.fixture
def capture_child(tmp_path: Path) -> Iterator[Callable[..., ChildCapture]]:
    started: list[ChildCapture] = []

    def start(collectors: list[Any], out_dir: Path | None = None, **opts: Any) -> ChildCapture:
        out = out_dir or tmp_path / "out"
        out.mkdir(exist_ok=True)
        opts.setdefault("timeout_s", 30.0)
        child = ChildCapture(CaptureOptions(**opts), out, collectors)
        started.append(child)
        return child

    yield start
    for child in started:
        child.close()


@pytest.fixture
def capture(capture_child: Callable[..., ChildCapture]) -> Callable[..., CaptureResult]:
    """Run a capture to completion (in a forked child) and return its result."""
    def run(collectors: list[Any], out_dir: Path | None = None, timeout: float = 60.0, **opts: Any) -> CaptureResult:
        return capture_child(collectors, out_dir, **opts).result(timeout)
    return run
