"""The blkio and network parts of a Docker stats frame: both cgroup versions' op names, interfaces
summed, and hostile values left out rather than raised."""

from __future__ import annotations

from typing import Any

import pytest

from forensics.parsing.docker_stats import blkio_bytes, network_totals


def _entry(op: str, value: Any, major: Any = 254, minor: Any = 0) -> dict[str, Any]:
    return {"major": major, "minor": minor, "op": op, "value": value}


def test_v1_ops_read_and_write_per_device() -> None:
    # cgroup v1: the engine copies blkio.throttle.io_service_bytes, op names capitalised, with Total
    stats = {"blkio_stats": {"io_service_bytes_recursive": [
        _entry("Read", 4194304), _entry("Write", 8192), _entry("Sync", 4202496), _entry("Async", 0),
        _entry("Discard", 0), _entry("Total", 4202496), _entry("Read", 512, 8, 16)]}}
    assert blkio_bytes(stats) == {"254:0": (4194304, 8192), "8:16": (512, 0)}


def test_v2_ops_lowercase() -> None:
    stats = {"blkio_stats": {"io_service_bytes_recursive": [_entry("read", 10), _entry("write", 20)]}}
    assert blkio_bytes(stats) == {"254:0": (10, 20)}


@pytest.mark.parametrize("stats", [
    None, [], {}, {"blkio_stats": None}, {"blkio_stats": {"io_service_bytes_recursive": None}},
    {"blkio_stats": {"io_service_bytes_recursive": []}},
    {"blkio_stats": {"io_service_bytes_recursive": ["x", _entry("Read", -1), _entry("Read", "9"),
                                                    _entry("Read", 1, major=None), _entry(7, 1),
                                                    _entry("Read", True)]}},
])
def test_no_blkio_figures(stats: Any) -> None:
    assert blkio_bytes(stats) is None


def test_networks_summed_over_interfaces() -> None:
    stats = {"networks": {
        "eth0": {"rx_bytes": 100, "rx_packets": 2, "rx_errors": 0, "rx_dropped": 1,
                 "tx_bytes": 50, "tx_packets": 1, "tx_errors": 0, "tx_dropped": 0},
        "eth1": {"rx_bytes": 5, "tx_bytes": 7, "rx_dropped": "many"}}}
    totals = network_totals(stats)
    assert totals is not None
    assert totals["rx_bytes"] == 105 and totals["tx_bytes"] == 57 and totals["rx_dropped"] == 1


@pytest.mark.parametrize("stats", [None, {}, {"networks": None}, {"networks": {}}, {"networks": {"eth0": 3}},
                                   {"networks": {"eth0": {"rx_bytes": -5}}}])
def test_no_network_figures(stats: Any) -> None:
    assert network_totals(stats) is None
