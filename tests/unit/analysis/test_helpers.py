"""Small pure helpers of the analyzer: total on any input (hypothesis), exact on known forms."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forensics.analysis.allocation import resolve_device_ids
from forensics.analysis.findings import shorten
from forensics.analysis.loaders.common import as_int, dig, parse_time
from forensics.analysis.model import Gpu
from forensics.analysis.rules.gpu_xid import xid_meaning
from forensics.analysis.source import json_pointer, resolve_pointer

GPUS = [Gpu("n", 0, "GPU-aaaa", "x", "00000000:3B:00.0", 1), Gpu("n", 1, "GPU-bbbb", "x", None, 1)]
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda c: st.lists(c) | st.dictionaries(st.text(), c), max_leaves=20)


@given(st.one_of(st.text(), st.integers(), st.floats(), st.none(), st.booleans()))
def test_parse_time_is_total(value: Any) -> None:
    out = parse_time(value)
    assert out is None or isinstance(out, float)


def test_parse_time_forms() -> None:
    t = datetime(2026, 11, 29, 14, 2, 10, tzinfo=UTC).timestamp()
    assert parse_time("2026-11-29T14:02:10Z") == t
    assert parse_time("2026-11-29T14:02:10.123456789Z") == t + 0.123456
    assert parse_time("2026-11-29T15:02:10+01:00") == t
    assert parse_time("0001-01-01T00:00:00Z") is None  # Docker's zero time
    assert parse_time("yesterday") is None


@given(st.lists(st.text(max_size=40), max_size=5))
def test_resolve_device_ids_is_total(ids: list[str]) -> None:
    assert isinstance(resolve_device_ids(ids, GPUS), tuple)


def test_resolve_device_ids_forms() -> None:
    assert resolve_device_ids(["0"], GPUS) == ("GPU-aaaa",)
    assert resolve_device_ids(["all"], GPUS) == ("GPU-aaaa", "GPU-bbbb")
    assert resolve_device_ids(["GPU-BBBB::3", "nvidia.com/gpu=0"], GPUS) == ("GPU-bbbb", "GPU-aaaa")
    # GKE's nvidiaN is the GPU of minor N: kept verbatim while no minor number is read
    assert resolve_device_ids(["nvidia0"], GPUS) == ("nvidia0",)
    by_minor = [replace(GPUS[0], minor_number=1), replace(GPUS[1], minor_number=0)]
    assert resolve_device_ids(["nvidia0", "nvidia1/vgpu2"], by_minor) == ("GPU-bbbb", "GPU-aaaa")
    assert resolve_device_ids(["none"], GPUS) == ()
    assert resolve_device_ids(["MIG-1234", "7"], GPUS) == ("MIG-1234", "index 7")  # kept, never dropped


@given(json_values, st.lists(st.one_of(st.text(max_size=5), st.integers(0, 5)), max_size=4))
def test_pointers_and_dig_are_total(doc: Any, path: list[str | int]) -> None:
    resolve_pointer(doc, json_pointer(*path))
    dig(doc, *path)
    as_int(doc)


def test_pointer_round_trip() -> None:
    doc = {"a/b": [{"~x": 5}]}
    assert resolve_pointer(doc, json_pointer("a/b", 0, "~x")) == 5


@given(st.text())
def test_shorten_bounds(text: str) -> None:
    out = shorten(text)
    assert len(out) <= 240 and "\n" not in out


def test_xid_classes() -> None:
    assert xid_meaning(79)[0] == "device" and xid_meaning(31)[0] == "application"
    assert xid_meaning(119) == ("device", "GSP RPC Timeout") and xid_meaning(99999)[0] == "unknown"
    # a pre-Ampere GPU gets the older listing's wording
    assert xid_meaning(94, "Tesla V100-SXM2-16GB")[1] == "Contained ECC error"
    assert xid_meaning(94, "NVIDIA H100 80GB HBM3")[1] == "Contained memory error"


def test_unicode_digits_are_not_numbers() -> None:
    assert resolve_pointer([1, 2], "/\u00b9") is None
    assert as_int("\u00b9") is None and as_int("-12") == -12
    assert resolve_device_ids(["\u00b9"], GPUS) == ("\u00b9",)
