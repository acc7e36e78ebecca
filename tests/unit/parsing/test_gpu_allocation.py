"""The GPU allocation model over Engine API inspect JSON (forensics.parsing.gpu_allocation)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.errors import ParseError
from forensics.parsing.gpu_allocation import (
    allocation_from_inspect,
    allocations_document,
    is_nvidia_runtime,
    json_pointer,
    parse_cdi_name,
    parse_visible_devices,
)

CID = "3f9a" + "0" * 60
INFO_RUNC = {"DefaultRuntime": "runc", "Runtimes": {"runc": {"path": "runc"},
                                                    "nvidia": {"path": "nvidia-container-runtime"}}}
INFO_NVIDIA = {"DefaultRuntime": "nvidia", "Runtimes": {"runc": {"path": "runc"},
                                                        "nvidia": {"path": "nvidia-container-runtime"}}}
CUDA_IMAGE = {"Id": "sha256:" + "1c2d" * 16,
              "Config": {"Env": ["PATH=/usr/local/cuda/bin:/bin", "CUDA_VERSION=12.4.1",
                                 "NVIDIA_REQUIRE_CUDA=cuda>=12.4", "NVIDIA_VISIBLE_DEVICES=all",
                                 "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]}}
PLAIN_IMAGE = {"Id": "sha256:" + "ab" * 32, "Config": {"Env": ["PATH=/bin"]}}


def container(*, env: list[str] | None = None, runtime: str = "runc",
              device_requests: list[dict[str, Any]] | None = None,
              devices: list[dict[str, Any]] | None = None, privileged: bool = False) -> dict[str, Any]:
    """The parts of GET /containers/{id}/json the model reads, shaped as Docker 20.10 returns them."""
    return {
        "Id": CID, "Name": "/notebook", "Image": "sha256:" + "1c2d" * 16,
        "Config": {"Env": env if env is not None else ["PATH=/bin"], "Image": "cuda:12"},
        "HostConfig": {"Runtime": runtime, "DeviceRequests": device_requests,
                       "Devices": devices or [], "Privileged": privileged},
    }


class TestDeviceRequests:
    def test_gpus_device_1(self) -> None:
        c = container(device_requests=[{"Driver": "", "Count": 0, "DeviceIDs": ["1"],
                                        "Capabilities": [["gpu"]], "Options": {}}])
        a = allocation_from_inspect(c, PLAIN_IMAGE, INFO_RUNC)
        assert a.scope == "devices"
        assert [(d.id, d.kind) for d in a.devices] == [("1", "index")]
        assert a.origins == ("operator",)
        (g,) = a.grants
        assert g.mechanism == "device-request" and g.capabilities == ("gpu",)
        assert g.sources[0].pointer == "/HostConfig/DeviceRequests/0"

    def test_gpus_all_is_count_minus_one(self) -> None:
        c = container(device_requests=[{"Driver": "", "Count": -1, "DeviceIDs": None,
                                        "Capabilities": [["gpu"]]}])
        a = allocation_from_inspect(c, PLAIN_IMAGE, INFO_RUNC)
        assert a.scope == "all" and a.devices == ()

    def test_gpus_count_two_means_indices_zero_and_one(self) -> None:
        c = container(device_requests=[{"Driver": "nvidia", "Count": 2, "Capabilities": [["gpu", "utility"]]}])
        a = allocation_from_inspect(c, PLAIN_IMAGE, INFO_RUNC)
        assert [d.id for d in a.devices] == ["0", "1"]
        assert a.grants[0].capabilities == ("gpu", "utility")

    def test_uuid_device_ids(self) -> None:
        uuid = "GPU-8f2c1e4a-0b1c-4d2e-9f00-123456789abc"
        c = container(device_requests=[{"Driver": "", "DeviceIDs": [uuid], "Capabilities": [["gpu"]]}])
        a = allocation_from_inspect(c, PLAIN_IMAGE, INFO_RUNC)
        assert [(d.id, d.kind) for d in a.devices] == [(uuid, "uuid")]

    def test_non_gpu_request_ignored(self) -> None:
        c = container(device_requests=[{"Driver": "", "Count": -1, "Capabilities": [["tpu"]]}])
        assert allocation_from_inspect(c, PLAIN_IMAGE, INFO_RUNC).scope == "none"

    def test_cdi_request(self) -> None:
        c = container(device_requests=[{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=all"]}])
        a = allocation_from_inspect(c, PLAIN_IMAGE, INFO_RUNC)
        assert a.scope == "all" and a.grants[0].mechanism == "cdi"
        c = container(device_requests=[{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=0",
                                                                      "vendor.com/fpga=1"]}])
        a = allocation_from_inspect(c, PLAIN_IMAGE, INFO_RUNC)
        assert [d.id for d in a.devices] == ["0"] and len(a.grants) == 1


class TestRuntimeEnv:
    def test_image_env_under_default_nvidia_runtime_is_the_secret_grant(self) -> None:
        c = container(env=list(CUDA_IMAGE["Config"]["Env"]), runtime="nvidia")
        a = allocation_from_inspect(c, CUDA_IMAGE, INFO_NVIDIA)
        assert a.scope == "all"
        assert set(a.origins) == {"image", "engine-default-runtime"}
        (g,) = a.grants
        assert g.origin == "image" and g.effective
        pointers = {(s.document, s.pointer, s.origin) for s in g.sources}
        assert ("container-inspect", "/Config/Env/3", "image") in pointers
        assert ("image-inspect", "/Config/Env/3", "image") in pointers
        assert ("engine-info", "/DefaultRuntime", "engine-default-runtime") in pointers
        assert any("default runtime" in n for n in a.notes)

    def test_same_image_under_runc_default_gets_nothing(self) -> None:
        c = container(env=list(CUDA_IMAGE["Config"]["Env"]), runtime="runc")
        a = allocation_from_inspect(c, CUDA_IMAGE, INFO_RUNC)
        assert a.scope == "none"
        (g,) = a.grants
        assert not g.effective and g.scope == "all" and "no effect" in g.reason

    def test_operator_env_with_explicit_runtime(self) -> None:
        c = container(env=["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0,1"], runtime="nvidia")
        a = allocation_from_inspect(c, PLAIN_IMAGE, INFO_RUNC)
        assert a.scope == "devices" and [d.id for d in a.devices] == ["0", "1"]
        assert a.origins == ("operator",)
        assert a.grants[0].sources[0].pointer == "/HostConfig/Runtime"

    def test_operator_overrides_image_value(self) -> None:
        env = [e if not e.startswith("NVIDIA_VISIBLE") else "NVIDIA_VISIBLE_DEVICES=1"
               for e in CUDA_IMAGE["Config"]["Env"]]
        a = allocation_from_inspect(container(env=env, runtime="nvidia"), CUDA_IMAGE, INFO_NVIDIA)
        assert a.grants[0].origin == "operator" and [d.id for d in a.devices] == ["1"]

    @pytest.mark.parametrize("value", ["none", "void", ""])
    def test_no_gpu_values(self, value: str) -> None:
        c = container(env=[f"NVIDIA_VISIBLE_DEVICES={value}"], runtime="nvidia")
        assert allocation_from_inspect(c, PLAIN_IMAGE, INFO_NVIDIA).scope == "none"

    def test_mig_ids(self) -> None:
        c = container(env=["NVIDIA_VISIBLE_DEVICES=MIG-GPU-8f2c/1/0,0:1"], runtime="nvidia")
        a = allocation_from_inspect(c, PLAIN_IMAGE, INFO_RUNC)
        assert [(d.id, d.kind) for d in a.devices] == [("MIG-GPU-8f2c/1/0", "mig-uuid"),
                                                       ("0:1", "mig-index")]

    def test_legacy_cuda_image_without_variable_gets_all(self) -> None:
        img = {"Config": {"Env": ["CUDA_VERSION=9.0"]}}
        c = container(env=["CUDA_VERSION=9.0"], runtime="nvidia")
        a = allocation_from_inspect(c, img, INFO_NVIDIA)
        assert a.scope == "all" and a.grants[0].origin == "image"

    def test_nvidia_runtime_without_variable(self) -> None:
        a = allocation_from_inspect(container(runtime="nvidia"), PLAIN_IMAGE, INFO_NVIDIA)
        assert a.scope == "none" and a.grants[0].origin == "engine-default-runtime"

    def test_runtime_by_path(self) -> None:
        info = {"DefaultRuntime": "runc", "Runtimes": {"gpu": {"path": "/usr/bin/nvidia-container-runtime"}}}
        assert is_nvidia_runtime("gpu", info)
        assert not is_nvidia_runtime("runc", info)
        assert not is_nvidia_runtime(None, info)

    def test_empty_runtime_falls_back_to_engine_default(self) -> None:
        c = container(env=["NVIDIA_VISIBLE_DEVICES=all"], runtime="")
        a = allocation_from_inspect(c, PLAIN_IMAGE, INFO_NVIDIA)
        assert a.scope == "all" and a.runtime == "nvidia"

    def test_missing_image_noted(self) -> None:
        a = allocation_from_inspect(container(), None, None)
        assert a.scope == "none" and any("image inspect missing" in n for n in a.notes)


class TestDevicesAndPrivileged:
    def test_privileged_sees_all(self) -> None:
        a = allocation_from_inspect(container(privileged=True), PLAIN_IMAGE, INFO_RUNC)
        assert a.scope == "all" and a.grants[0].mechanism == "privileged"
        assert a.grants[0].sources[0].pointer == "/HostConfig/Privileged"

    def test_device_nodes(self) -> None:
        devs = [{"PathOnHost": "/dev/nvidiactl", "PathInContainer": "/dev/nvidiactl", "CgroupPermissions": "rwm"},
                {"PathOnHost": "/dev/nvidia1", "PathInContainer": "/dev/nvidia0", "CgroupPermissions": "rwm"}]
        a = allocation_from_inspect(container(devices=devs), PLAIN_IMAGE, INFO_RUNC)
        assert [(d.id, d.kind) for d in a.devices] == [("1", "minor")]
        assert a.grants[0].sources[0].pointer == "/HostConfig/Devices/1"

    def test_cdi_name_in_devices(self) -> None:
        devs = [{"PathOnHost": "nvidia.com/gpu=all", "PathInContainer": "", "CgroupPermissions": ""}]
        assert allocation_from_inspect(container(devices=devs), PLAIN_IMAGE, INFO_RUNC).scope == "all"

    def test_union_of_grants(self) -> None:
        c = container(env=["NVIDIA_VISIBLE_DEVICES=0"], runtime="nvidia",
                      device_requests=[{"DeviceIDs": ["1"], "Capabilities": [["gpu"]]}])
        a = allocation_from_inspect(c, PLAIN_IMAGE, INFO_RUNC)
        assert sorted(d.id for d in a.devices) == ["0", "1"] and len(a.grants) == 2


class TestHelpers:
    def test_json_pointer_escapes(self) -> None:
        assert json_pointer("Config", "Labels", "a/b~c") == "/Config/Labels/a~1b~0c"

    def test_parse_visible_devices(self) -> None:
        assert parse_visible_devices("all") == ("all", ())
        assert parse_visible_devices("0,all")[0] == "all"
        scope, refs = parse_visible_devices(" 0 , GPU-abc ")
        assert scope == "devices" and [r.kind for r in refs] == ["index", "uuid"]

    def test_parse_cdi_name(self) -> None:
        assert parse_cdi_name("nvidia.com/gpu=0") == ("nvidia.com/gpu", "0")
        assert parse_cdi_name("/dev/nvidia0") is None

    def test_document_is_sorted_and_json(self) -> None:
        a = allocation_from_inspect(container(privileged=True), PLAIN_IMAGE, INFO_RUNC)
        b_in = container()
        b_in["Id"] = "0" * 64
        b = allocation_from_inspect(b_in, PLAIN_IMAGE, INFO_RUNC)
        doc = allocations_document([a, b])
        assert [c["container_id"] for c in doc["containers"]] == ["0" * 64, CID]
        assert doc["containers"][1]["grants"][0]["sources"][0]["origin"] == "operator"


class TestBadInput:
    @pytest.mark.parametrize("mutate", [
        lambda c: c.__setitem__("Id", 5),
        lambda c: c.__setitem__("HostConfig", []),
        lambda c: c["HostConfig"].__setitem__("DeviceRequests", {"Count": 1}),
        lambda c: c["HostConfig"].__setitem__("DeviceRequests", [{"Count": "all"}]),
        lambda c: c["HostConfig"].__setitem__("DeviceRequests", [{"Count": True}]),
        lambda c: c["HostConfig"].__setitem__("DeviceRequests", [{"DeviceIDs": [0]}]),
        lambda c: c["HostConfig"].__setitem__("Privileged", "yes"),
        lambda c: c["HostConfig"].__setitem__("Devices", ["/dev/nvidia0"]),
        lambda c: c["Config"].__setitem__("Env", "A=b"),
        lambda c: c["Config"].__setitem__("Env", [1]),
    ])
    def test_wrong_shapes_raise_parse_error(self, mutate: Any) -> None:
        c = copy.deepcopy(container())
        mutate(c)
        with pytest.raises(ParseError):
            allocation_from_inspect(c, PLAIN_IMAGE, INFO_RUNC)

    def test_not_an_object(self) -> None:
        with pytest.raises(ParseError):
            allocation_from_inspect([], None, None)
        with pytest.raises(ParseError):
            allocation_from_inspect(container(), "image", None)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["Id", "Name", "Image", "Config", "HostConfig", "Env", "Runtime",
                         "DeviceRequests", "Devices", "Privileged", "Driver", "Count", "DeviceIDs",
                         "Capabilities", "PathOnHost", "DefaultRuntime", "Runtimes", "path"]),
        children, max_size=6),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values, json_values, json_values)
def test_arbitrary_json_gives_a_model_or_parse_error(c: Any, img: Any, info: Any) -> None:
    try:
        a = allocation_from_inspect(c, img, info)
    except ParseError:
        return
    assert a.scope in ("all", "devices", "none")
    assert (a.scope == "devices") == bool(a.devices)


env_items = st.sampled_from(["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=0",
                             "NVIDIA_VISIBLE_DEVICES=void", "CUDA_VERSION=12.0", "SECRET=x"])


@settings(max_examples=200, deadline=None)
@given(env=st.lists(env_items, max_size=4), runtime=st.sampled_from(["runc", "nvidia", ""]),
       privileged=st.booleans(), count=st.sampled_from([None, -1, 0, 1, 3]),
       default=st.sampled_from(["runc", "nvidia"]))
def test_scope_is_the_union_of_effective_grants(env: list[str], runtime: str, privileged: bool,
                                                count: int | None, default: str) -> None:
    reqs = None if count is None else [{"Count": count, "Capabilities": [["gpu"]]}]
    c = container(env=env, runtime=runtime, privileged=privileged, device_requests=reqs)
    a = allocation_from_inspect(c, {"Config": {"Env": env[:1]}},
                                {"DefaultRuntime": default, "Runtimes": {}})
    effective = [g for g in a.grants if g.effective]
    assert (a.scope == "all") == any(g.scope == "all" for g in effective)
    if privileged or count == -1:
        assert a.scope == "all"
    for g in a.grants:
        assert g.sources and all(s.pointer.startswith("/") for s in g.sources)
