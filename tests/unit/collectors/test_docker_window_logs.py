"""Which log lines a --duration window's read adds after the snapshot's, and how they are redacted
(the engine end to end: tests/integration/test_docker_window_logs.py)."""

from __future__ import annotations

from pathlib import Path

from forensics.bundle.redact import Redactor
from forensics.bundle.sink import EvidenceSink
from forensics.collect.context import CaptureOptions, CollectContext
from forensics.collectors.docker.window_logs import last_line_record, redact_after, split_new_lines

BODY = "MIIBOgWindowBoundaryBody0123456789abcdefXYZ"


def _log(*lines: tuple[str, str]) -> bytes:
    return b"".join(f"{t} {text}\n".encode() for t, text in lines)


def _ctx(tmp_path: Path) -> CollectContext:
    return CollectContext(CaptureOptions(), EvidenceSink(tmp_path), Redactor())


def test_the_kept_lines_are_found_by_the_raw_record_not_by_the_redacted_member() -> None:
    kept = _log(("2026-12-06T11:29:35.99Z", "-----BEGIN RSA PRIVATE KEY-----"),
                ("2026-12-06T11:29:35.997Z", BODY), ("2026-12-06T11:29:35.9971Z", "-----END RSA PRIVATE KEY-----"))
    record = last_line_record(kept)
    assert record == {"time": "2026-12-06T11:29:35.9971Z", "lines_at_time": 1}
    later = _log(("2026-12-06T11:29:40.5Z", "RuntimeError: CUDA out of memory"))
    old, new, n = split_new_lines(kept + later, record)
    assert (old, new, n) == (kept, later, 3)
    assert split_new_lines(kept, record) == (kept, b"", 3)  # nothing printed since: nothing added


def test_lines_sharing_the_last_timestamp_past_the_recorded_count_are_new() -> None:
    t = "2026-12-06T11:00:00.000000001Z"
    kept = _log(("2026-12-06T10:59:59Z", "a"), (t, "b"), (t, "c"))
    record = last_line_record(kept)
    assert record == {"time": t, "lines_at_time": 2}
    again = kept + _log((t, "d"), ("2026-12-06T11:00:01Z", "e"))
    assert split_new_lines(again, record) == (kept, _log((t, "d"), ("2026-12-06T11:00:01Z", "e")), 3)
    # no record (the snapshot kept nothing): every line is new
    assert split_new_lines(again, None) == (b"", again, 0)


def test_a_secret_across_the_boundary_is_redacted_whole(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    old = _log(("2026-12-06T11:00:00.1Z", "step 1"), ("2026-12-06T11:00:00.2Z", "-----BEGIN RSA PRIVATE KEY-----"),
               ("2026-12-06T11:00:00.3Z", BODY))
    new = _log(("2026-12-06T11:00:01.1Z", "-----END RSA PRIVATE KEY-----"), ("2026-12-06T11:00:02Z", "step 2"))
    text, repeated = redact_after(ctx, old, new)
    assert BODY not in text and "<redacted:" in text and text.endswith("step 2\n")
    # the snapshot's own copy of the cut block was redacted when it was kept (a PEM block with no
    # END is redacted to its text's end, one line with its BEGIN): the append repeats that one line
    assert repeated == 1 and text.startswith("2026-12-06T11:00:00.2Z -----BEGIN RSA PRIVATE KEY-----")
    assert ctx.redactor.counts["logs"] == 0  # the block was counted when the snapshot kept it, cut
    assert BODY not in ctx.redactor.text(old.decode(), "logs")


def test_new_lines_alone_are_appended_when_nothing_spans_the_boundary(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    old = _log(("2026-12-06T11:00:00Z", "retry with password=hunter2-old"))
    new = _log(("2026-12-06T11:00:01Z", "retry with password=hunter2-new"), ("2026-12-06T11:00:02Z", "done"))
    text, repeated = redact_after(ctx, old, new)
    assert repeated == 0 and text.startswith("2026-12-06T11:00:01Z retry with password=<redacted:")
    assert "hunter2" not in text and text.endswith("done\n") and text.count("\n") == 2
    assert ctx.redactor.counts["logs"] == 1  # the old line's secret was counted when it was kept
