"""``record --metrics-addr HOST:PORT``: the recorder's figures as Prometheus metrics, attributed.

What dcgm-exporter cannot label: every GPU process with the container and pod it belongs to and
what that owner was granted on that GPU, decided by the analysis' own joins
(forensics.record.live, forensics.analysis.attribution), so a series and a finding never disagree.

Served (what :mod:`forensics.record.live.exposition` makes of each tick's snapshot; ``prometheus_client``'s exposition, text or OpenMetrics by the scraper's Accept header):

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
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    CollectorRegistry,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import (
    Metric,
)

from forensics.errors import UsageError
from forensics.record.live.exposition import (
    Histogram,
    ProcessLines,
    ProcessView,
    Snapshot,
    SourceFigures,
    collect_other,
    collect_snapshot,
)

if TYPE_CHECKING:
    from forensics.record.live.state import LiveState
    from forensics.record.live.views import GpuLive

__all__ = ["DEFAULT_HOST", "MetricsOptions", "RecorderMetrics", "metrics_options", "parse_metrics_addr"]

DEFAULT_HOST = "127.0.0.1"

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


class _SnapshotCollector:
    def __init__(self, owner: RecorderMetrics, everything: bool = True) -> None:
        self.owner = owner
        self.everything = everything

    def collect(self) -> Iterator[Metric]:
        snap = self.owner.snapshot
        return (collect_snapshot if self.everything else collect_other)(snap, snap.t - self.owner.stale_s)



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
        self.options = options
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
        self._prev_rows: list[tuple[Any, ...]] = []  # the last tick's process rows ...
        self._carried: dict[tuple[int, str, str | None], tuple[float, float]] = {}  # ... and SM figures carried
        self._owners: tuple[tuple[Any, Any], ...] = ()
        self._owners_at = (-1, -1)
        self.errors = 0
        self.last_error: str | None = None
        self._logged_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.server = self._bind(options.ssl_context())

    # -- the server ----------------------------------------------------------------------------
    def _bind(self, ctx: ssl.SSLContext | None) -> WSGIServer:
        owner = self
        timeout = self.options.timeout_s
        try:
            infos = socket.getaddrinfo(self.options.host, self.options.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except socket.gaierror as exc:
            raise UsageError(f"--metrics-addr {self.options.host}:{self.options.port}: {exc.strerror or exc}") from None
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
            server = Server((str(infos[0][4][0]), self.options.port), Handler, bind_and_activate=True)
        except OSError as exc:
            raise UsageError(f"--metrics-addr {self.options.host}:{self.options.port}: cannot listen: "
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
        return f"http{'s' if self.options.tls_cert else ''}://{f'[{host}]' if ':' in host else host}:{port}/metrics"

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

    def _carry_sm(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """NVML answers a process' SM utilisation only for periods not yet read (a tick shorter
        than the driver's period gets none): the last figure holds until ``stale_s``, so the
        series does not flap. Rows are ``LiveState.process_rows``; only a tick with a process
        without a figure costs more than a look."""
        prev_rows, self._prev_rows = self._prev_rows, rows
        carried, self._carried = self._carried, {}
        if not any(r[6] is None for r in rows):
            return rows
        last = {(r[0], r[2], r[3]): (r[4], r[6]) for r in prev_rows if r[6] is not None}
        last.update(carried)
        out = []
        for r in rows:
            if r[6] is None:
                key = (r[0], r[2], r[3])
                hit = last.get(key)
                if hit is not None and hit[0] >= r[4] - self.stale_s:
                    self._carried[key] = hit
                    r = (*r[:6], hit[1])
            out.append(r)
        return out

    def publish(self, rec: Any, live: LiveState | None, log: Any = None) -> None:
        """Take the snapshot the next scrapes serve (the loop thread, once per tick)."""
        gpus: tuple[GpuLive, ...] = ()
        procs: ProcessView | tuple[()] = ()
        if live is not None:
            live.refresh()
            at = (live.refreshes, live.process_gen)
            if at != self._owners_at:  # owners and grants change with the attribution and the process set only
                self._owners = tuple(live.owner_grant(pid, uuid, mig) for pid, _, uuid, mig in live.process_keys())
                self._owners_at = at
            gpus, procs = live.gpus(), ProcessView(self._carry_sm(live.process_rows()), self._owners)
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
            ring_max_bytes=rec.options.max_bytes, ring_segments_dropped=writer.dropped_segments if writer is not None else 0,
            live_refreshes=live.refreshes if live is not None else 0, tick=self.tick_hist.frozen(),
            rules={k: dict(v) for k, v in engine.per_rule.items()} if engine is not None else {},
            trigger_counters=dict(engine.counters) if engine is not None else {},
            trigger_eval_s=engine.eval_s if engine is not None else 0.0,
            capture_running=(engine.running is not None) if engine is not None else None,
            scrape_errors=self.errors)
        if log is not None and self.last_error and self._logged_error is None:  # the first one only
            self._logged_error = self.last_error
            log(f"metrics: a request failed: {self.last_error} (counted in gpuforensics_metrics_scrape_errors_total)")
