"""``gpuforensics top`` in a real terminal (tmux) against real containers on the simulated NVML:
each GPU process named by its container, the one without a grant marked, a container removed
while top runs listed as exited with its name, and ``c`` writing a bundle whose analysis names the
same culprit. The screen is read as a person would read it (``tmux capture-pane``)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from forensics.analysis import analyze_bundles
from tests.support import docker_engine as de
from tests.support.nvmlsim import Scenario, subprocess_env
from tests.support.nvmlsim import fixtures as nvf

sim_lib = nvf.sim_lib
pytestmark = [pytest.mark.slow, pytest.mark.docker]
GIB = 1 << 30
ROOT = Path(__file__).resolve().parents[2]


class Tmux:
    """A tmux server of its own (its own socket: the test's environment, nobody else's sessions)."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket

    def __call__(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run(["tmux", "-S", str(self.socket), *args], capture_output=True, text=True, timeout=30)
        if check and proc.returncode:
            raise AssertionError(f"tmux {' '.join(args)}: {proc.stderr}")
        return proc.stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "top")

    def wait(self, what: Callable[[str], bool], timeout_s: float, why: str) -> str:
        deadline = time.monotonic() + timeout_s
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if what(text):
                return text
            time.sleep(0.5)
        raise AssertionError(f"{why}; the screen:\n{text}")


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    if shutil.which("tmux") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("tmux is not installed (scripts/test installs it)")
        pytest.skip("tmux is not installed (scripts/test installs it)")
    t = Tmux(Path("/tmp") / f"gf-top-{os.getpid()}-{tmp_path.name[-20:]}.sock")
    try:
        yield t
    finally:
        t("kill-server", check=False)
        t.socket.unlink(missing_ok=True)


