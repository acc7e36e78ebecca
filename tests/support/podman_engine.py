"""A real podman (Debian's 4.3, rootful) with its Docker-compatible API service, for tests.

``start_podman()`` writes a private ``CONTAINERS_CONF`` and ``CONTAINERS_STORAGE_CONF`` into one
temporary directory and starts ``podman system service --time=0 unix://<dir>/podman.sock``:
``runtime = "runc"`` (crun refuses this machine's hybrid cgroup layout), ``cgroup_manager =
"cgroupfs"`` (containers land in ``/libpod_parent/libpod-<id>``), ``events_logger = "file"``,
``netns = "none"``, ``default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]`` (root here
lacks ``CAP_SYS_RESOURCE`` and may not raise an rlimit above its hard limit), the ``vfs``
storage driver with its graph root, run root and libpod tmp dir in the directory, and a runtime named
``nvidia`` that is runc (``[engine.runtimes]``: what ``--runtime nvidia`` names on a GPU host, where it
is NVIDIA's runc wrapper; podman's own inspect reports the name, ``OCIRuntime``), and a ``hooks_dir``
holding NVIDIA's OCI hook file for containers annotated ``gpuforensics.test/nvidia-hook=yes`` (its
binary a stand-in that exits 0). The test
images (``tests/support/oci_images.py``) are loaded with ``podman load``.

:class:`PodmanEngine` is a :class:`~tests.support.docker_engine.DockerEngine`: ``docker_host``
is the service socket, so the docker SDK and the docker collector talk to it as to dockerd;
``podman()`` runs the podman CLI on the same storage (what an operator types on a podman host).

``stop_podman()`` removes every container, stops the service by PID, kills conmon and container
processes of this instance (by PID), removes the ``libpod_parent`` cgroup directories it caused,
``/var/lib/containers`` (podman's blob-info cache) and ``/run/containers`` when they did not
exist before, and its directory. ``podman_engine`` is a session-scoped pytest fixture that skips
with the reason (fails under ``CI=true``) when podman cannot be had.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.containerd_engine import ensure_packages
from tests.support.docker_engine import DockerEngine, _ping
from tests.support.oci_images import BUSYBOX_REF, CUDA_LIKE_REF, test_images, write_archives
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
    wait_ready,
)

__all__ = [
    "BUSYBOX_REF",
    "CUDA_LIKE_REF",
    "PodmanEngine",
    "podman_engine",
    "start_podman",
    "stop_podman",
]

PODMAN = os.environ.get("GPUFORENSICS_PODMAN", "/usr/bin/podman")
RUNC = "/usr/sbin/runc"
CGROUP_PARENT = "libpod_parent"
_HOST_DIRS = ("/var/lib/containers", "/run/containers", "/run/libpod")
_START_TIMEOUT_S = 30.0

CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
netns = "none"
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{tmp}/events.log"
tmp_dir = "{tmp}/libpod"
volume_path = "{tmp}/volumes"
hooks_dir = ["{tmp}/hooks.d"]

[engine.runtimes]
nvidia = ["{runc}"]

[network]
network_config_dir = "{tmp}/net"
cni_plugin_dirs = ["{tmp}/cni"]
"""

STORAGE_CONF = """\
[storage]
driver = "vfs"
runroot = "{tmp}/runroot"
graphroot = "{tmp}/graphroot"
"""


@dataclass
class PodmanEngine(DockerEngine):
    """A private podman API service (``docker_host``) and its private configuration."""

    host_dirs_existed: dict[str, bool] = field(default_factory=dict)
    cgroup_parent_existed: dict[str, bool] = field(default_factory=dict)

    def podman_env(self) -> dict[str, str]:
        assert self.tmpdir is not None
        return {**os.environ, "CONTAINERS_CONF": str(self.tmpdir / "containers.conf"),
                "CONTAINERS_STORAGE_CONF": str(self.tmpdir / "storage.conf")}

    def podman(self, *args: str, check: bool = True,
               timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """The podman CLI on this instance's storage, in its directory: the conmon it starts for a
        container works there (it writes a file ``oom`` in its working directory when the container
        is OOM-killed: the test run left one in the checkout)."""
        proc = subprocess.run([PODMAN, *args], env=self.podman_env(), capture_output=True,
                              text=True, timeout=timeout, check=False, cwd=self.tmpdir)
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, proc.args, proc.stdout, proc.stderr)
        return proc


NVIDIA_HOOK_ANNOTATION = "gpuforensics.test/nvidia-hook"

# NVIDIA's hooks.d file as nvidia-ctk installs it for CRI-O and podman
# (nvidia-container-toolkit, cmd/nvidia-ctk-installer/container/runtime/crio/config_test.go at
# v1.20.0-27-gd34b3046), but for its path (a stand-in that reads the container state and exits 0:
# there is no driver here) and its condition: NVIDIA's runs "always"; this one only for containers
# with the annotation, so the other tests' containers stay hook-free.
NVIDIA_HOOK_JSON = """{{
  "version": "1.0.0",
  "hook": {{
    "path": "{path}",
    "args": [
      "nvidia-container-runtime-hook",
      "prestart"
    ],
    "env": [
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    ]
  }},
  "when": {{
    "annotations": {{"^gpuforensics\\\\.test/nvidia-hook$": "^yes$"}}
  }},
  "stages": [
    "prestart"
  ]
}}
"""


