"""Joins are resolved once after loading: process -> owner container -> pod -> allocation."""

from __future__ import annotations

from forensics.analysis.findings import Subject
from forensics.analysis.joins import resolve_joins
from forensics.analysis.model import NO_ALLOCATION, Container, Model, Pod, Process

UID = "829bf74c-b567-4c5a-ab20-91434119aa6f"
CID, LOOSE = "a" * 64, "b" * 64


def _model() -> Model:
    m = Model()
    m.pods[UID] = Pod("n1", UID, "ml", "trainer-0", "Running", (), (("trainer", 1),), ())
    m.containers[("n1", CID)] = Container("n1", CID, "trainer", "img", None, "running", None, False,
                                          None, None, NO_ALLOCATION, None, None)
    # containerd/CRI-O: only the cgroup path ties these processes to the pod
    m.processes[("n1", 10)] = Process("n1", 10, "python", "/kubepods/x", CID, UID)
    m.processes[("n1", 11)] = Process("n1", 11, "worker", "/kubepods/y", LOOSE, UID)
    m.processes[("n1", 12)] = Process("n1", 12, "bash", "/user.slice", None, None)
    m.processes[("n1", 13)] = Process("n1", 13, "sleep", "/other", "d" * 64, None)
    m.pids_absent_at_nvml.add(("n1", 12))
    resolve_joins(m)
    return m


def test_a_container_only_a_cgroup_ties_to_a_pod_is_in_that_pod() -> None:
    j = _model().joins
    pod = j.pod_of(Subject("container", CID, "trainer", "n1"))
    assert pod is not None and pod.uid == UID
    assert j.pod_of(Subject("container", "c" * 64, "x", "n1")) is None
    assert j.pod_of(Subject("process", "10", "python", "n1")) is None


def test_owners_are_containers_else_pods_and_an_untrusted_pid_is_its_own() -> None:
    j = _model().joins
    assert j.owner("n1", 10).subject == Subject("container", CID, "trainer", "n1")
    assert j.owner("n1", 10).attributed
    whole_pod = j.owner("n1", 11)  # no pod status lists its container: the pod as a whole owns it
    assert whole_pod.subject == Subject("pod", UID, "ml/trainer-0", "n1")
    assert whole_pod.allocation is j.pod_allocations[UID]
    unknown = j.owner("n1", 13)  # a container only its cgroup names: kept by its id, grant unknown
    assert unknown.subject == Subject("container", "d" * 64, "d" * 12, "n1") and not unknown.allocation.known
    gone = j.owner("n1", 12, "bash-from-xid")
    assert gone.subject == Subject("process", "12", "bash-from-xid", "n1") and not gone.attributed


def test_a_pods_grant_is_resolved_once_and_its_unknown_devices_said() -> None:
    j = _model().joins
    alloc = j.pod_allocations[UID]
    assert alloc.explicit and not alloc.devices_known and alloc.detail == "nvidia.com/gpu: 1 (devices unknown)"
    assert j.explicit_holders("n1", "GPU-1") == ()
