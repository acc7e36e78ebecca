"""Issue 32's corpus of real lines (tests/support/recent_lines.py), table-driven: every line yields
exactly the signals listed for it with the fields it carries, and the negative corpus none."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest

from forensics.parsing.kmsg import KmsgRecord
from forensics.parsing.logsignals.scan import scan_log
from forensics.parsing.nvrm import parse_xid
from tests.support import log_lines
from tests.support.recent_lines import KERNEL, KERNEL_NEGATIVE, LOG, NEGATIVE, Line


def _id(line: Line) -> str:
    return f"{line.source}:{line.text[:40]}"


def _signals(line: Line) -> list[tuple[str, dict[str, Any]]]:
    return [(s.kind, dataclasses.asdict(s)) for _, s in scan_log(line.text)]


def _check(line: Line, got: list[tuple[str, dict[str, Any]]]) -> None:
    assert [k for k, _ in got] == [k for k, _ in line.signals], (line.text, got)
    for (kind, want), (_, have) in zip(line.signals, got, strict=True):
        wrong = {f: (v, have.get(f, "<no such field>")) for f, v in want.items() if have.get(f, object()) != v}
        assert not wrong, (kind, wrong, line.text)


@pytest.mark.parametrize("line", LOG, ids=_id)
def test_every_log_line_yields_its_signals_with_their_fields(line: Line) -> None:
    assert line.signals, "a corpus line is a signal (lines that are none belong to NEGATIVE)"
    _check(line, _signals(line))


@pytest.mark.parametrize("line", KERNEL, ids=_id)
def test_every_kernel_line_yields_its_xid(line: Line) -> None:
    xid = parse_xid(KmsgRecord(0, 3, 1, 1_000_000, "-", line.text))
    assert xid is not None, line.text
    _check(line, [("xid", dataclasses.asdict(xid))])


@pytest.mark.parametrize("line", NEGATIVE, ids=_id)
def test_the_negative_corpus_yields_nothing(line: Line) -> None:
    assert not line.signals and _signals(line) == [], line.text


@pytest.mark.parametrize("line", KERNEL_NEGATIVE, ids=_id)
def test_kernel_lines_that_are_no_xid(line: Line) -> None:
    assert parse_xid(KmsgRecord(0, 3, 1, 1_000_000, "-", line.text)) is None


def test_the_corpus_is_new_real_lines_and_enough_of_them() -> None:
    texts = [ln.text for ln in LOG + KERNEL + NEGATIVE + KERNEL_NEGATIVE]
    assert len(texts) == len(set(texts)), [t for t, n in Counter(texts).items() if n > 1]
    old = {q.text for q in log_lines.ALL}
    assert not old & set(texts), "a line already in tests/support/log_lines.py"
    assert len(texts) >= 150, len(texts)
    for ln in LOG + KERNEL + NEGATIVE + KERNEL_NEGATIVE:
        assert ln.source and ln.version and ln.text, ln
