"""Suite-wide settings. Per-area fixtures live in tests/support/ and each area's conftest.py."""

from __future__ import annotations

import os

import pytest

# Tests never use the host's real Kubernetes or NVML by accident.
os.environ.setdefault("GPUFORENSICS_TESTING", "1")


@pytest.fixture
def out_dir(tmp_path):
    """A private output directory for bundles."""
    d = tmp_path / "out"
    d.mkdir()
    return d
