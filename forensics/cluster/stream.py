"""One exec stream, read frame by frame: stdout straight to a file, stderr's tail, the exit status.

The channel protocol (``v4.channel.k8s.io``, and ``v5`` which adds only the client's CLOSE
signal): each WebSocket message's first byte is the channel, 1 stdout, 2 stderr, 3 the error
channel, whose message at the end is a ``metav1.Status``: ``Success``, or ``Failure`` with
``reason: NonZeroExitCode`` and the exit code in ``details.causes[].message``; then the server
closes. A stream that ends without that status was cut, whatever the bytes look like.

Memory is one message (the API server sends at most 32 KiB each) plus a 16 KiB stderr tail:
the bundle goes to disk as it arrives, hashed on the way.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["StreamOutcome", "receive"]

_STDOUT, _STDERR, _ERROR, _CLOSE = 1, 2, 3, 255
_TAIL = 16 * 1024
_STATUS_CAP = 64 * 1024


@dataclass(frozen=True)
class StreamOutcome:
    """How an exec stream ended. ``ended``: ``exited`` (a status came), ``cut`` (the connection
    dropped first), ``deadline``, ``cancelled``, ``too-large`` (stdout over the cap)."""

    ended: str
    stdout_bytes: int
    sha256: str
    exit_code: int | None
    status_message: str | None
    stderr_tail: str
    subprotocol: str | None


def _exit_status(raw: bytes) -> tuple[int | None, str | None]:
    """``(exit code, message)`` from the error channel's Status; code None when it names none."""
    try:
        status = json.loads(raw)
    except ValueError:
        return None, " ".join(raw.decode("utf-8", "replace").split())[:300] or None
    if not isinstance(status, dict):
        return None, "the error channel held no Status"
    if status.get("status") == "Success":
        return 0, None
    message = status.get("message") if isinstance(status.get("message"), str) else None
    details = status.get("details")
    for cause in (details.get("causes") if isinstance(details, dict) else None) or []:
        if isinstance(cause, dict) and cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message", "")), message
            except ValueError:
                break
    return None, message or "the command failed"


def receive(ws: Any, out_path: Path, deadline: float, cancel: threading.Event,
            max_bytes: int = (1 << 30) + (64 << 20)) -> StreamOutcome:
    """Read ``ws`` (the client's WSClient) until it ends; stdout into ``out_path`` (created,
    ``0600``, never over an existing file). The socket is closed on return."""
    import websocket

    sock = ws.sock
    sha = hashlib.sha256()
    written = 0
    tail = bytearray()
    status = bytearray()
    got_status = False
    ended = "cut"
    try:
        fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb", buffering=64 << 10) as out:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    ended = "deadline"
                    break
                if cancel.is_set():
                    ended = "cancelled"
                    break
                sock.settimeout(min(left, 0.5))
                try:
                    opcode, frame = sock.recv_data_frame(True)
                except websocket.WebSocketTimeoutException:
                    continue
                except (websocket.WebSocketConnectionClosedException, websocket.WebSocketProtocolException,
                        OSError, ValueError):
                    break
                if opcode == websocket.ABNF.OPCODE_CLOSE:
                    ended = "exited" if got_status else "cut"
                    break
                if opcode not in (websocket.ABNF.OPCODE_BINARY, websocket.ABNF.OPCODE_TEXT):
                    continue
                data = frame.data if isinstance(frame.data, bytes) else str(frame.data).encode()
                if not data:
                    continue
                channel, payload = data[0], data[1:]
                if channel == _STDOUT and payload:
                    if written + len(payload) > max_bytes:
                        ended = "too-large"
                        break
                    out.write(payload)
                    sha.update(payload)
                    written += len(payload)
                elif channel == _STDERR:
                    tail.extend(payload)
                    del tail[:-_TAIL]
                elif channel == _ERROR and payload:
                    status.extend(payload[:_STATUS_CAP - len(status)])
                    got_status = True
                # _CLOSE (v5): the server half-closing a channel; nothing to do
            out.flush()
            os.fsync(out.fileno())
    finally:
        try:
            ws.close()
        except Exception:  # noqa: BLE001 - closing must never mask the outcome
            pass
    if got_status and ended == "cut":  # status then a dropped connection instead of a close frame
        ended = "exited"
    code, message = _exit_status(bytes(status)) if got_status else (None, None)
    return StreamOutcome(ended, written, sha.hexdigest(), code, message,
                         tail.decode("utf-8", "replace"), getattr(ws, "subprotocol", None))
