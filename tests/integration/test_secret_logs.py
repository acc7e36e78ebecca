"""Every secret of the corpus (tests/support/secret_corpus: gitleaks' fixtures, its generator
recipes, context-only passwords, in every context) printed by a real workload, then captured as a
user captures: none of them anywhere in the bundle's bytes.

- Docker: a container of the private engine (tests/support/docker_engine.py) cats the corpus to
  stdout; ``capture --only docker`` keeps its log (limits raised so that every line is kept);
- Kubernetes: the loopback API server (tests/support/kube_apiserver.py) serves the corpus as the
  log of a restarted GPU pod's container, current and previous instance; ``gpuforensics capture
  --only kubernetes`` through the CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from forensics.bundle.reader import open_bundle
from forensics.capture.runner import run_capture
from forensics.collect.context import CaptureOptions
from forensics.collectors.docker.docker import COLLECTOR
from forensics.specs import kubernetes as kspec
from tests.support.docker_engine import BUSYBOX_IMAGE, DockerEngine
from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig
from tests.support.kube_objects import gpu_node_scenario
from tests.support.polling import wait_for
from tests.support.secret_corpus import all_secrets, corpus_log, leaked

ROOT = Path(__file__).resolve().parents[2]
NODE = "gpu-node-07"
INFERENCE = ("ml", "inference-7d9c8b6f5-x2k4q", "server")  # restarted 3 times: a previous log too
LIMITS = {"logs.max_bytes": str(16 << 20), "docker.logs_tail": "100000", "kubernetes.logs_tail": "100000"}


def _no_secret_in(blob: bytes, where: str) -> None:
    found = leaked(blob)
    assert not found, f"{len(found)} secrets in {where}: " + ", ".join(f"{s.shape}" for s in found[:10])


@pytest.mark.docker
@pytest.mark.slow
def test_docker_container_printing_every_secret_shape(docker_engine: DockerEngine, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "corpus.txt").write_text(corpus_log())
    corpus.chmod(0o755)
    e = docker_engine
    cid = e.run_labelled("run", "-d", "--name", f"gf-{uuid.uuid4().hex[:8]}-secrets", "--network", "none",
                         "-v", f"{corpus}:/corpus:ro", BUSYBOX_IMAGE,
                         "sh", "-c", "cat /corpus/corpus.txt; echo CORPUS-DONE; exec sleep 600")
    try:
        client = e.client()
        try:
            wait_for(lambda: b"CORPUS-DONE" in client.logs(cid, tail=5), timeout=60)
        finally:
            client.close()
        opts = CaptureOptions(timeout_s=120.0, lookback_s=600,
                              extra={"docker.host": e.docker_host, **LIMITS})
        (tmp_path / "out").mkdir()
        bundle = open_bundle(run_capture(opts, tmp_path / "out", collectors=[COLLECTOR]).path)
        log = bundle.read_bytes(f"docker/containers/{cid}/logs.txt")
        assert b"CORPUS-DONE" in log and log.count(b"<redacted:") >= len(all_secrets())
        _no_secret_in(b"".join(bundle.read_bytes(name) for name in bundle.names()), "the docker bundle")
    finally:
        e.cli("rm", "-f", cid, check=False)


def _capture_cli(out: Path, *args: str, env: dict[str, str]) -> dict[str, bytes]:
    proc = subprocess.run([sys.executable, "-m", "forensics", "capture", "-o", str(out),
                           "--only", "kubernetes", "--quiet", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr
    [bundle] = out.glob("*.tgz")
    members: dict[str, bytes] = {}
    with tarfile.open(bundle) as tf:
        for info in tf.getmembers():
            f = tf.extractfile(info)
            if f is not None:
                members[info.name.split("/", 1)[1]] = f.read()
    return members


@pytest.mark.slow
def test_pod_logs_current_and_previous_printing_every_secret_shape(tmp_path: Path) -> None:
    pytest.importorskip("kubernetes")
    env: dict[str, Any] = {k: v for k, v in os.environ.items()
                           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "NODE_NAME")}
    env["HOME"] = str(tmp_path)
    lines = corpus_log().splitlines()
    now = time.time()
    with KubeAPIServer(gpu_node_scenario()) as api:
        api.set_pod_log(*INFERENCE, [(now - 60 + i * 1e-3, line) for i, line in enumerate(lines)], previous=True)
        api.set_pod_log(*INFERENCE, [(now - 30 + i * 1e-3, line) for i, line in enumerate(lines)])
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
        out = tmp_path / "out"
        out.mkdir()
        members = _capture_cli(out, "--kubeconfig", str(kubeconfig), "--node", NODE,
                               *[a for k, v in LIMITS.items() for a in ("--set", f"{k}={v}")], env=env)
    for previous in (False, True):
        log = members[kspec.pod_log_member(*INFERENCE, previous=previous)]
        # every line kept (a PEM body, redacted whole, joins its lines into one)
        assert log.count(b"\n") >= 0.99 * len(lines) and log.count(b"<redacted:") >= len(all_secrets())
    manifest = json.loads(members["manifest.json"])
    assert manifest["redaction"]["counts"]["logs"] >= 2 * len(all_secrets())
    _no_secret_in(b"".join(members.values()), "the kubernetes bundle")
