"""Helpers for the flight-recorder tests: a ring writer and a recorder in their own processes
(so they can be SIGKILLed), and reading a ring back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from forensics.ring import RingReader

__all__ = ["members", "record_lines", "ring_events", "start_recorder", "start_seq_writer", "wait_for_writer"]

ROOT = Path(__file__).resolve().parents[2]

_SEQ_WRITER = r"""
import os, sys, time
from forensics.ring import RingWriter
root, segment = sys.argv[1], int(sys.argv[2])
w = RingWriter(root, max_bytes=64 << 20, segment_bytes=segment, fsync_s=0.5).open()
print("run", w.run, flush=True)
n = 0
while True:
    batch = [(time.time(), time.monotonic(), "test/seq.jsonl", "append", (f'{{"n": {n + i}, "pad": "{"x" * 200}"}}\n').encode())
             for i in range(1 + n % 4)]
    if n % 50 == 0:
        batch.append((time.time(), time.monotonic(), "test/state.json", "write", f'{{"at": {n}}}\n'.encode()))
    w.append(batch)
    n += len([b for b in batch if b[2] == "test/seq.jsonl"])
    print(n - 1, flush=True)  # acknowledged: every record up to n - 1 has been written
    time.sleep(0.001)
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def start_seq_writer(ring: Path, segment_bytes: int = 16 << 10) -> subprocess.Popen[str]:
    """A process appending numbered records (``test/seq.jsonl``) and printing each acknowledged one."""
    return subprocess.Popen([sys.executable, "-c", _SEQ_WRITER, str(ring), str(segment_bytes)],
                            stdout=subprocess.PIPE, text=True, env=_env())


def start_recorder(ring: Path, *, env: dict[str, str] | None = None, stderr: Any = subprocess.PIPE,
                   **options: Any) -> subprocess.Popen[str]:
    """``gpuforensics record`` through the library, in its own process (stderr captured unless
    ``stderr`` says where: a long run whose stderr nobody reads must not fill the pipe).
    ``triggers``: a dict of TriggerOptions fields, ``rules`` as rule strings (``config``: the
    thresholds file's table they are parsed with); ``metrics``: a dict of
    MetricsOptions fields."""
    code = ("import json, sys\nfrom pathlib import Path\n"
            "from forensics.record.recorder import RecordOptions, run_recorder\n"
            "o = json.loads(sys.argv[1]); o['ring'] = Path(o['ring']); o['sources'] = tuple(o.get('sources', ()))\n"
            "t = o.pop('triggers', None)\n"
            "if t:\n"
            "    from forensics.record.triggers import TriggerOptions, parse_rules\n"
            "    from forensics.thresholds import config_from_mapping\n"
            "    c = t.pop('config', None)\n"
            "    t['rules'] = parse_rules(t['rules'], config_from_mapping(c) if c else None); t['bundles'] = Path(t['bundles'])\n"
            "    t['on_capture'] = tuple(t.get('on_capture', ())); o['triggers'] = TriggerOptions(**t)\n"
            "m = o.pop('metrics', None)\n"
            "if m is not None:\n"
            "    from forensics.record.live.metrics import MetricsOptions\n"
            "    o['metrics'] = MetricsOptions(**m)\n"
            "print(json.dumps(run_recorder(RecordOptions(**o))), flush=True)\n")
    options["ring"] = str(ring)
    full_env = _env()
    full_env.update(env or {})
    return subprocess.Popen([sys.executable, "-c", code, json.dumps(options)], stdout=subprocess.PIPE,
                            stderr=stderr, text=True, env=full_env)


def wait_for_writer(ring: Path, proc: subprocess.Popen[str], timeout_s: float = 30.0) -> None:
    """Wait until ``proc`` owns the ring (its ``writer.json`` names it): a loaded machine can take
    seconds to start Python, and a test that acts on the ring before would test nothing."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if ring.is_dir() and (RingReader(ring).writer() or {}).get("pid") == proc.pid:
            return
        time.sleep(0.05)
    raise AssertionError(f"the recorder (pid {proc.pid}, exit {proc.poll()}) did not open {ring} within {timeout_s:g} s")


def members(ring: Path, prefix: str = "") -> list[Any]:
    """Every record of the ring (optionally of members under ``prefix``), in order."""
    return list(RingReader(ring).records(members=(prefix,) if prefix else ()))


def record_lines(record: Any) -> list[Any]:
    """The JSON lines of one append record (the recorder batches a tick's lines of a member)."""
    return [json.loads(line) for line in record.data.splitlines() if line.strip()]


def ring_events(ring: Path) -> list[dict[str, Any]]:
    """The recorder's own events (``recorder/events.jsonl``), parsed."""
    return [ev for r in members(ring, "recorder/events.jsonl") for ev in record_lines(r)]


def wait_bundles(d: Path, n: int, timeout: float, proc: subprocess.Popen[str]) -> list[Path]:
    """The bundles a triggered recorder wrote into ``d``: at least ``n``, or what is there when
    ``timeout`` passed or the recorder ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        found = sorted(d.glob("gpuforensics-*.tgz"))
        if len(found) >= n:
            return found
        time.sleep(0.2)
    return sorted(d.glob("gpuforensics-*.tgz"))


def stop_recorder(proc: subprocess.Popen[str]) -> tuple[dict[str, Any], str]:
    """SIGTERM a recorder started by ``start_recorder``-style Popen; its final status (the last
    stdout line, JSON) and its stderr."""
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1]), err
