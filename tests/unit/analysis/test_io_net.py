"""io-stall, network-saturation and network-errors: each with a case that must fire, one that must
not (and is ruled out), and hostile counters that must neither crash nor fire."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis import build_model
from forensics.analysis.samples import NetSample
from forensics.parsing.netstat import NET_DEV_FIELDS
from tests.support.analysis_bundles import GIB, T0, BundleSpec
from tests.unit.analysis.conftest import Analyze, kinds, names, of_kind

MB = 1_000_000
DEV = "8:0"


def _loader(read_bps: float, limit: int | None, util: Any, *, v1: bool = False, seconds: int = 30) -> BundleSpec:
    """A data-loader container on GPU 0 reading at ``read_bps`` under an IO limit of ``limit``;
    ``util(s)`` is its GPU's utilisation at second s."""
    b = BundleSpec()
    b.status["net"] = "ok"
    b.gpu(0)
    c = b.container("loader", env=["NVIDIA_VISIBLE_DEVICES=0"])
    b.process(50, "python", container=c)
    b.gpu_series(0, range(seconds), lambda s: (util(s), 20 * GIB, {50: (20 * GIB, util(s))}))
    cg = f"/system.slice/docker-{c}.scope"
    for s in range(seconds):
        b.io_tick(T0 + s, cg, {DEV: (int(read_bps * s), 4096 * s)}, v1=v1)
    if limit is not None:
        b.io_limit(cg, DEV, rbps=limit, v1=v1)
    return b


class TestIoStall:
    def test_read_pinned_at_io_max_while_gpu_idles_is_a_starved_gpu(self, analyze: Analyze) -> None:
        (f,) = of_kind(analyze(_loader(0.99 * MB, MB, lambda s: 3)), "io-stall")
        assert names(f, "victim", "container") == ["loader"] and f["severity"] == "medium"
        assert f["metrics"]["gpu_starved"] is True and f["metrics"]["pinned_intervals"] == 29
        assert "GPU 0" in f["summary"] and "8:0" in f["summary"] and "data loader" in f["summary"]
        members = {e["member"] for e in f["evidence"]}
        assert members == {"cgroup/samples.jsonl", "cgroup/index.json"}
        assert any('"rbytes"' in e["excerpt"] for e in f["evidence"])
        assert "--device-read-bps" in f["next_step"]

    def test_v1_blkio_throttle_and_a_gpu_that_drops(self, analyze: Analyze) -> None:
        # busy at 90% for 10 s, then the reader hits its throttle and the GPU falls to 40%
        b = BundleSpec()
        b.gpu(0)
        c = b.container("loader", env=["NVIDIA_VISIBLE_DEVICES=0"])
        b.process(50, "python", container=c)
        b.gpu_series(0, range(30), lambda s: (90 if s < 10 else 40, GIB, {50: (GIB, 90 if s < 10 else 40)}))
        cg = f"/system.slice/docker-{c}.scope"
        total = 0
        for s in range(30):
            total += 0 if s <= 10 else MB
            b.io_tick(T0 + s, cg, {DEV: (total, 0)}, v1=True)
        b.io_limit(cg, DEV, rbps=MB, v1=True)
        (f,) = of_kind(analyze(b), "io-stall")
        assert f["metrics"]["gpu_starved"] is True and "against 90%" in f["summary"]

    def test_pinned_with_a_busy_gpu_is_low(self, analyze: Analyze) -> None:
        (f,) = of_kind(analyze(_loader(MB, MB, lambda s: 95)), "io-stall")
        assert f["severity"] == "low" and f["metrics"]["gpu_starved"] is False

    def test_under_the_limit_does_not_fire_and_is_ruled_out(self, analyze: Analyze) -> None:
        doc = analyze(_loader(0.2 * MB, MB, lambda s: 3))
        assert "io-stall" not in kinds(doc)
        assert any(r["kind"] == "io-stall" for r in doc["ruled_out"])

    def test_no_limit_and_no_pressure_does_not_fire(self, analyze: Analyze) -> None:
        assert "io-stall" not in kinds(analyze(_loader(500 * MB, None, lambda s: 3)))

    def test_io_pressure_while_gpu_idles_fires(self, analyze: Analyze) -> None:
        b = _loader(0.1 * MB, None, lambda s: 2)
        c = next(iter(b.jsonl["cgroup/samples.jsonl"])).split('"cgroup":"', 1)[1].split('"', 1)[0]
        for s in range(30):
            b.cgroup_tick(T0 + s, c, psi={"io": (60.0, 40.0)})
        (f,) = of_kind(analyze(b), "io-stall")
        assert f["metrics"]["psi_readings_over"] > 0 and "IO pressure" in f["summary"]

    def test_garbage_counters_neither_crash_nor_fire(self, analyze: Analyze) -> None:
        b = _loader(MB, MB, lambda s: 3, seconds=3)
        b.jsonl["cgroup/samples.jsonl"] = [
            '{"t": 1764424800, "cgroup": "/system.slice/docker-%s.scope", "values": {"io": {"stat": {"8:0": "x"}}}}' % ("a" * 64),
            '{"t": "soon", "cgroup": 7, "values": {"io": []}}',
            '{"t": 1764424801, "cgroup": "/", "values": {"io": {"stat": {"8:0": {"rbytes": -5, "wbytes": null}}}}}',
            "not json",
        ]
        b.cgroup_index = [{"path": "/x", "values": {"io": {"max": {"8:0": "max"}}}}, {"path": 3}]
        assert "io-stall" not in kinds(analyze(b))


