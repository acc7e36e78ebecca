"""Fixtures for the kubernetes and pod-resources collector tests: a context over a temporary
staging directory, an environment with no stray Kubernetes configuration, a running loopback
API server with its kubeconfig."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from forensics.bundle.redact import Redactor
from forensics.bundle.sink import EvidenceSink
from forensics.collect.context import CaptureOptions, CollectContext
from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig
from tests.support.kube_objects import ClusterState, gpu_node_scenario

__all__ = ["Staged", "clean_kube_env", "kube_api", "make_ctx", "scenario"]


@dataclass
class Staged:
    """A collect context and where its members land."""

    ctx: CollectContext
    root: Path

    def json(self, member: str) -> Any:
        return json.loads((self.root / member).read_text())

    def members(self) -> set[str]:
        return {str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file()}


def make_ctx(tmp_path: Path, redact: bool = True, timeout_s: float = 30.0, **options: Any) -> Staged:
    root = tmp_path / "staging"
    root.mkdir(exist_ok=True)
    opts = CaptureOptions(redact=redact, timeout_s=timeout_s,
                          capture_start=options.pop("capture_start", datetime.now(UTC)), **options)
    ctx = CollectContext(opts, EvidenceSink(root), Redactor(enabled=redact),
                         collector_name="kubernetes")
    return Staged(ctx, root)


@pytest.fixture
def clean_kube_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No in-cluster variables, no KUBECONFIG, NODE_NAME, and an empty HOME."""
    for var in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG", "NODE_NAME"):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))


@pytest.fixture
def scenario() -> ClusterState:
    return gpu_node_scenario()


@pytest.fixture
def kube_api(scenario: ClusterState, tmp_path: Path, clean_kube_env: None) -> Iterator[tuple[KubeAPIServer, Path]]:
    """A started loopback API server serving ``scenario`` and a kubeconfig for it."""
    with KubeAPIServer(scenario) as api:
        yield api, write_kubeconfig(tmp_path / "kubeconfig", api.url)
