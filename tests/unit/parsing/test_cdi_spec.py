"""CDI spec files (forensics.parsing.cdi_spec) and CDI grants read through them
(forensics.parsing.cdi_grants, in forensics.parsing.gpu_allocation's model), on ``nvidia-ctk cdi generate``'s shapes (tests/support/cdi_specs.py)."""

from __future__ import annotations

from typing import Any

import pytest

from forensics.errors import ParseError
from forensics.parsing.cdi_grants import CDI_SPEC_DOCUMENT, SpecGrants
from forensics.parsing.cdi_spec import CdiRegistry, nvidia_cdi_token, parse_spec
from forensics.parsing.gpu_allocation import allocation_from_inspect
from tests.support.cdi_specs import cdi_device_request, nvidia_ctk_spec, nvidia_ctk_spec_json

STATIC = "cdi/etc/cdi/nvidia.yaml"
DYNAMIC = "cdi/var/run/cdi/nvidia.yaml"


def _registry(*files: tuple[str, str, int]) -> CdiRegistry:
    return CdiRegistry.from_files((m, t.encode(), p) for m, t, p in files)


def _grants(*files: tuple[str, str, int]) -> SpecGrants:
    return SpecGrants(_registry(*files))


def _container(**host: Any) -> dict[str, Any]:
    return {"Id": "c" * 64, "Name": "/job", "Image": "sha256:" + "1" * 64,
            "HostConfig": {"Runtime": "runc", **host}, "Config": {"Env": ["PATH=/bin"]}}


class TestSpec:
    def test_nvidia_ctk_yaml_devices_nodes_and_lines(self) -> None:
        spec = parse_spec(STATIC, nvidia_ctk_spec(minors=(3, 1)).encode())
        assert spec.kind == "nvidia.com/gpu"
        assert [(d.qualified, d.minors) for d in spec.devices] == [
            ("nvidia.com/gpu=0", (3,)), ("nvidia.com/gpu=1", (1,)), ("nvidia.com/gpu=all", (3, 1))]
        assert "NVIDIA_VISIBLE_DEVICES=void" in spec.env
        lines = nvidia_ctk_spec(minors=(3, 1)).splitlines()
        assert lines[spec.devices[1].line - 1].strip() == '- name: "1"'  # type: ignore[operator]

    def test_json_form_with_major_minor(self) -> None:
        spec = parse_spec("cdi/etc/cdi/nvidia.json", nvidia_ctk_spec_json("gpu0", 2).encode())
        (dev,) = spec.devices
        assert (dev.qualified, dev.minors, dev.pointer, dev.line) == ("nvidia.com/gpu=gpu0", (2,), "/devices/0", None)

    @pytest.mark.parametrize("text", ["kind: nvidia.com/gpu\n", "devices: []\n", "[1, 2]\n", "a: [\n",
                                      "kind: nvidia.com/gpu\ndevices:\n  - containerEdits: {}\n"])
    def test_not_a_spec_is_a_parse_error(self, text: str) -> None:
        with pytest.raises(ParseError):
            parse_spec("cdi/etc/cdi/x.yaml", text.encode())

    def test_later_directory_wins_and_one_directory_conflicts(self) -> None:
        reg = _registry((STATIC, nvidia_ctk_spec(minors=(0, 1)), 0), (DYNAMIC, nvidia_ctk_spec(minors=(1, 0)), 1))
        assert reg.resolve("nvidia.com/gpu=0").minors == (1,)  # type: ignore[union-attr]
        twice = _registry((STATIC, nvidia_ctk_spec(), 0), ("cdi/etc/cdi/other.yaml", nvidia_ctk_spec(), 0))
        assert twice.resolve("nvidia.com/gpu=0") is None and len(twice.conflicts("nvidia.com/gpu=0")) == 2

    def test_type_index_names(self) -> None:
        assert [nvidia_cdi_token(n) for n in ("gpu3", "mig1:0", "0", "GPU-ab", "all")] == [
            "3", "1:0", "0", "GPU-ab", "all"]


