"""Capture orchestration (forensics/capture/runner.py) with our own collectors.

Each capture runs ``run_capture(collectors=[...])`` in a forked child (see capture_helpers.py);
collectors fail, hang, lie and crash; the bundle must still be written, on time, with every
failure recorded and everything collected before it kept.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from forensics.bundle.reader import open_bundle
from forensics.bundle.verify import verify_bundle
from forensics.capture.runner import CaptureResult
from forensics.collect.context import CollectContext, Tick
from forensics.errors import SourcePermissionDenied, SourceTimeout, SourceUnavailable, UsageError

from .capture_helpers import FnCollector, SamplingCollector, hang, pid_gone

Capture = Callable[..., CaptureResult]


def statuses(res: CaptureResult) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in res.manifest["collectors"]}


def write(member: str, text: str = "x\n") -> Callable[[CollectContext], None]:
    return lambda ctx: ctx.sink.write_text(member, text)


def raise_(exc: BaseException) -> Callable[..., None]:
    def f(*_a: Any) -> None:
        raise exc
    return f


class TestFailuresAreRecorded:
    def test_a_collector_that_raises(self, capture: Capture) -> None:
        res = capture([FnCollector("boom", raise_(ValueError("kaput\nsecond line"))), FnCollector("good", write("good/a.txt"))])
        s = statuses(res)
        assert s["boom"]["status"] == "failed"
        assert s["boom"]["error"] == "ValueError: kaput"  # one line
        assert s["good"]["status"] == "ok" and s["good"]["error"] is None
        assert open_bundle(res.path).read_text("good/a.txt") == "x\n"
        verify_bundle(res.path)

    @pytest.mark.parametrize("exc,status,error", [
        (SourceUnavailable("no NVIDIA driver loaded"), "unavailable", "no NVIDIA driver loaded"),
        (SourcePermissionDenied("/dev/kmsg"), "unavailable", "permission denied: /dev/kmsg"),
        (PermissionError(13, "Permission denied", "/proc/1/environ"), "unavailable", "permission denied: /proc/1/environ"),
        (SourceTimeout("docker ps took 30 s"), "failed", "timed out: docker ps took 30 s"),
        (SystemExit(3), "failed", "SystemExit: 3"),
        (KeyboardInterrupt(), "failed", "KeyboardInterrupt"),
    ])
    def test_error_classes_map_to_statuses(self, capture: Capture, exc: BaseException, status: str, error: str) -> None:
        res = capture([FnCollector("src", raise_(exc))])
        assert (statuses(res)["src"]["status"], statuses(res)["src"]["error"]) == (status, error)

    def test_partial_and_notes(self, capture: Capture) -> None:
        def f(ctx: CollectContext) -> None:
            ctx.note("3 containers")
            ctx.partial("stats of 1 container timed out")
            ctx.sink.write_text("docker/info.json", "{}")
        s = statuses(capture([FnCollector("docker", f)]))["docker"]
        assert s["status"] == "partial" and s["error"] == "stats of 1 container timed out"
        assert s["notes"] == ["3 containers"]

    @pytest.mark.parametrize("body,expected", [
        (lambda ctx: os._exit(0), "exited with status 0 without a result"),
        (lambda ctx: os._exit(7), "exited with status 7 without a result"),
        (lambda ctx: os.kill(os.getpid(), signal.SIGKILL), "died from signal SIGKILL"),
        (lambda ctx: (faulthandler.disable(), os.kill(os.getpid(), signal.SIGSEGV)), "died from signal SIGSEGV"),
    ])
    def test_a_collector_process_that_dies(self, capture: Capture, body: Callable[[CollectContext], None],
                                           expected: str) -> None:
        res = capture([FnCollector("crash", body), FnCollector("after", write("after/ok"))])
        s = statuses(res)
        assert s["crash"]["status"] == "failed" and expected in s["crash"]["error"]
        assert s["after"]["status"] == "ok"
        verify_bundle(res.path)

    def test_garbage_results(self, capture: Capture) -> None:
        """Return values are ignored; non-JSON values in evidence or hints are stringified, never fatal."""
        def f(ctx: CollectContext) -> object:
            ctx.sink.write_json("junk/odd.json", {"when": object(), "bytes": b"\xff", "set": {1}})
            ctx.publish("pids", [object()])
            ctx.note(object())  # type: ignore[arg-type]
            return object()
        res = capture([FnCollector("junk", f)])
        s = statuses(res)["junk"]
        assert s["status"] == "ok"
        doc = open_bundle(res.path).read_json("junk/odd.json")
        assert doc["when"].startswith("<object object")
        assert json.dumps(res.manifest)  # the manifest stayed JSON
        verify_bundle(res.path)

    def test_an_unsafe_member_name_fails_only_that_collector(self, capture: Capture) -> None:
        res = capture([FnCollector("evil", write("../../escape.txt")), FnCollector("good", write("good/a"))])
        s = statuses(res)
        assert s["evil"]["status"] == "failed" and "unsafe member name" in s["evil"]["error"]
        assert s["good"]["status"] == "ok"
        assert not (res.path.parent.parent / "escape.txt").exists()
        assert open_bundle(res.path).names() == ["good/a"]

    def test_every_collector_failing_still_writes_a_valid_bundle(self, capture: Capture) -> None:
        res = capture([FnCollector("a", raise_(RuntimeError("a"))),
                       FnCollector("b", raise_(SourceUnavailable("b"))),
                       FnCollector("c", lambda ctx: os._exit(1))])
        assert [c["status"] for c in res.manifest["collectors"]] == ["failed", "unavailable", "failed"]
        assert res.path.exists() and not res.interrupted
        b = open_bundle(res.path)
        assert b.names() == []
        assert [c["name"] for c in b.collectors()] == ["a", "b", "c"]
        verify_bundle(res.path)


class TestDeadlines:
    def test_a_hanging_collector_is_killed_and_what_it_wrote_is_kept(self, capture: Capture) -> None:
        def f(ctx: CollectContext) -> None:
            ctx.sink.write_text("hang/before.txt", str(os.getpid()))
            ctx.sink.append_jsonl("hang/progress.jsonl", {"step": 1})
            hang()
        t0 = time.monotonic()
        res = capture([FnCollector("hang", f, timeout_s=1.0), FnCollector("after", write("after/ok"))])
        elapsed = time.monotonic() - t0
        assert elapsed < 1.0 + 4.0, f"capture took {elapsed:.1f} s with a 1 s collector deadline"
        s = statuses(res)
        assert s["hang"]["status"] == "partial"
        assert "timed out after 1.0 s" in s["hang"]["error"]
        assert 0.9 < s["hang"]["duration_s"] < 3.0
        assert s["after"]["status"] == "ok"
        b = open_bundle(res.path)
        assert b.names() == ["after/ok", "hang/before.txt", "hang/progress.jsonl"]
        assert pid_gone(int(b.read_text("hang/before.txt")))
        verify_bundle(res.path)

    def test_a_hang_before_writing_anything_is_failed(self, capture: Capture) -> None:
        res = capture([FnCollector("hang", hang, timeout_s=0.5)])
        s = statuses(res)["hang"]
        assert s["status"] == "failed" and "timed out" in s["error"]

    def test_an_uninterruptible_signal_mask_does_not_matter(self, capture: Capture) -> None:
        """A source that ignores SIGTERM/SIGINT (as a wedged library call effectively does) still ends."""
        def f(ctx: CollectContext) -> None:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            hang()
        t0 = time.monotonic()
        capture([FnCollector("stubborn", f, timeout_s=0.5)])
        assert time.monotonic() - t0 < 4.0

    def test_global_timeout_caps_every_collector(self, capture: Capture) -> None:
        t0 = time.monotonic()
        res = capture([FnCollector("slow1", hang, timeout_s=60), FnCollector("slow2", hang, timeout_s=60)],
                      timeout_s=1.5)
        elapsed = time.monotonic() - t0
        assert elapsed < 1.5 + 4.0, elapsed
        s = statuses(res)
        assert s["slow1"]["status"] == "failed" and "timed out" in s["slow1"]["error"]
        # slow1 is killed with a slot of the budget kept back, so slow2 runs (and times out) too
        assert s["slow2"]["status"] == "failed" and "timed out" in s["slow2"]["error"]

    def test_grandchildren_of_a_hanging_collector_are_killed_too(self, capture: Capture, tmp_path: Path) -> None:
        """The deadline kills the collector's process group, so a helper it spawned does not linger."""
        marker = tmp_path / "grandchild.pid"

        def f(ctx: CollectContext) -> None:
            pid = os.fork()
            if pid == 0:
                hang()
            marker.write_text(str(pid))
            hang()
        capture([FnCollector("spawner", f, timeout_s=1.0)])
        gc = int(marker.read_text())
        try:
            assert pid_gone(gc), f"grandchild {gc} survived the deadline"
        finally:
            if not pid_gone(gc, 0):
                os.kill(gc, signal.SIGKILL)


