"""below-baseline judges a fall only from enough of the current run: one capture sample after an
hour at 95 % is a moment, not a fall (forensics/analysis/rules/baseline_drop.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forensics.analysis import analyze_bundles
from forensics.thresholds import config_from_mapping
from tests.support.analysis_bundles import GIB, BundleSpec

CFG = config_from_mapping({"baseline_bucket_s": 10, "baseline_min_history_s": 600,
                           "baseline_min_buckets": 10, "baseline_window_s": 3600})


def _analyze(tmp_path: Path, recent_s: list[int]) -> dict[str, Any]:
    b = BundleSpec(host="gpu-07")
    b.gpu(0)
    cid = b.container("trainer")
    b.process(4242, "python", container=cid)
    history = range(-1200, 0, 5)  # 20 min at 95 % before the capture began
    b.gpu_series(0, history, lambda s: (95.0, 20 * GIB, {4242: (10 * GIB, 95.0)}))
    b.gpu_series(0, recent_s, lambda s: (40.0, 20 * GIB, {4242: (10 * GIB, 40.0)}))
    return analyze_bundles([b.write(tmp_path)], CFG)


def _drops(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in doc["findings"] if f["kind"] == "below-baseline"]


def test_a_single_capture_sample_is_not_judged_a_fall_and_the_limitations_say_so(tmp_path: Path) -> None:
    doc = _analyze(tmp_path, [0])
    assert _drops(doc) == []
    assert any("below-baseline: trainer's SM share on GPU 0 not judged: 1 sample(s) over 0 s" in str(lim)
               for lim in doc["limitations"]), doc["limitations"]


def test_a_fall_held_over_several_samples_is_found(tmp_path: Path) -> None:
    (drop,) = _drops(_analyze(tmp_path, [0, 1, 2, 3, 4]))
    assert drop["metrics"]["sm_pct"] == 40.0 and drop["metrics"]["baseline_median_pct"] == 95.0
    assert [s["name"] for s in drop["subjects"] if s["role"] == "victim"] == ["trainer"]
