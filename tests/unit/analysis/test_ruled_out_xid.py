"""Ruling out an Xid fault cites both witnesses: the kernel log and NVML's event watch."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.analysis import analyze_bundles

SAMPLES = Path(__file__).resolve().parents[3] / "sample_bundles"


def _xid_rule_out(name: str) -> dict[str, object]:
    path = SAMPLES / f"{name}.tgz"
    if not path.exists():
        pytest.skip(f"{path} not built")
    doc = analyze_bundles([path])
    (entry,) = [r for r in doc["ruled_out"] if r["kind"] == "gpu-xid-fault"]
    return entry


def test_nvml_event_watch_is_cited_and_an_empty_kernel_window_is_called_weak() -> None:
    entry = _xid_rule_out("unallocated-gpu-use")  # its kernel window holds no record
    statement = str(entry["statement"])
    assert "0 records; an empty log window proves little" in statement
    assert "no XidCriticalError event from NVML on the 2 GPU(s)" in statement
    members = [e["member"] for e in entry["evidence"]]  # type: ignore[union-attr]
    assert "nvml/events.jsonl" in members


def test_not_ruled_out_when_an_xid_happened() -> None:
    path = SAMPLES / "xid-fault.tgz"
    if not path.exists():
        pytest.skip(f"{path} not built")
    doc = analyze_bundles([path])
    assert not [r for r in doc["ruled_out"] if r["kind"] == "gpu-xid-fault"]
