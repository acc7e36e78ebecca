"""A real Docker Engine for tests, sample bundles and benchmarks.

Use the engine ``DOCKER_HOST`` names when it answers; otherwise start a private ``dockerd`` whose
data root, exec root, pidfile, config file and socket all live in one temporary directory, with
``--bridge=none --iptables=false --ip-masq=false`` so the host's network is left alone, and
``--add-runtime nvidia=runc --default-runtime=nvidia``: the realistic GPU host, where every
container runs under the "nvidia" runtime unless it asks for another one (here that runtime is
plain runc, so containers really start; the GPU side is simulated elsewhere). One daemon is
enough: tests that need the runc default pass ``--runtime runc``.

Test images are built locally (no registry): ``docker import`` of a rootfs holding Debian's static
``/bin/busybox`` and its applet links, plus a "cuda-like" image whose ENV carries
``NVIDIA_VISIBLE_DEVICES=all`` and ``NVIDIA_DRIVER_CAPABILITIES=compute,utility``, as NVIDIA's CUDA
images do. Everything tests create carries the label ``gpuforensics-test=1`` and is removed at
the end; a private daemon is stopped by its PID and its directory removed.

Plain functions (``start_engine``, ``stop_engine``, ``build_images``, ``acquire_engine``,
``release_engine``) serve scripts outside pytest; ``docker_engine`` is the session-scoped
pytest fixture (import it into a conftest.py). When no engine can be had the fixture skips,
except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.private_daemon import (
    EngineUnavailable,
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
    "BUSYBOX_IMAGE",
    "CUDA_LIKE_IMAGE",
    "DockerEngine",
    "TEST_LABEL",
    "acquire_engine",
    "build_images",
    "docker_engine",
    "release_engine",
    "start_engine",
    "stop_engine",
]

TEST_LABEL = "gpuforensics-test"
LABELS = {TEST_LABEL: "1"}
BUSYBOX_IMAGE = "gpuforensics-test/busybox:1"
CUDA_LIKE_IMAGE = "gpuforensics-test/cuda-like:1"
DOCKERD = os.environ.get("GPUFORENSICS_DOCKERD", "/usr/sbin/dockerd")
BUSYBOX = os.environ.get("GPUFORENSICS_BUSYBOX", "/bin/busybox")
_START_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 30.0
_KEEP_FOR_RETRY = ("dockerd.log", "daemon.json")  # kept when dockerd is retried with vfs




@dataclass
class DockerEngine:
    """A reachable engine: ``docker_host`` URL, and for a private one its PID and directory."""

    docker_host: str
    private: bool
    pid: int | None = None
    tmpdir: Path | None = None
    default_runtime: str = ""
    images: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def client(self, timeout: float = 30.0) -> Any:
        """A low-level ``docker.APIClient`` bound to this engine."""
        import docker

        return docker.APIClient(base_url=self.docker_host, timeout=timeout, version="auto")

    def env(self) -> dict[str, str]:
        """The current environment with ``DOCKER_HOST`` pointing at this engine."""
        env = dict(os.environ)
        env["DOCKER_HOST"] = self.docker_host
        return env

    def cli(self, *args: str, check: bool = True, timeout: float = 60.0,
            input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run the ``docker`` CLI against this engine (what an operator types)."""
        exe = shutil.which("docker")
        if exe is None:
            raise EngineUnavailable("the docker CLI is not installed (Debian: apt-get install docker.io)")
        proc = subprocess.run([exe, *args], env=self.env(), capture_output=True, timeout=timeout,
                              input=input_text,
                              text=True, check=False)
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, proc.args, proc.stdout, proc.stderr)
        return proc

    def run_labelled(self, *args: str, check: bool = True) -> str:
        """``docker <create|run> --label gpuforensics-test=1 ...``; returns the container id."""
        verb, rest = args[0], args[1:]
        proc = self.cli(verb, "--label", f"{TEST_LABEL}=1", *rest, check=check)
        return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""

    def remove_test_objects(self, images: bool = False) -> None:
        """Force-remove every container (and, if asked, image) labelled ``gpuforensics-test``."""
        remove_labelled(self.client(), images=images)


# -----------------------------------------------------------------------------------------
# reachability


def _ping(docker_host: str, timeout: float = 3.0) -> str | None:
    """None when the engine at ``docker_host`` answers ``GET /_ping``, else the reason."""
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - docker is a dependency
        return f"the docker SDK is not installed: {exc}"
    try:
        client = docker.APIClient(base_url=docker_host, timeout=timeout, version="auto")
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable", with why
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


def _engine_info(docker_host: str) -> dict[str, Any]:
    import docker

    client = docker.APIClient(base_url=docker_host, timeout=10, version="auto")
    try:
        info: dict[str, Any] = client.info()
        return info
    finally:
        client.close()


