"""Podman containers' grants from podman's own inspect (forensics.parsing.libpod_allocation).

The document shape is podman 4.3.1's ``GET /v4.3.1/libpod/containers/{id}/json`` as the real
service answered it on this project's test machine (Debian's podman 4.3.1, a container made with
``podman run -d --device nvidia.com/gpu=0 ... busybox sleep 600`` through a CDI spec in
/var/run/cdi): ``OCIRuntime`` the runtime's name, ``HostConfig.Runtime`` ``oci``,
``HostConfig.Devices`` empty (a CDI device node the host lacks is left out), the spec's
``NVIDIA_VISIBLE_DEVICES=void`` in ``Config.Env``, and the command line in ``Config.CreateCommand``
(podman's ``libpod/define/container_inspect.go``, v4.3.1, for the field names). The live
counterpart is tests/integration/test_podman_gpu_grants.py.
"""

from __future__ import annotations

from typing import Any

from forensics.bundle.redact import Redactor
from forensics.collect.context import CaptureOptions, CollectContext
from forensics.collectors.docker.redact import redact_libpod
from forensics.parsing.cdi_grants import SpecGrants
from forensics.parsing.cdi_spec import CdiRegistry
from forensics.parsing.libpod_allocation import (
    LIBPOD_INSPECT,
    allocation_from_libpod,
    create_command_cdi_devices,
)
from tests.support.cdi_specs import nvidia_ctk_spec


def libpod(runtime: str = "runc", argv: list[str] | None = None, env: list[str] | None = None,
           annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "Id": "b110d18d4ffb9b383ecd760c5888a49f65bd7b352440d2d292021885b1a349e5", "Name": "cdi1",
        "Image": "67b55f800cfa8e17dc6fc809847c0a74be638e763890dadc31f758dcab2a54c9", "OCIRuntime": runtime,
        "Config": {"Env": env or ["container=podman", "PATH=/bin", "TERM=xterm", "HOME=/root",
                                  "HOSTNAME=b110d18d4ffb", "NVIDIA_VISIBLE_DEVICES=void"],
                   "Cmd": ["sleep", "600"], "Entrypoint": "",
                   "Annotations": {"io.container.manager": "libpod", **(annotations or {})},
                   "CreateCommand": argv if argv is not None else [
                       "/usr/bin/podman", "run", "-d", "--name", "cdi1", "--device", "nvidia.com/gpu=0",
                       "gpuforensics-test/busybox:1", "sleep", "600"]},
        "HostConfig": {"Runtime": "oci", "Devices": [], "Privileged": False},
    }


def test_command_line_cdi_devices() -> None:
    argv = ["podman", "run", "--device=nvidia.com/gpu=1", "--device", "/dev/fuse:/dev/fuse:rwm",
            "--gpus", "0,GPU-ab12", "--gpus=all", "--device", "vendor.com/fpga=x", "img"]
    assert create_command_cdi_devices(argv) == [
        (2, "nvidia.com/gpu=1", "--device nvidia.com/gpu=1"), (6, "nvidia.com/gpu=0", "--gpus 0,GPU-ab12"),
        (6, "nvidia.com/gpu=GPU-ab12", "--gpus 0,GPU-ab12"), (7, "nvidia.com/gpu=all", "--gpus all"),
        (9, "vendor.com/fpga=x", "--device vendor.com/fpga=x")]


def test_a_mig_cdi_name_holds_a_colon() -> None:
    """nvidia-ctk names a MIG device ``nvidia.com/gpu=0:1`` (GPU 0's MIG device 1): CDI device names
    may hold ':', and podman takes the whole qualified name as one (it was read as a host path
    HOST:CONTAINER and dropped: the container on its MIG device looked ungranted)."""
    argv = ["podman", "run", "--device", "nvidia.com/gpu=0:1", "--device=nvidia.com/gpu=mig1:0",
            "--device", "/dev/nvidia0:/dev/nvidia0", "img"]
    assert create_command_cdi_devices(argv) == [
        (3, "nvidia.com/gpu=0:1", "--device nvidia.com/gpu=0:1"),
        (4, "nvidia.com/gpu=mig1:0", "--device nvidia.com/gpu=mig1:0")]
    alloc = allocation_from_libpod(libpod(argv=argv))
    assert {(d.id, d.kind) for d in alloc.devices} >= {("0:1", "mig-index"), ("1:0", "mig-index")}, alloc.devices


