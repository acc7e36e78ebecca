"""The recorder's metrics endpoint (forensics.record.live.metrics) on loopback: a live state replayed
from a sample bundle, scraped over real HTTP(S) and parsed with prometheus_client's own parser."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from forensics.errors import UsageError
from forensics.record.live.exposition import Histogram
from forensics.record.live.metrics import MetricsOptions, parse_metrics_addr
from forensics.record.recorder import Recorder, RecordOptions
from forensics.record.triggers import Firing, TriggerOptions, parse_rules
from tests.unit.record.test_live import SAMPLES, replay

UNALLOCATED = SAMPLES / "unallocated-gpu-use.tgz"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def recorders() -> Iterator[list[Recorder]]:
    """Every recorder's endpoint a test opens is closed at the end, pass or fail."""
    made: list[Recorder] = []
    yield made
    for rec in made:
        if rec.metrics is not None:
            rec.metrics.close()
        if rec.triggers is not None:
            rec.triggers.close()


def _recorder(tmp_path: Path, made: list[Recorder], start: bool = True, **metrics: Any) -> Recorder:
    metrics.setdefault("port", 0)
    metrics.setdefault("stale_s", 1e12)  # the sample bundle's figures are old
    rec = Recorder(RecordOptions(ring=tmp_path / "ring", metrics=MetricsOptions(**metrics)))
    made.append(rec)
    if start:
        assert rec.metrics is not None
        rec.metrics.start()
    return rec


def _scrape(url: str, context: ssl.SSLContext | None = None) -> dict[str, list[Any]]:
    with urllib.request.urlopen(url, timeout=10, context=context) as resp:  # noqa: S310 - loopback
        text = resp.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


@pytest.mark.parametrize(("text", "want"), [
    ("127.0.0.1:9464", ("127.0.0.1", 9464)), ("9464", ("127.0.0.1", 9464)), ("0.0.0.0:1", ("0.0.0.0", 1)),
    ("[::1]:9464", ("::1", 9464)), ("localhost:65535", ("localhost", 65535)),
])
def test_metrics_addr(text: str, want: tuple[str, int]) -> None:
    assert parse_metrics_addr(text) == want


@pytest.mark.parametrize("text", [":9464", "host:", "host:0", "host:65536", "host:http", "::1:9464", "[x]:1", ""])
def test_bad_metrics_addr_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError):
        parse_metrics_addr(text)


def test_processes_by_container_and_grant_as_the_live_state_has_them(tmp_path: Path, recorders: list[Recorder]) -> None:
    rec = _recorder(tmp_path, recorders)
    assert rec.live is not None and rec.metrics is not None
    replay(UNALLOCATED, rec.live)
    rec.metrics.publish(rec, rec.live)
    fams = _scrape(rec.metrics.url)
    mem = {s.labels["container"]: s for s in fams["gpuforensics_process_gpu_memory_bytes"]}
    assert set(mem) == {"trainer", "notebook"}
    nb, tr = mem["notebook"].labels, mem["trainer"].labels
    assert (nb["allocated"], nb["grant"], tr["allocated"], tr["grant"]) == ("false", "blanket", "true", "explicit")
    live = {p.owner.container_name: p for p in rec.live.processes()}
    for name, sample in mem.items():
        p = live[name]
        assert sample.value == p.used_memory_bytes
        assert sample.labels == {
            "gpu": str(p.gpu_index), "gpu_uuid": p.gpu_uuid, "mig_uuid": "", "pid": str(p.pid), "owner": "container",
            "container": name, "container_id": p.owner.container_id, "namespace": p.owner.pod_namespace,
            "pod": p.owner.pod_name, "allocated": "true" if p.grant.allocated else "false", "grant": p.grant.grant,
                "claim": p.grant.claim}
    sm = {s.labels["container"]: s.value for s in fams["gpuforensics_process_sm_utilization_percent"]}
    assert sm == {n: p.sm_util_pct for n, p in live.items()}
    util = {s.labels["gpu"]: s.value for s in fams["gpuforensics_gpu_utilization_percent"]}
    assert util == {str(g.index): g.util_pct for g in rec.live.gpus()} and util["0"] == 99
    counts = {(s.labels["gpu"], s.labels["allocated"]): s.value for s in fams["gpuforensics_gpu_processes"]}
    assert counts[("0", "false")] == 1 and counts[("0", "true")] == 1 and counts[("1", "false")] == 0
    assert "gpuforensics_trigger_firings" not in fams  # no trigger asked for
    assert fams["process_resident_memory_bytes"][0].value > 0  # the recorder process' own cost


