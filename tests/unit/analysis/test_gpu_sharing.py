"""Sharing contracts: a pod allowed to share a GPU is never `unallocated-gpu-use`; over its share it
is `gpu-share-exceeded` (lower severity, the contract quoted)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.analysis import analyze_bundles
from forensics.analysis.loaders.sharing import gpu_resource_names, parse_memory_limit
from tests.support.analysis_bundles import GIB, BundleSpec, cid_of
from tests.unit.analysis.conftest import Analyze, kinds, names, of_kind

T_UID, N_UID = "11111111-2222-4333-8444-555555555555", "66666666-7777-4888-8999-aaaaaaaaaaaa"


def _shared(resource: str = "nvidia.com/gpu.shared", env: list[tuple[str, str]] | None = None,
            ids: list[str] | None = None, notebook_mem: int = 40 * GIB) -> BundleSpec:
    b = BundleSpec()
    uuid = b.gpu(0)
    trainer, notebook = cid_of("trainer"), cid_of("jupyter")
    b.pod("ml", "trainer-0", T_UID, [("trainer", trainer, 0)])
    b.pod("research", "notebook-alice", N_UID, [("jupyter", notebook, 0)], env=env)
    b.podresources += [
        {"name": "trainer-0", "namespace": "ml", "containers": [
            {"name": "trainer", "devices": [{"resource_name": resource, "device_ids": [f"{uuid}::0"]}]}]},
        {"name": "notebook-alice", "namespace": "research", "containers": [
            {"name": "jupyter", "devices": [{"resource_name": resource, "device_ids": ids or [f"{uuid}::1"]}]}]}]
    b.add_json("kubernetes/node.json", {"kind": "Node", "metadata": {"name": b.host},
                                        "status": {"capacity": {"cpu": "64", resource: "4"}}})
    b.process(31, "torchrun", container=trainer, pod_uid=T_UID)
    b.process(32, "python", container=notebook, pod_uid=N_UID)
    b.gpu_series(0, range(20), lambda s: (99, 50 * GIB, {31: (10 * GIB, 45.0), 32: (notebook_mem, 45.0)}))
    b.status["docker"] = "unavailable"
    return b


def test_parsers() -> None:
    assert parse_memory_limit("4g") == 4 << 30 and parse_memory_limit("0=2048M") == 2048 << 20
    assert parse_memory_limit("lots") is None
    assert gpu_resource_names({"status": {"capacity": {"nvidia.com/gpu.shared": "16", "cpu": "8"}}}) == {
        "nvidia.com/gpu.shared": 16}


def test_a_renamed_time_slicing_grant_is_not_unallocated_use(analyze: Analyze) -> None:
    doc = analyze(_shared())
    assert "unallocated-gpu-use" not in kinds(doc) and "overlapping-gpu-allocation" not in kinds(doc)
    assert "gpu-share-exceeded" not in kinds(doc)  # 45% SM against the 25% its 1 of 4 replicas stand for: within the 20-point margin


def test_over_an_mps_memory_limit_is_share_exceeded(analyze: Analyze) -> None:
    doc = analyze(_shared(env=[("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=16G"),
                               ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50")]))
    assert "unallocated-gpu-use" not in kinds(doc)
    (f,) = of_kind(doc, "gpu-share-exceeded")
    assert f["severity"] == "low" and "research/notebook-alice" in names(f, "culprit", "pod")
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=16G" in f["summary"] and "above its 16.0 GiB limit" in f["summary"]
    assert f["metrics"]["sharing"] == "mps"
    assert any(e["member"] == "kubernetes/pods.json" and "/env/" in e["locator"] for e in f["evidence"])


def test_a_vgpu_environment_limit_is_a_contract(analyze: Analyze) -> None:
    b = _shared(env=[("CUDA_DEVICE_MEMORY_LIMIT", "8g")])
    b.podresources = b.podresources[:1]  # the notebook holds no device: only its scheduler's limit
    doc = analyze(b)
    assert "unallocated-gpu-use" not in kinds(doc)
    (f,) = of_kind(doc, "gpu-share-exceeded")
    assert f["metrics"]["sharing"] == "vgpu-env" and f["metrics"]["memory_limit_bytes"] == 8 << 30


def test_without_any_grant_it_is_still_unallocated_use(analyze: Analyze) -> None:
    b = _shared()
    b.podresources = b.podresources[:1]
    doc = analyze(b)
    (f,) = of_kind(doc, "unallocated-gpu-use")
    assert "research/notebook-alice" in names(f, "culprit", "pod")
    assert "gpu-share-exceeded" not in kinds(doc)


_J = st.recursive(st.none() | st.integers() | st.text(max_size=10),
                  lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
                  max_leaves=10)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node=_J, ids=st.lists(st.text(max_size=20), max_size=3), value=st.text(max_size=12))
def test_garbage_sharing_inputs_never_raise(node: Any, ids: list[str], value: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        b = _shared(env=[("CUDA_DEVICE_MEMORY_LIMIT", value), ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", value)], ids=ids)
        b.add_json("kubernetes/node.json", node)
        doc = analyze_bundles([b.write(Path(tmp))])
        assert not [lim for lim in doc["limitations"] if "could not be read" in lim or lim.startswith("rule ")]