class TestCdiGrants:
    def test_docker_device_request_resolved_through_the_spec(self) -> None:
        """``docker run --device nvidia.com/gpu=0`` where the spec's device 0 is /dev/nvidia1."""
        reg = _registry((STATIC, nvidia_ctk_spec(minors=(1, 0)), 0))
        alloc = allocation_from_inspect(_container(DeviceRequests=[cdi_device_request("nvidia.com/gpu=0")]), cdi=SpecGrants(reg))
        (grant,) = alloc.grants
        assert grant.mechanism == "cdi" and [(d.id, d.kind) for d in grant.devices] == [("1", "minor")]
        assert "nvidia.com/gpu=0" in grant.reason and "/dev/nvidia1" in grant.reason
        req, spec_src = grant.sources
        assert req.pointer == "/HostConfig/DeviceRequests/0"
        assert (spec_src.document, spec_src.pointer) == (CDI_SPEC_DOCUMENT + STATIC, "/devices/0")

    def test_type_index_name_without_a_spec_is_nvidia_naming(self) -> None:
        alloc = allocation_from_inspect(_container(DeviceRequests=[cdi_device_request("nvidia.com/gpu=gpu1")]))
        assert [(d.id, d.kind) for d in alloc.devices] == [("1", "index")]

    def test_other_vendor_kind_is_a_gpu_grant_only_through_its_spec(self) -> None:
        req = [cdi_device_request("k8s.gpu.example.com/claim=abc-gpu-0")]
        assert allocation_from_inspect(_container(DeviceRequests=req)).scope == "none"
        reg = _registry(("cdi/var/run/cdi/claim.yaml", nvidia_ctk_spec(("abc-gpu-0", "abc-gpu-1"), (4, 5),
                                                                       kind="k8s.gpu.example.com/claim"), 1))
        alloc = allocation_from_inspect(_container(DeviceRequests=req), cdi=SpecGrants(reg))
        assert [(d.id, d.kind) for d in alloc.devices] == [("4", "minor")]

    def test_a_spec_device_without_gpu_nodes_grants_no_gpu(self) -> None:
        text = 'cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n  - name: "0"\n    containerEdits:\n' \
               '      env: ["X=1"]\n'
        alloc = allocation_from_inspect(_container(DeviceRequests=[cdi_device_request("nvidia.com/gpu=0")]),
                                        cdi=_grants((STATIC, text, 0)))
        assert alloc.scope == "none" and alloc.grants == ()

    def test_void_in_the_environment_does_not_take_a_cdi_grant_back(self) -> None:
        """The nvidia runtime, ``NVIDIA_VISIBLE_DEVICES=void`` (the CDI spec's own env) and a CDI request."""
        c = _container(Runtime="nvidia", DeviceRequests=[cdi_device_request("nvidia.com/gpu=1")])
        c["Config"]["Env"].append("NVIDIA_VISIBLE_DEVICES=void")
        alloc = allocation_from_inspect(c, cdi=_grants((STATIC, nvidia_ctk_spec(), 0)))
        assert alloc.scope == "devices" and [(d.id, d.kind) for d in alloc.devices] == [("1", "minor")]

    def test_jit_cdi_runtime_kind_without_a_spec_file(self) -> None:
        """NVIDIA Container Toolkit 1.18's jit-cdi mode names ``runtime.nvidia.com/gpu=<id>`` and makes
        its spec in memory: no file to read, the name is NVIDIA's naming."""
        req = [cdi_device_request("runtime.nvidia.com/gpu=GPU-8a74f1c2-0000-4000-8000-000000000001")]
        alloc = allocation_from_inspect(_container(DeviceRequests=req), cdi=_grants((STATIC, nvidia_ctk_spec(), 0)))
        (grant,) = alloc.grants
        assert [d.kind for d in grant.devices] == ["uuid"] and "not in the captured CDI specs" in grant.reason

    def test_cdi_name_as_a_device_path_on_host(self) -> None:
        devs = [{"PathOnHost": "nvidia.com/gpu=1", "PathInContainer": "", "CgroupPermissions": ""}]
        alloc = allocation_from_inspect(_container(Devices=devs), cdi=_grants((STATIC, nvidia_ctk_spec(minors=(0, 7)), 0)))
        assert [(d.id, d.kind) for d in alloc.devices] == [("7", "minor")]