def test_stale_figures_are_not_served(tmp_path: Path, recorders: list[Recorder]) -> None:
    rec = _recorder(tmp_path, recorders, stale_s=60.0)
    assert rec.live is not None and rec.metrics is not None
    replay(UNALLOCATED, rec.live)  # sampled long ago: a hung sampler's last figures
    rec.metrics.publish(rec, rec.live)
    fams = _scrape(rec.metrics.url)
    assert fams["gpuforensics_process_gpu_memory_bytes"] == [] and fams["gpuforensics_gpu_utilization_percent"] == []
    seen = fams["gpuforensics_gpu_last_sample_timestamp_seconds"]
    assert len(seen) == 2 and all(s.value < time.time() - 60 for s in seen)


def test_recorder_cost_histograms_and_counters(tmp_path: Path, recorders: list[Recorder]) -> None:
    rec = _recorder(tmp_path, recorders)
    m = rec.metrics
    assert m is not None
    now = time.monotonic()
    m.sent({"nvml": now - 0.003, "procfs": now - 0.003})
    m.answered("nvml", now - 0.003)
    m.answered("procfs", now - 0.003)  # the last answer ends the tick
    m.sent({"nvml": now})
    rec.ticks, rec.ticks_behind, rec.records_dropped, rec.disk_full_dropped = 2, 3, 5, 7
    m.publish(rec, rec.live)
    fams = _scrape(m.url)
    tick = {s.name: s for s in fams["gpuforensics_recorder_tick_duration_seconds"]}
    assert tick["gpuforensics_recorder_tick_duration_seconds_count"].value == 1
    buckets = [s for s in fams["gpuforensics_recorder_tick_duration_seconds"] if s.name.endswith("_bucket")]
    assert [b.value for b in buckets] == sorted(b.value for b in buckets)  # cumulative
    assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == 1
    assert next(b.value for b in buckets if b.labels["le"] == "0.001") == 0
    assert next(b.value for b in buckets if b.labels["le"] == "1.0") == 1
    answers = [s for s in fams["gpuforensics_recorder_source_answer_seconds"] if s.name.endswith("_count")]
    assert {s.labels["source"]: s.value for s in answers}["nvml"] == 1
    one = {f: fams[f][0].value for f in ("gpuforensics_recorder_ticks", "gpuforensics_recorder_ticks_dropped",
                                          "gpuforensics_recorder_records_dropped")}
    assert one == {"gpuforensics_recorder_ticks": 2, "gpuforensics_recorder_ticks_dropped": 3,
                   "gpuforensics_recorder_records_dropped": 12}


def test_histogram_buckets_per_bucket_and_sum() -> None:
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 3.0):
        h.observe(v)
    assert h.frozen() == ((2, 1, 1), pytest.approx(3.65))


def test_trigger_counters_are_the_engines(tmp_path: Path, recorders: list[Recorder]) -> None:
    triggers = TriggerOptions(rules=parse_rules(["gpu.util>90%:5s"]), bundles=tmp_path / "bundles", cooldown_s=600.0,
                              stop_grace_s=0.2, capture_args={"only": ["host"], "duration_s": 0.0})
    rec = Recorder(RecordOptions(ring=tmp_path / "ring", triggers=triggers, metrics=MetricsOptions(port=0)))
    recorders.append(rec)
    assert rec.triggers is not None and rec.metrics is not None and rec.triggers.live is rec.live
    rec.metrics.start()
    now = time.time()
    firing = Firing(triggers.rules[0], "GPU 0", 99.0, now - 10, now, "GPU 0 at 99%", "nvml/samples.jsonl")
    rec.triggers.offer(firing)
    rec.triggers.offer(firing)  # inside the cooldown
    rec.metrics.publish(rec, rec.live)
    fams = _scrape(rec.metrics.url)
    assert [(s.labels, s.value) for s in fams["gpuforensics_trigger_firings"]] == [({"trigger": "gpu.util>90%:5s"}, 2)]
    assert fams["gpuforensics_trigger_suppressed"][0].value == 1
    assert fams["gpuforensics_trigger_capture_running"][0].value == 1
    rec.triggers.close()  # the capture is stopped: it ends one way or the other
    rec.metrics.publish(rec, rec.live)
    fams = _scrape(rec.metrics.url)
    per_rule = rec.triggers.per_rule["gpu.util>90%:5s"]
    got = {s.labels["outcome"]: s.value for s in fams["gpuforensics_trigger_captures"]}
    assert got == {"captured": per_rule["captured"], "failed": per_rule["failed"]} and sum(got.values()) == 1
    ended = {s.labels["outcome"]: s.value for s in fams["gpuforensics_captures"]}
    assert sum(ended.values()) == 1 and fams["gpuforensics_trigger_capture_running"][0].value == 0


