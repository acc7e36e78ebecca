"""A real containerd (Debian's 1.6, with its CRI plugin) for tests and benchmarks.

``start_containerd()`` writes a ``version = 2`` config into one temporary directory and starts a
private ``containerd`` whose root, state, gRPC socket, runc root and CNI directories all live
there: ``restrict_oom_score_adj = true`` (root on this machine lacks ``CAP_SYS_RESOURCE``, so no
negative ``oom_score_adj`` may be set: without it runc fails with "can't get final child's PID
from pipe"), runc through ``io.containerd.runc.v2`` with ``SystemdCgroup = false`` (cgroupfs),
the ``overlayfs`` snapshotter, no CNI (pods use the node's network namespace, ``NamespaceOption
network = NODE``) and the plugins that would touch host paths (``/opt/containerd``, btrfs,
zfs, devmapper, aufs) disabled. The test images (``tests/support/oci_images.py``: busybox,
cuda-like, a gcc-built pause) are imported with ``ctr -n k8s.io images import``.

:class:`CriDriver` plays the kubelet's part over the same CRI the collector reads: it creates
pod sandboxes with the kubelet's labels and cgroup parents (``/kubepods/<qos>/pod<uid>``) and
containers with the kubelet's labels, resources, envs and devices.

``stop_containerd()`` removes every sandbox through CRI, stops containerd by its PID, kills the
shims and container processes that name its directory (by PID), removes the cgroup directories
its pods caused under each hierarchy, the shim sockets it added under ``/run/containerd/s`` (and
``/run/containerd`` itself when it did not exist before) and its directory.

``containerd_engine`` is a session-scoped pytest fixture: it skips with the reason when the
engine cannot be had (not root, package missing and not installable), and fails under
``CI=true``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.oci_images import (
    BUSYBOX_REF,
    CUDA_LIKE_REF,
    PAUSE_REF,
    test_images,
    write_archives,
)
from tests.support.private_daemon import (
    EngineUnavailable,
    cgroup_hierarchies,
    cleanup_dir,
    engine_fixture,
    kill_pids,
    pids_naming,
    private_dir,
    spawn_logged,
    tail,
    terminate,
)

__all__ = [
    "BUSYBOX_REF",
    "CUDA_LIKE_REF",
    "CGROUP_ROOT",
    "ContainerdEngine",
    "CriDriver",
    "PAUSE_REF",
    "containerd_engine",
    "ensure_packages",
    "start_containerd",
    "stop_containerd",
]

CONTAINERD = os.environ.get("GPUFORENSICS_CONTAINERD", "/usr/bin/containerd")
CTR = os.environ.get("GPUFORENSICS_CTR", "/usr/bin/ctr")
RUNC = "/usr/sbin/runc"
CGROUP_ROOT = "/sys/fs/cgroup"
SHIM_SOCKET_DIR = "/run/containerd/s"
NAMESPACE = "k8s.io"
_START_TIMEOUT_S = 30.0

CONFIG = """\
version = 2
root = "{tmp}/root"
state = "{tmp}/state"
oom_score = 0
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "{tmp}/containerd.sock"

[debug]
  level = "warn"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{runc}"
        Root = "{tmp}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{tmp}/cni/bin"
    conf_dir = "{tmp}/cni/conf"
