"""The pods ``exec`` subresource of the loopback API server: WebSocket, channel protocol, real children.

``GET /api/v1/namespaces/{ns}/pods/{name}/exec?command=...&stdout=true&stderr=true`` with
``Upgrade: websocket`` is answered as the API server (proxying the kubelet) answers it:

- the subprotocol is chosen from what the client offers, newest first: ``v5.channel.k8s.io``
  (v4 plus the client's CLOSE signal on channel 255), then ``v4.channel.k8s.io``; none of them
  is a 400, as is a request that is not a WebSocket upgrade;
- every message is a binary frame whose first byte is the channel: 1 stdout, 2 stderr, 3 the
  error channel, which carries the ``metav1.Status`` at the end (``{"status": "Success"}``, or
  ``Failure`` with ``reason: NonZeroExitCode`` and ``details.causes[0]`` = ``ExitCode``/``"<n>"``),
  after which the server sends a close frame; an empty message opens each channel first;
- the command runs as a **real child process** on the pod's simulated node (:class:`SimNode`):
  ``gpuforensics ...`` becomes ``python -m forensics ...`` of this checkout; the environment is
  the container's ``env`` from the pod spec (``fieldRef: spec.nodeName`` resolved) plus the
  node's own (its simulated NVML scenario, a kubeconfig for this server), the working directory
  is the node's staging directory. Output is sent as it is read (32 KiB at most per message),
  so a slow reader holds the child back through TCP, as a real kubelet stream does.
- faults, per node: ``cut_after_bytes`` drops the TCP connection (no status, no close frame)
  once that much stdout was sent; ``corrupt_at_byte`` flips one stdout byte. A client that
  goes away (close frame or closed socket) has its command killed (the whole process group),
  and :meth:`ExecRuntime.stop` kills whatever still runs.

:class:`ExecRuntime` also records every exec (pod, command, exit code, bytes) in ``execs``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

__all__ = ["ExecRecord", "ExecRuntime", "SimNode", "V4", "V5", "session_members"]

V4 = "v4.channel.k8s.io"
V5 = "v5.channel.k8s.io"
_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
REPO = Path(__file__).resolve().parents[2]
_STDOUT, _STDERR, _ERROR = 1, 2, 3


@dataclass
class SimNode:
    """One simulated node: where its commands run and with what, and how it misbehaves."""

    name: str
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    cut_after_bytes: int | None = None
    corrupt_at_byte: int | None = None


@dataclass
class ExecRecord:
    pod: str
    node: str
    command: list[str]
    subprotocol: str
    exit_code: int | None = None
    stdout_bytes: int = 0
    pid: int | None = None  # the child's (its session id too)
    outcome: str = "running"  # exited, client-gone, cut, spawn-failed


def _accept(key: str) -> str:
    return base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()


def _frame(payload: bytes, opcode: int = 0x2) -> bytes:
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


def _read_frame(rfile: Any) -> tuple[int, bytes] | None:
    """One client frame (masked, as RFC 6455 requires of clients); None at end of stream."""
    head = rfile.read(2)
    if len(head) < 2:
        return None
    opcode, n = head[0] & 0x0F, head[1] & 0x7F
    if n == 126:
        n = struct.unpack("!H", rfile.read(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", rfile.read(8))[0]
    mask = rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
    data = rfile.read(n)
    if len(data) < n:
        return None
    return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(data))


def _status(exit_code: int | None, command: list[str], error: str | None = None) -> bytes:
    if exit_code == 0:
        body: dict[str, Any] = {"metadata": {}, "status": "Success"}
    elif exit_code is not None:
        body = {"metadata": {}, "status": "Failure",
                "message": f"command terminated with non-zero exit code: error executing command "
                           f"[{' '.join(command)}], exit code {exit_code}",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]}}
    else:
        body = {"metadata": {}, "status": "Failure", "reason": "InternalError",
                "message": error or "error executing command"}
    return json.dumps(body, separators=(",", ":")).encode()


def container_env(pod: Mapping[str, Any], container: str | None) -> dict[str, str]:
    """The container's ``env`` as the kubelet resolves it (values and ``spec.nodeName`` refs)."""
    spec = pod.get("spec", {})
    containers = spec.get("containers") or []
    chosen = next((c for c in containers if c.get("name") == container), containers[0] if containers else {})
    env: dict[str, str] = {}
    for item in chosen.get("env") or []:
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
            env[item["name"]] = spec.get("nodeName", "")
        elif item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[item["name"]] = pod["metadata"]["name"]
    return env