def _write_nvidia_hook(tmp: Path) -> None:
    hook = tmp / "bin" / "nvidia-container-runtime-hook"
    hook.write_text("#!/bin/sh\ncat >/dev/null\nexit 0\n")
    hook.chmod(0o755)
    (tmp / "hooks.d" / "oci-nvidia-hook.json").write_text(NVIDIA_HOOK_JSON.format(path=hook))


def start_podman(tmp_parent: str | None = None, timeout_s: float = _START_TIMEOUT_S,
                 load_images: bool = True) -> PodmanEngine:
    """Start a private podman API service and load the test images; EngineUnavailable if not."""
    if os.geteuid() != 0:
        raise EngineUnavailable("a rootful podman service needs root")
    ensure_packages({"podman": PODMAN, "runc": RUNC})
    tmp = private_dir("gfpm-", tmp_parent)
    for sub in ("cni", "net", "libpod", "volumes", "images", "hooks.d", "bin"):
        (tmp / sub).mkdir()
    _write_nvidia_hook(tmp)
    (tmp / "containers.conf").write_text(CONTAINERS_CONF.format(tmp=tmp, runc=RUNC))
    (tmp / "storage.conf").write_text(STORAGE_CONF.format(tmp=tmp))
    sock = tmp / "podman.sock"
    engine = PodmanEngine(
        docker_host=f"unix://{sock}", private=True, tmpdir=tmp,
        host_dirs_existed={d: os.path.exists(d) for d in _HOST_DIRS},
        cgroup_parent_existed={h: os.path.exists(os.path.join(h, CGROUP_PARENT))
                               for h in cgroup_hierarchies()},
    )
    proc = spawn_logged([PODMAN, "system", "service", "--time=0", f"unix://{sock}"], tmp / "podman.log",
                        env=engine.podman_env())
    engine.pid, engine.proc = proc.pid, proc
    try:
        reason = wait_ready(proc, lambda: _ping(engine.docker_host, timeout=2.0) if sock.exists() else "not started",
                            timeout_s, "podman system service")
        if reason is not None:
            raise EngineUnavailable(f"podman service did not start: {reason}; log: "
                                    f"{tail(tmp / 'podman.log')}")
        engine.default_runtime = "runc"
        if load_images:
            images = test_images()
            for ref, path in write_archives(images, tmp / "images").items():
                engine.podman("load", "-q", "-i", str(path))
                engine.images[ref] = images[ref].image_id
    except BaseException:
        stop_podman(engine)
        raise
    return engine


def stop_podman(engine: PodmanEngine) -> None:
    """Undo :func:`start_podman` (see the module docstring); safe to call twice."""
    if engine.tmpdir is None:
        return
    if engine.proc is not None and engine.proc.poll() is None:
        with contextlib.suppress(Exception):
            engine.podman("rm", "-a", "-f", "-t", "0", check=False, timeout=60)
    if engine.pid is not None:
        terminate(engine.pid, engine.proc, timeout_s=15)
    # conmon names our run root on its command line; container processes sit in libpod cgroups
    # whose ids are this instance's (listed in its storage)
    ids = _container_ids(engine.tmpdir)
    kill_pids(pids_naming([i.encode() for i in ids], ("cgroup",)))
    kill_pids(pids_naming([str(engine.tmpdir).encode()], ("cmdline",)))
    for hierarchy in cgroup_hierarchies():
        base = os.path.join(hierarchy, CGROUP_PARENT)
        if not os.path.isdir(base):
            continue
        mine = [d for d, _, _ in os.walk(base)
                if any(i in os.path.basename(d) for i in ids) or os.path.basename(d) == "conmon"]
        if not engine.cgroup_parent_existed.get(hierarchy, True):
            mine = [d for d, _, _ in os.walk(base)]
        for d in sorted(mine, key=len, reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(d)
    for d, existed in engine.host_dirs_existed.items():
        if not existed:
            shutil.rmtree(d, ignore_errors=True)
    cleanup_dir(engine.tmpdir)
    engine.pid = None
    engine.proc = None
    engine.tmpdir = None


def _container_ids(tmp: Path) -> list[str]:
    """Ids of the containers this instance's storage holds (vfs: one dir per container)."""
    try:
        return [d for d in os.listdir(tmp / "graphroot" / "vfs-containers") if len(d) == 64]
    except OSError:
        return []


try:
    import pytest
except ImportError:  # pragma: no cover - scripts may run without pytest installed
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture(scope="session")
    def podman_engine() -> Iterator[PodmanEngine]:
        """A private podman service with the test images; skips (fails under CI=true) when none."""
        yield from engine_fixture(start_podman, stop_podman, "podman")