class TestSampling:
    def test_sample_is_called_once_per_tick(self, capture: Capture) -> None:
        res = capture([SamplingCollector("gpu")], duration_s=1.2, interval_s=0.4)
        s = statuses(res)["gpu"]
        assert s["status"] == "ok"
        assert s["sampling"] == {"ticks": 4, "errors": [], "stopped": None}  # t = 0, 0.4, 0.8, 1.2
        b = open_bundle(res.path)
        rows = [o for _, o in b.iter_jsonl("gpu/samples.jsonl")]
        assert [r["index"] for r in rows] == [0, 1, 2, 3]
        span = rows[-1]["t"] - rows[0]["t"]
        assert 1.1 < span < 1.8, span  # ticks are due on a fixed grid, not drifting by each tick's cost
        assert rows[0]["time"].endswith("Z")
        assert b.read_json("gpu/end.json") == {"seen": [0, 1, 2, 3]}  # same object across ticks
        assert res.manifest["capture"]["window"] == {"duration_s": 1.2, "interval_s": 0.4, "since": None,
                                                     "lookback_s": 3600.0}

    def test_no_duration_means_no_sampling(self, capture: Capture) -> None:
        res = capture([SamplingCollector("gpu")])
        assert "sampling" not in statuses(res)["gpu"]
        assert open_bundle(res.path).names() == ["gpu/snapshot.json"]

    def test_a_hanging_sampler_is_cut_and_its_ticks_kept(self, capture: Capture) -> None:
        def on_tick(_ctx: CollectContext, tick: Tick) -> None:
            if tick.index == 2:
                hang()
        t0 = time.monotonic()
        res = capture([SamplingCollector("gpu", on_tick), SamplingCollector("cg")],
                      duration_s=1.2, interval_s=0.4, timeout_s=2.0)
        elapsed = time.monotonic() - t0
        assert elapsed < 1.2 + 2.0 + 4.0, elapsed
        s = statuses(res)
        assert s["gpu"]["status"] == "partial" and "sampling" in s["gpu"]["error"] and "timed out" in s["gpu"]["error"]
        assert s["cg"]["status"] == "ok" and s["cg"]["sampling"]["ticks"] == 4  # samplers run side by side
        b = open_bundle(res.path)
        assert [o["index"] for _, o in b.iter_jsonl("gpu/samples.jsonl")] == [0, 1]
        verify_bundle(res.path)

    def test_a_failing_tick_is_recorded_not_fatal(self, capture: Capture) -> None:
        def on_tick(_ctx: CollectContext, tick: Tick) -> None:
            if tick.index == 1:
                raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        s = statuses(capture([SamplingCollector("gpu", on_tick)], duration_s=0.8, interval_s=0.4))["gpu"]
        assert s["status"] == "partial"
        assert s["sampling"]["ticks"] == 2 and s["sampling"]["errors"] == ["tick 1: RuntimeError: NVML_ERROR_GPU_IS_LOST"]

    def test_a_source_that_disappears_stops_sampling(self, capture: Capture) -> None:
        def on_tick(_ctx: CollectContext, tick: Tick) -> None:
            if tick.index >= 1:
                raise SourceUnavailable("GPU fell off the bus")
        s = statuses(capture([SamplingCollector("gpu", on_tick)], duration_s=1.2, interval_s=0.4))["gpu"]
        assert s["status"] == "partial" and s["sampling"]["stopped"] == "GPU fell off the bus"
        assert s["sampling"]["ticks"] == 1

    def test_an_end_of_window_read_without_ticks_waits_out_the_window(self, capture: Capture) -> None:
        """A collector with ``end_sampling`` and no ``sample`` reads once, when the window is over."""
        @dataclass
        class EndOnly:
            name: str = "kube"
            order: int = 10
            timeout_s: float = 10.0

            def snapshot(self, ctx: CollectContext) -> None:
                ctx.sink.write_json("kube/snapshot.json", {"t": time.time()})
                ctx.publish("kube_node", ["gpu-07"])

            def end_sampling(self, ctx: CollectContext) -> None:
                ctx.sink.write_json("kube/end.json", {"t": time.time(), "hint": ctx.hint("kube_node")})

        res = capture([EndOnly(), SamplingCollector("gpu")], duration_s=1.2, interval_s=0.4)
        s = statuses(res)
        assert s["kube"]["status"] == "ok"
        assert s["kube"]["sampling"] == {"ticks": None, "errors": [], "stopped": None, "end_of_window_only": True}
        b = open_bundle(res.path)
        start, end = b.read_json("kube/snapshot.json"), b.read_json("kube/end.json")
        assert end["hint"] == ["gpu-07"] and end["t"] - start["t"] >= 1.2
        last_tick = [o for _, o in b.iter_jsonl("gpu/samples.jsonl")][-1]["t"]
        assert end["t"] >= last_tick - 0.2  # at the end of the window, with the samplers' last tick

    def test_collectors_that_failed_their_snapshot_are_not_sampled(self, capture: Capture) -> None:
        class Broken(SamplingCollector):
            def snapshot(self, ctx: CollectContext) -> None:
                raise SourceUnavailable("no driver")
        s = statuses(capture([Broken("gpu")], duration_s=0.2, interval_s=0.1))["gpu"]
        assert s["status"] == "unavailable" and "sampling" not in s


