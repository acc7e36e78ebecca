"""The analysis-document contract (forensics/document_format.py) and the shared human formatting
(forensics/humanize.py) that analysis texts and the report both use."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from forensics.document_format import (
    OUTPUT_FORMATS,
    REPORT_FORMATS,
    SEVERITIES,
    severity_rank,
    split_formats,
)
from forensics.humanize import format_bytes, format_clock


def test_split_formats_lowercases_resolves_aliases_and_drops_duplicates() -> None:
    assert split_formats("html, PDF,markdown,,html") == ["html", "pdf", "md"]
    assert split_formats(["htm", "md,json"]) == ["html", "md", "json"]
    assert split_formats(" , ") == []
    assert split_formats("docx") == ["docx"]  # each caller rejects what it does not write


def test_report_formats_are_output_formats_and_severities_rank_worst_first() -> None:
    assert set(REPORT_FORMATS) < set(OUTPUT_FORMATS)
    assert [severity_rank(s) for s in SEVERITIES] == list(range(len(SEVERITIES)))
    assert severity_rank("bogus") == len(SEVERITIES)


@pytest.mark.parametrize("value, unknown, largest, text", [
    (None, "?", "TiB", "?"),
    (float("nan"), "—", "PiB", "—"),
    (True, "—", "PiB", "—"),
    (512, "?", "TiB", "512 B"),
    (66571993088, "?", "TiB", "62.0 GiB"),
    (3 * 1024**5, "?", "TiB", "3072.0 TiB"),
    (3 * 1024**5, "—", "PiB", "3.0 PiB"),
])
def test_format_bytes(value: object, unknown: str, largest: str, text: str) -> None:
    assert format_bytes(value, unknown, largest=largest) == text


def test_format_clock() -> None:
    t = datetime(2026, 11, 29, 14, 2, 10, tzinfo=UTC)
    assert format_clock(t.timestamp(), "an unknown time", zone="Z") == "14:02:10Z"
    assert format_clock(t, "—") == "14:02:10"
    assert format_clock(None, "an unknown time") == "an unknown time"
    assert format_clock(float("inf"), "?") == "?"
