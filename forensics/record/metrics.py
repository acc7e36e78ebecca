"""``record --metrics-addr HOST:PORT``: the recorder's figures as Prometheus metrics, attributed.

What dcgm-exporter cannot label: every GPU process with the container and pod it belongs to and
what that owner was granted on that GPU, decided by the analysis' own joins
(forensics.record.live, forensics.analysis.attribution), so a series and a finding never disagree.

Served (``prometheus_client``'s exposition, text or OpenMetrics by the scraper's Accept header):

- per process and GPU: ``gpuforensics_process_gpu_memory_bytes`` and
  ``gpuforensics_process_sm_utilization_percent`` labelled ``gpu`` (index), ``gpu_uuid``,
  ``mig_uuid``, ``pid``, ``owner`` (container|pod|process), ``container``, ``container_id``,
  ``namespace``, ``pod``, ``allocated`` (true|false) and ``grant`` (explicit|shared|blanket|none);
- per GPU: utilisation, memory used/total, lost, and its processes counted by ``allocated``;
- the triggers (forensics.record.triggers): firings, suppressed firings, captures by outcome,
  ``--on-capture`` outcomes, bundles rotated, evaluation time, a capture running;
- the recorder's own cost: the tick duration (commands sent -> last answer) and each source's
  answer time as histograms, ticks, dropped ticks (the loop fell behind; a source that missed a
  tick), source restarts and status, records written and dropped (disk full), the ring's bytes,
  the attribution runs, and the recorder process' CPU and memory (``process_*``).

How it stays out of the loop's way: the loop publishes an immutable :class:`Snapshot` once per
tick (:meth:`RecorderMetrics.publish`, a reference swap); the HTTP server runs in one daemon thread
of the recorder parent that only reads the latest snapshot, serves one connection at a time with
a timeout on every read and write (the TLS handshake included), writes nothing to stdio (errors are
counted, and the loop logs the first one), and is stopped on shutdown. Figures older than
``stale_s`` (a hung NVML sampler) are not served. Listens on loopback unless told otherwise.

TLS: ``--metrics-tls-cert``/``--metrics-tls-key`` (and ``--metrics-client-ca`` to require client
certificates). prometheus_client's server has no basic auth: for authentication put the endpoint
behind kube-rbac-proxy (deploy/daemonset-metrics.yaml, docs/metrics.md).
"""

from __future__ import annotations

import gzip
import ipaddress
import math
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import IO, TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    CollectorRegistry,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString as _go_float

from forensics.errors import UsageError

if TYPE_CHECKING:
    from forensics.record.live import GpuLive, LiveState, ProcessLive

__all__ = ["DEFAULT_HOST", "Histogram", "MetricsOptions", "RecorderMetrics", "Snapshot", "collect_snapshot",
           "metrics_options", "parse_metrics_addr"]

DEFAULT_HOST = "127.0.0.1"
PROCESS_LABELS = ("gpu", "gpu_uuid", "mig_uuid", "pid", "owner", "container", "container_id", "namespace", "pod",
                  "allocated", "grant")
