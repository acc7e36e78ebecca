"""The recorder loads its sources' modules before forking the samplers (shared pages); a module
that cannot be loaded there is left to the source's child, which reports it, and never stops the
recorder."""

from __future__ import annotations

import sys

import pytest

from forensics.record import sources


def test_preload_loads_each_sources_modules_and_leaves_failures_to_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources.KernelDriver, "preloads", ("forensics.collectors.no_such_module",))
    failed = sources.preload(["procfs", "cgroups", "kernel", "no-such-source"])
    assert failed == ["forensics.collectors.no_such_module"]
    for module in ("forensics.collectors.procfs", "forensics.collectors.cgroups", sources.HOSTFS_PROC,
                   "forensics.collectors.kernel"):
        assert module in sys.modules


def test_preload_of_nvml_loads_what_its_collector_imports_lazily() -> None:
    """The nvml collector imports its bindings (and importlib.metadata, for their version) when it
    opens the library: loaded before the fork, their objects' pages are shared, not the nvml
    child's own. Importing the bindings loads no NVML library."""
    pytest.importorskip("pynvml")
    assert sources.preload(["nvml"]) == []
    for module in (*sources.NVML_LAZY, "forensics.collectors.nvml"):
        assert module in sys.modules
