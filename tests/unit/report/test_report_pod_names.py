"""On Kubernetes, the per-container view names the pod and the container in it, not the kubelet's
Docker container name (``k8s_<container>_<pod>_<namespace>_<uid>_0``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.analysis import analyze_bundles
from forensics.report.view import build_view

SAMPLE = Path(__file__).resolve().parents[3] / "sample_bundles" / "k8s-pod-without-gpu-limit.tgz"


@pytest.mark.skipif(not SAMPLE.exists(), reason="sample bundle not built")
def test_containers_are_labelled_by_pod() -> None:
    view = build_view(analyze_bundles([SAMPLE]))
    labels = sorted(c.label for c in view.containers.all_shown)
    assert labels == ["pod ml/trainer-0 (container trainer)",
                      "pod research/notebook-alice (container jupyter)"]
    assert not any(label.startswith("k8s_") for label in labels)


def test_docker_containers_keep_their_name() -> None:
    doc = {"format": "gpuforensics-analysis", "format_version": 1,
           "containers": [{"id": "a" * 64, "name": "trainer", "pod": ""}], "pods": []}
    (c,) = build_view(doc).containers.all_shown
    assert c.label == "trainer"