class ExecRuntime:
    """Runs exec requests for the loopback server on simulated nodes (by the pod's ``nodeName``)."""

    def __init__(self, nodes: list[SimNode] | None = None, chunk: int = 32 * 1024) -> None:
        self.nodes: dict[str, SimNode] = {n.name: n for n in nodes or []}
        self.chunk = chunk
        self.execs: list[ExecRecord] = []
        self._lock = threading.Lock()
        self._children: set[subprocess.Popen[bytes]] = set()
        self._stopping = threading.Event()

    def add(self, node: SimNode) -> None:
        self.nodes[node.name] = node

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            children = list(self._children)
        for child in children:
            _kill_group(child)

    # -- the request ----------------------------------------------------------------------
    def serve(self, req: BaseHTTPRequestHandler, pod: dict[str, Any], query: dict[str, list[str]]) -> None:
        """Upgrade ``req`` and run the exec; the caller has routed and authorized it."""
        offered = [p.strip() for p in (req.headers.get("Sec-WebSocket-Protocol") or "").split(",") if p.strip()]
        key = req.headers.get("Sec-WebSocket-Key")
        if (req.headers.get("Upgrade") or "").lower() != "websocket" or not key:
            _plain(req, 400, "Upgrade request required")
            return
        proto = next((p for p in (V5, V4) if p in offered), None)
        if proto is None:
            _plain(req, 400, f"unable to upgrade: no supported subprotocol in {offered!r}")
            return
        command = query.get("command") or []
        node_name = pod["spec"].get("nodeName", "")
        node = self.nodes.get(node_name)
        record = ExecRecord(pod["metadata"]["name"], node_name, list(command), proto)
        with self._lock:
            self.execs.append(record)
        req.send_response(101, "Switching Protocols")
        req.send_header("Upgrade", "websocket")
        req.send_header("Connection", "Upgrade")
        req.send_header("Sec-WebSocket-Accept", _accept(key))
        req.send_header("Sec-WebSocket-Protocol", proto)
        req.end_headers()
        req.wfile.flush()
        req.close_connection = True
        sock: socket.socket = req.connection
        gone = threading.Event()
        threading.Thread(target=self._watch_client, args=(req, sock, gone), daemon=True,
                         name=f"exec-client-{record.pod}").start()
        try:
            for ch in (_STDOUT, _STDERR, _ERROR):  # open the channels
                sock.sendall(_frame(bytes([ch])))
            if node is None or not command:
                err = f"pod {record.pod}: no simulated node {node_name!r}" if node is None else "you must specify at least 1 command"
                record.outcome = "spawn-failed"
                sock.sendall(_frame(bytes([_ERROR]) + _status(None, command, err)))
                sock.sendall(_frame(struct.pack("!H", 1000), 0x8))
                return
            self._run(record, node, pod, query, command, sock, gone)
        except OSError:  # the client went away while we wrote
            if record.outcome == "running":
                record.outcome = "client-gone"

    def _watch_client(self, req: BaseHTTPRequestHandler, sock: socket.socket, gone: threading.Event) -> None:
        try:
            while True:
                frame = _read_frame(req.rfile)
                if frame is None:
                    break
                opcode, data = frame
                if opcode == 0x8:  # close: answer it, then we are done
                    try:
                        sock.sendall(_frame(data[:2] or struct.pack("!H", 1000), 0x8))
                    except OSError:
                        pass
                    break
                if opcode == 0x9:
                    sock.sendall(_frame(data, 0xA))
                # v5 CLOSE (255, channel) and stdin data: nothing to do with stdin=false
        except (OSError, ValueError, struct.error):
            pass
        gone.set()

    def _run(self, record: ExecRecord, node: SimNode, pod: dict[str, Any], query: dict[str, list[str]],
             command: list[str], sock: socket.socket, gone: threading.Event) -> None:
        argv = [sys.executable, "-m", "forensics", *command[1:]] if command[0] == "gpuforensics" else command
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(node.workdir),
               "PYTHONPATH": str(REPO), "LANG": "C.UTF-8"}
        env.update(container_env(pod, (query.get("container") or [None])[0]))
        env.update(node.env)
        node.workdir.mkdir(parents=True, exist_ok=True)
        try:
            child = subprocess.Popen(argv, cwd=node.workdir, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            record.outcome = "spawn-failed"
            sock.sendall(_frame(bytes([_ERROR]) + _status(None, command, f"failed to exec in container: {exc}")))
            sock.sendall(_frame(struct.pack("!H", 1000), 0x8))
            return
        record.pid = child.pid
        with self._lock:
            self._children.add(child)
        try:
            self._pump(record, node, child, sock, gone)
        finally:
            _kill_group(child)
            with self._lock:
                self._children.discard(child)

    def _pump(self, record: ExecRecord, node: SimNode, child: subprocess.Popen[bytes],
              sock: socket.socket, gone: threading.Event) -> None:
        assert child.stdout is not None and child.stderr is not None
        sel = selectors.DefaultSelector()
        sel.register(child.stdout, selectors.EVENT_READ, _STDOUT)
        sel.register(child.stderr, selectors.EVENT_READ, _STDERR)
        open_fds = 2
        while open_fds:
            if gone.is_set() or self._stopping.is_set():
                record.outcome = "client-gone"
                return
            for key, _ in sel.select(0.1):
                data = os.read(key.fd, self.chunk)
                if not data:
                    sel.unregister(key.fileobj)
                    open_fds -= 1
                    continue
                channel = key.data
                if channel == _STDOUT:
                    start = record.stdout_bytes
                    if node.corrupt_at_byte is not None and start <= node.corrupt_at_byte < start + len(data):
                        i = node.corrupt_at_byte - start
                        data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
                    if node.cut_after_bytes is not None and start + len(data) >= node.cut_after_bytes:
                        data = data[:max(0, node.cut_after_bytes - start)]
                        sock.sendall(_frame(bytes([_STDOUT]) + data))
                        record.stdout_bytes += len(data)
                        record.outcome = "cut"
                        sock.shutdown(socket.SHUT_RDWR)  # the connection drops: no status, no close
                        sock.close()
                        return
                    record.stdout_bytes += len(data)
                sock.sendall(_frame(bytes([channel]) + data))
        sel.close()
        while child.poll() is None:
            if gone.wait(0.05) or self._stopping.is_set():
                record.outcome = "client-gone"
                return
        record.exit_code = child.returncode if child.returncode >= 0 else 128 - child.returncode
        record.outcome = "exited"
        sock.sendall(_frame(bytes([_ERROR]) + _status(record.exit_code, record.command)))
        sock.sendall(_frame(struct.pack("!H", 1000), 0x8))
        gone.wait(2.0)  # the client answers the close


def session_members(sid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid:  # field 6 of stat: the session id
            pids.append(int(entry))
    return pids


def _kill_group(child: subprocess.Popen[bytes], grace_s: float = 3.0) -> None:
    """Stop the command as a container runtime would: SIGTERM (capture then ends its collectors
    and finishes), then SIGKILL to everything left in its session (collectors run in process
    groups of their own)."""
    if child.poll() is None:
        try:
            os.killpg(child.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            child.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    for pid in ([child.pid] if child.poll() is None else []) + session_members(child.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        child.wait(5)
    except subprocess.TimeoutExpired:
        pass
    for f in (child.stdout, child.stderr):
        if f is not None:
            f.close()


def _plain(req: BaseHTTPRequestHandler, code: int, message: str) -> None:
    body = json.dumps({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                       "message": message, "reason": "BadRequest", "code": code}).encode()
    req.send_response(code)
    req.send_header("Content-Type", "application/json")
    req.send_header("Content-Length", str(len(body)))
    req.end_headers()
    req.wfile.write(body)


def wait_for(predicate: Any, timeout_s: float = 10.0) -> bool:
    """Poll ``predicate()`` until true or ``timeout_s`` passes."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())