GPU_LABELS = ("gpu", "gpu_uuid", "name")
# seconds; a tick at 1 Hz answers in milliseconds, a hung source in seconds
TICK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def parse_metrics_addr(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT`` or ``PORT`` (loopback) -> (host, port); a usage error otherwise."""
    value = text.strip()
    host, sep, port_text = value.rpartition(":")
    if not sep:
        host, port_text = DEFAULT_HOST, value
    elif host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise UsageError(f"--metrics-addr {text!r}: {host!r} is not an IPv6 address") from None
    elif ":" in host:
        raise UsageError(f"--metrics-addr {text!r}: an IPv6 address goes in brackets, [::1]:PORT")
    if not host:
        raise UsageError(f"--metrics-addr {text!r}: give a host (127.0.0.1:PORT; 0.0.0.0:PORT for every interface)")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UsageError(f"--metrics-addr {text!r}: the port must be a number between 1 and 65535")
    return host, int(port_text)


@dataclass(frozen=True)
class MetricsOptions:
    """``record --metrics-addr`` and its TLS files."""

    host: str = DEFAULT_HOST
    port: int = 9464
    tls_cert: str | None = None
    tls_key: str | None = None
    client_ca: str | None = None  # require client certificates signed by this CA
    timeout_s: float = 5.0  # every read and write of a connection, the TLS handshake included
    stale_s: float | None = None  # default: max(15 s, 5 recorder intervals)

    def ssl_context(self) -> ssl.SSLContext | None:
        if not (self.tls_cert or self.tls_key or self.client_ca):
            return None
        if not (self.tls_cert and self.tls_key):
            raise UsageError("--metrics-tls-cert and --metrics-tls-key go together")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.tls_cert, self.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"--metrics-tls-cert/--metrics-tls-key: cannot load {self.tls_cert} / {self.tls_key}: "
                             f"{getattr(exc, 'strerror', None) or exc}") from None
        if self.client_ca:
            try:
                ctx.load_verify_locations(cafile=self.client_ca)
            except (OSError, ssl.SSLError) as exc:
                raise UsageError(f"--metrics-client-ca: cannot load {self.client_ca}: "
                                 f"{getattr(exc, 'strerror', None) or exc}") from None
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx


def metrics_options(addr: str | None, tls_cert: str | None = None, tls_key: str | None = None,
                    client_ca: str | None = None) -> MetricsOptions | None:
    """``record --metrics-addr`` and its TLS options (None: no endpoint); a usage error when a TLS
    option comes without the address or the files cannot be loaded."""
    if addr is None:
        if tls_cert or tls_key or client_ca:
            raise UsageError("--metrics-tls-cert/--metrics-tls-key/--metrics-client-ca need --metrics-addr")
        return None
    host, port = parse_metrics_addr(addr)
    options = MetricsOptions(host, port, tls_cert, tls_key, client_ca)
    options.ssl_context()  # the files load, before anything runs
    return options


class Histogram:
    """A histogram the loop thread observes into and a snapshot copies: per-bucket counts (not
    cumulative), so a copy taken at any moment is a consistent histogram."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...] = TICK_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        for i, b in enumerate(self.bounds):
            if value <= b:
                self.counts[i] += 1
                break
        else:
            self.counts[-1] += 1
        self.total += value

    def frozen(self) -> tuple[tuple[int, ...], float]:
        return tuple(self.counts), self.total


@dataclass(frozen=True)
class SourceFigures:
    name: str
    up: bool
    ticks: int
    missed: int
    restarts: int
    answer: tuple[tuple[int, ...], float]


@dataclass(frozen=True)
class Snapshot:
    """What one scrape serves: taken by the loop thread, read by the server thread."""

    t: float
    gpus: tuple[GpuLive, ...] = ()
    processes: tuple[ProcessLive, ...] = ()
    sources: tuple[SourceFigures, ...] = ()
    ticks: int = 0
    ticks_behind: int = 0
    records_written: int = 0
    records_dropped: int = 0
    ring_bytes: int = 0
    ring_max_bytes: int = 0
    ring_segments_dropped: int = 0
    live_refreshes: int = 0
    tick: tuple[tuple[int, ...], float] = ((), 0.0)
    rules: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    trigger_counters: Mapping[str, int] = field(default_factory=dict)
    trigger_eval_s: float = 0.0
    capture_running: bool | None = None  # None: no trigger
    scrape_errors: int = 0


def _histogram(name: str, doc: str, frozen: tuple[tuple[int, ...], float], bounds: tuple[float, ...],
               labels: tuple[str, ...] = (), values: tuple[str, ...] = (),
               family: HistogramMetricFamily | None = None) -> HistogramMetricFamily:
    fam = family or HistogramMetricFamily(name, doc, labels=labels)
    counts, total = frozen
    if not counts:
        counts = (0,) * (len(bounds) + 1)
    buckets, acc = [], 0
    for bound, n in zip((*bounds, math.inf), counts, strict=True):
        acc += n
        buckets.append(("+Inf" if bound == math.inf else repr(float(bound)), float(acc)))
    fam.add_metric(list(values), buckets, total)
    return fam


MEMORY = ("gpuforensics_process_gpu_memory_bytes",
          "GPU memory used by a process (NVML), by GPU, container, pod and the owner's grant on that GPU")
SM = ("gpuforensics_process_sm_utilization_percent",
      "SM utilisation of a process over the last sampling period (NVML process utilization)")


def _process_labels(p: ProcessLive) -> list[str]:
    o, g = p.owner, p.grant
    return [str(p.gpu_index), p.gpu_uuid, p.mig_uuid or "", str(p.pid), o.kind, o.container_name,
            o.container_id, o.pod_namespace, o.pod_name, "true" if g.allocated else "false", g.grant]


def collect_snapshot(s: Snapshot, stale_before: float) -> Iterator[Metric]:
    """The metric families of one snapshot (figures sampled before ``stale_before`` left out)."""
    mem = GaugeMetricFamily(*MEMORY, labels=PROCESS_LABELS)
    sm = GaugeMetricFamily(*SM, labels=PROCESS_LABELS)
    for p in s.processes:
        if p.t >= stale_before:
            if p.used_memory_bytes is not None:
                mem.add_metric(_process_labels(p), float(p.used_memory_bytes))
            if p.sm_util_pct is not None:
                sm.add_metric(_process_labels(p), p.sm_util_pct)
    yield mem
    yield sm
    yield from collect_other(s, stale_before)


def collect_other(s: Snapshot, stale_before: float) -> Iterator[Metric]:
    """:func:`collect_snapshot` without the two per-process families."""
    per_gpu: dict[tuple[str, str], list[int]] = {}
    for p in s.processes:
        if p.t >= stale_before:
            n = per_gpu.setdefault((str(p.gpu_index), p.gpu_uuid), [0, 0])
            n[0 if p.grant.allocated else 1] += 1

    util = GaugeMetricFamily("gpuforensics_gpu_utilization_percent", "GPU utilisation (NVML utilization rates)",
                             labels=GPU_LABELS)
    used = GaugeMetricFamily("gpuforensics_gpu_memory_used_bytes", "GPU memory used (NVML)", labels=GPU_LABELS)
    total = GaugeMetricFamily("gpuforensics_gpu_memory_total_bytes", "GPU memory total (NVML)", labels=GPU_LABELS)
    lost = GaugeMetricFamily("gpuforensics_gpu_lost", "1 when the GPU answered GpuIsLost", labels=GPU_LABELS)
    procs = GaugeMetricFamily("gpuforensics_gpu_processes",
                              "GPU processes on the GPU, by whether their owner was granted it",
                              labels=("gpu", "gpu_uuid", "allocated"))
    seen = GaugeMetricFamily("gpuforensics_gpu_last_sample_timestamp_seconds",
                             "When the GPU was last sampled (unix seconds)", labels=GPU_LABELS)
    for gpu in s.gpus:
        labels = [str(gpu.index), gpu.uuid, gpu.name]
        seen.add_metric(labels, gpu.t)
        if gpu.t < stale_before:
            continue
        lost.add_metric(labels, 1.0 if gpu.lost else 0.0)
        if gpu.util_pct is not None:
            util.add_metric(labels, gpu.util_pct)
        if gpu.memory_used_bytes is not None:
            used.add_metric(labels, float(gpu.memory_used_bytes))
        if gpu.memory_total_bytes is not None:
            total.add_metric(labels, float(gpu.memory_total_bytes))
        yes, no = per_gpu.get((str(gpu.index), gpu.uuid), [0, 0])
        procs.add_metric([str(gpu.index), gpu.uuid, "true"], float(yes))
        procs.add_metric([str(gpu.index), gpu.uuid, "false"], float(no))
    yield from (util, used, total, lost, procs, seen)

    if s.capture_running is not None:
        fired = CounterMetricFamily("gpuforensics_trigger_firings", "Times a trigger's rule fired (inside its cooldown or not)",
                                    labels=("trigger",))
        suppressed = CounterMetricFamily("gpuforensics_trigger_suppressed",
                                         "Firings inside the trigger's cooldown (no capture)", labels=("trigger",))
        captures = CounterMetricFamily("gpuforensics_trigger_captures", "Captures a trigger started, by outcome",
                                       labels=("trigger", "outcome"))
        for rule, c in sorted(s.rules.items()):
            fired.add_metric([rule], float(c.get("fired", 0) + c.get("suppressed", 0)))
            suppressed.add_metric([rule], float(c.get("suppressed", 0)))
            for outcome in ("captured", "failed"):
                captures.add_metric([rule, outcome], float(c.get(outcome, 0)))
        yield from (fired, suppressed, captures)
        tc = s.trigger_counters
        outcomes = CounterMetricFamily("gpuforensics_captures", "Triggered captures that ended, by outcome",
                                       labels=("outcome",))
        for outcome in ("ok", "incomplete", "failed"):
            outcomes.add_metric([outcome], float(tc.get(f"captures_{outcome}", 0)))
        yield outcomes
        hooks = CounterMetricFamily("gpuforensics_on_capture", "--on-capture commands, by outcome", labels=("outcome",))
        for outcome in ("ok", "failed", "timed_out", "skipped"):
            hooks.add_metric([outcome], float(tc.get(f"on_capture_{outcome}", 0)))
        yield hooks
        yield CounterMetricFamily("gpuforensics_trigger_bundles_rotated", "Triggered bundles deleted by --keep/--keep-bytes",
                                  value=float(tc.get("bundles_rotated", 0)))
        yield CounterMetricFamily("gpuforensics_trigger_evaluation_seconds", "Time spent evaluating the trigger rules",
                                  value=s.trigger_eval_s)
        yield GaugeMetricFamily("gpuforensics_trigger_capture_running", "1 while a triggered capture runs",
                                value=1.0 if s.capture_running else 0.0)

    yield _histogram("gpuforensics_recorder_tick_duration_seconds",
                     "From a tick's commands sent to the last source's answer", s.tick, TICK_BUCKETS)
    answer = HistogramMetricFamily("gpuforensics_recorder_source_answer_seconds",
                                   "From a tick's command to a source's answer", labels=("source",))
    up = GaugeMetricFamily("gpuforensics_recorder_source_up", "1 while the source's sampler answers", labels=("source",))
    missed = CounterMetricFamily("gpuforensics_recorder_source_ticks_missed",
                                 "Ticks a source's sampler had not answered in time (dropped for that source)",
                                 labels=("source",))
    restarts = CounterMetricFamily("gpuforensics_recorder_source_restarts",
                                   "Sampler processes ended and started again (hung, exited, failed)", labels=("source",))
    for src in s.sources:
        _histogram("", "", src.answer, TICK_BUCKETS, values=(src.name,), family=answer)
        up.add_metric([src.name], 1.0 if src.up else 0.0)
        missed.add_metric([src.name], float(src.missed))
        restarts.add_metric([src.name], float(src.restarts))
    yield from (answer, up, missed, restarts)
    yield CounterMetricFamily("gpuforensics_recorder_ticks", "Ticks sent", value=float(s.ticks))
    yield CounterMetricFamily("gpuforensics_recorder_ticks_dropped",
                              "Ticks skipped because the loop fell behind (suspended, starved)", value=float(s.ticks_behind))
    yield CounterMetricFamily("gpuforensics_recorder_records_written", "Records written to the ring",
                              value=float(s.records_written))
    yield CounterMetricFamily("gpuforensics_recorder_records_dropped", "Records not written (the ring's disk full)",
                              value=float(s.records_dropped))
    yield GaugeMetricFamily("gpuforensics_recorder_ring_bytes", "Bytes the ring holds on disk", value=float(s.ring_bytes))
    yield GaugeMetricFamily("gpuforensics_recorder_ring_max_bytes", "The ring's cap (--max-bytes)",
                            value=float(s.ring_max_bytes))
    yield CounterMetricFamily("gpuforensics_recorder_ring_segments_dropped",
                              "Ring segments deleted by the size and retention caps", value=float(s.ring_segments_dropped))
    yield CounterMetricFamily("gpuforensics_recorder_attribution_runs",
                              "Times the live attribution ran (identities changed)", value=float(s.live_refreshes))
    yield CounterMetricFamily("gpuforensics_metrics_scrape_errors", "Metrics requests that failed (bad request, "
                              "TLS handshake, timeout, client gone)", value=float(s.scrape_errors))
    yield GaugeMetricFamily("gpuforensics_recorder_snapshot_timestamp_seconds",
                            "When the served figures were taken (unix seconds)", value=s.t)


class _SnapshotCollector:
    def __init__(self, owner: RecorderMetrics, everything: bool = True) -> None:
        self.owner = owner
        self.everything = everything

    def collect(self) -> Iterator[Metric]:
        snap = self.owner.snapshot
        return (collect_snapshot if self.everything else collect_other)(snap, snap.t - self.owner.stale_s)


def floatToGoString(value: float) -> str:  # noqa: N802 - prometheus_client's name, typed
    text: str = _go_float(value)  # type: ignore[no-untyped-call]
    return text


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


_SORTED = sorted(range(len(PROCESS_LABELS)), key=lambda i: PROCESS_LABELS[i])


class ProcessLines:
    """The two per-process families as the text exposition format (0.0.4), byte for byte what
    prometheus_client's ``generate_latest`` writes for them (tested), with each process' label
    string kept while its identity, owner and grant stay the same: a node's 512 processes change
    values every tick, their labels seldom, and escaping 11 labels per series per scrape is most of
    prometheus_client's time."""

    def __init__(self, max_cached: int = 50_000) -> None:
        self.max_cached = max_cached
        self._labels: dict[tuple[Any, ...], str] = {}

    def label_string(self, p: ProcessLive) -> str:
        key = (p.pid, p.gpu_index, p.gpu_uuid, p.mig_uuid, p.owner, p.grant)
        text = self._labels.get(key)
        if text is None:
            values = _process_labels(p)
            text = ",".join(f'{PROCESS_LABELS[i]}="{_escape(values[i])}"' for i in _SORTED)
            if len(self._labels) >= self.max_cached:
                self._labels.clear()
            self._labels[key] = text
        return text

    def render(self, s: Snapshot, stale_before: float) -> str:
        live = [(self.label_string(p), p) for p in s.processes if p.t >= stale_before]
        out = []
        for (name, doc), field_name in ((MEMORY, "used_memory_bytes"), (SM, "sm_util_pct")):
            out.append(f"# HELP {name} {doc}\n# TYPE {name} gauge\n")
            for labels, p in live:
                value = getattr(p, field_name)
                if value is not None:
                    out.append(f"{name}{{{labels}}} {floatToGoString(value)}\n")
        return "".join(out)


class _ErrorSink:
    """Where wsgiref writes its error reports: counted and the latest kept, never printed here."""

    def __init__(self, owner: RecorderMetrics) -> None:
        self.owner = owner

    def write(self, text: str) -> int:
        if text.strip():
            self.owner.last_error = text.strip().splitlines()[-1][:500]
        return len(text)

    def flush(self) -> None:
        pass


class RecorderMetrics:
    """The exporter of one recorder run: bound at construction (a busy port is a usage error
    before anything runs), served by :meth:`start`, fed by the loop (:meth:`sent`,
    :meth:`answered`, :meth:`publish`), stopped by :meth:`close`."""

    def __init__(self, options: MetricsOptions, interval_s: float) -> None:
        self.o = options
        self.stale_s = options.stale_s or max(15.0, 5 * interval_s)
        self.snapshot = Snapshot(t=time.time())
        # the whole exposition as prometheus_client writes it (tests compare against it) and what
        # a scrape serves: the per-process families by ProcessLines, the rest by prometheus_client
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_SnapshotCollector(self))
        self.rest = CollectorRegistry(auto_describe=False)
        self.rest.register(_SnapshotCollector(self, everything=False))
        for registry in (self.registry, self.rest):
            ProcessCollector(namespace="", registry=registry)
        self.process_lines = ProcessLines()
        self.tick_hist = Histogram()
        self.answer_hist: dict[str, Histogram] = {}
        self._sent_at: float | None = None
        self._waiting: set[str] = set()
        self._last_sm: dict[tuple[int, str, str | None], tuple[float, float]] = {}
        self.errors = 0
        self.last_error: str | None = None
        self._logged_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.server = self._bind(options.ssl_context())

    # -- the server ----------------------------------------------------------------------------
    def _bind(self, ctx: ssl.SSLContext | None) -> WSGIServer:
        owner = self
        timeout = self.o.timeout_s
        try:
            infos = socket.getaddrinfo(self.o.host, self.o.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except socket.gaierror as exc:
            raise UsageError(f"--metrics-addr {self.o.host}:{self.o.port}: {exc.strerror or exc}") from None
        family = infos[0][0]

        class Handler(WSGIRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
                pass

            def get_stderr(self) -> IO[str]:
                return _ErrorSink(owner)  # type: ignore[return-value]

        Handler.timeout = timeout  # every read and write of the connection

        class Server(WSGIServer):
            address_family = family
            allow_reuse_address = True

            def get_request(self) -> tuple[socket.socket, Any]:
                sock, addr = self.socket.accept()
                sock.settimeout(timeout)
                if ctx is not None:
                    try:
                        sock = ctx.wrap_socket(sock, server_side=True)  # the handshake, within the timeout
                    except BaseException:
                        owner.errors += 1
                        sock.close()
                        raise
                return sock, addr

            def handle_error(self, request: Any, client_address: Any) -> None:
                owner.errors += 1

        try:
            server = Server((str(infos[0][4][0]), self.o.port), Handler, bind_and_activate=True)
        except OSError as exc:
            raise UsageError(f"--metrics-addr {self.o.host}:{self.o.port}: cannot listen: "
                             f"{exc.strerror or exc}") from None
        server.set_app(self._app)
        server.timeout = 0.2  # handle_request() returns at least this often: close() is seen
        return server

    def exposition(self) -> bytes:
        """One scrape's body (text format 0.0.4), from the latest snapshot."""
        snap = self.snapshot
        head = self.process_lines.render(snap, snap.t - self.stale_s)
        return head.encode("utf-8") + generate_latest(self.rest)

    def _app(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD"), ("Content-Type", "text/plain")])
            return [b"GET /metrics\n"]
        body = self.exposition()
        headers = [("Content-Type", CONTENT_TYPE_PLAIN_0_0_4)]
        if "gzip" in (environ.get("HTTP_ACCEPT_ENCODING") or ""):
            body = gzip.compress(body, compresslevel=1)
            headers.append(("Content-Encoding", "gzip"))
        headers.append(("Content-Length", str(len(body))))
        start_response("200 OK", headers)
        return [] if environ["REQUEST_METHOD"] == "HEAD" else [body]

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http{'s' if self.o.tls_cert else ''}://{f'[{host}]' if ':' in host else host}:{port}/metrics"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="gpuforensics-metrics", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                self.server.handle_request()  # waits up to server.timeout; one connection, start to end
            except (OSError, ValueError):  # the socket closed under it
                return

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)  # a connection mid-request is cut: the recorder's stop does not wait on a client
        self.server.server_close()

    # -- fed by the loop -----------------------------------------------------------------------
    def sent(self, busy_since: Mapping[str, float]) -> None:
        """A tick's commands went to these sources (name -> when, monotonic)."""
        self._sent_at = min(busy_since.values()) if busy_since else None
        self._waiting = set(busy_since)

    def answered(self, name: str, since_mono: float) -> None:
        """A source answered the command it got at ``since_mono``."""
        now = time.monotonic()
        self.answer_hist.setdefault(name, Histogram()).observe(max(0.0, now - since_mono))
        if name in self._waiting:
            self._waiting.discard(name)
            if not self._waiting and self._sent_at is not None:
                self.tick_hist.observe(max(0.0, now - self._sent_at))
                self._sent_at = None

    def _carry_sm(self, procs: tuple[ProcessLive, ...]) -> tuple[ProcessLive, ...]:
        """NVML answers a process' SM utilisation only for periods not yet read (a tick shorter
        than the driver's period gets none): the last figure holds until ``stale_s``, so the
        series does not flap."""
        last, out = self._last_sm, []
        self._last_sm = {}
        for p in procs:
            key = (p.pid, p.gpu_uuid, p.mig_uuid)
            if p.sm_util_pct is not None:
                self._last_sm[key] = (p.t, p.sm_util_pct)
            elif key in last and last[key][0] >= p.t - self.stale_s:
                self._last_sm[key] = last[key]
                p = replace(p, sm_util_pct=last[key][1])
            out.append(p)
        return tuple(out)

    def publish(self, rec: Any, live: LiveState | None, log: Any = None) -> None:
        """Take the snapshot the next scrapes serve (the loop thread, once per tick)."""
        gpus: tuple[GpuLive, ...] = ()
        procs: tuple[ProcessLive, ...] = ()
        if live is not None:
            live.refresh()
            gpus, procs = live.gpus(), self._carry_sm(live.processes())
        sources = tuple(SourceFigures(n, st.status == "running", st.ticks, st.missed, st.restarts,
                                      self.answer_hist[n].frozen() if n in self.answer_hist else ((), 0.0))
                        for n, st in rec.sources.items())
        writer = rec.writer
        engine = rec.triggers
        self.snapshot = Snapshot(
            t=time.time(), gpus=gpus, processes=procs, sources=sources, ticks=rec.ticks,
            ticks_behind=rec.ticks_behind, records_written=rec.records_written,
            records_dropped=rec.records_dropped + rec.disk_full_dropped,
            ring_bytes=writer.size_bytes if writer is not None else 0,
            ring_max_bytes=rec.o.max_bytes, ring_segments_dropped=writer.dropped_segments if writer is not None else 0,
            live_refreshes=live.refreshes if live is not None else 0, tick=self.tick_hist.frozen(),
            rules={k: dict(v) for k, v in engine.per_rule.items()} if engine is not None else {},
            trigger_counters=dict(engine.counters) if engine is not None else {},
            trigger_eval_s=engine.eval_s if engine is not None else 0.0,
            capture_running=(engine.running is not None) if engine is not None else None,
            scrape_errors=self.errors)
        if log is not None and self.last_error and self._logged_error is None:  # the first one only
            self._logged_error = self.last_error
            log(f"metrics: a request failed: {self.last_error} (counted in gpuforensics_metrics_scrape_errors_total)")