# -----------------------------------------------------------------------------------------
# a private dockerd


def start_engine(default_runtime: str = "nvidia", tmp_parent: str | None = None,
                 timeout_s: float = _START_TIMEOUT_S,
                 extra_args: Sequence[str] = ()) -> DockerEngine:
    """Start a private dockerd and wait until it answers; raises EngineUnavailable with why not.

    Everything lives in one ``mkdtemp`` directory (kept short: a unix socket path has a 108-byte
    limit). ``/etc/docker/daemon.json`` is not read (an empty ``--config-file`` is given).
    """
    if not os.path.exists(DOCKERD):
        raise EngineUnavailable(f"{DOCKERD} not found (Debian: apt-get install docker.io)")
    if os.geteuid() != 0:
        raise EngineUnavailable("starting a private dockerd needs root")
    tmp = private_dir("gfdk-", tmp_parent)
    (tmp / "daemon.json").write_text("{}\n")
    sock = tmp / "docker.sock"
    attempts: list[list[str]] = [[], ["--storage-driver=vfs"]]
    errors: list[str] = []
    for storage in attempts:
        args = [
            DOCKERD,
            "--config-file", str(tmp / "daemon.json"),
            "--data-root", str(tmp / "data"),
            "--exec-root", str(tmp / "exec"),
            "--pidfile", str(tmp / "dockerd.pid"),
            "--host", f"unix://{sock}",
            "--bridge=none", "--iptables=false", "--ip-masq=false",
            "--userland-proxy=false",
            "--add-runtime", "nvidia=runc",
            "--log-level=warn",
            *storage,
            *extra_args,
        ]
        if default_runtime != "runc":
            args.append(f"--default-runtime={default_runtime}")
        proc = spawn_logged(args, tmp / "dockerd.log")
        engine = DockerEngine(docker_host=f"unix://{sock}", private=True, pid=proc.pid, tmpdir=tmp,
                              proc=proc)
        try:
            reason = wait_ready(proc, lambda: _ping(f"unix://{sock}", timeout=2.0) if sock.exists() else "not started",
                                timeout_s, "dockerd", poll_s=0.2)
            if reason is None:
                engine.default_runtime = str(_engine_info(engine.docker_host).get("DefaultRuntime", ""))
                return engine
        except BaseException:  # interrupted (pytest SIGTERMed): nothing is left behind
            stop_engine(engine, remove_images=False)
            raise
        log_tail = tail(tmp / "dockerd.log")
        errors.append(f"{' '.join(storage) or 'default storage'}: {reason}; log: {log_tail}")
        terminate(proc.pid, proc, _STOP_TIMEOUT_S)
        cleanup_dir(tmp, keep=_KEEP_FOR_RETRY)
    cleanup_dir(tmp)
    raise EngineUnavailable("private dockerd did not start: " + " | ".join(errors))


def _container_processes(tmp: Path) -> list[int]:
    """PIDs whose /proc/<pid>/cgroup names a container of the engine whose data root is in tmp."""
    try:
        ids = [d for d in os.listdir(tmp / "data" / "containers") if len(d) == 64]
    except OSError:
        return []
    return pids_naming([cid.encode() for cid in ids], ("cgroup",))


def _remove_container_cgroups(tmp: Path, root: str = "/sys/fs/cgroup") -> None:
    """rmdir the (now empty) cgroups a killed engine left for its containers."""
    try:
        ids = [d for d in os.listdir(tmp / "data" / "containers") if len(d) == 64]
    except OSError:
        return
    found: list[str] = []

    def walk(path: str, depth: int) -> None:
        try:
            entries = list(os.scandir(path))
        except OSError:
            return
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if any(cid in entry.name for cid in ids):
                found.append(entry.path)
            elif depth < 3:
                walk(entry.path, depth + 1)

    walk(root, 1)
    for path in sorted(found, key=len, reverse=True):
        with contextlib.suppress(OSError):
            os.rmdir(path)


def stop_engine(engine: DockerEngine, remove_images: bool = True) -> None:
    """Remove what tests created; for a private engine, stop dockerd by PID and remove its dir."""
    if _ping(engine.docker_host, timeout=2.0) is None:
        with contextlib.suppress(Exception):
            remove_labelled(engine.client(), images=remove_images)
    if not engine.private or engine.pid is None or engine.tmpdir is None:
        return
    terminate(engine.pid, engine.proc, _STOP_TIMEOUT_S)
    # a dockerd that was killed leaves its containers running: kill their processes (found by
    # their cgroup naming one of this engine's containers), then containerd and shims by PID
    leftovers = _container_processes(engine.tmpdir)
    if leftovers:
        kill_pids(leftovers)
        _remove_container_cgroups(engine.tmpdir)
    kill_pids(pids_naming([str(engine.tmpdir).encode()], ("cmdline",)))
    cleanup_dir(engine.tmpdir)
    engine.pid = None
    engine.proc = None