def test_cdi_device_of_the_command_line_resolved_through_the_spec() -> None:
    reg = CdiRegistry.from_files([("cdi/var/run/cdi/nvidia.yaml", nvidia_ctk_spec(minors=(2, 3)).encode(), 1)])
    alloc = allocation_from_libpod(libpod(), cdi=SpecGrants(reg))
    (grant,) = [g for g in alloc.grants if g.effective and g.scope != "none"]
    assert grant.mechanism == "cdi" and [(d.id, d.kind) for d in grant.devices] == [("2", "minor")]
    assert (grant.sources[0].document, grant.sources[0].pointer) == (LIBPOD_INSPECT, "/Config/CreateCommand/6")
    assert alloc.scope == "devices"  # the spec's void in Config.Env takes nothing back


def test_runtime_is_the_oci_runtime_not_oci() -> None:
    alloc = allocation_from_libpod(libpod("nvidia", argv=[], env=["NVIDIA_VISIBLE_DEVICES=1"]))
    (grant,) = alloc.grants
    assert grant.mechanism == "nvidia-runtime-env" and grant.effective and alloc.runtime == "nvidia"
    assert [(s.document, s.pointer) for s in grant.sources][0] == (LIBPOD_INSPECT, "/OCIRuntime")
    assert [(d.id, d.kind) for d in alloc.devices] == [("1", "index")]


def test_runc_with_the_variable_grants_nothing() -> None:
    alloc = allocation_from_libpod(libpod("runc", argv=[], env=["NVIDIA_VISIBLE_DEVICES=0"]))
    assert alloc.scope == "none" and not alloc.grants[0].effective


def test_cdi_annotation() -> None:
    alloc = allocation_from_libpod(libpod(argv=[], annotations={"cdi.k8s.io/nvidia": "nvidia.com/gpu=GPU-77"}))
    assert [(d.id, d.kind) for d in alloc.devices] == [("GPU-77", "uuid")]
    assert alloc.grants[-1].sources[0].pointer == "/Config/Annotations/cdi.k8s.io~1nvidia"


def test_create_command_env_values_redacted_as_env() -> None:
    ctx = CollectContext(CaptureOptions(), None, Redactor(enabled=True), {}, None, "docker")  # type: ignore[arg-type]
    doc = libpod(argv=["podman", "run", "-e", "API_URL=https://u:pw@h/x", "--env=FOO=bar", "-e",
                       "NVIDIA_VISIBLE_DEVICES=0", "--device", "nvidia.com/gpu=0", "img", "--token", "abc"])
    argv = redact_libpod(doc, ctx)["Config"]["CreateCommand"]
    assert argv[3].startswith("API_URL=<redacted:") and argv[4].startswith("--env=FOO=<redacted:")
    assert argv[6] == "NVIDIA_VISIBLE_DEVICES=0" and argv[8] == "nvidia.com/gpu=0"
    assert argv[10] == "--token" and argv[11].startswith("<redacted:")


def _oci(hook: str | None = "/usr/bin/nvidia-container-runtime-hook",
         devices: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An OCI runtime spec as podman writes ``userdata/config.json`` (runtime-spec ``config.md``)."""
    hooks = {"prestart": [{"path": hook, "args": ["nvidia-container-runtime-hook", "prestart"]}]} if hook else {}
    return {"ociVersion": "1.0.2-dev", "process": {"env": ["NVIDIA_VISIBLE_DEVICES=1"], "args": ["sleep", "600"]},
            "hooks": hooks, "linux": {"devices": devices or []}}


def test_nvidia_oci_hook_makes_the_variable_effective_under_runc() -> None:
    alloc = allocation_from_libpod(libpod("runc", argv=[], env=["NVIDIA_VISIBLE_DEVICES=1"]), oci_config=_oci())
    (grant,) = alloc.grants
    assert grant.effective and "NVIDIA's OCI hook" in grant.reason
    assert ("oci-config", "/hooks/prestart/0") in [(s.document, s.pointer) for s in grant.sources]
    assert [(d.id, d.kind) for d in alloc.devices] == [("1", "index")]
    other = allocation_from_libpod(libpod("runc", argv=[], env=["NVIDIA_VISIBLE_DEVICES=1"]),
                                   oci_config=_oci(hook="/usr/libexec/some-other-hook"))
    assert other.scope == "none"


def test_gpu_device_nodes_of_the_oci_spec() -> None:
    devices = [{"path": "/dev/nvidia3", "type": "c", "major": 195, "minor": 3},
               {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255},
               {"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}]
    alloc = allocation_from_libpod(libpod(argv=[], env=["PATH=/bin"]), oci_config=_oci(hook=None, devices=devices))
    assert [(d.id, d.kind) for d in alloc.devices] == [("3", "minor")]
    assert alloc.grants[0].sources[0].pointer == "/linux/devices/0"