def test_a_busy_port_is_a_usage_error_before_anything_runs(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(UsageError, match="cannot listen"):
            Recorder(RecordOptions(ring=tmp_path / "ring", metrics=MetricsOptions(port=port)))
    assert not (tmp_path / "ring").exists()


def test_a_silent_client_holds_the_server_no_longer_than_its_timeout(tmp_path: Path, recorders: list[Recorder]) -> None:
    rec = _recorder(tmp_path, recorders, timeout_s=0.5)
    assert rec.metrics is not None
    host, port = rec.metrics.address
    with socket.create_connection((host, port)):  # connects, sends nothing
        t0 = time.monotonic()
        assert "gpuforensics_recorder_ticks" in _scrape(rec.metrics.url)
        assert time.monotonic() - t0 < 5
    rec.metrics.close()
    with pytest.raises(OSError):
        socket.create_connection((host, port), timeout=2).close()


def _self_signed(d: Path) -> tuple[Path, Path]:
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def test_tls(tmp_path: Path, recorders: list[Recorder]) -> None:
    cert, key = _self_signed(tmp_path)
    rec = _recorder(tmp_path, recorders, tls_cert=str(cert), tls_key=str(key), timeout_s=1.0)
    assert rec.metrics is not None and rec.metrics.url.startswith("https://127.0.0.1:")
    ctx = ssl.create_default_context(cafile=str(cert))
    assert "gpuforensics_recorder_ticks" in _scrape(rec.metrics.url, ctx)
    with pytest.raises(OSError):  # plain HTTP to the TLS port: refused by the handshake
        _scrape(rec.metrics.url.replace("https://", "http://"))
    with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):  # a client that does not trust it
        _scrape(rec.metrics.url, ssl.create_default_context())
    deadline = time.monotonic() + 10  # the server sees a failed handshake after the client gave up
    while rec.metrics.errors < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    rec.metrics.publish(rec, rec.live)
    assert _scrape(rec.metrics.url, ctx)["gpuforensics_metrics_scrape_errors"][0].value >= 2


def test_client_certificates_required(tmp_path: Path, recorders: list[Recorder]) -> None:
    cert, key = _self_signed(tmp_path)
    rec = _recorder(tmp_path, recorders, tls_cert=str(cert), tls_key=str(key), client_ca=str(cert), timeout_s=1.0)
    assert rec.metrics is not None
    ctx = ssl.create_default_context(cafile=str(cert))
    with pytest.raises(OSError):
        _scrape(rec.metrics.url, ctx)
    ctx.load_cert_chain(str(cert), str(key))
    assert "gpuforensics_recorder_ticks" in _scrape(rec.metrics.url, ctx)


@pytest.mark.parametrize("files", [{"tls_cert": "/nonexistent.pem", "tls_key": "/nonexistent.key"},
                                   {"tls_cert": "/etc/hostname"}])
def test_bad_tls_files_are_usage_errors(tmp_path: Path, files: dict[str, str]) -> None:
    with pytest.raises(UsageError, match="--metrics-tls"):
        Recorder(RecordOptions(ring=tmp_path / "ring", metrics=MetricsOptions(port=0, **files)))