def _nic(rx: int, tx: int, *, speed: int | None = 10_000, state: str = "up", **errors: int) -> dict[str, Any]:
    return {"rx_bytes": rx, "tx_bytes": tx, "rx_errors": 0, "tx_errors": 0, "rx_dropped": 0, "tx_dropped": 0,
            **errors, "operstate": state, "speed_mbps": speed}


def _ib(xmit_words: int, wait: int = 0, *, state: str = "ACTIVE", **counters: int) -> dict[str, Any]:
    return {"port_xmit_data": xmit_words, "port_rcv_data": 0, "port_xmit_wait": wait, "symbol_error": 0,
            "link_downed": 0, "port_rcv_errors": 0, **counters, "state": state, "rate_bytes_per_s": 25e9}


_FORM = ["interfaces"]


@pytest.fixture(params=["interfaces", "net_dev"])
def net_form(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each network case twice: node interfaces written parsed (``interfaces``, bundles before
    ``net_dev``) and as the collector writes them now (each changed ``/proc/net/dev`` line verbatim
    in ``net_dev``, each changed state in ``links``): the same findings from both."""
    _FORM[0] = request.param
    yield request.param
    _FORM[0] = "interfaces"


def _as_net_dev(interfaces: dict[str, dict[str, Any]], lines: dict[str, str],
                states: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """The lines and states that changed since the last tick, as the collector writes them."""
    changed, links = {}, {}
    for iface, values in interfaces.items():
        line = f"{iface:>6}: " + " ".join(str(values.get(f, 0)) for f in NET_DEV_FIELDS)
        if lines.get(iface) != line:
            changed[iface] = lines[iface] = line
        state = {"operstate": values.get("operstate"), "speed_mbps": values.get("speed_mbps")}
        if states.get(iface) != state:
            links[iface] = states[iface] = state
    return changed, links


def _net(seconds: int, nic: Any, ib: Any = None, netns: Any = None, b: BundleSpec | None = None) -> BundleSpec:
    b = b if b is not None else BundleSpec()
    b.status["net"] = "ok"
    lines: dict[str, str] = {}
    states: dict[str, Any] = {}
    for s in range(seconds):
        interfaces = {"eth0": nic(s), "lo": _nic(100 * s, 100 * s, speed=None, state="unknown")}
        if _FORM[0] == "interfaces":
            b.net_tick(T0 + s, interfaces=interfaces, ib={"mlx5_0/1": ib(s)} if ib else None,
                       netns=netns(s) if netns else None)
            continue
        changed, links = _as_net_dev(interfaces, lines, states)
        b.add_jsonl("net/samples.jsonl", {"t": T0 + s, "tick": s, "net_dev": changed, "links": links,
                                          "ib": {"mlx5_0/1": ib(s)} if ib else {}, "disks": {},
                                          "netns": netns(s) if netns else {}, "rates": {}})
    return b


@pytest.mark.usefixtures("net_form")
class TestNetworkSaturation:
    def test_nic_at_link_rate_names_the_container_that_sent(self, analyze: Analyze) -> None:
        link = 10_000 * MB // 8  # 10 Gb/s in bytes/s
        b = BundleSpec()
        c = b.container("uploader")
        quiet = b.container("quiet")
        _net(10, lambda s: _nic(1000 * s, int(0.97 * link) * s), b=b, netns=lambda s: {
            "4026532577": {"pid": 10, "container_id": c, "interfaces": {"eth0": {"rx_bytes": 0, "tx_bytes": int(0.9 * link) * s},
                                                                       "lo": {"rx_bytes": 10**12 * s, "tx_bytes": 0}}},
            "4026532578": {"pid": 11, "container_id": quiet, "interfaces": {"eth0": {"rx_bytes": 5 * s, "tx_bytes": 5 * s}}}})
        (f,) = of_kind(analyze(b), "network-saturation")
        assert f["metrics"]["link"] == "eth0" and f["metrics"]["saturated_intervals"] == 9
        assert names(f, "culprit", "container") == ["uploader"] and "97%" in f["summary"]
        assert f["evidence"][0]["member"] == "net/samples.jsonl" and '"eth0"' in f["evidence"][0]["excerpt"]

    def test_ib_xmit_wait_rising_is_congestion(self, analyze: Analyze) -> None:
        (f,) = of_kind(analyze(_net(6, lambda s: _nic(s, s), ib=lambda s: _ib(1000 * s, 5000 * s))), "network-saturation")
        assert f["metrics"]["link_kind"] == "ib" and f["metrics"]["xmit_wait_intervals"] == 5
        assert "port_xmit_wait" in f["summary"] and "NCCL" in f["next_step"]

    def test_ib_data_words_count_four_bytes(self, analyze: Analyze) -> None:
        words = int(0.95 * 25e9 / 4)
        (f,) = of_kind(analyze(_net(4, lambda s: _nic(s, s), ib=lambda s: _ib(words * s))), "network-saturation")
        assert f["metrics"]["utilisation_peak"] >= 0.94
        # a quarter of that, read as bytes, would be under the threshold
        doc = analyze(_net(4, lambda s: _nic(s, s), ib=lambda s: _ib(words * s // 4)))
        assert "network-saturation" not in kinds(doc)

    def test_quiet_links_are_ruled_out(self, analyze: Analyze) -> None:
        doc = analyze(_net(5, lambda s: _nic(MB * s, MB * s), ib=lambda s: _ib(1000 * s)))
        assert "network-saturation" not in kinds(doc) and "network-errors" not in kinds(doc)
        ruled = {r["kind"] for r in doc["ruled_out"]}
        assert {"network-saturation", "network-errors"} <= ruled

    def test_one_hot_interval_is_not_saturation(self, analyze: Analyze) -> None:
        link = 10_000 * MB // 8
        doc = analyze(_net(5, lambda s: _nic(0, link * (1 if s >= 4 else 0) + s)))
        assert "network-saturation" not in kinds(doc)


@pytest.mark.usefixtures("net_form")
class TestNetworkErrors:
    def test_ib_link_down_and_symbol_errors_are_high(self, analyze: Analyze) -> None:
        doc = analyze(_net(6, lambda s: _nic(s, s), ib=lambda s: _ib(s, link_downed=1 if s >= 3 else 0,
                                                                          symbol_error=7 * s)))
        (f,) = of_kind(doc, "network-errors")
        assert f["severity"] == "high" and f["metrics"]["link_downed"] == 1 and "symbol_error +35" in f["summary"]
        assert "ibdiagnet" in f["next_step"]

    def test_flapping_nic_state(self, analyze: Analyze) -> None:
        doc = analyze(_net(6, lambda s: _nic(s, s, state="down" if s == 2 else "up")))
        (f,) = of_kind(doc, "network-errors")
        assert f["metrics"]["flapped"] is True and "down" in f["summary"] and f["severity"] == "high"

    def test_a_few_drops_are_routine_many_are_low(self, analyze: Analyze) -> None:
        assert "network-errors" not in kinds(analyze(_net(6, lambda s: _nic(s, s, rx_dropped=3 * s))))
        (f,) = of_kind(analyze(_net(6, lambda s: _nic(s, s, rx_dropped=300 * s))), "network-errors")
        assert f["severity"] == "low" and f["metrics"]["drops"] == 1500

    def test_counter_reset_and_garbage_do_not_fire(self, analyze: Analyze) -> None:
        b = _net(4, lambda s: _nic(s, s, rx_errors=100 if s < 2 else 0))  # reset: went down, not up
        b.add_jsonl("net/samples.jsonl", {"t": T0 + 9, "interfaces": {"eth0": {"rx_errors": "many", "operstate": 5}},
                                          "ib": ["x"], "netns": {"1": None}})
        b.add_jsonl("net/samples.jsonl", {"t": None, "interfaces": 3})
        doc = analyze(b)
        assert "network-errors" not in kinds(doc) and "network-saturation" not in kinds(doc)

    def test_snapshot_only_rules_nothing_out(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.status["net"] = "ok"
        doc = analyze(b)
        assert not {r["kind"] for r in doc["ruled_out"]} & {"network-saturation", "network-errors"}


def test_a_namespace_the_collector_named_unchanged_keeps_its_counters(tmp_path: Path) -> None:
    b = BundleSpec()
    b.status["net"] = "ok"
    c = b.container("idle")
    b.net_tick(T0, netns={"4026532577": {"pid": 10, "container_id": c,
                                         "interfaces": {"eth0": {"rx_bytes": 7, "tx_bytes": 9}, "lo": {"rx_bytes": 1}}}})
    for s in (1, 2):
        b.add_jsonl("net/samples.jsonl", {"t": T0 + s, "tick": s, "interfaces": {}, "ib": {}, "disks": {},
                                          "netns": {}, "netns_unchanged": [4026532577, 99], "rates": {}})
    model = build_model([b.write(tmp_path)])
    got = [(s.t - T0, s.name, s.counters, s.container_id) for s in model.series(NetSample) if s.kind == "netns"]
    assert got == [(float(s), "4026532577", {"rx_bytes": 7, "tx_bytes": 9}, c) for s in range(3)]  # 99: never written


def test_a_namespace_written_as_the_kernels_text_is_parsed_by_the_loader(tmp_path: Path) -> None:
    b = BundleSpec()
    b.status["net"] = "ok"
    c = b.container("busy")
    head = "Inter-|   Receive |  Transmit\n face |bytes packets|bytes packets\n"
    for s, rx in ((0, 100), (1, 5100)):
        b.net_tick(T0 + s, netns={"4026532577": {"pid": 10, "container_id": c, "dev": head +
                                                 "    lo: 5 1 0 0 0 0 0 0 6 1 0 0 0 0 0 0\n"
                                                 f"  eth0: {rx} 10 2 0 0 0 0 0 200 3 0 0 0 0 0 0\n"}})
    b.net_tick(T0 + 2, netns={"4026532578": {"pid": 11, "container_id": c, "dev": head + "eth0: 1 2\n"}})
    model = build_model([b.write(tmp_path)])
    got = [(s.t - T0, s.counters["rx_bytes"], s.counters["tx_bytes"], s.counters["rx_errors"])
           for s in model.series(NetSample) if s.kind == "netns"]
    assert got == [(0.0, 100, 200, 2), (1.0, 5100, 200, 2)]  # lo left out; the text that does not parse: no sample


def test_a_quiet_namespace_has_no_reading_while_unread_and_its_veth_bytes_at_unchanged_until(tmp_path: Path) -> None:
    """Ticks that left a namespace unread (``netns_quiet``) give it no reading; the entry after them
    carries ``unchanged_until``, the last tick its host veth's line read as at its previous reading:
    a reading there of the bytes the veth mirrors (received and sent), the previous entry's, and no
    other counter (drops and errors inside the namespace are not on the host end)."""
    b = BundleSpec()
    b.status["net"] = "ok"
    c = b.container("quiet")
    head = "Inter-|   Receive |  Transmit\n face |bytes packets|bytes packets\n"

    def dev(rx: int, lo: int) -> str:
        return head + f"    lo: {lo} 1 0 0 0 0 0 0 {lo} 1 0 0 0 0 0 0\n  eth0: {rx} 10 2 0 0 0 0 0 200 3 0 0 0 0 0 0\n"
    b.net_tick(T0, netns={"4026532577": {"pid": 10, "container_id": c, "dev": dev(100, 5)}})
    for s in (1, 2, 3):
        b.add_jsonl("net/samples.jsonl", {"t": T0 + s, "tick": s, "net_dev": {}, "ib": {}, "disks": {},
                                          "netns": {}, "netns_quiet": [4026532577], "rates": {}})
    b.net_tick(T0 + 4, netns={"4026532577": {"pid": 10, "container_id": c, "dev": dev(5100, 9),
                                             "unchanged_until": T0 + 3}})
    model = build_model([b.write(tmp_path)])
    got = sorted((s.t - T0, s.counters) for s in model.series(NetSample) if s.kind == "netns")
    full = {"rx_bytes": 100, "tx_bytes": 200, "rx_errors": 2, "tx_errors": 0, "rx_dropped": 0, "tx_dropped": 0,
            "rx_fifo_errors": 0, "rx_frame_errors": 0, "tx_carrier_errors": 0}
    assert got == [(0.0, full), (3.0, {"rx_bytes": 100, "tx_bytes": 200}), (4.0, {**full, "rx_bytes": 5100})]


def test_samples_from_the_recorders_ring_are_cited_under_ring(analyze: Analyze) -> None:
    """Net samples the bundle holds only as the flight recorder's (``ring/net/samples.jsonl``): the
    ruled-out check cites that member, ``ring/`` and all, as the other loaders' ring members are."""
    b = _net(5, lambda s: _nic(MB * s, MB * s), ib=lambda s: _ib(1000 * s))
    b.jsonl["ring/net/samples.jsonl"] = b.jsonl.pop("net/samples.jsonl")
    doc = analyze(b)
    (ruled,) = [r for r in doc["ruled_out"] if r["kind"] == "network-saturation"]
    assert [e["member"] for e in ruled["evidence"]] == ["ring/net/samples.jsonl"]
