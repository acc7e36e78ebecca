"""Who an unattributed GPU process's finding may blame. Host processes are grouped by cgroup as one
owner, except the root cgroup ``/``, which is no one's (every process of a host without a cgroup
hierarchy for them, kernel-started helpers): two processes there stay two findings. The MPS server
(``nvidia-cuda-mps-server``, comm ``nvidia-cuda-mps``) runs the kernels of the MPS clients the
containers hold: it is on every GPU they share, and it is never the culprit of using one."""

from __future__ import annotations

from tests.support.analysis_bundles import GIB, BundleSpec
from tests.unit.analysis.conftest import Analyze, kinds, names, of_kind


def test_processes_in_the_root_cgroup_are_not_one_owner(analyze: Analyze) -> None:
    b = BundleSpec()
    b.gpu(0)
    for pid in (50, 51):
        b.process(pid, "python", cgroup="/")
    b.gpu_series(0, range(5), lambda s: (50, 2 * GIB, {50: (GIB, 10.0), 51: (GIB, 10.0)}))
    found = of_kind(analyze(b), "unattributed-gpu-process")
    assert sorted(f["metrics"]["pids"] for f in found) == ["50", "51"], [f["summary"] for f in found]


def _mps_host(*, in_container: bool) -> BundleSpec:
    """trainer has --gpus device=0 and runs its MPS client on GPU 0; the MPS server runs on the
    host (a systemd service) or in a daemon container with no GPU grant of its own."""
    b = BundleSpec()
    b.gpu(0)
    trainer = b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=0"])
    b.process(10, "python", container=trainer)
    if in_container:
        daemon = b.container("mps-daemon", image_env=["PATH=/bin"], runtime="runc")
        b.process(88, "nvidia-cuda-mps", container=daemon)
    else:
        b.process(88, "nvidia-cuda-mps", cgroup="/system.slice/nvidia-mps.service")
    b.gpu_series(0, range(10), lambda s: (90, 20 * GIB, {10: (18 * GIB, 85.0), 88: (40 << 20, None)}))
    return b


def test_the_mps_server_is_no_culprit(analyze: Analyze) -> None:
    for in_container in (False, True):
        doc = analyze(_mps_host(in_container=in_container))
        accused = [n for f in doc["findings"] for n in names(f, "culprit")]
        assert "nvidia-cuda-mps" not in accused and "mps-daemon" not in accused, \
            [f["summary"] for f in doc["findings"]]
        assert "unallocated-gpu-use" not in kinds(doc)


def test_another_host_process_beside_it_is_still_judged(analyze: Analyze) -> None:
    b = _mps_host(in_container=False)
    b.process(77, "stress", cgroup="/user.slice/user-1000.slice/session-3.scope")
    b.gpu_series(0, range(10, 20), lambda s: (90, 20 * GIB, {10: (18 * GIB, 85.0), 77: (GIB, 40.0)}))
    (f,) = [f for f in of_kind(analyze(b), "unattributed-gpu-process") if "stress" in names(f, "culprit")]
    assert names(f, "victim") == ["trainer"]


def test_the_live_attribution_does_not_call_the_mps_server_unallocated() -> None:
    """The recorder's metrics label asks the rule's question (forensics.analysis.attribution)."""
    from forensics.analysis.attribution import attribute

    b = _mps_host(in_container=True)
    b.add_json("nvml/devices.json", {"t": b.start, "complete": True, "system": {}, "devices": b.gpus})
    members = dict(b.members)
    members.update({m: ("\n".join(lines) + "\n").encode() for m, lines in b.jsonl.items()})
    uuid = b.gpus[0]["nvml"]["nvmlDeviceGetUUID"]["value"]
    assert attribute(members).grant(88, uuid).unallocated is False
