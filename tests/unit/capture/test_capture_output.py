"""Capture's own output (issue 12): a live line while it runs, one summary line per collector
after it, error texts that are sentences, and a plain-text collector list."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics.capture.children import classify
from forensics.capture.runner import run_capture
from forensics.cli import cli
from forensics.collect.context import CaptureOptions, CollectContext
from forensics.errors import SourceUnavailable, sentence

from .capture_helpers import FnCollector, SamplingCollector

#: What requests says when the Docker socket does not exist (seen on a host without Docker).
DOCKER_NO_SOCKET = ("Error while fetching server API version: ('Connection aborted.', "
                    "FileNotFoundError(2, 'No such file or directory'))")
URLLIB3_REFUSED = ("HTTPConnectionPool(host='10.0.0.1', port=6443): Max retries exceeded with url: /api "
                   "(Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f3a2b1c>: "
                   "Failed to establish a new connection: [Errno 111] Connection refused'))")
REPR = re.compile(r"\w+Error\(|\('|object at 0x|\[Errno")


class TestSentences:
    @pytest.mark.parametrize("raw,expected", [
        (DOCKER_NO_SOCKET, "Error while fetching server API version: connection aborted: no such file or directory"),
        ("('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))",
         "connection aborted: connection reset by peer"),
        ("no NVIDIA driver loaded", "no NVIDIA driver loaded"),
        ("first line\nsecond line", "first line"),
    ])
    def test_sentence(self, raw: str, expected: str) -> None:
        assert sentence(raw) == expected

    def test_no_repr_survives(self) -> None:
        for raw in (DOCKER_NO_SOCKET, URLLIB3_REFUSED):
            assert not REPR.search(sentence(raw)), sentence(raw)

    def test_collector_errors_are_sentences(self) -> None:
        status, error = classify(SourceUnavailable(f"no Docker engine at unix:///var/run/docker.sock: {DOCKER_NO_SOCKET}"))
        assert status == "unavailable"
        assert not REPR.search(error), error
        assert error.endswith("connection aborted: no such file or directory")
        _, error = classify(ConnectionError(DOCKER_NO_SOCKET))
        assert error.startswith("ConnectionError: ") and not REPR.search(error), error


def test_live_line_then_one_summary_line_per_collector(tmp_path: Path) -> None:
    lines: list[str] = []
    live: list[str] = []

    def boom(_ctx: CollectContext) -> None:
        raise SourceUnavailable(DOCKER_NO_SOCKET)

    collectors = [SamplingCollector("sampler"), FnCollector("boom", boom, order=20)]
    opts = CaptureOptions(timeout_s=30.0, duration_s=1.0, interval_s=0.5)
    run_capture(opts, tmp_path, collectors=collectors, progress=lines.append, live=live.append)
    summary = [line for line in lines if not line.startswith("sampling ")]
    assert [line.split()[0] for line in summary] == ["sampler", "boom"]  # one line each
    sampler, failed = summary
    assert re.search(r"\bok\b.*\b\d+ members\b.*\bticks\b", sampler), sampler
    assert "unavailable" in failed and "0 members" in failed and not REPR.search(failed), failed
    assert any(x.startswith("collecting sampler") for x in live)
    assert any(re.search(r"sampling: \d+ s of 1 s, \d+ s left, tick \d of 3", x) for x in live), live
    assert live[-1] == ""  # cleared before the summary


def test_collectors_list_is_plain_text() -> None:
    out = CliRunner().invoke(cli, ["collectors"]).output
    assert "nvml" in out and "``" not in out and ":func:" not in out
