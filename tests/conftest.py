"""Suite-wide settings. Per-area fixtures live in tests/support/ and each area's conftest.py."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest

# Tests never use the host's real Kubernetes or NVML by accident.
os.environ.setdefault("GPUFORENSICS_TESTING", "1")


def _sigterm_interrupts(signum: int, _frame: Any) -> None:
    """SIGTERM to pytest is an interrupt (as Ctrl-C is): pytest then runs the teardown of every
    fixture set up, so the private daemons tests/support started are stopped and their temporary
    directories removed, instead of being left running. Once: a second SIGTERM during that teardown
    is ignored (SIGKILL still ends the run at once; the daemons then get SIGTERM through
    PR_SET_PDEATHSIG, tests/support/private_daemon.py)."""
    signal.signal(signum, signal.SIG_IGN)
    raise KeyboardInterrupt("pytest got SIGTERM: tearing down")


def pytest_configure(config: pytest.Config) -> None:
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _sigterm_interrupts)


@pytest.fixture
def out_dir(tmp_path):
    """A private output directory for bundles."""
    d = tmp_path / "out"
    d.mkdir()
    return d



def _scenario_kept():
    before = os.environ.get("NVMLSIM_SCENARIO")
    yield
    if before is None:
        os.environ.pop("NVMLSIM_SCENARIO", None)
    else:
        os.environ["NVMLSIM_SCENARIO"] = before


# ``nvmlsim.activate()`` points this process's simulated NVML at a scenario through
# ``$NVMLSIM_SCENARIO``; whoever set it (a test, or a module's fixture) must not hand it on (a later
# test that copied ``os.environ`` into a child's environment read another test's GPUs).
_nvmlsim_scenario_kept_per_test = pytest.fixture(autouse=True)(_scenario_kept)
_nvmlsim_scenario_kept_per_module = pytest.fixture(autouse=True, scope="module")(_scenario_kept)


def _untracked(root: str) -> set[str] | None:
    """The checkout's untracked, not ignored paths (None outside a git checkout, or without git)."""
    import subprocess

    try:
        out = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=all"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {line[3:] for line in out.splitlines() if line.startswith("?? ")}


@pytest.fixture(autouse=True, scope="session")
def _the_checkout_is_left_as_found():
    """Tests remove what they made: a run that leaves a new file in the checkout fails (a podman
    container's conmon left ``oom`` in the working directory after its OOM kill)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    before = _untracked(root)
    yield
    after = _untracked(root)
    if before is not None and after is not None and after - before:
        pytest.fail(f"the test run left new files in the checkout: {sorted(after - before)[:10]}")
