"""``cluster capture``: every chosen node captured through its capture pod's ``exec``, concurrently.

::

    choose nodes ──> find each node's capture pod (or create a Job there) ──> exec
    `gpuforensics capture -o - --node N ...` ──> stdout streamed to DIR/.N.tgz.partial (hashed)
    ──> exit status from the error channel ──> verify every member against the manifest
    ──> DIR/N.tgz ──> one row per node in the summary and DIR/cluster.json

A node never disappears from the result: no capture pod, exec refused (403, with the API
server's message naming the missing permission), past its deadline, cut mid-stream, failed
capture or a bundle that does not verify are rows with a status and an error. Only a received
bundle that verifies is kept; anything else is removed. At most ``parallel`` nodes are in flight
(threads: each holds one WebSocket message and a 16 KiB stderr tail, never a bundle).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from forensics._version import __version__
from forensics.bundle.cluster_dir import CLUSTER_FORMAT, CLUSTER_JSON
from forensics.bundle.leftovers import owner_token, sweep_abandoned
from forensics.cluster.jobspec import job_manifest, job_name
from forensics.cluster.kube import APIError, Kube, load_client_config
from forensics.cluster.options import ClusterCaptureOptions
from forensics.cluster.selection import capture_pods_by_node, check_options, choose_nodes, pick_pod
from forensics.cluster.stream import StreamOutcome, receive
from forensics.errors import (
    BundleError,
    BundleNotWritten,
    ClusterError,
    ForensicsError,
    OutputNotWritten,
    UsageError,
    storage_refused,
    write_failure,
)

__all__ = [
    "CLUSTER_JSON",
    "ClusterResult",
    "NodeResult",
    "STATUSES",
    "format_table",
    "incomplete_collectors",
    "run_cluster_capture",
]

#: ``ok``: verified bundle kept, every collector in its manifest ``ok`` (or its source absent:
#: ``unavailable``, ``skipped``); ``partial``: kept, but the capture was interrupted (exit 3) or a
#: collector's evidence is ``partial`` or ``failed`` (``incomplete`` names them); the rest keep no
#: bundle.
STATUSES = ("ok", "partial", "no-capture-pod", "forbidden", "timed-out", "failed")
_JOB_POLL_S = 0.5
_EXIT_INTERRUPTED = 3


@dataclass
class NodeResult:
    """One row of the summary (and of ``cluster.json``'s ``nodes``)."""

    node: str
    status: str = "failed"
    pod: str | None = None
    bundle: str | None = None  # file name in the output directory
    bundle_name: str | None = None  # the capture's own name (the bundle's top directory)
    sha256: str | None = None
    bytes: int = 0
    members: int | None = None
    duration_s: float = 0.0
    exit_code: int | None = None
    error: str | None = None
    job: str | None = None
    subprotocol: str | None = None
    stderr_tail: str = ""
    #: the local storage refused the received bundle (disk full, quota, I/O error, read-only)
    not_written: bool = False
    #: the collectors whose evidence in the kept bundle is partial or failed: "name: status (error)"
    incomplete: list[str] = field(default_factory=list)

    @property
    def kept(self) -> bool:
        return self.status in ("ok", "partial")


@dataclass
class ClusterResult:
    out_dir: Path
    started: str
    finished: str
    nodes: list[NodeResult] = field(default_factory=list)
    interrupted: bool = False
    path: Path | None = None
    #: ``cluster.json`` could not be written (then ``path`` is None)
    summary_error: ForensicsError | None = None

    @property
    def all_ok(self) -> bool:
        return bool(self.nodes) and all(n.status == "ok" for n in self.nodes) and not self.interrupted

    def write_failure(self) -> ForensicsError | None:
        """What the local storage refused, as the error the CLI exits with (exit 4, errors.py):
        ``cluster.json`` itself, else the received bundles; None when everything was written."""
        if self.summary_error is not None:
            return self.summary_error
        refused = [n for n in self.nodes if n.not_written]
        if not refused:
            return None
        return BundleNotWritten(f"{len(refused)} bundle(s) not written into {self.out_dir}: "
                                + "; ".join(f"{n.node}: {n.error}" for n in refused[:3]))

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for n in self.nodes if n.status == s) for s in STATUSES if any(n.status == s for n in self.nodes)}


def incomplete_collectors(manifest: dict[str, Any] | None) -> list[str]:
    """The collectors a capture's manifest records as ``partial`` or ``failed``, each as
    ``"name: status (error)"``: a bundle that verifies can still hold incomplete evidence (a
    collector timed out, an engine stopped answering), and that node is not ``ok``. A source
    that is absent on the node (``unavailable``) or left out (``skipped``) is not incomplete."""
    out = []
    for c in (manifest or {}).get("collectors") or []:
        if isinstance(c, dict) and c.get("status") in ("partial", "failed"):
            error = f" ({c['error']})" if c.get("error") else ""
            out.append(f"{c.get('name')}: {c.get('status')}{error}")
    return out


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _one_line(text: str | None, limit: int = 300) -> str | None:
    if not text:
        return None
    return " ".join(text.split())[:limit] or None


