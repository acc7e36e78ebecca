"""A node whose containers a CRI runtime described (or podman, read by the docker source) is judged as
a Docker node is: the allocation kinds ask the container-runtime role, never Docker by name."""

from __future__ import annotations

import pytest

from forensics.analysis.findings import EvidenceRef
from forensics.analysis.kinds import RuledOutCheck
from forensics.analysis.model import Model
from forensics.analysis.rules.gpu_allocation import (
    UNALLOCATED_GPU_USE,
    _every_gpu_process_allocated,
)
from forensics.analysis.samples import ProcessGpuSample
from forensics.thresholds import AnalysisConfig

NODE = "gpu-07"
CFG = AnalysisConfig()


def _model(**status: str) -> Model:
    m = Model()
    info = m.node(NODE)
    info.bundles.append("b1")
    info.collector_status.update({"nvml": "ok", "procfs": "ok", **status})
    info.members_used["nvml"] = "nvml/samples.jsonl"
    m.add(ProcessGpuSample(NODE, "GPU-0", 4242, 1.0, 1 << 30, 50.0, EvidenceRef("b1", "nvml/samples.jsonl", 1, "{}")))
    return m


@pytest.mark.parametrize("status", [{"cri": "ok", "docker": "unavailable"}, {"docker": "ok"},
                                    {"cri": "partial", "docker": "skipped", "kubernetes": "ok"}])
def test_a_runtime_that_described_the_containers_costs_no_confidence(status: dict[str, str]) -> None:
    # before roles, the kind needed "docker" by name: a containerd/CRI-O node's finding lost 30 % (0.95 -> 0.66)
    assert UNALLOCATED_GPU_USE.confidence(_model(**status), NODE, 0.9, CFG) == 0.9


def test_no_runtime_at_all_lowers_confidence() -> None:
    m = _model(docker="unavailable", cri="unavailable", kubernetes="ok")
    assert UNALLOCATED_GPU_USE.confidence(m, NODE, 0.9, CFG) == round(0.9 * CFG.missing_source_confidence_factor, 2)


def _ruled_out(m: Model) -> tuple[str, list[object]] | None:
    return _every_gpu_process_allocated(RuledOutCheck(m, NODE, m.nodes[NODE], frozenset(), (), CFG))


def test_every_process_allocated_is_stated_on_a_cri_node_as_on_a_docker_node() -> None:
    for status in ({"docker": "ok"}, {"cri": "ok", "docker": "unavailable"}):
        said = _ruled_out(_model(**status))
        assert said is not None and said[0] == f"every GPU process on {NODE} ran in a container allocated that GPU"
    # nothing described the containers: not stated
    assert _ruled_out(_model(docker="unavailable", cri="unavailable")) is None
    # /proc not read: a GPU process cannot be placed in a container, not stated
    assert _ruled_out(_model(procfs="failed", docker="ok")) is None
