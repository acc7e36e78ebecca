"""pytest fixtures and helpers around the simulated NVML (import them into a test module).

``sim_lib``: the compiled library (session-wide, cached); without gcc the test skips (fails in CI).
``nvml_clean``: makes sure this process's pynvml is not left initialised by a test (a failed test
or an abandoned hang could leave the simulated library's refcount up, and with it a stale scenario).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forensics.bundle.redact import Redactor
from forensics.bundle.sink import EvidenceSink
from forensics.collect.context import CaptureOptions, CollectContext
from tests.support.env import need
from tests.support.nvmlsim import BuildError, Scenario, activate, build_library, gcc_path


@pytest.fixture(scope="session")
def sim_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need(gcc_path() is not None, "gcc is needed to build the simulated libnvidia-ml.so.1")
    try:
        return build_library(tmp_path_factory.mktemp("nvmlsim"))
    except BuildError as exc:  # a broken source is a failure, not a skip
        pytest.fail(str(exc))


def shutdown_all() -> None:
    """nvmlShutdown until NVML says it is not initialised (drops any leftover refcount)."""
    import pynvml

    if pynvml.nvmlLib is None:
        return
    for _ in range(100):
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            return


@pytest.fixture
def nvml_clean() -> Iterator[None]:
    shutdown_all()
    yield
    shutdown_all()


@pytest.fixture
def sleepers() -> Iterator[list[int]]:
    """Two real processes to stand for GPU workloads (simulated NVML can name real PIDs); killed by PID afterwards."""
    procs = [subprocess.Popen(["sleep", "120"]) for _ in range(2)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def make_ctx(root: Path, lib: Path | None, **options: Any) -> CollectContext:
    opts = CaptureOptions(nvml_library=str(lib) if lib else None, **options)
    return CollectContext(opts, EvidenceSink(root), Redactor(enabled=True), {}, None, "nvml")


def snapshot(sc: Scenario, tmp_path: Path, lib: Path, collector: Any = None,
             name: str = "stage") -> tuple[CollectContext, dict[str, Any]]:
    """Run the nvml collector's snapshot in this process; return its context and members (parsed)."""
    from forensics.collectors.nvml.nvml import NvmlCollector

    activate(sc.write(tmp_path / f"{name}.tsv"))
    root = tmp_path / name
    root.mkdir()
    ctx = make_ctx(root, lib, timeout_s=20.0)
    (collector or NvmlCollector()).snapshot(ctx)
    return ctx, read_members(root)


def read_members(root: Path) -> dict[str, Any]:
    """Every member under ``root/nvml``: JSON parsed, JSONL as a list of objects."""
    out: dict[str, Any] = {}
    base = root / "nvml"
    for p in sorted(base.rglob("*")) if base.is_dir() else []:
        if p.suffix == ".json":
            out[p.name] = json.loads(p.read_text())
        elif p.suffix == ".jsonl":
            out[p.name] = [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return out


def find_bundle_dir(out_dir: Path) -> Path:
    """Unpack the single bundle in ``out_dir``; return its top directory."""
    import tarfile

    bundles = sorted(out_dir.glob("*.tgz"))
    assert len(bundles) == 1, bundles
    dest = out_dir / "unpacked"
    with tarfile.open(bundles[0]) as tf:
        tf.extractall(dest, filter="data")
    (top,) = list(dest.iterdir())
    return top