def _last_line(text: str) -> str | None:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else None


# -- one node ----------------------------------------------------------------------------------
class _NodeRun:
    def __init__(self, kube: Kube, opts: ClusterCaptureOptions, cancel: threading.Event,
                 progress: Callable[[str], None]) -> None:
        self.kube = kube
        self.opts = opts
        self.cancel = cancel
        self.progress = progress

    def capture_in_pod(self, res: NodeResult, pod: str, t0: float) -> None:
        opts = self.opts
        deadline = t0 + opts.node_deadline_s()
        res.pod = pod
        try:
            ws = self.kube.open_exec(opts.namespace, pod, opts.container, opts.capture_command(res.node),
                                     connect_timeout_s=max(1.0, min(30.0, deadline - time.monotonic())))
        except APIError as exc:
            res.status = "forbidden" if exc.kind in ("forbidden", "unauthorized") else "failed"
            res.error = _one_line(f"exec refused: {exc}" if exc.status else f"exec failed: {exc}")
            return
        # named as capture names its partial archives (the owner token of bundle.leftovers): the
        # partial of a killed run is removed by the next run into this directory
        partial = opts.out_dir / f".gpuforensics-{res.node}.{owner_token()}.{secrets.token_hex(4)}.tgz.partial"
        try:
            try:
                outcome = receive(ws, partial, deadline, self.cancel)
            except OSError as exc:  # our own disk, not the node: said as such, exit 4 when refused
                res.not_written = storage_refused(exc)
                res.error = _one_line(f"cannot write the received bundle into {opts.out_dir}: {exc.strerror or exc}")
                return
            self._settle(res, outcome, partial)
        finally:
            partial.unlink(missing_ok=True)

    def _settle(self, res: NodeResult, out: StreamOutcome, partial: Path) -> None:
        res.bytes, res.exit_code, res.subprotocol = out.stdout_bytes, out.exit_code, out.subprotocol
        res.stderr_tail = out.stderr_tail[-4096:]
        if out.ended == "deadline":
            res.status = "timed-out"
            res.error = (f"no complete bundle within the node deadline of {self.opts.node_deadline_s():g} s "
                         f"({out.stdout_bytes} bytes received)")
            return
        if out.ended == "cancelled":
            res.error = f"interrupted ({out.stdout_bytes} bytes received)"
            return
        if out.ended == "too-large":
            res.error = f"stream over the size cap after {out.stdout_bytes} bytes: stopped"
            return
        if out.ended == "cut":
            res.error = f"stream cut after {out.stdout_bytes} bytes, before the exit status: bundle discarded"
            return
        if out.exit_code not in (0, _EXIT_INTERRUPTED):
            why = _last_line(out.stderr_tail) or out.status_message or "the capture failed"
            res.error = _one_line(f"capture exited {out.exit_code}: {why}" if out.exit_code is not None else why)
            return
        from forensics.bundle.verify import verify_bundle

        try:
            verified = verify_bundle(partial)
        except BundleError as exc:
            res.error = _one_line(f"received bundle rejected ({out.stdout_bytes} bytes): {exc}")
            return
        if verified.file_sha256 != out.sha256:  # the file is what was received, or nothing is kept
            res.error = "received bundle changed on disk before it was verified"
            return
        final = self.opts.out_dir / f"{res.node}.tgz"
        try:
            os.link(partial, final)  # never over an existing file
        except FileExistsError:
            res.error = f"{final.name} already exists in the output directory: bundle not kept"
            return
        except OSError as exc:
            res.not_written = storage_refused(exc)
            res.error = _one_line(f"cannot keep {final.name}: {exc.strerror or exc}")
            return
        res.bundle, res.bundle_name = final.name, f"{verified.top}.tgz"
        res.sha256, res.members = verified.file_sha256, verified.members_checked
        res.incomplete = incomplete_collectors(verified.manifest)
        res.status = "ok" if out.exit_code == 0 and not res.incomplete else "partial"
        if out.exit_code == _EXIT_INTERRUPTED:
            res.error = "the capture was interrupted: the bundle holds what it collected"
        elif res.incomplete:
            res.error = _one_line(f"evidence incomplete: {'; '.join(res.incomplete)}", limit=500)

    # -- --job ---------------------------------------------------------------------------------
    def capture_with_job(self, res: NodeResult, t0: float) -> None:
        opts = self.opts
        name = job_name(res.node)
        wait_s = int(opts.job_start_timeout_s + opts.node_deadline_s()) + 30
        body = job_manifest(res.node, opts.namespace, name, wait_s, opts.image)
        try:
            self.kube.request("POST", f"/apis/batch/v1/namespaces/{opts.namespace}/jobs", body=body)
        except APIError as exc:
            res.status = "forbidden" if exc.kind == "forbidden" else "failed"
            res.error = _one_line(f"cannot create Job {name}: {exc}")
            return
        res.job = name
        try:
            pod, why = self._wait_for_job_pod(name, time.monotonic() + opts.job_start_timeout_s)
            if pod is None:
                res.error = _one_line(why)
                res.status = "timed-out" if why and "not running after" in why else "failed"
                return
            self.capture_in_pod(res, pod, time.monotonic())
        finally:
            self._delete_job(res, name)

    def _wait_for_job_pod(self, name: str, until: float) -> tuple[str | None, str | None]:
        path = f"/api/v1/namespaces/{self.opts.namespace}/pods"
        last = "no pod yet"
        while time.monotonic() < until and not self.cancel.is_set():
            try:
                pods = self.kube.list_items(path, {"labelSelector": f"job-name={name}"})
            except APIError as exc:
                return None, f"cannot watch the Job's pod: {exc}"
            for pod in pods:
                status = pod.get("status", {})
                phase = status.get("phase")
                pod_name = str(pod.get("metadata", {}).get("name"))
                if phase == "Running":
                    return pod_name, None
                if phase in ("Failed", "Succeeded"):
                    return None, f"Job pod {pod_name} {phase}: {status.get('reason') or status.get('message') or ''}"
                for cs in status.get("containerStatuses") or []:
                    waiting = (cs.get("state") or {}).get("waiting") or {}
                    if waiting.get("reason") in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                                                 "CreateContainerConfigError", "CreateContainerError"):
                        return None, f"Job pod {pod_name}: {waiting['reason']}: {waiting.get('message', '')}"
                last = f"pod {pod_name} is {phase}"
            time.sleep(_JOB_POLL_S)
        if self.cancel.is_set():
            return None, "interrupted while the Job started"
        try:
            job = self.kube.request("GET", f"/apis/batch/v1/namespaces/{self.opts.namespace}/jobs/{name}")
            conditions = "; ".join(f"{c.get('type')}: {c.get('message') or c.get('reason')}"
                                   for c in job.get("status", {}).get("conditions") or [])
            if conditions:
                last += f"; Job: {conditions}"
        except APIError:
            pass
        return None, f"Job {name}: pod not running after {self.opts.job_start_timeout_s:g} s ({last})"

    def _delete_job(self, res: NodeResult, name: str) -> None:
        try:  # Background: the Job's pod goes too (the API's default for Jobs would orphan it)
            self.kube.request("DELETE", f"/apis/batch/v1/namespaces/{self.opts.namespace}/jobs/{name}",
                              {"propagationPolicy": "Background"})
        except APIError as exc:
            if exc.kind != "not-found":
                note = f"Job {name} not deleted ({exc}); its activeDeadlineSeconds ends it"
                res.error = f"{res.error}; {note}" if res.error else note


