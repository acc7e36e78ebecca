"""The allocation model from a CRI runtime's verbose ContainerStatus info (the OCI runtime spec),
starting from a real containerd 1.6.20 answer (tests/fixtures/cri/containerd-1.6.20.json)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.errors import ParseError
from forensics.parsing.oci_allocation import RUNTIME_INFO, allocation_from_runtime_info

FIXTURE = Path(__file__).parents[2] / "fixtures" / "cri" / "containerd-1.6.20.json"


@pytest.fixture
def info() -> dict[str, Any]:
    """The trainer container's verbose info: /dev/nvidia0 (195:0) from a device plugin, a
    ``c 195:0 rwm`` cgroup rule, NVIDIA_VISIBLE_DEVICES=0 from the pod spec over the image's =all,
    runc (no NVIDIA runtime or hook)."""
    doc = json.loads(FIXTURE.read_text())
    parsed: dict[str, Any] = json.loads(doc["container_status"]["info"]["info"])
    return parsed


def _grants(a: Any) -> dict[str, Any]:
    return {g.mechanism: g for g in a.grants}


def test_real_containerd_answer(info: dict[str, Any]) -> None:
    a = allocation_from_runtime_info("c1", "ml/trainer-0/main", "img", info)
    assert (a.scope, [(d.kind, d.id) for d in a.devices]) == ("devices", [("minor", "0")])
    assert a.runtime == "io.containerd.runc.v2" and a.origins == ("operator",)
    g = _grants(a)
    node = g["device-node"]
    assert node.effective and node.sources[0].document == RUNTIME_INFO
    assert node.sources[0].pointer == "/runtimeSpec/linux/devices/0"
    assert json.loads(node.sources[0].excerpt) == info["runtimeSpec"]["linux"]["devices"][0]
    rule = g["device-cgroup"]
    assert rule.sources[0].pointer == "/runtimeSpec/linux/resources/devices/1"
    assert [(d.kind, d.id) for d in rule.devices] == [("minor", "0")]
    env = g["nvidia-runtime-env"]  # the last NVIDIA_VISIBLE_DEVICES entry (the pod spec's) wins
    assert not env.effective and env.origin == "operator" and [d.id for d in env.devices] == ["0"]
    assert env.sources[0].pointer == "/runtimeSpec/process/env/6"
    assert env.sources[1].pointer == "/config/envs/1"
    assert "neither NVIDIA's runtime nor its hook" in env.reason


def test_image_env_under_the_nvidia_runtime_is_every_gpu(info: dict[str, Any]) -> None:
    info["runtimeSpec"]["process"]["env"].remove("NVIDIA_VISIBLE_DEVICES=0")
    info["config"]["envs"] = [e for e in info["config"]["envs"] if e["key"] != "NVIDIA_VISIBLE_DEVICES"]
    del info["runtimeSpec"]["linux"]["devices"]
    info["runtimeSpec"]["linux"]["resources"]["devices"] = [{"allow": False, "access": "rwm"}]
    assert allocation_from_runtime_info("c", "n", "i", info).scope == "none"  # runc: no effect
    for how in ("binary", "hook", "handler"):
        doc = copy.deepcopy(info)
        handler = None
        if how == "binary":
            doc["runtimeOptions"]["binary_name"] = "/usr/bin/nvidia-container-runtime"
        elif how == "hook":
            doc["runtimeSpec"]["hooks"] = {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook"}]}
        else:
            handler = "nvidia"
        a = allocation_from_runtime_info("c", "n", "i", doc, handler)
        env = _grants(a)["nvidia-runtime-env"]
        assert (a.scope, env.origin, env.effective) == ("all", "image", True), how
        assert "the image's ENV" in env.reason


@pytest.mark.parametrize(("rules", "scope", "minors"), [
    ([{"allow": False, "access": "rwm"}, {"allow": True, "type": "c", "major": 195, "access": "rwm"}], "all", []),
    ([{"allow": True, "access": "rwm"}], "all", []),  # privileged's shape: every device
    ([{"allow": True, "access": "rwm"}, {"allow": False, "access": "rwm"}], "none", []),
    ([{"allow": True, "type": "c", "major": 195, "minor": 1, "access": "rw"},
      {"allow": True, "type": "c", "major": 195, "minor": 255, "access": "rw"},  # nvidiactl: not a GPU
      {"allow": True, "type": "c", "major": 195, "minor": 2, "access": "m"},  # mknod only
      {"allow": True, "type": "b", "major": 195, "minor": 3, "access": "rw"},
      {"allow": True, "type": "c", "major": 226, "minor": 0, "access": "rw"}], "devices", ["1"]),
    ([{"allow": True, "type": "c", "major": 195, "minor": 1, "access": "rw"},
      {"allow": False, "type": "c", "major": 195, "minor": 1, "access": "rw"}], "none", []),
])
def test_device_cgroup_rules_in_order(info: dict[str, Any], rules: list[Any], scope: str,
                                      minors: list[str]) -> None:
    del info["runtimeSpec"]["linux"]["devices"]
    info["runtimeSpec"]["linux"]["resources"]["devices"] = rules
    a = allocation_from_runtime_info("c", "n", "i", info)
    assert a.scope == scope
    assert [d.id for d in a.devices] == minors


def test_privileged_and_cdi(info: dict[str, Any]) -> None:
    spec = info["runtimeSpec"]
    del spec["linux"]["devices"]
    spec["linux"]["resources"]["devices"] = []
    info["config"]["CDI_devices"] = [{"name": "nvidia.com/gpu=1"}, {"name": "vendor.com/fpga=0"}]
    spec["annotations"]["cdi.k8s.io/nvidia-device-plugin_abc"] = "nvidia.com/gpu=GPU-1234"
    a = allocation_from_runtime_info("c", "n", "i", info)
    cdi = [g for g in a.grants if g.mechanism == "cdi"]
    assert [(g.devices[0].kind, g.devices[0].id) for g in cdi] == [("index", "1"), ("uuid", "GPU-1234")]
    assert cdi[0].sources[0].pointer == "/config/CDI_devices/0"
    assert cdi[1].sources[0].pointer == "/runtimeSpec/annotations/cdi.k8s.io~1nvidia-device-plugin_abc"
    info["config"]["linux"]["security_context"] = {"privileged": True}
    a = allocation_from_runtime_info("c", "n", "i", info)
    assert a.scope == "all" and _grants(a)["privileged"].sources[0].pointer == \
        "/config/linux/security_context/privileged"


def test_device_node_by_path_and_unicode_digits() -> None:
    devices = [{"path": "/dev/nvidia3"}, {"path": "/dev/nvidia\u00b2"}, {"path": "/dev/nvidiactl", "type": "c",
                                                                      "major": 195, "minor": 255}]
    a = allocation_from_runtime_info("c", "n", "i", {"runtimeSpec": {"linux": {"devices": devices}}})
    assert [d.id for d in a.devices] == ["3"]


def test_no_runtime_spec_is_noted() -> None:
    a = allocation_from_runtime_info("c", "n", "i", {"pid": 1})
    assert a.scope == "none" and a.notes and "no OCI runtime spec" in a.notes[0]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 300) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["runtimeSpec", "config", "linux", "devices", "resources", "process", "env", "path",
                         "major", "minor", "type", "allow", "access", "hooks", "annotations", "envs",
                         "CDI_devices", "name", "security_context", "privileged", "runtimeOptions"]),
        children, max_size=6),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.none() | st.text(max_size=8))
def test_arbitrary_json_gives_a_model_or_parse_error(info: Any, handler: str | None) -> None:
    try:
        a = allocation_from_runtime_info("c", "n", "i", info, handler)
    except ParseError:
        return
    assert a.scope in ("all", "devices", "none")
    assert (a.scope == "devices") == bool(a.devices)