class TestHintsAndContext:
    def test_hints_flow_from_earlier_collectors_to_later_ones(self, capture: Capture) -> None:
        def first(ctx: CollectContext) -> None:
            ctx.publish("pids", [4242, 51022])
            ctx.publish("container_ids", ["3f9a" * 16])

        def second(ctx: CollectContext) -> None:
            ctx.publish("pids", [51022, 7])
            ctx.sink.write_json("second/seen.json", {"pids": ctx.hint("pids"), "ids": ctx.hint("container_ids")})

        def before(ctx: CollectContext) -> None:
            ctx.sink.write_json("before/seen.json", {"pids": ctx.hint("pids")})

        res = capture([FnCollector("before", before), FnCollector("first", first), FnCollector("second", second),
                       SamplingCollector("sampler")], duration_s=0.1, interval_s=0.1)
        b = open_bundle(res.path)
        assert b.read_json("before/seen.json") == {"pids": []}
        assert b.read_json("second/seen.json") == {"pids": [4242, 51022, 7], "ids": ["3f9a" * 16]}
        assert b.read_json("sampler/snapshot.json") == {"hints": [4242, 51022, 7]}
        assert all(o["hints"] == [4242, 51022, 7] for _, o in b.iter_jsonl("sampler/samples.jsonl"))
        assert res.manifest["hints"] == {"container_ids": ["3f9a" * 16], "pids": [4242, 51022, 7]}

    def test_hints_of_a_failed_collector_are_lost_but_harmless(self, capture: Capture) -> None:
        def f(ctx: CollectContext) -> None:
            ctx.publish("pids", [1])
            raise RuntimeError("after publishing")
        res = capture([FnCollector("f", f)])
        assert statuses(res)["f"]["status"] == "failed"
        assert res.manifest["hints"] in ({}, {"pids": [1]})

    def test_context_carries_options_deadline_and_low_priority(self, capture: Capture) -> None:
        def f(ctx: CollectContext) -> None:
            ctx.sink.write_json("ctx/seen.json", {
                "remaining": ctx.remaining(), "lookback": ctx.options.lookback_s, "extra": ctx.options.extra,
                "nice": os.getpriority(os.PRIO_PROCESS, 0), "redact": ctx.redactor.enabled,
                "name": ctx.collector_name})
        res = capture([FnCollector("ctx", f, timeout_s=5.0)], lookback_s=60.0, extra={"k": "v"})
        seen = open_bundle(res.path).read_json("ctx/seen.json")
        assert 3.0 < seen["remaining"] <= 5.0
        assert seen["lookback"] == 60.0 and seen["extra"] == {"k": "v"} and seen["name"] == "ctx"
        assert seen["nice"] >= 10  # capture never competes with the workload it investigates
        assert seen["redact"] is True

    def test_redaction_counts_from_collectors_reach_the_manifest(self, capture: Capture) -> None:
        def f(ctx: CollectContext) -> None:
            ctx.sink.write_json("p/cmd.json", ctx.redactor.argv(["train", "--password=hunter2", "--token", "t"]))
            ctx.sink.write_json("p/env.json", ctx.redactor.env_list(["A=1", "NVIDIA_VISIBLE_DEVICES=0"]))
        res = capture([FnCollector("p", f), FnCollector("q", lambda ctx: ctx.redactor.env_value("B", "2"))],
                      argv=("gpuforensics", "capture", "--set", "db.password=x"))
        red = res.manifest["redaction"]
        assert red["enabled"] is True
        assert red["counts"] == {"argv": 3, "env": 2}  # 2 from p's argv, 1 from the capture's own argv
        assert res.manifest["capture"]["argv"][3].startswith("db.password=<redacted:")
        assert "hunter2" not in open_bundle(res.path).read_text("p/cmd.json")

    def test_no_redact_passes_through(self, capture: Capture) -> None:
        res = capture([FnCollector("p", lambda ctx: ctx.sink.write_json("p/cmd.json", ctx.redactor.argv(["--password=hunter2"])))],
                      redact=False)
        assert open_bundle(res.path).read_json("p/cmd.json") == ["--password=hunter2"]
        assert res.manifest["redaction"] == {**res.manifest["redaction"], "enabled": False, "counts": {}}


