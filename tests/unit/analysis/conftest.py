"""Fixtures of the analyzer tests: bundles built with the real BundleWriter (tests/support/analysis_bundles.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis import AnalysisConfig, analyze_bundles
from tests.support.analysis_bundles import GIB, T0, BundleSpec, cid_of

Analyze = Callable[..., dict[str, Any]]


@pytest.fixture
def analyze(tmp_path: Path) -> Analyze:
    """``analyze(spec, ..., config=None)``: write each BundleSpec and analyse them together."""
    counter = [0]

    def run(*specs: BundleSpec, config: AnalysisConfig | None = None, window: str | None = None) -> dict[str, Any]:
        paths = []
        for spec in specs:
            counter[0] += 1
            out = tmp_path / f"b{counter[0]}"
            out.mkdir()
            paths.append(spec.write(out))
        doc = analyze_bundles(paths, config, window=window)
        broken = [lim for lim in doc["limitations"] if "could not be read" in lim or lim.startswith("rule ")]
        assert not broken, broken  # a loader or rule crashed: a bug, not a limitation
        return doc

    return run


def kinds(doc: dict[str, Any]) -> list[str]:
    return [f["kind"] for f in doc["findings"]]


def of_kind(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [f for f in doc["findings"] if f["kind"] == kind]


def names(finding: dict[str, Any], role: str, type_: str | None = None) -> list[str]:
    return [s["name"] for s in finding["subjects"] if s["role"] == role and (type_ is None or s["type"] == type_)]


def secretly_taken(spec: BundleSpec | None = None, *, notebook_gpu: int = 0, takeover_s: int = 20,
                   seconds: int = 60) -> BundleSpec:
    """The worked example: trainer given GPU 0; notebook (no GPU flag, image ENV all, default nvidia
    runtime) takes GPU 0 at ``takeover_s``; trainer's SM share collapses and it dies at the end."""
    b = spec or BundleSpec()
    b.gpu(0)
    b.gpu(1)
    trainer = b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=0"], nano_cpus=4_000_000_000)
    notebook = b.container("notebook")
    b.process(4101, "python", container=trainer)
    b.process(4202, "python", container=notebook)

    def gpu0(s: float) -> tuple[float, int, dict[int, tuple[int, float | None]]]:
        if s < takeover_s or notebook_gpu != 0:
            return 96, 30 * GIB, {4101: (30 * GIB, 95.0)}
        return 99, 76 * GIB, {4101: (30 * GIB, 7.0), 4202: (46 * GIB, 88.0)}

    def gpu1(s: float) -> tuple[float, int, dict[int, tuple[int, float | None]]]:
        if notebook_gpu == 1 and s >= takeover_s:
            return 80, 20 * GIB, {4202: (20 * GIB, 80.0)}
        return 0, 0, {}

    b.gpu_series(0, range(seconds), gpu0)
    b.gpu_series(1, range(seconds), gpu1)
    for s in range(0, seconds, 5):
        b.cgroup_tick(T0 + s, f"/system.slice/docker-{trainer}.scope", nr_periods=100 * s, nr_throttled=s,
                      throttled_usec=1000 * s, memory=8 * GIB)
    return b


__all__ = ["GIB", "T0", "Analyze", "BundleSpec", "cid_of", "kinds", "names", "of_kind", "secretly_taken"]
