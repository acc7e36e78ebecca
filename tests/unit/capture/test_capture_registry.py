"""The collector registry (forensics/capture/registry.py) and the collector context (context.py)."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from forensics.bundle.redact import Redactor
from forensics.bundle.sink import EvidenceSink
from forensics.capture.registry import (
    COLLECTOR_MODULES,
    BrokenCollector,
    NotSelected,
    collector_name,
    load_collectors,
    not_selected,
)
from forensics.capture.runner import CaptureResult
from forensics.collect.context import CaptureOptions, CollectContext, Collector, Tick, merge_hints

PKG = "gf_test_collectors"


@pytest.fixture
def fake_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, str]], tuple[str, ...]]:
    """Write modules into a throw-away package on sys.path; return their dotted names."""
    def make(sources: dict[str, str]) -> tuple[str, ...]:
        pkg = tmp_path / PKG
        pkg.mkdir(exist_ok=True)
        (pkg / "__init__.py").write_text("")
        for name, src in sources.items():
            (pkg / f"{name}.py").write_text(textwrap.dedent(src))
        monkeypatch.syspath_prepend(str(tmp_path))
        for mod in list(__import__("sys").modules):
            if mod == PKG or mod.startswith(PKG + "."):
                monkeypatch.delitem(__import__("sys").modules, mod)
        return tuple(f"{PKG}.{n}" for n in sources)
    return make


def _collector_src(name: str, order: int) -> str:
    return f"""
        class C:
            name, order, timeout_s = {name!r}, {order}, 1.0
            def snapshot(self, ctx):
                ctx.sink.write_text("{name}/x", "x")
        COLLECTOR = C()
    """


class TestRegistry:
    def test_sorted_by_volatility_order_missing_modules_skipped(self, fake_modules: Callable[..., tuple[str, ...]]) -> None:
        mods = fake_modules({"slow": _collector_src("slow", 90), "fast": _collector_src("fast", 10)})
        found = load_collectors((*mods, f"{PKG}.not_written_yet"))
        assert [c.name for c in found] == ["fast", "slow"]

    def test_a_broken_module_costs_only_itself(self, fake_modules: Callable[..., tuple[str, ...]],
                                               capture: Callable[..., CaptureResult]) -> None:
        mods = fake_modules({"good": _collector_src("good", 10),
                             "broken": "import no_such_dependency_xyz\n",
                             "nocollector": "X = 1\n"})
        found = load_collectors(mods)
        broken = {c.name: c for c in found if isinstance(c, BrokenCollector)}
        assert set(broken) == {"broken", "nocollector"}
        assert "no_such_dependency_xyz" in broken["broken"].error
        res = capture(found)
        s = {c["name"]: c for c in res.manifest["collectors"]}
        assert s["good"]["status"] == "ok"
        assert s["broken"]["status"] == "failed" and "cannot load collector module" in s["broken"]["error"]
        assert s["nocollector"]["status"] == "failed"

    def test_the_real_registry(self) -> None:
        found = load_collectors(extra={"prometheus.url": "http://127.0.0.1:9"})  # every source configured
        names = [c.name for c in found]
        assert len(names) == len(set(names)), names
        assert "host" in names
        assert not [c for c in found if isinstance(c, BrokenCollector)], [c.error for c in found if isinstance(c, BrokenCollector)]
        for c in found:
            assert isinstance(c, Collector), c
            assert isinstance(c.order, int) and 0 < c.timeout_s <= 600, c.name
            assert (type(c).__doc__ or "").strip(), f"collector {c.name} has no docstring naming its source"
        assert [c.order for c in found] == sorted(c.order for c in found)

    def test_a_source_that_needs_configuring_is_not_run_without_it(self) -> None:
        """No ``prometheus.url``: the prometheus source is left out as "not configured" (its module
        never imported), and capture records it as skipped with that reason."""
        prom = next(c for c in load_collectors() if c.name == "prometheus")
        assert isinstance(prom, NotSelected)
        assert not_selected("prometheus", (), ()) == (
            "not configured (prometheus.url not given: Prometheus base URL, same as --prometheus)")
        assert not_selected("prometheus", (), (), {"prometheus.url": "http://prom:9090"}) is None
        assert not_selected("prometheus", ("prometheus",), (), {"prometheus.url": ""}) is not None

    def test_registry_lists_volatile_sources_first(self) -> None:
        """RFC 3227: GPU process tables before containers, processes and cgroups; host facts last."""
        short = [collector_name(m) for m in COLLECTOR_MODULES]
        assert short[0] == "nvml" and short[-1] == "host"
        assert short.index("procfs") < short.index("kernel") < short.index("kubernetes")


class TestContext:
    def _ctx(self, tmp_path: Path, **kw: object) -> CollectContext:
        return CollectContext(CaptureOptions(), EvidenceSink(tmp_path), Redactor(), **kw)  # type: ignore[arg-type]

    def test_hints_publish_and_read(self, tmp_path: Path) -> None:
        ctx = self._ctx(tmp_path, hints={"pids": [1, 2]})
        assert ctx.hint("pids") == [1, 2] and ctx.hint("pod_uids") == []
        ctx.publish("pids", [2, 3])
        assert ctx.hint("pids") == [1, 2, 3]
        assert ctx.published == {"pids": [2, 3]}  # only what this collector added goes back
        ctx.hint("pids").append(99)
        assert ctx.hint("pids") == [1, 2, 3]  # a copy: callers cannot corrupt the hints

    def test_merge_hints_dedupes_keeps_order_and_handles_unhashables(self) -> None:
        into: dict[str, list[object]] = {"pids": [3, 1]}
        merge_hints(into, {"pids": [1, 2, 3, 4], "pods": [{"uid": "a"}, {"uid": "a"}, ["x"]]})
        assert into == {"pids": [3, 1, 2, 4], "pods": [{"uid": "a"}, ["x"]]}

    def test_deadline_and_remaining(self, tmp_path: Path) -> None:
        ctx = self._ctx(tmp_path, deadline=time.monotonic() + 2.0)
        assert 1.5 < ctx.remaining() <= 2.0
        default = self._ctx(tmp_path)
        assert 59 < default.remaining() <= 60.0  # options.timeout_s

    def test_notes_and_partial(self, tmp_path: Path) -> None:
        ctx = self._ctx(tmp_path)
        ctx.note("n1")
        ctx.partial("p1")
        assert ctx.notes == ["n1"] and ctx.partial_reasons == ["p1"]

    def test_tick_time_is_utc_iso(self) -> None:
        t = Tick(index=3, time_unix=1764424800.25)
        assert t.time_iso == "2025-11-29T14:00:00.250000Z"

    def test_options_are_frozen(self) -> None:
        opts = CaptureOptions()
        with pytest.raises(AttributeError):
            opts.timeout_s = 1  # type: ignore[misc]
        assert opts.capture_start.tzinfo is not None and opts.redact is True