# -- the whole run -----------------------------------------------------------------------------
def _prepare_dir(out_dir: Path, say: Callable[[str], None] | None = None) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--output: cannot create {out_dir}: {exc.strerror or exc}") from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise UsageError(f"--output: {out_dir} is not writable")
    if (out_dir / CLUSTER_JSON).exists():
        raise UsageError(f"--output: {out_dir} already holds a cluster capture ({CLUSTER_JSON}); choose a new directory")
    for left in sweep_abandoned(out_dir):  # a run killed before its summary: its partial bundles
        (say or _stderr_notice)(f"removed {left.kind} {left.path.name} left by process {left.owner_pid}, which is gone")


def _stderr_notice(message: str) -> None:
    print(f"gpuforensics: {message}", file=sys.stderr, flush=True)


def run_cluster_capture(opts: ClusterCaptureOptions, progress: Callable[[str], None] | None = None,
                        notice: Callable[[str], None] | None = None) -> ClusterResult:
    """Capture every chosen node; write ``DIR/<node>.tgz`` for each verified bundle and
    ``DIR/cluster.json``. Raises :class:`ClusterError` only when the cluster cannot be asked at
    all; a ``KeyboardInterrupt`` stops the nodes in flight, writes the summary, then propagates.
    What the local storage refused is in :meth:`ClusterResult.write_failure`. ``notice``
    receives what must be said even without a terminal (removed leftovers; default: stderr)."""
    check_options(opts)
    say = progress or (lambda _msg: None)
    _prepare_dir(opts.out_dir, notice or _stderr_notice)
    kube = Kube(load_client_config(opts.kubeconfig, opts.context))
    started = _now()
    try:
        pods = {} if opts.job else capture_pods_by_node(kube, opts)
        nodes = choose_nodes(kube, opts, pods)
        result = ClusterResult(opts.out_dir, started, started, [NodeResult(n) for n in nodes])
        say(f"{len(nodes)} node(s), {min(opts.parallel, len(nodes))} at a time"
            + (" (a Job per node)" if opts.job else f" (capture pods in namespace {opts.namespace})"))
        cancel = threading.Event()
        runner = _NodeRun(kube, opts, cancel, say)

        def one(res: NodeResult) -> NodeResult:
            t0 = time.monotonic()
            try:
                if cancel.is_set():
                    res.error = "interrupted before it started"
                elif opts.job:
                    runner.capture_with_job(res, t0)
                else:
                    name, why = pick_pod(pods.get(res.node, []))
                    if name is None:
                        res.status = "no-capture-pod"
                        res.error = why or (f"no pod of the capture DaemonSet ({opts.pod_selector}) on this node "
                                            f"in namespace {opts.namespace}")
                    else:
                        runner.capture_in_pod(res, name, t0)
            except Exception as exc:  # noqa: BLE001 - one node's bug must not cost the others
                res.status, res.error = "failed", _one_line(f"internal error: {type(exc).__name__}: {exc}")
            res.duration_s = round(time.monotonic() - t0, 3)
            say(f"{res.node}: {res.status}" + (f" ({res.error})" if res.error and not res.kept else "")
                + (f" {res.bytes} bytes in {res.duration_s:.1f} s" if res.kept else ""))
            return res

        pool = ThreadPoolExecutor(max_workers=min(opts.parallel, max(1, len(nodes))), thread_name_prefix="node")
        futures: set[Future[NodeResult]] = {pool.submit(one, r) for r in result.nodes}
        try:
            while futures:
                _, futures = wait(futures, timeout=0.5, return_when=FIRST_COMPLETED)
        except KeyboardInterrupt:
            result.interrupted = True
            cancel.set()
            wait(futures)
            raise
        finally:
            pool.shutdown(wait=True)
            result.finished = _now()
            try:
                result.path = write_summary(result, opts)
            except OSError as exc:
                result.summary_error = write_failure(f"cannot write {opts.out_dir / CLUSTER_JSON}", exc,
                                                     OutputNotWritten, ClusterError)
        return result
    finally:
        kube.close()


