"""GPU grants of podman containers, the ways podman documents them, on the real podman 4.3 service
(tests/support/podman_engine.py) with simulated NVML naming the containers' real processes.

Podman's Docker-compatible inspect says every runtime is ``oci`` and has no CDI devices: the
capture also stores podman's own inspect (``docker/containers/<id>/libpod-inspect.json``) and the
analysis reads the grant from it. Containers:

- ``cdi``: ``--device nvidia.com/gpu=gpu1`` through a CDI spec (type-index name, device node
  ``/dev/nvidia1``, c 195:1), busy on GPU 1: granted, evidence in the libpod member and the spec;
- ``nvrt``: ``--runtime nvidia -e NVIDIA_VISIBLE_DEVICES=0`` (the private service's ``nvidia``
  runtime is runc), busy on GPU 0: granted;
- ``hooked``: ``-e NVIDIA_VISIBLE_DEVICES=1`` under runc with NVIDIA's OCI hook (the private
  service's ``hooks.d`` file, for containers annotated ``gpuforensics.test/nvidia-hook=yes``), busy
  on GPU 1: granted, the hook cited in the OCI spec podman started it with (``oci-config.json``);
- ``plain``: ``-e NVIDIA_VISIBLE_DEVICES=0`` under runc, busy on GPU 0: not granted (the variable
  means nothing without NVIDIA's runtime or hook), and accused.

Podman 4.3 reads CDI specs from ``/etc/cdi`` and ``/var/run/cdi`` only (its registry is built with
the CDI library's default directories; ``containers.conf`` has no ``cdi_spec_dirs`` before podman
4.5's containers/common), so the spec is written into ``/var/run/cdi`` (a tmpfs: gone at reboot)
under a name of this run and removed afterwards with the directory when the test made it; a host
that already has a spec of kind ``nvidia.com/gpu`` there is not touched (the test skips).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis import analyze_bundles
from forensics.bundle.reader import Bundle, open_bundle
from forensics.capture.runner import run_capture
from forensics.collect.context import CaptureOptions
from tests.support.cdi_specs import nvidia_ctk_spec_json
from tests.support.nvmlsim import Scenario as NvmlScenario
from tests.support.nvmlsim import activate
from tests.support.nvmlsim import fixtures as nvf
from tests.support.podman_engine import (
    BUSYBOX_REF,
    NVIDIA_HOOK_ANNOTATION,
    PodmanEngine,
    podman_engine,
)
from tests.support.podresources_server import gpu_uuid
from tests.support.polling import host_pids_with_cmdline, wait_for

__all__ = ["podman_engine", "sim_lib"]

pytestmark = [pytest.mark.slow, pytest.mark.root]

sim_lib = nvf.sim_lib
CDI_DIR = Path("/var/run/cdi")
GIB = 1 << 30


@dataclass
class Node:
    bundle: Bundle
    analysis: dict[str, Any]
    ids: dict[str, str]
    spec_file: Path


def _cdi_dir_has_nvidia_specs() -> bool:
    for d in (Path("/etc/cdi"), CDI_DIR):
        try:
            for f in d.iterdir():
                if "nvidia.com/gpu" in f.read_text(errors="replace"):
                    return True
        except OSError:
            continue
    return False


@pytest.fixture(scope="module")
def node(podman_engine: PodmanEngine, sim_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    if _cdi_dir_has_nvidia_specs():
        pytest.skip("this host has CDI specs of kind nvidia.com/gpu: a test spec would conflict with them")
    e = podman_engine
    tag = uuid.uuid4().hex[:8]
    made_dir = not CDI_DIR.exists()
    spec_file = CDI_DIR / f"gpuforensics-test-{tag}.json"
    ids: dict[str, str] = {}

    def run(name: str, *args: str) -> None:
        proc = e.podman("run", "-d", "--name", f"gf-{tag}-{name}", *args, BUSYBOX_REF, "sleep", "600")
        ids[name] = proc.stdout.strip().splitlines()[-1]

    tmp = tmp_path_factory.mktemp("podman-gpu")
    try:
        CDI_DIR.mkdir(parents=True, exist_ok=True)
        spec_file.write_text(nvidia_ctk_spec_json("gpu1", 1))
        run("cdi", "--device", "nvidia.com/gpu=gpu1")
        run("nvrt", "--runtime", "nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=0")
        run("hooked", "--annotation", f"{NVIDIA_HOOK_ANNOTATION}=yes", "-e", "NVIDIA_VISIBLE_DEVICES=1")
        run("plain", "-e", "NVIDIA_VISIBLE_DEVICES=0")
        pids = {n: wait_for(lambda n=n: host_pids_with_cmdline(["sleep", "600"], ids[n]))[0] for n in ids}
        sc = NvmlScenario()
        sc.add_gpu(uuid=gpu_uuid(0), gpu_util=90, memory_total_bytes=80 * GIB, minor_number=0)
        sc.add_gpu(uuid=gpu_uuid(1), gpu_util=90, memory_total_bytes=80 * GIB, minor_number=1)
        sc.add_process(pid=pids["cdi"], gpu=1, used_memory_bytes=10 * GIB, sm_util=80, mem_util=20)
        sc.add_process(pid=pids["nvrt"], gpu=0, used_memory_bytes=10 * GIB, sm_util=80, mem_util=20)
        sc.add_process(pid=pids["hooked"], gpu=1, used_memory_bytes=4 * GIB, sm_util=30, mem_util=5)
        sc.add_process(pid=pids["plain"], gpu=0, used_memory_bytes=5 * GIB, sm_util=60, mem_util=10)
        activate(sc.write(tmp / "nvml.tsv"))
        from forensics.collectors.cdi import COLLECTOR as CDI
        from forensics.collectors.docker.docker import COLLECTOR as DOCKER
        from forensics.collectors.nvml.nvml import NvmlCollector
        from forensics.collectors.procfs import ProcfsCollector

        out = tmp / "out"
        out.mkdir()
        result = run_capture(CaptureOptions(
            nvml_library=str(sim_lib), timeout_s=90, lookback_s=600, duration_s=2, interval_s=1,
            extra={"docker.host": e.docker_host, "cdi.static_dir": "/etc/cdi", "cdi.dynamic_dir": str(CDI_DIR)},
        ), out, collectors=[NvmlCollector(), DOCKER, ProcfsCollector(), CDI])
        yield Node(open_bundle(result.path), analyze_bundles([result.path]), ids, spec_file)
    finally:
        e.podman("rm", "-f", "-t", "0", *ids.values(), check=False)
        spec_file.unlink(missing_ok=True)
        if made_dir:
            try:
                CDI_DIR.rmdir()
            except OSError:
                pass


def _container(node: Node, name: str) -> dict[str, Any]:
    return next(c for c in node.analysis["containers"] if c["id"] == node.ids[name])


def _unallocated(node: Node) -> list[dict[str, Any]]:
    return [f for f in node.analysis["findings"] if f["kind"] == "unallocated-gpu-use"]


def test_libpod_inspect_stored_beside_the_compatible_one(node: Node) -> None:
    for cid in node.ids.values():
        compat = node.bundle.read_json(f"docker/containers/{cid}/inspect.json")
        own = node.bundle.read_json(f"docker/containers/{cid}/libpod-inspect.json")
        assert compat["HostConfig"]["Runtime"] == "oci" and own["Id"] == cid
    nvrt = node.bundle.read_json(f"docker/containers/{node.ids['nvrt']}/libpod-inspect.json")
    assert nvrt["OCIRuntime"] == "nvidia"


def test_cdi_device_container_is_granted_its_gpu(node: Node) -> None:
    alloc = _container(node, "cdi")["gpu_allocation"]
    assert alloc["kind"] == "cdi" and alloc["explicit"] is True, alloc
    assert alloc["gpus"] == [gpu_uuid(1)] and alloc["source"] == "podman libpod inspect"
    assert "nvidia.com/gpu=gpu1" in alloc["detail"]
    assert not [f for f in _unallocated(node) if any(s.get("id") == node.ids["cdi"] for s in f["subjects"])]


def test_runtime_nvidia_container_is_granted_its_gpu(node: Node) -> None:
    alloc = _container(node, "nvrt")["gpu_allocation"]
    assert alloc["kind"] == "env" and alloc["explicit"] is True and alloc["gpus"] == [gpu_uuid(0)], alloc
    assert "runtime nvidia" in alloc["detail"]


def test_nvidia_hook_makes_the_variable_a_grant(node: Node) -> None:
    alloc = _container(node, "hooked")["gpu_allocation"]
    assert alloc["kind"] == "env" and alloc["explicit"] is True and alloc["gpus"] == [gpu_uuid(1)], alloc
    assert "NVIDIA's OCI hook" in alloc["detail"]
    oci = node.bundle.read_json(f"docker/containers/{node.ids['hooked']}/oci-config.json")
    assert oci["hooks"]["prestart"][0]["path"].endswith("/nvidia-container-runtime-hook")
    doc = node.bundle.read_json("docker/allocations.json")
    (grant,) = [g for c in doc["containers"] if c["container_id"] == node.ids["hooked"] for g in c["grants"]]
    assert grant["effective"] and {"document": "oci-config", "pointer": "/hooks/prestart/0"} in [
        {k: s[k] for k in ("document", "pointer")} for s in grant["sources"]]


def test_cdi_device_node_is_in_the_oci_spec(node: Node) -> None:
    """The device the CDI spec gave (c 195:1) is in the OCI spec podman started the container with."""
    oci = node.bundle.read_json(f"docker/containers/{node.ids['cdi']}/oci-config.json")
    assert {"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1} in [
        {k: d.get(k) for k in ("path", "type", "major", "minor")} for d in oci["linux"]["devices"]]
    doc = node.bundle.read_json("docker/allocations.json")
    (entry,) = [c for c in doc["containers"] if c["container_id"] == node.ids["cdi"]]
    assert {(g["mechanism"], g["devices"][0]["id"]) for g in entry["grants"] if g["effective"]} >= {
        ("device-node", "1")}


def test_plain_runc_container_is_accused_with_the_libpod_runtime_cited(node: Node) -> None:
    """The one that was not granted: named, and the evidence shows what podman ran it with."""
    (f,) = _unallocated(node)
    culprits = [s for s in f["subjects"] if s["role"] == "culprit"]
    assert [s["id"] for s in culprits] == [node.ids["plain"]], f["summary"]
    libpod = f"docker/containers/{node.ids['plain']}/libpod-inspect.json"
    assert any(e["member"] == libpod for e in f["evidence"]), f["evidence"]


def test_grant_evidence_cites_the_libpod_member_and_the_spec(node: Node) -> None:
    """Granted containers leave no finding to carry evidence: the allocations the capture wrote,
    rebuilt from the same members, name their sources."""
    doc = node.bundle.read_json("docker/allocations.json")
    by_id = {c["container_id"]: c for c in doc["containers"]}
    cdi = [g for g in by_id[node.ids["cdi"]]["grants"] if g["mechanism"] == "cdi"]
    assert cdi and cdi[0]["sources"][0]["document"] == "libpod-inspect"
    assert cdi[0]["sources"][0]["pointer"].startswith("/Config/CreateCommand/")
    nvrt = [g for g in by_id[node.ids["nvrt"]]["grants"] if g["mechanism"] == "nvidia-runtime-env"]
    assert nvrt and nvrt[0]["effective"] and {"document": "libpod-inspect", "pointer": "/OCIRuntime"} in [
        {k: s[k] for k in ("document", "pointer")} for s in nvrt[0]["sources"]]
    spec = node.bundle.read_json("cdi/index.json")
    assert any(f.get("member", "").endswith(node.spec_file.name) for d in spec["directories"] for f in d["files"])


def test_the_flight_recorder_keeps_podmans_records_at_first_sight(node: Node, podman_engine: PodmanEngine) -> None:
    """The recorder's Docker follower, on the same service: with each container's inspect it keeps
    podman's own and the OCI spec (a container gone before any capture keeps its real grant)."""
    import json
    import time

    from forensics.bundle.redact import Redactor
    from forensics.collect.context import CollectContext
    from forensics.collectors.docker.follow import DockerFollower
    from forensics.record.child import RecordSink

    follower, sink = DockerFollower(), RecordSink()
    ctx = CollectContext(CaptureOptions(interval_s=1.0, timeout_s=10.0, extra={"docker.host": podman_engine.docker_host}),
                         sink, Redactor(enabled=True), {}, None, "docker")
    members: dict[str, bytes] = {}
    follower.start(ctx)
    try:
        want = f"docker/containers/{node.ids['hooked']}/oci-config.json"
        wanted = {want, f"docker/containers/{node.ids['nvrt']}/libpod-inspect.json"}
        deadline = time.monotonic() + 30
        while not wanted <= set(members) and time.monotonic() < deadline:
            time.sleep(0.2)
            members.update({r[2]: r[4] for r in sink.take_bytes()})
    finally:
        follower.stop()
    own = json.loads(members[f"docker/containers/{node.ids['nvrt']}/libpod-inspect.json"])
    assert own["OCIRuntime"] == "nvidia"
    assert json.loads(members[want])["hooks"]["prestart"][0]["path"].endswith("nvidia-container-runtime-hook")