def _cli(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "forensics", "record", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_record_metrics_addr_serves_until_sigterm(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _cli("--ring", str(tmp_path / "ring"), "--sources", "procfs", "--interval", "0.2",
                "--metrics-addr", f"127.0.0.1:{port}")
    try:
        assert proc.stderr is not None
        lines = [proc.stderr.readline() for _ in range(1)]
        while "metrics on" not in lines[-1] and lines[-1] and len(lines) < 20:  # after any other log line
            lines.append(proc.stderr.readline())
        assert f"metrics on http://127.0.0.1:{port}/metrics" in lines[-1], lines
        deadline = time.monotonic() + 60  # a loaded machine

        def up(fams: dict[str, list[Any]]) -> dict[str, float]:
            return {s.labels["source"]: s.value for s in fams["gpuforensics_recorder_source_up"]}

        fams = _scrape(f"http://127.0.0.1:{port}/metrics")
        while (fams["gpuforensics_recorder_ticks"][0].value < 2 or up(fams) != {"procfs": 1}) \
                and time.monotonic() < deadline:  # the sampler's first answer, then a tick
            time.sleep(0.2)
            fams = _scrape(f"http://127.0.0.1:{port}/metrics")
        assert fams["gpuforensics_recorder_ticks"][0].value >= 2 and up(fams) == {"procfs": 1}, up(fams)
        assert fams["gpuforensics_recorder_ring_bytes"][0].value > 0
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert json.loads(out)["ticks"] >= 2
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)


@pytest.mark.parametrize(("args", "says"), [
    (["--metrics-addr", "127.0.0.1:http"], "the port must be a number"),
    (["--metrics-tls-cert", "/etc/hostname"], "need --metrics-addr"),
    (["--metrics-addr", "127.0.0.1:9464", "--metrics-tls-cert", "/etc/hostname"], "go together"),
])
def test_bad_metrics_options_exit_2_before_anything_runs(tmp_path: Path, args: list[str], says: str) -> None:
    proc = _cli("--ring", str(tmp_path / "ring"), *args)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and says in err and "Traceback" not in err, err
    assert not (tmp_path / "ring").exists()


def test_served_exposition_is_prometheus_clients_own(tmp_path: Path, recorders: list[Recorder]) -> None:
    """The per-process families rendered with cached label strings, the rest by prometheus_client:
    the body parses to exactly what prometheus_client's generate_latest writes for every family,
    a label value with a quote, a backslash and a newline included."""
    rec = _recorder(tmp_path, recorders)
    assert rec.live is not None and rec.metrics is not None
    replay(UNALLOCATED, rec.live)
    rec.metrics.publish(rec, rec.live)
    snap = rec.metrics.snapshot
    odd = replace(snap.processes[0], owner=replace(snap.processes[0].owner, container_name='we"ird\\name\nx'))
    rec.metrics.snapshot = replace(snap, processes=(*snap.processes, odd))
    served = rec.metrics.exposition().decode()
    reference = generate_latest(rec.metrics.registry).decode()
    volatile = ("process_cpu_seconds", "process_resident_memory_bytes", "process_virtual_memory_bytes",
                "process_open_fds")

    def lines(text: str) -> list[str]:
        return sorted(ln for ln in text.splitlines() if not ln.startswith(volatile))

    assert lines(served) == lines(reference)
    heads = [ln for ln in served.splitlines() if ln.startswith("gpuforensics_process_gpu_memory_bytes{")]
    assert len(heads) == 3 and any('container="we\\"ird\\\\name\\nx"' in ln for ln in heads)
    with urllib.request.urlopen(urllib.request.Request(rec.metrics.url, headers={"Accept-Encoding": "gzip"}),
                                timeout=10) as resp:
        assert resp.headers["Content-Encoding"] == "gzip" and resp.headers["Content-Type"].startswith("text/plain")
        assert lines(gzip.decompress(resp.read()).decode()) == lines(rec.metrics.exposition().decode())


def test_a_tick_without_an_sm_sample_keeps_the_last_figure_until_stale(tmp_path: Path, recorders: list[Recorder]) -> None:
    """NVML gives a process' SM share only for periods not yet read: a tick without one serves the
    last figure (the series does not flap), until it is ``stale_s`` old."""
    rec = _recorder(tmp_path, recorders, stale_s=5.0)
    assert rec.live is not None and rec.metrics is not None
    t0 = time.time()  # ticks from now on: the rows are fresh; the SM figures age by their ticks

    def tick(i: int, sm: int | None) -> dict[str, float]:
        util = {"value": [{"pid": 4242, "smUtil": sm, "timeStamp": i}]} if sm is not None else {"value": []}
        line = {"kind": "device", "tick": i, "t": t0 + i, "gpu_index": 0, "uuid": "GPU-x",
                "nvml": {"nvmlDeviceGetProcessUtilization": util},
                "processes": [{"pid": 4242, "usedGpuMemory": 1 << 20}, {"pid": 4343, "usedGpuMemory": 1 << 20}]}
        rec.live.feed(t0 + i, 0.0, "nvml/samples.jsonl", "append", json.dumps(line) + "\n")  # type: ignore[union-attr]
        rec.metrics.publish(rec, rec.live)  # type: ignore[union-attr]
        return {s.labels["pid"]: s.value for s in _scrape(rec.metrics.url)["gpuforensics_process_sm_utilization_percent"]}  # type: ignore[union-attr]

    assert tick(1, 40) == {"4242": 40.0}  # 4343 never had a sample: no series
    assert tick(2, None) == {"4242": 40.0}
    assert tick(3, None) == {"4242": 40.0}
    assert tick(4, 70) == {"4242": 70.0}
    assert tick(9, None) == {"4242": 70.0}  # 5 s after its sample
    assert tick(10, None) == {}  # 6 s: stale
