"""Properties: any subset of collectors missing or failed never raises, and findings never name
an entity that is not in the bundle; malformed members become limitations."""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.analysis import analyze_bundles
from tests.support.analysis_bundles import ALL_COLLECTORS, GIB, T0, BundleSpec, cid_of
from tests.unit.analysis.conftest import secretly_taken

STATUSES = ("ok", "partial", "failed", "unavailable", "skipped")


def _rich(statuses: dict[str, str]) -> BundleSpec:
    b = secretly_taken()
    b.status.update(statuses)
    etl = b.container("etl", image_env=["PATH=/bin"], memory=32 << 20, state="exited", exit_code=137,
                      oom_killed=True, finished=T0 + 30)
    b.kernel_oom(T0 + 30, 9001, "python", f"/system.slice/docker-{etl}.scope", 32_700, 32_768)
    b.kmsg(T0 + 40, "NVRM: Xid (PCI:0000:86:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
    b.process(31337, "stress", cgroup="/user.slice/user-0.slice/session-1.scope")
    for s in range(0, 60, 5):
        b.cgroup_tick(T0 + s, "/", psi={"memory": (35.0, 12.0)}, host_psi=True)
    uid = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
    b.pod("ml", "trainer-0", uid, [("trainer", "b" * 64, 1)], oom_killed=["trainer"])
    b.pod_devices("ml", "trainer-0", "trainer", [b.gpus[1]["nvml"]["nvmlDeviceGetUUID"]["value"]])
    return b


def _bundle_text(path: Path) -> str:
    parts = []
    with tarfile.open(path) as tar:
        for m in tar.getmembers():
            parts.append(m.name)
            f = tar.extractfile(m)
            if f is not None:
                parts.append(f.read().decode("utf-8", "replace"))
    return "\n".join(parts)


def _subjects(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = [s for f in doc["findings"] for s in f["subjects"]]
    out += doc["verdict"]["culprits"] + doc["verdict"]["victims"]
    return out


def _check_evidence(doc: dict[str, Any]) -> None:
    members = set(doc["bundles"][0]["members"])
    for f in doc["findings"]:
        assert f["evidence"], f["kind"]  # every finding cites its proof
        for e in f["evidence"]:
            assert e["member"] in members, e
    for r in doc["ruled_out"]:
        for e in r["evidence"]:
            assert e["member"] in members, e


def _check_named_entities_exist(doc: dict[str, Any], text: str) -> None:
    for s in _subjects(doc):
        ident = s["id"]
        if s["type"] == "pod":  # pod UIDs appear with dashes in the API JSON
            assert ident in text, s
        elif s["type"] == "host":
            assert ident in text, s
        else:
            assert ident in text, s
        assert s["node"] in text


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({name: st.sampled_from(STATUSES) for name in ALL_COLLECTORS}))
def test_any_collector_subset_never_raises_and_names_only_bundle_entities(statuses: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _rich(statuses).write(Path(tmp))
        doc = analyze_bundles([path])
        assert not [lim for lim in doc["limitations"] if "could not be read" in lim or lim.startswith("rule ")]
        _check_named_entities_exist(doc, _bundle_text(path))
        _check_evidence(doc)
        for name, status in statuses.items():
            containerd_node = name == "docker" and status != "failed" and statuses["kubernetes"] in ("ok", "partial")
            if status in ("failed", "unavailable", "skipped") and name in ("nvml", "docker", "procfs", "kernel",
                                                                          "cgroups") and not containerd_node:
                assert any(name in lim or {"nvml": "NVML", "docker": "Docker", "procfs": "/proc",
                                           "kernel": "kernel log", "cgroups": "cgroup"}[name] in lim
                           for lim in doc["limitations"]), (name, doc["limitations"])
        for f in doc["findings"]:
            assert 0 < f["confidence"] <= 1


MEMBERS = ["nvml/samples.jsonl", "nvml/devices.json", "nvml/processes.json", "nvml/events.jsonl",
           "proc/4202/cgroup", "proc/4202/stat", "proc/4202/environ", "proc/index.json", "kernel/kmsg.txt",
           "kernel/index.json", "cgroup/samples.jsonl", "cgroup/index.json", "kubernetes/pods.json",
           "kubernetes/events.json", "kubernetes/podresources/list.json", "host/host.json",
           "docker/info.json", "docker/events.jsonl", "docker/samples.jsonl",
           f"docker/containers/{cid_of('notebook')}/inspect.json",
           f"docker/containers/{cid_of('notebook')}/inspect-end.json",
           f"docker/containers/{cid_of('notebook')}/logs.txt"]
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                    max_leaves=15)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(member=st.sampled_from(MEMBERS), value=JSON)
def test_wrong_json_shapes_never_raise(member: str, value: Any) -> None:
    import json

    with tempfile.TemporaryDirectory() as tmp:
        b = _rich({})
        b.jsonl.pop(member, None)
        text = json.dumps(value)
        b.members[member] = (text + "\n" + text + "\n").encode() if member.endswith(".jsonl") else text.encode()
        path = b.write(Path(tmp))
        doc = analyze_bundles([path])
        assert not [lim for lim in doc["limitations"] if "could not be read" in lim or lim.startswith("rule ")]
        _check_named_entities_exist(doc, _bundle_text(path))
        _check_evidence(doc)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(member=st.sampled_from(MEMBERS),
       garbage=st.binary(max_size=300))
def test_malformed_members_never_raise(member: str, garbage: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        b = _rich({})
        b.jsonl.pop(member, None)
        b.members[member] = garbage
        path = b.write(Path(tmp))
        doc = analyze_bundles([path])
        assert doc["format"] == "gpuforensics-analysis"
        assert not [lim for lim in doc["limitations"] if "could not be read" in lim or lim.startswith("rule ")]
        _check_named_entities_exist(doc, _bundle_text(path))


def test_wrong_shapes_never_raise(tmp_path: Path) -> None:
    b = _rich({})
    b.add_json("nvml/devices.json", {"devices": [{"index": "zero", "nvml": []}, 7, None]})
    b.add_json(f"docker/containers/{'c' * 64}/inspect.json", {"Id": 5, "HostConfig": "x", "Config": {"Env": "x"}})
    b.add_json("kubernetes/pods.json", {"items": [{"metadata": {}}, "x"]})
    b.add_json("kubernetes/podresources/list.json", {"pod_resources": [{"containers": [{"devices": [None]}]}]})
    b.jsonl["cgroup/samples.jsonl"].append('{"t": "x", "cgroup": 5, "values": []}')
    b.jsonl["nvml/samples.jsonl"].append('{"kind": "device", "t": 1, "uuid": 3, "processes": "x"}')
    doc = analyze_bundles([b.write(tmp_path)])
    assert doc["findings"]
    assert not [lim for lim in doc["limitations"] if "could not be read" in lim or lim.startswith("rule ")], doc["limitations"]


def test_rich_bundle_findings(tmp_path: Path) -> None:
    doc = analyze_bundles([_rich({}).write(tmp_path)])
    kinds = {f["kind"] for f in doc["findings"]}
    assert {"unallocated-gpu-use", "gpu-compute-hog", "oom-kill", "gpu-lost", "pressure-stall"} <= kinds
    assert GIB  # (used by the builders)
