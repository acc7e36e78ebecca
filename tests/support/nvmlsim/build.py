"""Compile the simulated NVML (``nvmlsim.c``) into ``<dest_dir>/libnvidia-ml.so.1``.

``gcc -shared -fPIC``; the result is cached by the SHA-256 of the source and the flags (a stamp
file beside the library), and written atomically so that parallel test workers can share a
directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["LIBRARY_NAME", "SOURCE", "BuildError", "build", "default_cache_dir", "gcc_path"]

SOURCE = Path(__file__).with_name("nvmlsim.c")
LIBRARY_NAME = "libnvidia-ml.so.1"
_FLAGS = ("-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-fvisibility=hidden")
_LIBS = ("-lm",)


class BuildError(RuntimeError):
    """gcc is missing or failed; the message carries its output."""


def gcc_path() -> str | None:
    """The C compiler used (``$CC`` or ``gcc`` on PATH), or None."""
    return shutil.which(os.environ.get("CC", "gcc"))


def _digest() -> str:
    h = hashlib.sha256(SOURCE.read_bytes())
    h.update("\0".join(_FLAGS + _LIBS).encode())
    return h.hexdigest()


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/gpuforensics-nvmlsim/<source hash>`` (or under ~/.cache)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gpuforensics-nvmlsim" / _digest()[:16]


def build(dest_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return the path of a simulated ``libnvidia-ml.so.1`` built from the current source."""
    dest = Path(dest_dir) if dest_dir is not None else default_cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    lib = dest / LIBRARY_NAME
    stamp = dest / (LIBRARY_NAME + ".sha256")
    digest = _digest()
    if lib.is_file() and stamp.is_file() and stamp.read_text().strip() == digest:
        return lib
    cc = gcc_path()
    if cc is None:
        raise BuildError("no C compiler: gcc (or $CC) is needed to build the simulated NVML")
    fd, tmp = tempfile.mkstemp(prefix=".nvmlsim-", suffix=".so", dir=dest)
    os.close(fd)
    try:
        proc = subprocess.run(
            [cc, *_FLAGS, "-o", tmp, str(SOURCE), *_LIBS],
            capture_output=True, text=True, check=False,
        )
        if proc.returncode != 0:
            raise BuildError(f"{cc} failed ({proc.returncode}):\n{proc.stderr}")
        os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    stamp_tmp = stamp.with_suffix(f".{os.getpid()}.tmp")
    stamp_tmp.write_text(digest + "\n")
    os.replace(stamp_tmp, stamp)
    return lib