class TestSelection:
    def test_only_and_skip(self, capture: Capture) -> None:
        cs = [FnCollector(n, write(f"{n}/x")) for n in ("a", "b", "c")]
        s = statuses(capture(cs, only=("a", "c"), skip=("c",)))
        assert s["a"]["status"] == "ok"
        assert (s["b"]["status"], s["b"]["error"]) == ("skipped", "not selected (--only)")
        assert (s["c"]["status"], s["c"]["error"]) == ("skipped", "skipped (--skip)")

    @pytest.mark.parametrize("opt", ["only", "skip"])
    def test_unknown_names_are_usage_errors_and_write_nothing(self, capture: Capture, tmp_path: Path, opt: str) -> None:
        out = tmp_path / "sel"
        out.mkdir()
        with pytest.raises(UsageError, match=f"--{opt}: unknown collector nvlm"):
            capture([FnCollector("nvml", write("n/x"))], out_dir=out, **{opt: ("nvlm",)})
        assert list(out.iterdir()) == []  # no bundle, no staging directory


def test_manifest_records_the_capture(capture: Capture) -> None:
    t0 = time.time()
    res = capture([FnCollector("a", write("a/x"))], argv=("gpuforensics", "capture", "-o", "x"))
    cap = res.manifest["capture"]
    assert cap["argv"] == ["gpuforensics", "capture", "-o", "x"]
    assert cap["interrupted"] is False and cap["timeout_s"] == 30.0
    assert cap["started"].endswith("Z") and cap["finished"] >= cap["started"]
    assert cap["resource_use"]["max_rss_kib_self"] > 0
    assert abs(res.manifest["host"]["captured_at_unix"] - t0) < 30
    assert res.manifest["host"]["hostname"] == os.uname().nodename
    assert res.manifest["collectors"][0]["started"].endswith("Z")


def test_a_capture_started_with_many_descriptors_open(capture: Capture) -> None:
    """A capture started by a process that holds many descriptors (an agent, a recorder child that
    keeps thousands of cgroup files) gets its collectors' pipes numbered above 1023, which select(2)
    refuses: the waits poll instead (lifeline.wait_readable)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1200, hard), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        assert max(held) > 1023
        res = capture([SamplingCollector("gpu")], duration_s=0.8, interval_s=0.4)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert statuses(res)["gpu"]["status"] == "ok", statuses(res)
    assert statuses(res)["gpu"]["sampling"]["ticks"] == 3
