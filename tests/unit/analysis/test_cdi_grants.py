"""Docker containers given GPUs through CDI (Engine 28.2+: ``docker run --device nvidia.com/gpu=...``),
judged end to end on bundles: the grant is what the node's CDI spec files (``cdi/``) say the name
is, never the environment alone (tests/support/cdi_specs.py for the shapes and their sources)."""

from __future__ import annotations

import json

from forensics.report.markdown import render_markdown
from tests.support.analysis_bundles import GIB, BundleSpec
from tests.support.cdi_specs import cdi_device_request, nvidia_ctk_spec
from tests.unit.analysis.conftest import Analyze, kinds, names, of_kind

SPEC_MEMBER = "cdi/etc/cdi/nvidia.yaml"


def _node(spec_text: str | None, names_: tuple[str, ...], on_gpu: int, *, env: list[str] | None = None,
          runtime: str = "runc", minors_read: bool = True) -> BundleSpec:
    """Two GPUs (minor = index); container ``job`` given ``names_`` through a cdi device request,
    its process busy on GPU ``on_gpu``; ``spec_text`` in /etc/cdi (None: no spec on the node);
    ``minors_read`` false: NVML's minor numbers are not in the bundle."""
    b = BundleSpec(default_runtime="runc")
    for i in (0, 1):
        b.gpu(i)
        if minors_read:
            b.gpus[i]["nvml"]["nvmlDeviceGetMinorNumber"] = {"value": i}
    c = b.container("job", image_env=["PATH=/bin"], env=env, runtime=runtime,
                    device_requests=[cdi_device_request(*names_)])
    b.process(10, "python", container=c, environ=["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void"])
    b.gpu_series(on_gpu, range(10), lambda s: (90, 20 * GIB, {10: (20 * GIB, 90.0)}))
    if spec_text is not None:
        b.members[SPEC_MEMBER] = spec_text.encode()
        b.add_json("cdi/index.json", {"directories": [
            {"path": "/etc/cdi", "priority": 0, "exists": True, "error": None,
             "files": [{"name": "nvidia.yaml", "member": SPEC_MEMBER, "size": len(spec_text)}]},
            {"path": "/var/run/cdi", "priority": 1, "exists": False, "error": None, "files": []}]})
    return b


def _container(doc: dict, name: str) -> dict:  # type: ignore[type-arg]
    return next(c for c in doc["containers"] if c["name"] == name)


def test_type_index_name_on_its_gpu_is_granted(analyze: Analyze) -> None:
    """``nvidia-ctk cdi generate --device-name-strategy type-index``: ``nvidia.com/gpu=gpu1`` is
    /dev/nvidia1; the container on GPU 1 is not accused (today: "gpu1" is no GPU, and it is)."""
    doc = analyze(_node(nvidia_ctk_spec(("gpu0", "gpu1")), ("nvidia.com/gpu=gpu1",), on_gpu=1))
    assert "unallocated-gpu-use" not in kinds(doc)
    alloc = _container(doc, "job")["gpu_allocation"]
    assert alloc["kind"] == "cdi" and alloc["explicit"] is True
    assert len(alloc["gpus"]) == 1 and alloc["gpus"][0].startswith("GPU-")
    assert "nvidia.com/gpu=gpu1" in alloc["detail"] and SPEC_MEMBER in alloc["detail"]
    assert alloc["cdi_devices"] == ["nvidia.com/gpu=gpu1"]
    # the report's grant column names the CDI device after the kind
    row = next(line for line in render_markdown(doc).splitlines() if line.startswith("| **job**"))
    assert "| cdi nvidia.com/gpu=gpu1: " in row, row


def test_a_device_node_no_read_minor_names_is_never_judged(analyze: Analyze) -> None:
    """The spec grants /dev/nvidia1, and the bundle has no minor numbers: which GPU that is is unknown
    (the driver's minors need not follow NVML's order), so the container on GPU 0 is not accused
    (before: /dev/nvidia1 was taken as NVML index 1, and the container on GPU 0 was a culprit)."""
    doc = analyze(_node(nvidia_ctk_spec(("gpu0", "gpu1")), ("nvidia.com/gpu=gpu1",), on_gpu=0,
                        minors_read=False))
    assert "unallocated-gpu-use" not in kinds(doc)
    alloc = _container(doc, "job")["gpu_allocation"]
    assert alloc["explicit"] is True and not any(g.startswith("GPU-") for g in alloc["gpus"])


def test_claim_style_kind_resolved_only_by_its_spec(analyze: Analyze) -> None:
    """A CDI kind that is not NVIDIA's well-known one (a DRA driver's per-claim spec in /var/run/cdi)
    grants the GPU its device nodes name."""
    spec = nvidia_ctk_spec(("claim-7f3a-gpu-0", "claim-7f3a-gpu-1"), (1, 0), kind="k8s.gpu.nvidia.com/claim")
    doc = analyze(_node(spec, ("k8s.gpu.nvidia.com/claim=claim-7f3a-gpu-0",), on_gpu=1))
    assert "unallocated-gpu-use" not in kinds(doc), [f["summary"] for f in doc["findings"]]


def test_void_under_the_nvidia_runtime_is_not_no_grant(analyze: Analyze) -> None:
    """The process environment says NVIDIA_VISIBLE_DEVICES=void (the spec's env), the container runs
    under the nvidia runtime with that value in its env too: the CDI request still grants GPU 0."""
    doc = analyze(_node(nvidia_ctk_spec(), ("nvidia.com/gpu=0",), on_gpu=0, runtime="nvidia",
                        env=["NVIDIA_VISIBLE_DEVICES=void"]))
    assert "unallocated-gpu-use" not in kinds(doc)
    assert _container(doc, "job")["gpu_allocation"]["kind"] == "cdi"


def test_use_of_another_gpu_names_the_cdi_grant_and_cites_the_spec(analyze: Analyze) -> None:
    doc = analyze(_node(nvidia_ctk_spec(("gpu0", "gpu1")), ("nvidia.com/gpu=gpu0",), on_gpu=1))
    (f,) = of_kind(doc, "unallocated-gpu-use")
    assert names(f, "culprit") == ["job"]
    assert "nvidia.com/gpu=gpu0" in f["summary"]
    text = nvidia_ctk_spec(("gpu0", "gpu1")).splitlines()
    spec_ev = [e for e in f["evidence"] if e["member"] == SPEC_MEMBER]
    assert spec_ev and spec_ev[0]["locator"] == "line 5" and spec_ev[0]["excerpt"] == text[4]
    assert any(e["locator"] == "/HostConfig/DeviceRequests/0" for e in f["evidence"])


def test_spec_defined_twice_in_one_directory_is_a_limitation(analyze: Analyze) -> None:
    b = _node(nvidia_ctk_spec(), ("nvidia.com/gpu=0",), on_gpu=0)
    b.members["cdi/etc/cdi/copy.yaml"] = nvidia_ctk_spec().encode()
    index = json.loads(b.members["cdi/index.json"])
    index["directories"][0]["files"].append({"name": "copy.yaml", "member": "cdi/etc/cdi/copy.yaml"})
    b.add_json("cdi/index.json", index)
    doc = analyze(b)
    assert any("CDI device nvidia.com/gpu=0 is defined by" in lim for lim in doc["limitations"])
