"""Triggers: the grammar (good and bad rules), the thresholds file shared with analyze, evaluation
over a real LiveState, cooldown and one capture at a time with real (small) captures, rotation,
and --on-capture's timeout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forensics.errors import UsageError
from forensics.record.live.state import LiveState
from forensics.record.triggers import (
    Evaluator,
    TriggerEngine,
    TriggerOptions,
    load_trigger_config,
    parse_on_capture,
    parse_rule,
    parse_rules,
    rotate_bundles,
)
from forensics.thresholds import load_config

ROOT = Path(__file__).resolve().parents[3]


# -- grammar ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "kind", "name", "op", "threshold", "duration", "xid"), [
    ("gpu.util>90%:5m", "threshold", "gpu.util", ">", 90.0, 300.0, None),
    ("gpu.memory>95%:1m", "threshold", "gpu.memory", ">", 95.0, 60.0, None),
    ("container.throttled>50%:2m", "threshold", "container.throttled", ">", 50.0, 120.0, None),
    ("psi.memory.some>20%:1m", "threshold", "psi.memory.some", ">", 20.0, 60.0, None),
    ("psi.io.full>=12.5%:30s", "threshold", "psi.io.full", ">=", 12.5, 30.0, None),
    ("gpu.util<5%:1h", "threshold", "gpu.util", "<", 5.0, 3600.0, None),
    (" GPU.UTIL > 90 % ", "threshold", "gpu.util", ">", 90.0, 0.0, None),
    ("gpu.util>90", "threshold", "gpu.util", ">", 90.0, 0.0, None),
    ("oom", "event", "oom", "", None, 0.0, None),
    ("xid", "event", "xid", "", None, 0.0, None),
    ("xid:79", "event", "xid", "", None, 0.0, 79),
    ("gpu-lost", "event", "gpu-lost", "", None, 0.0, None),
    ("unallocated-gpu-use", "event", "unallocated-gpu-use", "", None, 0.0, None),
])
def test_good_rules(text: str, kind: str, name: str, op: str, threshold: float | None, duration: float,
                    xid: int | None) -> None:
    r = parse_rule(text)
    assert (r.kind, r.name, r.op, r.threshold, r.duration_s, r.xid) == (kind, name, op, threshold, duration, xid)
    assert r.text == text


@pytest.mark.parametrize(("text", "says"), [
    ("", "empty rule"),
    ("gpu.utl>90%", "unknown metric 'gpu.utl'"),
    ("gpu.util>190%", "between 0 and 100"),
    ("gpu.util>90%:5x", "not a duration"),
    ("gpu.util>90%:9d", "not a duration"),
    ("gpu.util>90%:200h", "longer than 7 days"),
    ("gpu.util", "needs a threshold"),
    ("gpu.util=90%", "not a rule"),
    ("gpu.util>>90%", "not a rule"),
    ("xid:abc", "needs an Xid number"),
    ("xid:0", "needs an Xid number"),
    ("oom>5%", "takes no threshold"),
    ("psi.gpu.some>1%", "unknown metric"),
    ("gpu.util>-1%", "not a rule"),
    ("gpu.util>90%:", "not a rule"),
])
def test_bad_rules_are_usage_errors(text: str, says: str) -> None:
    with pytest.raises(UsageError, match=says.replace("(", r"\(")):
        parse_rule(text)


def test_the_same_rule_twice_is_an_error() -> None:
    with pytest.raises(UsageError, match="given twice"):
        parse_rules(["oom", " OOM "])


def test_bad_rule_exits_2_before_anything_runs(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ring = tmp_path / "ring"
    proc = subprocess.run([sys.executable, "-m", "forensics", "record", "--ring", str(ring), "--bundles",
                           str(tmp_path / "b"), "--trigger", "oom", "--trigger", "gpu.util>90%:5q"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "not a duration" in proc.stderr
    assert not ring.exists()  # nothing ran
    proc = subprocess.run([sys.executable, "-m", "forensics", "record", "--ring", str(ring), "--trigger", "oom"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and "--bundles" in proc.stderr


def test_thresholds_file_is_analyzes_and_gives_the_defaults(tmp_path: Path) -> None:
    cfg_file = tmp_path / "t.toml"
    cfg_file.write_text('triggers = ["gpu.memory:1m", "container.throttled", "oom"]\n'
                        "[thresholds]\ngpu_memory_pressure_ratio = 0.95\ncpu_throttled_ratio = 0.3\n")
    cfg, texts = load_trigger_config(cfg_file)
    rules = parse_rules(texts, cfg)
    mem, thr, _ = rules
    assert (mem.op, mem.threshold, mem.duration_s, mem.threshold_from) == (">=", 95.0, 60.0, "gpu_memory_pressure_ratio")
    assert thr.threshold == pytest.approx(30.0)
    assert load_config(cfg_file).gpu_memory_pressure_ratio == 0.95  # analyze --config reads the same file
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({"triggers": ["psi.memory.some"], "psi_some_avg10_pct": 35}))
    cfg, texts = load_trigger_config(flat)
    assert parse_rules(texts, cfg)[0].threshold == 35.0
    assert load_config(flat).psi_some_avg10_pct == 35.0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"triggers": "oom"}))
    with pytest.raises(UsageError, match="list of rules"):
        load_trigger_config(bad)
    bad.write_text(json.dumps({"gpu_memory_pressure": 1}))
    with pytest.raises(UsageError, match="unknown threshold"):
        load_trigger_config(bad)


# -- evaluation over a real LiveState -----------------------------------------------------------
def _gpu_tick(state: LiveState, tick: int, t: float, util: float) -> None:
    line = {"kind": "device", "tick": tick, "t": t, "gpu_index": 0, "uuid": "GPU-x",
            "nvml": {"nvmlDeviceGetUtilizationRates": {"value": {"gpu": util, "memory": 0}},
                     "nvmlDeviceGetMemoryInfo_v2": {"value": {"used": 1, "total": 100}}}, "processes": []}
    state.feed(t, t, "nvml/samples.jsonl", "append", json.dumps(line) + "\n")


def test_a_threshold_fires_after_holding_for_its_duration_and_breaks_start_it_again() -> None:
    state = LiveState()
    ev = Evaluator(parse_rules(["gpu.util>90%:5s"]), max_gap_s=3.0)
    fired = []
    utils = [95, 95, 95, 50, 95, 95, 95, 95, 95, 95, 95]
    for i, u in enumerate(utils):
        _gpu_tick(state, i, 1000.0 + i, u)
        fired.append(ev.evaluate(state))
        assert ev.evaluate(state) == []  # a stale sample neither extends nor fires again
    first = next(i for i, f in enumerate(fired) if f)
    assert first == 9  # 95 from t=1004 (after the break at 1003), held 5 s at t=1009
    f = fired[9][0]
    assert (f.value, f.crossed_at, f.t, f.subject) == (95.0, 1004.0, 1009.0, "GPU 0 (GPU-x)")
    # a silence longer than max_gap_s: the condition was not seen to hold
    _gpu_tick(state, 20, 1020.0, 95)
    assert ev.evaluate(state) == []
    _gpu_tick(state, 21, 1024.0, 95)
    assert ev.evaluate(state) == []


def test_event_rules_match_their_events() -> None:
    state = LiveState()
    lines = [{"type": "xid", "xid": 13, "pci_bus_id": "0000:3b:00.0", "time": "2026-12-01T00:00:00Z"},
             {"type": "xid", "xid": 79, "pci_bus_id": "0000:3b:00.0", "time": "2026-12-01T00:00:01Z"}]
    state.feed(0, 0, "kernel/window.jsonl", "append", "\n".join(json.dumps(x) for x in lines) + "\n")
    ev = Evaluator(parse_rules(["xid", "xid:79", "gpu-lost", "oom"]))
    by_rule = {f.rule.text: f for f in ev.evaluate(state)}
    assert set(by_rule) == {"xid", "xid:79", "gpu-lost"}
    assert by_rule["xid"].value == 13 and by_rule["xid"].also == 1
    assert by_rule["xid:79"].value == 79
    assert ev.evaluate(state) == []


# -- the engine: cooldown, one capture at a time ------------------------------------------------
class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _engine(tmp_path: Path, rules: list[str], clock: _Clock, **kw: object) -> tuple[TriggerEngine, list[str]]:
    logs: list[str] = []
    opts = TriggerOptions(rules=parse_rules(rules), bundles=tmp_path / "bundles", cooldown_s=60.0,
                          capture_args={"only": ["host"], "duration_s": 0.0}, **kw)  # type: ignore[arg-type]
    opts.check()
    eng = TriggerEngine(opts, LiveState(), logs.append, ring=tmp_path / "ring", interval_s=1.0, clock=clock)
    return eng, logs


def _wait_idle(eng: TriggerEngine, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while (eng.running is not None or eng.pending) and time.monotonic() < deadline:
        eng.tick()
        time.sleep(0.1)
    assert eng.running is None and not eng.pending


def _firing(rule_text: str, eng: TriggerEngine):  # noqa: ANN202
    from forensics.record.triggers import Firing

    rule = next(r for r in eng.options.rules if r.text == rule_text)
    now = time.time()
    return Firing(rule, "GPU 0", 99.0, now - 10, now, "GPU 0 at 99%", "nvml/samples.jsonl")


def test_cooldown_and_one_capture_at_a_time(tmp_path: Path) -> None:
    clock = _Clock()
    eng, logs = _engine(tmp_path, ["gpu.util>90%:5s", "oom"], clock)
    eng.offer(_firing("gpu.util>90%:5s", eng))
    assert eng.running is not None
    eng.offer(_firing("oom", eng))  # one capture at a time: it waits
    eng.offer(_firing("gpu.util>90%:5s", eng))  # inside the cooldown: suppressed
    assert list(eng.pending) == ["oom"]
    _wait_idle(eng)
    bundles = sorted((tmp_path / "bundles").glob("gpuforensics-*.tgz"))
    assert len(bundles) == 2, logs
    st = eng.status()
    assert st["rules"]["gpu.util>90%:5s"] == {"fired": 1, "suppressed": 1, "captured": 1}
    assert st["rules"]["oom"]["captured"] == 1
    assert sum("bundle " in line for line in logs) == 2 and all(str(tmp_path) in line for line in logs)
    manifests = [json.loads(subprocess.run(["tar", "-xOzf", str(b), "--wildcards", "*/manifest.json"],
                                           capture_output=True, check=True).stdout) for b in bundles]
    assert sorted(m["trigger"]["name"] for m in manifests) == ["gpu.util>90%:5s", "oom"]
    m = next(m for m in manifests if m["trigger"]["name"] == "gpu.util>90%:5s")
    assert m["trigger"]["value"] == 99.0 and m["trigger"]["fired_at"] and m["capture"]["window"]["since"]
    clock.now += 61  # the cooldown is over: the same trigger captures again
    eng.offer(_firing("gpu.util>90%:5s", eng))
    assert eng.running is not None
    _wait_idle(eng)
    assert len(list((tmp_path / "bundles").glob("gpuforensics-*.tgz"))) == 3


def _recorder_capturing(tmp_path: Path, bundles: Path) -> subprocess.Popen[str]:
    """A process with a trigger engine whose 60 s capture into ``bundles`` runs; it prints the
    capture's PID."""
    code = (
        "import sys, time\nfrom pathlib import Path\n"
        "from forensics.record.live.state import LiveState\n"
        "from forensics.record.triggers import TriggerEngine, TriggerOptions, parse_rules, Firing\n"
        f"o = TriggerOptions(rules=parse_rules(['oom']), bundles=Path({str(bundles)!r}), trigger_duration_s=60)\n"
        "o.check()\n"
        f"e = TriggerEngine(o, LiveState(), print, ring=Path({str(tmp_path / 'ring')!r}), interval_s=1.0)\n"
        "e.offer(Firing(o.rules[0], 'host', None, time.time(), time.time(), 'x', 'kernel/window.jsonl'))\n"
        "print(e.running.proc.pid, flush=True)\ntime.sleep(60)\n")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_capture_child_dies_with_the_recorder(tmp_path: Path) -> None:
    parent = _recorder_capturing(tmp_path, tmp_path / "b")
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        time.sleep(1.0)
        assert Path(f"/proc/{child}").exists()
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
            stat = Path(f"/proc/{child}/stat").read_text().split()
            if stat[2] == "Z":
                break
            time.sleep(0.1)
        alive = Path(f"/proc/{child}").exists() and Path(f"/proc/{child}/stat").read_text().split()[2] != "Z"
        assert not alive, "the trigger's capture outlived the recorder"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


