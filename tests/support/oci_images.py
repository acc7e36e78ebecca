"""Test images as docker-archive tarballs, built locally (no registry), for containerd and podman.

A docker-archive (what ``docker save`` writes) is a tar of ``manifest.json``, the image config
``<sha256>.json`` and one ``<sha256>/layer.tar`` per layer. ``ctr -n k8s.io images import`` and
``podman load`` both accept it. Three images:

- ``busybox``: Debian's static ``/bin/busybox`` with a link per applet (the rootfs
  ``tests/support/docker_engine.py`` imports into Docker), ``PATH=/bin``, ``CMD ["/bin/sh"]``;
- ``cuda-like``: the same rootfs with ``NVIDIA_VISIBLE_DEVICES=all`` and
  ``NVIDIA_DRIVER_CAPABILITIES=compute,utility`` in its ENV, as NVIDIA's CUDA images carry;
- ``pause``: the sandbox image, one static binary built here with gcc from a dozen lines of C
  (sleeps until SIGTERM/SIGINT, reaps children), like the kubelet's ``registry.k8s.io/pause``.

Layer and config bytes are deterministic (fixed mtimes), so the image ids are stable.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.support.docker_engine import busybox_rootfs_tar
from tests.support.private_daemon import EngineUnavailable

__all__ = [
    "BUSYBOX_REF",
    "CUDA_LIKE_REF",
    "PAUSE_REF",
    "TestImage",
    "build_pause_binary",
    "docker_archive",
    "test_images",
    "write_archives",
]

BUSYBOX_REF = "gpuforensics-test/busybox:1"
CUDA_LIKE_REF = "gpuforensics-test/cuda-like:1"
PAUSE_REF = "gpuforensics-test/pause:1"
_MTIME = 1_700_000_000  # fixed: the same inputs give the same image id

PAUSE_C = r"""
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void done(int s) { (void)s; _exit(0); }
static void reap(int s) { (void)s; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
    signal(SIGINT, done);
    signal(SIGTERM, done);
    signal(SIGCHLD, reap);
    for (;;) pause();
    return 0;
}
"""


@dataclass(frozen=True)
class TestImage:
    """One image: its reference, the tarball's bytes and the image id (sha256 of its config)."""

    __test__ = False  # not a pytest class

    ref: str
    archive: bytes
    image_id: str


def build_pause_binary(workdir: Path) -> bytes:
    """Compile the pause program statically with gcc; raises EngineUnavailable with why not."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise EngineUnavailable("gcc not found (Debian: apt-get install gcc); it builds the pause binary")
    src = workdir / "pause.c"
    out = workdir / "pause"
    src.write_text(PAUSE_C)
    proc = subprocess.run([gcc, "-static", "-Os", "-s", "-o", str(out), str(src)],
                          capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise EngineUnavailable(f"gcc -static pause.c failed: {proc.stderr.strip()[-300:]}")
    return out.read_bytes()


def _normalise(layer: bytes) -> bytes:
    """Rewrite a tar with fixed mtimes and owners (deterministic digests)."""
    src = tarfile.open(fileobj=io.BytesIO(layer), mode="r")
    buf = io.BytesIO()
    with src, tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as dst:
        for member in src.getmembers():
            member.mtime, member.uid, member.gid, member.uname, member.gname = _MTIME, 0, 0, "", ""
            data = src.extractfile(member) if member.isfile() else None
            dst.addfile(member, data)
    return buf.getvalue()


def _pause_layer(binary: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for d in ("dev", "proc", "sys", "etc"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, _MTIME
            tar.addfile(info)
        info = tarfile.TarInfo("pause")
        info.size, info.mode, info.mtime = len(binary), 0o755, _MTIME
        tar.addfile(info, io.BytesIO(binary))
    return buf.getvalue()


def docker_archive(ref: str, layer: bytes, config: dict[str, object]) -> TestImage:
    """A docker-archive tarball of one image with one layer and the given container config."""
    layer_digest = hashlib.sha256(layer).hexdigest()
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "2023-11-14T22:13:20Z",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
        "history": [{"created": "2023-11-14T22:13:20Z", "created_by": "gpuforensics tests"}],
    }
    config_raw = json.dumps(image_config, sort_keys=True, separators=(",", ":")).encode()
    config_digest = hashlib.sha256(config_raw).hexdigest()
    manifest = [{"Config": f"{config_digest}.json", "RepoTags": [ref],
                 "Layers": [f"{layer_digest}/layer.tar"]}]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        def add(name: str, data: bytes | None, directory: bool = False) -> None:
            info = tarfile.TarInfo(name)
            info.mtime = _MTIME
            if directory:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                return
            assert data is not None
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))

        add(layer_digest, None, directory=True)
        add(f"{layer_digest}/layer.tar", layer)
        add(f"{config_digest}.json", config_raw)
        add("manifest.json", json.dumps(manifest).encode())
        add("repositories", json.dumps(
            {ref.rpartition(":")[0]: {ref.rpartition(":")[2]: layer_digest}}).encode())
    return TestImage(ref=ref, archive=buf.getvalue(), image_id=f"sha256:{config_digest}")


def test_images() -> dict[str, TestImage]:
    """The busybox, cuda-like and pause images, keyed by reference."""
    rootfs = _normalise(busybox_rootfs_tar())
    base: dict[str, object] = {"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"], "WorkingDir": "/",
                               "Labels": {"gpuforensics-test": "1"}}
    cuda: dict[str, object] = {
        **base,
        "Env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all",
                "NVIDIA_DRIVER_CAPABILITIES=compute,utility", "CUDA_VERSION=12.4.1"],
        "Labels": {"gpuforensics-test": "1", "com.nvidia.volumes.needed": "nvidia_driver"},
    }
    with tempfile.TemporaryDirectory(prefix="gfpause-") as tmp:
        pause = build_pause_binary(Path(tmp))
    pause_config: dict[str, object] = {"Entrypoint": ["/pause"], "Env": ["PATH=/"],
                                       "Labels": {"gpuforensics-test": "1"}}
    images = [
        docker_archive(BUSYBOX_REF, rootfs, base),
        docker_archive(CUDA_LIKE_REF, rootfs, cuda),
        docker_archive(PAUSE_REF, _pause_layer(pause), pause_config),
    ]
    return {image.ref: image for image in images}


def write_archives(images: dict[str, TestImage], directory: Path) -> dict[str, Path]:
    """Write each image's tarball under ``directory``; returns ref -> path."""
    out = {}
    for ref, image in images.items():
        path = directory / (ref.replace("/", "_").replace(":", "_") + ".tar")
        path.write_bytes(image.archive)
        os.chmod(path, 0o600)
        out[ref] = path
    return out