"""


def ensure_packages(packages: Mapping[str, str]) -> None:
    """Install the Debian packages (name -> a file it provides) that are missing, when root.

    Raises EngineUnavailable with why not (not root, no apt-get, the install failed).
    """
    missing = [pkg for pkg, path in packages.items() if not os.path.exists(path)]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise EngineUnavailable(f"missing {' '.join(missing)} (Debian: apt-get install {' '.join(missing)})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    proc = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=600,
                       check=False)
        proc = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
                              env=env, capture_output=True, text=True, timeout=600, check=False)
    still = [pkg for pkg, path in packages.items() if not os.path.exists(path)]
    if proc.returncode != 0 or still:
        raise EngineUnavailable(f"apt-get install {' '.join(missing)} failed: {proc.stderr.strip()[-300:]}")


@dataclass
class ContainerdEngine:
    """A private containerd: its directory, gRPC socket, PID and the imported image ids."""

    tmpdir: Path
    socket: str
    pid: int | None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    images: dict[str, str] = field(default_factory=dict)
    # state to undo: shim sockets and cgroup dirs that existed before it started
    shim_sockets_before: frozenset[str] = frozenset()
    run_containerd_existed: bool = True
    cgroup_parents: set[str] = field(default_factory=set)
    kubepods_existed: dict[str, bool] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    def ctr(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([CTR, "--address", self.socket, "--namespace", NAMESPACE, *args],
                              capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise EngineUnavailable(f"ctr {' '.join(args)} failed: {proc.stderr.strip()[-300:]}")
        return proc

    def driver(self) -> CriDriver:
        return CriDriver(self)


# -----------------------------------------------------------------------------------------
# the kubelet's part, over CRI


def kubelet_labels(name: str, namespace: str, uid: str) -> dict[str, str]:
    """The labels the kubelet puts on a pod sandbox."""
    return {"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": namespace,
            "io.kubernetes.pod.uid": uid}


@dataclass
class Pod:
    """A sandbox the driver made, and the config CreateContainer needs again."""

    sandbox_id: str
    name: str
    namespace: str
    uid: str
    cgroup_parent: str
    config: Any = field(repr=False)


class CriDriver:
    """Creates pods and containers the way the kubelet does, through the shipped CRI client."""

    def __init__(self, engine: ContainerdEngine, timeout_s: float = 60.0) -> None:
        import grpc

        from forensics.collectors.cri import api_pb2, api_pb2_grpc

        self.engine = engine
        self.pb: Any = api_pb2
        self.channel = grpc.insecure_channel(engine.endpoint, options=[("grpc.enable_http_proxy", 0)])
        self.stub: Any = api_pb2_grpc.RuntimeServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.timeout_s = timeout_s

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> CriDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_pod(self, name: str, namespace: str = "default", uid: str | None = None,
                qos: str = "burstable", annotations: Mapping[str, str] | None = None) -> Pod:
        """RunPodSandbox with the kubelet's metadata, labels and ``/kubepods/<qos>/pod<uid>`` parent."""
        pb = self.pb
        uid = uid or str(uuid.uuid4())
        parent = f"/kubepods/{qos}/pod{uid}" if qos != "guaranteed" else f"/kubepods/pod{uid}"
        self.engine.cgroup_parents.add(parent)
        config = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace=namespace, attempt=0),
            log_directory=str(self.engine.tmpdir / "logs" / f"{namespace}_{name}_{uid}"),
            labels=kubelet_labels(name, namespace, uid),
            annotations=dict(annotations or {}),
            linux=pb.LinuxPodSandboxConfig(
                cgroup_parent=parent,
                security_context=pb.LinuxSandboxSecurityContext(
                    namespace_options=pb.NamespaceOption(network=pb.NODE, pid=pb.POD, ipc=pb.POD)),
            ),
        )
        os.makedirs(config.log_directory, exist_ok=True)
        resp = self.stub.RunPodSandbox(pb.RunPodSandboxRequest(config=config, runtime_handler=""),
                                       timeout=self.timeout_s)
        return Pod(resp.pod_sandbox_id, name, namespace, uid, parent, config)

    def create_container(self, pod: Pod, name: str, image: str = BUSYBOX_REF,
                         command: Sequence[str] = ("sleep", "3600"),
                         envs: Mapping[str, str] | None = None,
                         memory_limit_bytes: int = 0, cpu_quota_us: int = 0,
                         cpu_period_us: int = 100_000,
                         devices: Mapping[str, str] | None = None, start: bool = True) -> str:
        """CreateContainer (and StartContainer) with the kubelet's labels; returns its id.

        ``devices`` maps a host device node to its path in the container (what a device plugin's
        Allocate answer makes the kubelet pass).
        """
        pb = self.pb
        labels = {**kubelet_labels(pod.name, pod.namespace, pod.uid),
                  "io.kubernetes.container.name": name}
        config = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name, attempt=0),
            image=pb.ImageSpec(image=image),
            command=list(command),
            envs=[pb.KeyValue(key=k, value=v.encode()) for k, v in (envs or {}).items()],
            labels=labels,
            annotations={"io.kubernetes.container.restartCount": "0"},
            log_path=f"{name}/0.log",
            devices=[pb.Device(container_path=c, host_path=h, permissions="rwm")
                     for h, c in (devices or {}).items()],
            linux=pb.LinuxContainerConfig(resources=pb.LinuxContainerResources(
                memory_limit_in_bytes=memory_limit_bytes, cpu_quota=cpu_quota_us,
                cpu_period=cpu_period_us if cpu_quota_us else 0, cpu_shares=2)),
        )
        os.makedirs(os.path.join(pod.config.log_directory, name), exist_ok=True)
        resp = self.stub.CreateContainer(pb.CreateContainerRequest(
            pod_sandbox_id=pod.sandbox_id, config=config, sandbox_config=pod.config),
            timeout=self.timeout_s)
        if start:
            self.stub.StartContainer(pb.StartContainerRequest(container_id=resp.container_id),
                                     timeout=self.timeout_s)
        return str(resp.container_id)

    def status(self, container_id: str) -> Any:
        return self.stub.ContainerStatus(self.pb.ContainerStatusRequest(container_id=container_id),
                                         timeout=self.timeout_s).status

    def wait_exited(self, container_id: str, timeout_s: float = 60.0) -> Any:
        """Poll ContainerStatus until the container has exited; returns the status."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.status(container_id)
            if status.state == self.pb.CONTAINER_EXITED:
                return status
            if time.monotonic() > deadline:
                raise TimeoutError(f"container {container_id[:12]} still {status.state} after {timeout_s} s")
            time.sleep(0.2)

    def pid_of(self, container_id: str) -> int:
        """The container's main PID on the host (from the verbose info)."""
        import json

        resp = self.stub.ContainerStatus(self.pb.ContainerStatusRequest(
            container_id=container_id, verbose=True), timeout=self.timeout_s)
        return int(json.loads(resp.info["info"])["pid"])

    def remove_all(self) -> None:
        """Stop and remove every sandbox (and so every container) this runtime holds."""
        pb = self.pb
        for sandbox in self.stub.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=self.timeout_s).items:
            with contextlib.suppress(Exception):
                self.stub.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=sandbox.id),
                                         timeout=self.timeout_s)
            with contextlib.suppress(Exception):
                self.stub.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox.id),
                                           timeout=self.timeout_s)


