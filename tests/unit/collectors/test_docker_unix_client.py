"""The docker snapshot's unix-socket client: which addresses it takes, how it reads a log stream,
how it names the engine's errors (against a real engine: tests/integration/test_docker_collector.py
and test_docker_unix_snapshot.py)."""

from __future__ import annotations

import pytest

from forensics.collectors.docker.calls import describe_error, is_race
from forensics.collectors.docker.unix_client import (
    DEFAULT_SOCKET,
    APIError,
    NotFound,
    UnixEngineClient,
    demultiplex,
    unix_socket_path,
)


def test_only_unix_addresses_are_taken() -> None:
    assert unix_socket_path(None) == DEFAULT_SOCKET
    assert unix_socket_path("unix:///run/user/1000/docker.sock") == "/run/user/1000/docker.sock"
    assert unix_socket_path("http+unix:///var/run/docker.sock") == "/var/run/docker.sock"
    for other in ("tcp://10.0.0.1:2376", "ssh://user@host", "npipe:////./pipe/docker_engine", "unix://relative"):
        assert unix_socket_path(other) is None, other


def test_multiplexed_log_frames_joined_in_order() -> None:
    def frame(stream: int, payload: bytes) -> bytes:
        return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload

    data = frame(1, b"2026-12-06T10:00:00.000000001Z out\n") + frame(2, b"2026-12-06T10:00:00.5Z err\n")
    assert demultiplex(data) == b"2026-12-06T10:00:00.000000001Z out\n2026-12-06T10:00:00.5Z err\n"
    # a frame cut short keeps what arrived; a header cut short is dropped
    assert demultiplex(frame(1, b"whole\n") + frame(1, b"cut off here")[:12]) == b"whole\ncut "
    assert demultiplex(frame(1, b"whole\n") + b"\x01\x00\x00") == b"whole\n"


def test_errors_named_as_the_sdk_names_them() -> None:
    gone = NotFound("404 Client Error for /containers/abc/top: Not Found ('No such container: abc')", 404)
    assert describe_error(gone).startswith("NotFound: 404") and is_race(describe_error(gone))
    stopped = APIError("409 Client Error for /containers/abc/top: Conflict ('Container abc is not running')", 409)
    assert is_race(describe_error(stopped)) and stopped.status_code == 409


def test_one_shot_refused_before_the_request_on_an_old_api() -> None:
    client = UnixEngineClient("/nonexistent/docker.sock", 1.0)
    client.api_version = (1, 40)
    with pytest.raises(APIError, match="one_shot is not supported"):
        client.stats("abc", stream=False, one_shot=True)


def test_an_answer_over_the_cap_is_an_error_not_a_cut(tmp_path, monkeypatch) -> None:
    """A body past the client's cap was read up to the cap and returned as if whole: a log
    would have kept its oldest lines and lost the newest. Now the call fails, named."""
    import socket
    import threading

    from forensics.collectors.docker import unix_client

    path = str(tmp_path / "engine.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    bodies = [b"x" * 64, b"y" * 65]

    def serve() -> None:
        for body in bodies:
            conn, _ = server.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    monkeypatch.setattr(unix_client, "_MAX_BODY", 64)
    client = UnixEngineClient(path, 5.0)
    try:
        assert client.get_bytes("/containers/abc/logs") == b"x" * 64  # at the cap: whole
        with pytest.raises(APIError, match="over 64 bytes: not read"):
            client.get_bytes("/containers/abc/logs")
    finally:
        thread.join(5)
        server.close()