class TestGpusAsCdi:
    """Engine 29.2+ with nvidia-cdi-hook injects ``--gpus`` as ``nvidia.com/gpu=<id>`` CDI devices
    (moby ``daemon/devices_nvidia_linux.go``, ``cdiDeviceInjector``); the inspect keeps the request."""

    REQ = {"Driver": "", "Count": 0, "DeviceIDs": ["1"], "Capabilities": [["gpu"]], "Options": {}}
    ALL = {"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}

    def test_resolved_through_the_spec_on_29_2(self) -> None:
        reg = _registry((STATIC, nvidia_ctk_spec(minors=(0, 4)), 0))
        alloc = allocation_from_inspect(_container(DeviceRequests=[self.REQ]), None, {"ServerVersion": "29.2.0"}, SpecGrants(reg))
        (grant,) = alloc.grants
        assert grant.mechanism == "device-request" and [(d.id, d.kind) for d in grant.devices] == [("4", "minor")]
        assert grant.cdi_names == ("nvidia.com/gpu=1",) and "nvidia-cdi-hook" in grant.reason
        assert [s.document for s in grant.sources] == ["container-inspect", CDI_SPEC_DOCUMENT + STATIC]
        everything = allocation_from_inspect(_container(DeviceRequests=[self.ALL]), None,
                                             {"ServerVersion": "29.3.1"}, SpecGrants(reg))
        assert everything.scope == "devices" and [d.id for d in everything.devices] == ["0", "4"]

    def test_older_engine_or_missing_name_read_as_before(self) -> None:
        reg = _registry((STATIC, nvidia_ctk_spec(minors=(0, 4)), 0))
        old = allocation_from_inspect(_container(DeviceRequests=[self.REQ]), None, {"ServerVersion": "28.5.2"}, SpecGrants(reg))
        assert [(d.id, d.kind) for d in old.devices] == [("1", "index")] and old.grants[0].cdi_names == ()
        uuid_named = _registry((STATIC, nvidia_ctk_spec(("GPU-a", "GPU-b")), 0))
        new = allocation_from_inspect(_container(DeviceRequests=[self.REQ]), None, {"ServerVersion": "29.2.0"},
                                      SpecGrants(uuid_named))
        assert [(d.id, d.kind) for d in new.devices] == [("1", "index")]


def test_gpu_nodes_of_the_spec_wide_edits_are_every_devices() -> None:
    """A spec that puts /dev/nvidia<N> in its spec-wide edits (given with any of its devices, as the
    CDI runtimes apply them) and gives its device only an env: the device grants those GPUs (it
    granted nothing, and the container on its GPU was accused)."""
    spec = ('{"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [{"name": "all", "containerEdits": '
            '{"env": ["NVIDIA_VISIBLE_DEVICES=void"]}}], "containerEdits": {"deviceNodes": '
            '[{"path": "/dev/nvidia0"}, {"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia1"}]}}')
    reg = CdiRegistry.from_files([("cdi/etc/cdi/a.json", spec.encode(), 0)])
    alloc = allocation_from_inspect({"Id": "c" * 64, "HostConfig": {"DeviceRequests": [
        cdi_device_request("nvidia.com/gpu=all")]}}, cdi=SpecGrants(reg))
    assert alloc.scope == "devices" and [(d.id, d.kind) for d in alloc.devices] == [("0", "minor"), ("1", "minor")]
