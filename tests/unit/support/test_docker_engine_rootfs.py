"""The test-image rootfs built by tests/support/docker_engine.py (no engine needed)."""

from __future__ import annotations

import io
import os
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.support.docker_engine import BUSYBOX, busybox_rootfs_tar  # noqa: E402


@pytest.mark.skipif(not os.path.exists(BUSYBOX) and os.environ.get("CI") != "true",
                    reason=f"{BUSYBOX} missing (apt-get install busybox-static)")
def test_rootfs_has_busybox_applets_and_passwd() -> None:
    data = busybox_rootfs_tar()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert members["bin/busybox"].isfile() and members["bin/busybox"].mode & 0o111
        for applet in ("sh", "sleep", "dd", "ps"):
            assert members[f"bin/{applet}"].issym() and members[f"bin/{applet}"].linkname == "busybox"
        passwd = tar.extractfile("etc/passwd")
        assert passwd is not None and passwd.read().startswith(b"root:x:0:0:")
        assert members["tmp"].isdir() and members["tmp"].mode == 0o1777
        assert not any(name.startswith("/") or ".." in name for name in members)