# -----------------------------------------------------------------------------------------
# start / stop


def _shim_sockets() -> frozenset[str]:
    try:
        return frozenset(os.listdir(SHIM_SOCKET_DIR))
    except OSError:
        return frozenset()


def start_containerd(tmp_parent: str | None = None, timeout_s: float = _START_TIMEOUT_S,
                     import_images: bool = True) -> ContainerdEngine:
    """Start a private containerd and import the test images; raises EngineUnavailable with why not."""
    if os.geteuid() != 0:
        raise EngineUnavailable("starting a private containerd needs root")
    ensure_packages({"containerd": CONTAINERD, "runc": RUNC})
    tmp = private_dir("gfctd-", tmp_parent)
    for sub in ("cni/bin", "cni/conf", "runc", "logs", "images"):
        (tmp / sub).mkdir(parents=True)
    (tmp / "config.toml").write_text(CONFIG.format(tmp=tmp, pause=PAUSE_REF, runc=RUNC))
    engine = ContainerdEngine(
        tmpdir=tmp, socket=str(tmp / "containerd.sock"), pid=None,
        shim_sockets_before=_shim_sockets(), run_containerd_existed=os.path.exists("/run/containerd"),
        kubepods_existed={h: os.path.exists(os.path.join(h, "kubepods")) for h in cgroup_hierarchies(CGROUP_ROOT)},
    )
    proc = spawn_logged([CONTAINERD, "--config", str(tmp / "config.toml")], tmp / "containerd.log")
    engine.pid, engine.proc = proc.pid, proc
    try:
        _wait_ready(engine, timeout_s)
        if import_images:
            images = test_images()
            for ref, path in write_archives(images, tmp / "images").items():
                engine.ctr("images", "import", str(path))
                engine.images[ref] = images[ref].image_id
    except BaseException:
        stop_containerd(engine)
        raise
    return engine