# -- rotation -----------------------------------------------------------------------------------
def test_rotation_keeps_the_newest_by_count_and_bytes(tmp_path: Path) -> None:
    names = []
    for i in range(6):
        p = tmp_path / f"gpuforensics-h-2026120{i}T000000Z.tgz"
        p.write_bytes(b"x" * 1000)
        os.utime(p, (1000 + i, 1000 + i))
        names.append(p.name)
    other = tmp_path / "notes.tgz"
    other.write_bytes(b"y" * 5000)
    link = tmp_path / "gpuforensics-link-20260101T000000Z.tgz"
    link.symlink_to(other)
    removed = rotate_bundles(tmp_path, keep=4, keep_bytes=10_000)
    assert sorted(p.name for p in removed) == names[:2]
    removed = rotate_bundles(tmp_path, keep=10, keep_bytes=2500)
    assert sorted(p.name for p in removed) == names[2:4]
    removed = rotate_bundles(tmp_path, keep=10, keep_bytes=10, busy=frozenset())
    assert [p.name for p in removed] == [names[4]]  # the newest stays even over the cap
    assert other.exists() and link.is_symlink()
    assert sorted(p.name for p in tmp_path.glob("gpuforensics-*.tgz")) == sorted([names[5], link.name])


def test_rotation_removes_what_a_recorder_killed_mid_capture_left(tmp_path: Path) -> None:
    """A recorder SIGKILLed while its triggered capture runs: the capture dies with it and its
    stderr log (and staging directory) stay in --bundles. The next rotation removes them, and so
    does the next recorder's start; a log whose recorder still runs is kept."""
    from forensics.bundle.leftovers import TRIGGER_LOG_PREFIX, owner_token

    bundles = tmp_path / "b"
    parent = _recorder_capturing(tmp_path, bundles)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 30  # the capture under way: its staging directory exists
        while not list(bundles.glob(".gpuforensics-staging-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        parent.kill()
        parent.wait()
        while Path(f"/proc/{child}").exists() and time.monotonic() < deadline + 10:
            if Path(f"/proc/{child}/stat").read_text().split()[2] == "Z":
                break
            time.sleep(0.05)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    orphans = list(bundles.glob(f"{TRIGGER_LOG_PREFIX}*.log"))
    assert len(orphans) == 1 and list(bundles.glob(".gpuforensics-staging-*")), sorted(bundles.iterdir())
    live = bundles / f"{TRIGGER_LOG_PREFIX}{owner_token()}.abcd1234.log"  # this process's: alive
    live.write_text("capture still running\n")
    unnamed = bundles / f"{TRIGGER_LOG_PREFIX}k2j4h5g6.log"  # no owner to ask: left alone
    unnamed.write_text("?\n")
    bundle = bundles / "gpuforensics-h-20261201T000000Z.tgz"
    bundle.write_bytes(b"x" * 100)
    assert rotate_bundles(bundles, keep=10, keep_bytes=1 << 20) == []  # no bundle beyond the caps
    assert not orphans[0].exists() and not list(bundles.glob(".gpuforensics-staging-*"))
    assert live.exists() and unnamed.exists() and bundle.exists()

    # the next recorder's start sweeps too (no capture needs to end first)
    dead = bundles / orphans[0].name
    dead.write_text("left by the killed recorder\n")
    logs: list[str] = []
    opts = TriggerOptions(rules=parse_rules(["oom"]), bundles=bundles)
    opts.check()
    TriggerEngine(opts, LiveState(), logs.append, ring=tmp_path / "ring", interval_s=1.0)
    assert not dead.exists() and live.exists()
    assert any("removed 1 leftovers" in line for line in logs), logs


# -- --on-capture -----------------------------------------------------------------------------
def test_on_capture_timeout_kills_its_group_and_logs_exit_status(tmp_path: Path) -> None:
    clock = _Clock()
    marker = tmp_path / "grandchild.pid"
    script = tmp_path / "hook.sh"
    script.write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {marker}\nwait\n")
    script.chmod(0o755)
    eng, logs = _engine(tmp_path, ["oom"], clock, on_capture=parse_on_capture(f"{script}"),
                        on_capture_timeout_s=5.0)
    eng._run_hook(str(tmp_path / "bundles" / "b.tgz"))
    start = time.monotonic()
    tick_times = []
    while (not marker.exists() or time.monotonic() - start < 0.5) and time.monotonic() - start < 10:
        t0 = time.perf_counter()
        eng.tick()
        tick_times.append(time.perf_counter() - t0)
        time.sleep(0.05)
    assert eng.hooks and max(tick_times) < 0.5  # never blocking the loop
    grandchild = int(marker.read_text())
    clock.now += 6
    eng.tick()
    assert not eng.hooks and eng.counters["on_capture_timed_out"] == 1
    assert any("killed after" in line and "timeout 5 s" in line for line in logs), logs
    time.sleep(0.3)
    assert not Path(f"/proc/{grandchild}").exists() or \
        Path(f"/proc/{grandchild}/stat").read_text().split()[2] == "Z"
    for cmd, status in (("true", 0), ("false", 1)):
        eng2, logs2 = _engine(tmp_path, ["oom"], clock, on_capture=parse_on_capture(cmd))
        eng2._run_hook("/tmp/b.tgz")
        deadline = time.monotonic() + 10
        while eng2.hooks and time.monotonic() < deadline:
            eng2.tick()
            time.sleep(0.05)
        assert logs2 == [f"--on-capture for /tmp/b.tgz: exit status {status}"]


def test_on_capture_command_must_exist() -> None:
    with pytest.raises(UsageError, match="command not found"):
        TriggerOptions(rules=parse_rules(["oom"]), bundles=Path("/tmp"), on_capture=("no-such-cmd-x",)).check()
    with pytest.raises(UsageError, match="--on-capture"):
        parse_on_capture("'unterminated")
