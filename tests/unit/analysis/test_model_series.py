"""The model's extension points: series keyed by record type, the loaders' scratch state kept out
of it, and a model that leaves the loading code only with its joins resolved."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path
from typing import NamedTuple

from forensics.analysis import build_model
from forensics.analysis.events import OomKill
from forensics.analysis.findings import Subject
from forensics.analysis.loaders.state import LoadState
from forensics.analysis.model import Model
from forensics.analysis.samples import CpuSample, GpuSample, ProcessGpuSample
from tests.support.analysis_bundles import GIB, T0, BundleSpec

PACKAGE = Path(__file__).resolve().parents[3] / "forensics"


class ToySample(NamedTuple):
    """A reading no source produces: a new source's type needs no field on the model."""

    node: str
    t: float


def test_records_land_in_the_series_of_their_type() -> None:
    m = Model()
    assert m.series(ToySample) == []
    held = m.series(ToySample)
    m.add(ToySample("n1", T0))
    m.extend(ToySample, [ToySample("n1", T0 + 1), ToySample("n2", T0 + 2)])
    assert held is m.series(ToySample)  # a hoisted append keeps writing to the model's own list
    held.append(ToySample("n3", T0 + 3))
    assert [s.node for s in m.series(ToySample)] == ["n1", "n1", "n2", "n3"]
    assert m.series(GpuSample) == [] and m.series(OomKill) == []


def test_the_loaders_scratch_state_is_not_on_the_model() -> None:
    on_model = {f.name for f in fields(Model)}
    scratch = {f.name for f in fields(LoadState)}
    assert scratch and not on_model & scratch
    assert not {"psi_counters", "nvml_identity", "psi_some_floor", "kernel_keys"} & (on_model | set(dir(Model)))


def test_build_model_returns_a_model_with_its_series_and_joins_resolved(tmp_path: Path) -> None:
    b = BundleSpec(host="gpu-07")
    uuid = b.gpu(0)
    cid = b.container("trainer")
    b.process(4242, "python", container=cid)
    b.gpu_series(0, range(5), lambda s: (90.0, 20 * GIB, {4242: (10 * GIB, 80.0)}))
    b.cgroup_tick(T0, f"/system.slice/docker-{cid}.scope", nr_periods=100, nr_throttled=0)
    model = build_model([b.write(tmp_path)])
    assert len(model.series(GpuSample)) == 5
    assert {(s.pid, s.gpu_uuid) for s in model.series(ProcessGpuSample)} == {(4242, uuid)}
    assert [s.container_id for s in model.series(CpuSample)] == [cid]
    owner = model.joins.owner("gpu-07", 4242)  # set before build_model returned
    assert owner.attributed and owner.subject == Subject("container", cid, "trainer", "gpu-07")


def test_only_the_loading_code_makes_a_model() -> None:
    """``Model()`` is called in forensics.analysis.loaders.load_model alone, which resolves the joins
    before returning it: no other code can hold a model whose joins are not set."""
    makers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Model":
                makers.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert len(makers) == 1 and makers[0].startswith("forensics/analysis/loaders/__init__.py:"), makers