def _wait_ready(engine: ContainerdEngine, timeout_s: float) -> None:
    """Until the CRI answers Version (containerd is ready in about 0.15 s here)."""
    import grpc

    from forensics.collectors.cri import api_pb2, api_pb2_grpc

    assert engine.proc is not None
    deadline = time.monotonic() + timeout_s
    reason = "not started"
    while time.monotonic() < deadline:
        if engine.proc.poll() is not None:
            reason = f"containerd exited with status {engine.proc.returncode}"
            break
        if os.path.exists(engine.socket):
            channel = grpc.insecure_channel(engine.endpoint)
            try:
                stub: Any = api_pb2_grpc.RuntimeServiceStub(channel)  # type: ignore[no-untyped-call]
                stub.Version(api_pb2.VersionRequest(), timeout=2.0)
                return
            except grpc.RpcError as exc:
                reason = f"CRI Version: {exc.code().name}: {exc.details()}"
            finally:
                channel.close()
        time.sleep(0.05)
    raise EngineUnavailable(f"private containerd did not start: {reason}; log: "
                            f"{tail(engine.tmpdir / 'containerd.log')}")


def remove_cgroup_dirs(parents: Sequence[str], existed: Mapping[str, bool],
                       top: str = "kubepods") -> None:
    """rmdir each parent's subtree in every hierarchy, deepest first, then the ``top`` levels
    that did not exist before (the kubelet's ``kubepods/<qos>``)."""
    for hierarchy in cgroup_hierarchies(CGROUP_ROOT):
        for parent in parents:
            base = os.path.join(hierarchy, parent.lstrip("/"))
            dirs = [d for d, _, _ in os.walk(base)] if os.path.isdir(base) else []
            for d in sorted(dirs, key=len, reverse=True):
                with contextlib.suppress(OSError):
                    os.rmdir(d)
        if existed.get(hierarchy, True):
            continue
        root = os.path.join(hierarchy, top)
        if os.path.isdir(root):
            for d in sorted((d for d, _, _ in os.walk(root)), key=len, reverse=True):
                with contextlib.suppress(OSError):
                    os.rmdir(d)


def stop_containerd(engine: ContainerdEngine) -> None:
    """Undo :func:`start_containerd` (see the module docstring); safe to call twice."""
    if engine.proc is not None and engine.proc.poll() is None:
        with contextlib.suppress(Exception), CriDriver(engine, timeout_s=20.0) as driver:
            driver.remove_all()
    if engine.pid is not None:
        terminate(engine.pid, engine.proc, timeout_s=15)
    # shims name our socket on their command line; container processes sit in our cgroups
    kill_pids(pids_naming([p.encode() + b"/" for p in engine.cgroup_parents], ("cgroup",)))
    kill_pids(pids_naming([str(engine.tmpdir).encode()], ("cmdline",)))
    remove_cgroup_dirs(sorted(engine.cgroup_parents), engine.kubepods_existed)
    for name in _shim_sockets() - engine.shim_sockets_before:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(SHIM_SOCKET_DIR, name))
    if not engine.run_containerd_existed:
        shutil.rmtree("/run/containerd", ignore_errors=True)
    cleanup_dir(engine.tmpdir)
    engine.pid = None
    engine.proc = None


try:
    import pytest
except ImportError:  # pragma: no cover - scripts may run without pytest installed
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture(scope="session")
    def containerd_engine() -> Iterator[ContainerdEngine]:
        """A private containerd with the test images; skips (fails under CI=true) when none."""
        yield from engine_fixture(start_containerd, stop_containerd, "containerd")