def _keep(name: str, screen: str) -> None:
    """GF_TOP_SCREENS=DIR keeps the screens this test read (what a person sees, for a review)."""
    where = os.environ.get("GF_TOP_SCREENS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        (Path(where) / f"{name}.txt").write_text(screen)


def _line(screen: str, needle: str) -> str:
    return next((ln for ln in screen.splitlines() if needle in ln), "")


def test_top_names_each_gpu_process_marks_the_ungranted_one_and_captures(
        docker_engine: de.DockerEngine, sim_lib: Path, tmp_path: Path, tmux: Tmux) -> None:
    tag = os.getpid()
    trainer, notebook, short = f"trainer-{tag}", f"notebook-{tag}", f"short-{tag}"
    gpu0, gpu1 = "GPU-00000000-0000-4000-8000-000000000000", "GPU-11111111-1111-4111-8111-111111111111"
    cids: list[str] = []
    try:
        cids.append(docker_engine.run_labelled("run", "-d", "--name", trainer, "-e", f"NVIDIA_VISIBLE_DEVICES={gpu0}",
                                               de.CUDA_LIKE_IMAGE, "sleep", "600"))
        cids.append(docker_engine.run_labelled("run", "-d", "--name", notebook, de.CUDA_LIKE_IMAGE, "sleep", "600"))
        cids.append(docker_engine.run_labelled("run", "-d", "--name", short, "-e", f"NVIDIA_VISIBLE_DEVICES={gpu1}",
                                               de.CUDA_LIKE_IMAGE, "sleep", "600"))
        pids = [int(docker_engine.cli("inspect", "-f", "{{.State.Pid}}", c).stdout.strip()) for c in cids]
        sc = Scenario()
        sc.add_gpu(name="NVIDIA H100 80GB HBM3", uuid=gpu0, gpu_util=[(0, 97)], memory_total_bytes=80 * GIB)
        sc.add_gpu(name="NVIDIA H100 80GB HBM3", uuid=gpu1, gpu_util=[(0, 40)], memory_total_bytes=80 * GIB)
        sc.add_process(pid=pids[0], gpu=0, used_memory_bytes=20 * GIB, sm_util=[(0, 30)], mem_util=20)
        sc.add_process(pid=pids[1], gpu=0, used_memory_bytes=50 * GIB, sm_util=[(0, 65)], mem_util=40)
        sc.add_process(pid=pids[2], gpu=1, used_memory_bytes=8 * GIB, sm_util=[(0, 40)], mem_util=10)
        env = subprocess_env(sc.write(tmp_path / "sc.tsv"), sim_lib)
        env.update({"DOCKER_HOST": docker_engine.docker_host, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color",
                    "LANG": "C.UTF-8"})
        bundles = tmp_path / "bundles"
        bundles.mkdir()
        script = tmp_path / "top.sh"
        script.write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()) + shlex.join(
            [sys.executable, "-m", "forensics", "top", "--interval", "1", "--ring", str(tmp_path / "no-ring"),
             "--nvml-library", str(sim_lib), "--bundles", str(bundles)]) + "\n")
        tmux("new-session", "-d", "-s", "top", "-x", "160", "-y", "48", f"sh {shlex.quote(str(script))}; sleep 600")
        tmux("set-option", "-t", "top", "window-size", "manual")
        tmux("resize-window", "-t", "top", "-x", "160", "-y", "48")

        def named(screen: str) -> bool:
            return all(_line(screen, n) for n in (trainer, notebook, short))

        screen = tmux.wait(named, 90, "top did not name the three containers' GPU processes")
        time.sleep(3)  # a refresh more: the containers' CPU % over an interval
        screen = tmux.screen()
        _keep("160x48", screen)
        nb, tr, sh = _line(screen, notebook), _line(screen, trainer), _line(screen, short)
        assert str(pids[1]) in nb and "! none" in nb and "50.0 GiB" in nb, nb
        assert "env" in tr and "!" not in tr and str(pids[0]) in tr, tr
        assert "env" in sh and "!" not in sh, sh
        assert "! none: no grant covers this GPU" in screen
        assert max(len(ln) for ln in screen.splitlines()) <= 160

        # the terminal shrinks to 80x24: still usable, the mark kept
        tmux("resize-window", "-t", "top", "-x", "80", "-y", "24")
        small = tmux.wait(lambda s: len(s.splitlines()) <= 24 and "! none" in _line(s, notebook)
                          and max(len(ln) for ln in s.splitlines()) <= 80, 20, "top did not redraw for 80x24")
        assert "GPU-MEM" in small and "MEM/LIMIT" not in small
        _keep("80x24", small)
        tmux("resize-window", "-t", "top", "-x", "160", "-y", "48")

        # keys: a text filter, cleared; sort by SM %
        tmux("send-keys", "-t", "top", "/", "train", "Enter")
        filt = tmux.wait(lambda s: "filter:text=train" in s, 10, "the text filter was not applied")
        assert _line(filt, trainer) and not _line(filt, notebook) and not _line(filt, short)
        tmux("send-keys", "-t", "top", "x", "s")
        by_sm = tmux.wait(lambda s: "sort:sm" in s and "filter:" not in s, 10, "x/s did not clear and sort")
        rows = [ln for ln in by_sm.splitlines() if any(n in ln for n in (trainer, notebook, short))]
        assert [next(n for n in (trainer, notebook, short) if n in r) for r in rows] == [notebook, short, trainer], rows

        # a container removed while top runs: listed as exited, still named
        docker_engine.cli("rm", "-f", short)
        screen = tmux.wait(lambda s: f"container {short} (" in s, 60, "the removed container is not listed as exited")
        assert "RECENTLY EXITED" in screen
        _keep("160x48-exited", screen)
        tmux("send-keys", "-t", "top", "Enter")
        _keep("160x48-details", tmux.wait(lambda s: "evidence" in s, 10, "Enter did not show the details"))
        tmux("send-keys", "-t", "top", "Enter")

        # c: a bundle now, its path on the screen, the view live meanwhile
        tmux("send-keys", "-t", "top", "c")
        screen = tmux.wait(lambda s: "bundle written: " in s or "capture failed" in s, 240, "the capture did not end")
        lines = screen.splitlines()
        at = next((i for i, ln in enumerate(lines) if ln.startswith("bundle written: ")), None)
        assert at is not None, screen
        # the path, wrapped over the lines above the keys where the terminal is narrower than it
        path = Path("".join(ln.rstrip() for ln in lines[at:-1]).removeprefix("bundle written: "))
        assert path.is_file() and path.parent == bundles, (path, screen)
        _keep("160x48-capture", screen)
        doc = analyze_bundles([path])
        culprits = {s["name"] for f in doc["findings"] if f["kind"] == "unallocated-gpu-use"
                    for s in f["subjects"] if s["role"] == "culprit"}
        assert culprits == {notebook}, doc["findings"]

        tmux("send-keys", "-t", "top", "q")
        after = tmux.wait(lambda s: "gpuforensics top" not in s, 30, "q did not quit")
        assert f"bundle written: {path}" in after.replace("\n", "")  # said again once the screen is gone
    finally:
        for c in cids:
            docker_engine.cli("rm", "-f", c, check=False)
