"""Every rule reads GPU device samples through its kind (``FindingKind.gpu_samples``), so each claim
rests only on the origins that can show it: ``gpu-memory-unattributed`` never on dcgm-exporter
history (memory figures with no process list), and a GPU left unjudged is said to be (the history
bundle from a real Prometheus is tests/e2e/test_prometheus_history.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from forensics.analysis.kinds import FindingKind
from forensics.analysis.model import Gpu, Model
from forensics.analysis.rules import SPECS
from forensics.analysis.rules.gpu_memory import GPU_MEMORY_UNATTRIBUTED
from forensics.analysis.samples import (
    DCGM_EXPORTER,
    GPU_SAMPLE_ORIGINS,
    NVML_SAMPLED,
    GpuSample,
    samples_from,
)
from tests.support.analysis_bundles import GIB, T0

RULES = Path(__file__).resolve().parents[3] / "forensics" / "analysis" / "rules"
_DIRECT = {"samples_by_gpu", "gpu_sample_count"}


@pytest.mark.parametrize("module", sorted(p.name for p in RULES.glob("*.py")))
def test_no_rule_reads_gpu_samples_around_its_kind(module: str) -> None:
    """``model.series(GpuSample)``, ``model.gpu_sample_count`` and ``model.samples_by_gpu()`` without the
    origins to keep are every sample whatever it came from: a rule goes through its kind."""
    tree = ast.parse((RULES / module).read_text())
    with_origins = {id(c.func) for c in ast.walk(tree) if isinstance(c, ast.Call) and (c.args or c.keywords)}
    direct = [f"line {n.lineno}: model.{n.attr}" for n in ast.walk(tree)
              if isinstance(n, ast.Attribute) and n.attr in _DIRECT and id(n) not in with_origins
              and isinstance(n.value, ast.Name | ast.Attribute)
              and (getattr(n.value, "id", None) == "model" or getattr(n.value, "attr", None) == "model")]
    direct += [f"line {c.lineno}: model.series(GpuSample)" for c in ast.walk(tree)
               if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "series"
               and any(isinstance(a, ast.Name) and a.id == "GpuSample" for a in c.args)]
    assert not direct, f"{module} reads GPU samples without its kind's origins: {direct}"


def test_every_kind_that_leaves_origins_out_says_why() -> None:
    for k in SPECS:
        assert k.sample_origins <= set(GPU_SAMPLE_ORIGINS), k
        assert k.sample_origins == set(GPU_SAMPLE_ORIGINS) or k.unjudged, k
    assert DCGM_EXPORTER not in GPU_MEMORY_UNATTRIBUTED.sample_origins
    with pytest.raises(ValueError, match="does not say why"):
        FindingKind("test-kind-without-why", severity="low", rank=999, gpu_samples=(NVML_SAMPLED,))


def _model(origin_of_gpu1: str) -> Model:
    m = Model()
    for i, origin in enumerate((NVML_SAMPLED, origin_of_gpu1)):
        uuid = f"GPU-{i}"
        m.gpus[("n1", uuid)] = Gpu("n1", i, uuid, "H100", None, 80 * GIB)
        m.extend(GpuSample, [GpuSample("n1", uuid, T0 + s, 50.0, 40 * GIB, 80 * GIB, 0, 60.0, 300.0, None,  # type: ignore[arg-type]
                                       origin) for s in range(3)])
    return m


def test_a_gpu_with_only_exporter_history_is_not_judged_and_said_so() -> None:
    m = _model(DCGM_EXPORTER)
    kept = GPU_MEMORY_UNATTRIBUTED.gpu_samples(m)
    assert list(kept) == [("n1", "GPU-0")]
    assert GPU_MEMORY_UNATTRIBUTED.judged_on(m, "n1") == 3
    (lim,) = m.limitations
    assert lim.startswith("gpu-memory-unattributed not judged on n1 (GPU 1): their readings come from "
                          "dcgm-exporter only; exporter history lists no processes")
    # a kind that can judge on every origin gets every sample, and says nothing
    every = SPECS[0].gpu_samples(m)
    assert sum(map(len, every.values())) == 6 and len(m.limitations) == 1


def test_nvml_everywhere_is_judged_whole() -> None:
    m = _model(NVML_SAMPLED)
    assert GPU_MEMORY_UNATTRIBUTED.gpu_samples(m) is m.samples_by_gpu() and not m.limitations
    assert samples_from(m, frozenset({NVML_SAMPLED})) is m.samples_by_gpu()