def remove_labelled(client: Any, images: bool = False) -> None:
    """Force-remove containers labelled ``gpuforensics-test`` (and images, if asked)."""
    try:
        for c in client.containers(all=True, filters={"label": TEST_LABEL}):
            with contextlib.suppress(Exception):
                client.remove_container(c["Id"], force=True, v=True)
        if images:
            for img in client.images(filters={"label": TEST_LABEL}):
                with contextlib.suppress(Exception):
                    client.remove_image(img["Id"], force=True)
    finally:
        client.close()


# -----------------------------------------------------------------------------------------
# images


def busybox_rootfs_tar(busybox: str = BUSYBOX) -> bytes:
    """A tar of a minimal rootfs: /bin/busybox, a link per applet, /etc/passwd, empty mount points."""
    if not os.path.exists(busybox):
        raise EngineUnavailable(f"{busybox} not found (Debian: apt-get install busybox-static)")
    listing = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True).stdout
    applets = sorted({a.strip() for a in listing.split() if a.strip() and "/" not in a} - {"busybox"})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "root", "work"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        with open(busybox, "rb") as f:
            data = f.read()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
        for applet in applets:
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
        for name, text in (("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"),
                           ("etc/group", "root:x:0:\nnogroup:x:65534:\n")):
            raw = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(raw), 0o644
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def _import(client: Any, rootfs: bytes, ref: str, changes: list[str]) -> str:
    repo, _, tag = ref.rpartition(":")
    client.import_image_from_data(rootfs, repository=repo, tag=tag, changes=changes)
    image_id: str = client.inspect_image(ref)["Id"]
    return image_id


def build_images(engine: DockerEngine) -> dict[str, str]:
    """Import the busybox and cuda-like test images (labelled); returns ref -> image id."""
    rootfs = busybox_rootfs_tar()
    client = engine.client(timeout=120)
    try:
        base = ['LABEL gpuforensics-test="1"', "ENV PATH=/bin", "WORKDIR /", 'CMD ["/bin/sh"]']
        engine.images[BUSYBOX_IMAGE] = _import(client, rootfs, BUSYBOX_IMAGE, base)
        cuda = [*base,
                'LABEL com.nvidia.volumes.needed="nvidia_driver"',
                "ENV NVIDIA_VISIBLE_DEVICES=all",
                "ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility",
                "ENV NVIDIA_REQUIRE_CUDA=cuda>=12.0",
                "ENV CUDA_VERSION=12.4.1"]
        engine.images[CUDA_LIKE_IMAGE] = _import(client, rootfs, CUDA_LIKE_IMAGE, cuda)
    finally:
        client.close()
    return dict(engine.images)


# -----------------------------------------------------------------------------------------
# acquire / release (scripts) and the pytest fixture


def acquire_engine(default_runtime: str = "nvidia", images: bool = True) -> DockerEngine:
    """The ``DOCKER_HOST`` engine when it answers, else a private one; with images built."""
    errors = []
    host = os.environ.get("DOCKER_HOST")
    engine: DockerEngine | None = None
    if host:
        reason = _ping(host)
        if reason is None:
            engine = DockerEngine(docker_host=host, private=False)
            engine.default_runtime = str(_engine_info(host).get("DefaultRuntime", ""))
        else:
            errors.append(f"DOCKER_HOST={host} does not answer ({reason})")
    if engine is None:
        try:
            engine = start_engine(default_runtime=default_runtime)
        except EngineUnavailable as exc:
            errors.append(str(exc))
            raise EngineUnavailable("; ".join(errors)) from exc
    if images:
        try:
            build_images(engine)
        except BaseException:  # an interrupt too (pytest SIGTERMed): nothing is left behind
            release_engine(engine)
            raise
    return engine


def release_engine(engine: DockerEngine) -> None:
    """Undo ``acquire_engine``: remove labelled objects; stop a private daemon."""
    stop_engine(engine, remove_images=True)


try:
    import pytest
except ImportError:  # pragma: no cover - scripts may run without pytest installed
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture(scope="session")
    def docker_engine() -> Iterator[DockerEngine]:
        """A real engine with the test images; skips (fails under CI=true) when none can be had."""
        yield from engine_fixture(acquire_engine, release_engine, "Docker engine")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.support.docker_engine``: start an engine, print its DOCKER_HOST as JSON,
    wait for Ctrl-C or SIGTERM, then stop it (for manual runs and scripts in other languages)."""
    engine = acquire_engine()
    print(json.dumps({"DOCKER_HOST": engine.docker_host, "pid": engine.pid,
                      "default_runtime": engine.default_runtime, "images": engine.images}),
          flush=True)
    stop = False

    def _stop(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        while not stop:
            time.sleep(0.5)
    finally:
        release_engine(engine)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
