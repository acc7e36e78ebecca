"""The cri loader: a real containerd's answers (tests/fixtures/cri/containerd-1.6.20.json) as the
collector writes them, joined to pods by sandbox without the Kubernetes API."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from forensics.analysis.events import OomKill
from forensics.analysis.loaders.cri import load_cri
from forensics.analysis.loaders.state import LoadState
from forensics.analysis.model import Gpu, Model
from forensics.analysis.source import Source, resolve_pointer
from forensics.specs import cri as cri_spec

FIXTURE = Path(__file__).parents[2] / "fixtures" / "cri" / "containerd-1.6.20.json"
NODE = "gpu-07"


class _Bundle:
    def __init__(self, members: dict[str, Any]) -> None:
        self.data = {k: json.dumps(v).encode() for k, v in members.items()}

    @property
    def manifest(self) -> dict[str, Any]:
        return {}

    def read_bytes(self, member: str) -> bytes:
        return self.data[member]


def _members(mutate: Any = None) -> dict[str, Any]:
    d = json.loads(FIXTURE.read_text())
    sid = d["pods"]["items"][0]["id"]
    cid = d["containers"]["containers"][0]["id"]
    status = copy.deepcopy(d["container_status"])
    if mutate is not None:
        mutate(status)
    return {cri_spec.PODS: d["pods"], cri_spec.CONTAINERS: d["containers"],
            cri_spec.sandbox_member(sid): d["sandbox_status"], cri_spec.container_member(cid): status}


def _load(members: dict[str, Any], gpus: int = 2) -> tuple[Model, Source]:
    model = Model()
    for i in range(gpus):
        model.gpus[(NODE, f"GPU-{i}")] = Gpu(NODE, i, f"GPU-{i}", "H100", None, None, minor_number=i)
    src = Source(_Bundle(members), "b1", members)
    load_cri(src, model, NODE, LoadState())
    return model, src


def test_container_named_by_its_pod_and_granted_by_its_runtime_spec() -> None:
    members = _members()
    model, src = _load(members)
    assert not src.problems
    [(key, c)] = model.containers.items()
    uid = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
    assert (c.name, c.pod_uid, c.k8s_container_name, c.state) == ("ml/trainer-0/main", uid, "main", "running")
    assert c.image == "docker.io/gpuforensics-test/cuda-like:1"
    assert (c.cpu_quota_cores, c.memory_limit_bytes) == (0.2, 64 << 20)
    a = c.allocation
    assert (a.kind, a.explicit, a.gpus, a.source) == ("device-node", True, ("GPU-0",), "runtime spec")
    member = cri_spec.container_member(c.id)
    locators = [e.locator for e in a.evidence]
    assert "/info/info#/runtimeSpec/linux/devices/0" in locators
    # the excerpt is the member's own text: the value that pointer names inside the info string,
    # escaped as the member holds it
    info = json.loads(members[member]["info"]["info"])
    member_text = src.bundle.read_bytes(member).decode()
    for ev in a.evidence:
        assert ev.member == member and not ev.normalised
        assert ev.excerpt.removesuffix("...") in member_text, ev
    ev = next(e for e in a.evidence if e.locator.endswith("/devices/0"))
    assert json.loads(json.loads(f'"{ev.excerpt}"')) == resolve_pointer(info, ev.locator.split("#", 1)[1])
    pod = model.pods[uid]
    assert (pod.namespace, pod.name, pod.container_ids) == ("ml", "trainer-0", (("main", c.id),))
    assert not pod.gpu_limits_known and pod.phase == "SANDBOX_READY"


def test_oom_killed_container_and_pod_from_the_listing_when_info_is_missing() -> None:
    def oom(status: dict[str, Any]) -> None:
        status["status"].update(state="CONTAINER_EXITED", reason="OOMKilled", exit_code=137,
                                finished_at="1796155600000000000")
        del status["info"]  # a runtime that answered without verbose info: the listing names the sandbox

    model, _ = _load(_members(oom))
    [c] = model.containers.values()
    assert (c.state, c.exit_code, c.oom_killed, c.finished_at) == ("exited", 137, True, 1796155600.0)
    assert c.name == "ml/trainer-0/main" and not c.allocation.known
    [o] = model.series(OomKill)
    assert (o.source, o.container_id, o.pod_uid, o.k8s_container_name) == ("cri", c.id, c.pod_uid, "main")
    assert o.evidence[0].locator == "/status/reason" and o.evidence[0].excerpt == "OOMKilled"


def test_no_gpu_granted_cites_the_runtime_spec() -> None:
    def bare(status: dict[str, Any]) -> None:
        info = json.loads(status["info"]["info"])
        linux = info["runtimeSpec"]["linux"]
        del linux["devices"]
        linux["resources"]["devices"] = [{"allow": False, "access": "rwm"}]
        status["info"]["info"] = json.dumps(info)

    model, src = _load(_members(bare))
    [c] = model.containers.values()
    assert (c.allocation.kind, c.allocation.explicit, c.allocation.gpus) == ("none", False, ())
    [ev] = c.allocation.evidence
    assert ev.locator == "/info/info#/runtimeSpec/linux" and not ev.normalised
    assert ev.excerpt.endswith("...") and ev.excerpt[:-3] in src.bundle.read_bytes(ev.member).decode()


def test_hostile_members_do_not_raise() -> None:
    members = _members()
    cid_member = next(m for m in members if m.startswith(cri_spec.CONTAINERS_DIR))
    problems: list[str] = []
    for bad in ({"status": "x"}, {"status": {"id": "c" * 64}, "info": {"info": "{not json"}},
                {"status": {"id": "c" * 64}, "info": {"info": json.dumps({"runtimeSpec": {"linux": []}})}}, []):
        model, src = _load({**members, cid_member: bad})
        problems += src.problems
        for c in model.containers.values():
            assert not c.allocation.explicit
    assert any("allocation not understood" in p for p in problems), problems


def _cdi_only(names: str) -> Any:
    """The container's GPU came only through CDI names in its ``cdi.k8s.io/`` annotation (the
    runtime's CDI mode edits the spec after containerd wrote it: no device node in it)."""
    def mutate(status: dict[str, Any]) -> None:
        info = json.loads(status["info"]["info"])
        linux = info["runtimeSpec"]["linux"]
        del linux["devices"]
        linux["resources"]["devices"] = [{"allow": False, "access": "rwm"}]
        info["runtimeSpec"]["annotations"]["cdi.k8s.io/nvidia-device-plugin_trainer"] = names
        status["info"]["info"] = json.dumps(info)
    return mutate