def summary_document(result: ClusterResult, opts: ClusterCaptureOptions) -> dict[str, Any]:
    return {
        "format": CLUSTER_FORMAT,
        "format_version": 1,
        "tool": {"name": "gpuforensics", "version": __version__},
        "started": result.started,
        "finished": result.finished,
        "interrupted": result.interrupted,
        "mode": "job" if opts.job else "daemonset",
        "namespace": opts.namespace,
        "selection": {"nodes": list(opts.nodes) or None, "selector": opts.selector, "pods_of": opts.pods_of},
        "parallel": opts.parallel,
        "node_timeout_s": opts.node_deadline_s(),
        "command": opts.capture_command("NODE"),
        "counts": result.counts(),
        "all_ok": result.all_ok,
        "nodes": [asdict(n) for n in result.nodes],
    }


def write_summary(result: ClusterResult, opts: ClusterCaptureOptions) -> Path:
    """``DIR/cluster.json``, written atomically (temporary file, fsync, rename), mode 0600."""
    final = opts.out_dir / CLUSTER_JSON
    data = (json.dumps(summary_document(result, opts), indent=1, sort_keys=True) + "\n").encode()
    fd, tmp = tempfile.mkstemp(prefix=f".{CLUSTER_JSON}.", dir=opts.out_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return final


def format_table(result: ClusterResult) -> str:
    """The summary table: node, pod, status, bundle, SHA-256 (first 12), duration, error."""
    head = ("NODE", "POD", "STATUS", "BUNDLE", "SHA-256", "DURATION", "ERROR")
    rows = [(n.node, n.pod or "-", n.status, n.bundle or "-", (n.sha256 or "-")[:12],
             f"{n.duration_s:.1f} s", n.error or "") for n in result.nodes]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(6)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:6], widths, strict=True)) + "  " + r[6] for r in [head, *rows]]
    counts = ", ".join(f"{v} {k}" for k, v in result.counts().items())
    lines.append(f"{len(result.nodes)} node(s): {counts}" + (" (interrupted)" if result.interrupted else ""))
    return "\n".join(line.rstrip() for line in lines)
