"""Ghost GPU memory: `gpu-memory-unattributed` (device memory used minus the listed processes')."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.analysis import analyze_bundles
from tests.support.analysis_bundles import GIB, BundleSpec
from tests.unit.analysis.conftest import Analyze, kinds, names, of_kind


def _ghost(leak: bool) -> BundleSpec:
    b = BundleSpec()
    b.gpu(0)
    b.process(50, "trainer", container=b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=0"]))

    def tick(s: float) -> tuple[float, int, dict[int, tuple[int, float | None]]]:
        if s < 10:
            return 80, 35 * GIB, {50: (35 * GIB, 80.0)}
        return 0, (35 * GIB if leak else 0), {}

    b.gpu_series(0, range(20), tick)
    return b


def test_memory_left_behind_by_an_exited_process(analyze: Analyze) -> None:
    (f,) = of_kind(analyze(_ghost(leak=True)), "gpu-memory-unattributed")
    assert f["metrics"]["gap_bytes"] == 35 * GIB and f["metrics"]["last_owner_pid"] == 50
    assert "appeared between 14:00:09Z and 14:00:10Z" in f["summary"]
    assert "only a GPU reset frees it" in f["summary"] and f["severity"] == "high"
    assert "trainer" in names(f, "culprit")


def test_memory_that_every_process_accounts_for_is_no_finding(analyze: Analyze) -> None:
    doc = analyze(_ghost(leak=False))
    assert "gpu-memory-unattributed" not in kinds(doc)
    assert any(r["kind"] == "gpu-memory-unattributed" for r in doc["ruled_out"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(used=st.lists(st.one_of(st.none(), st.integers(-(1 << 40), 1 << 40)), min_size=1, max_size=6),
       held=st.one_of(st.none(), st.integers(-(1 << 40), 1 << 40)))
def test_garbage_memory_readings_never_raise(used: list[int | None], held: int | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        b = BundleSpec()
        b.gpu(0)
        for i, u in enumerate(used):
            b.gpu_tick(0, b.start + i, 10, u if u is not None else 0, procs={7: (held, 5.0)})  # type: ignore[dict-item]
        doc = analyze_bundles([b.write(Path(tmp))])
        assert not [lim for lim in doc["limitations"] if "could not be read" in lim or lim.startswith("rule ")]