_SPEC = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
         "devices": [{"name": "trainer", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}]}}],
         "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}]}}


def test_a_cdi_name_is_read_through_the_nodes_cdi_specs() -> None:
    """``nvidia.com/gpu=trainer`` is what the node's spec says it is (/dev/nvidia1: GPU 1), cited."""
    members = {**_members(_cdi_only("nvidia.com/gpu=trainer")), "cdi/etc/cdi/nvidia.json": _SPEC}
    model, src = _load(members)
    [c] = model.containers.values()
    a = c.allocation
    assert (a.kind, a.explicit, a.gpus, a.devices_known) == ("cdi", True, ("GPU-1",), True), a
    assert "cdi/etc/cdi/nvidia.json" in {e.member for e in a.evidence}
    assert a.cdi_devices == ("nvidia.com/gpu=trainer",)


def test_a_cdi_name_read_by_nvidias_naming_without_a_spec() -> None:
    """No spec in the bundle: ``gpu1`` (nvidia-ctk's type-index naming) is GPU 1, never a GPU named
    'gpu1' that no GPU matches (the container on GPU 1 was accused of using it unallocated)."""
    model, _ = _load(_members(_cdi_only("nvidia.com/gpu=gpu1")))
    [c] = model.containers.values()
    assert (c.allocation.explicit, c.allocation.gpus) == (True, ("GPU-1",)), c.allocation


def test_a_cdi_name_of_an_unknown_gpu_kind_is_a_grant_of_unknown_gpus() -> None:
    """A DRA driver's per-claim CDI name whose spec the bundle lacks: a GPU was granted, which one
    is not known (never 'no GPU': the container on its claim's GPU was accused)."""
    model, _ = _load(_members(_cdi_only("k8s.gpu.nvidia.com/claim=5b6c7d8e-gpu-0")))
    [c] = model.containers.values()
    assert (c.allocation.explicit, c.allocation.devices_known) == (True, False), c.allocation
