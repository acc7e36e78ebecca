"""gpu-pcie-degraded and gpu-nvlink-errors on bundles written the collector's way: a case that must
fire and one that must not for each, and garbage in their inputs never raises."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.analysis import analyze_bundles
from tests.support.analysis_bundles import GIB, T0, BundleSpec
from tests.unit.analysis.conftest import Analyze, kinds, of_kind

_COUNTERS = ("REPLAY", "RECOVERY", "CRC_FLIT", "CRC_DATA")


def _v(value: Any) -> dict[str, Any]:
    return {"value": value}


def _pcie(gen: int = 5, width: int = 16, replays: int = 0) -> dict[str, Any]:
    return {"nvmlDeviceGetCurrPcieLinkGeneration": _v(gen), "nvmlDeviceGetMaxPcieLinkGeneration": _v(5),
            "nvmlDeviceGetGpuMaxPcieLinkGeneration": _v(5), "nvmlDeviceGetCurrPcieLinkWidth": _v(width),
            "nvmlDeviceGetMaxPcieLinkWidth": _v(16), "nvmlDeviceGetPcieReplayCounter": _v(replays)}


def _nvlink(states: list[int], counters: dict[tuple[int, str], int] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for link, state in enumerate(states):
        out[f"nvmlDeviceGetNvLinkState({link})"] = {"value": state, "decoded": "Enabled" if state else "Disabled"}
        for c in _COUNTERS:
            out[f"nvmlDeviceGetNvLinkErrorCounter({link},NVML_NVLINK_ERROR_DL_{c})"] = _v(
                (counters or {}).get((link, c), 0))
    return out


def _bundle(start: dict[str, Any], end: dict[str, Any] | None, util: float = 90) -> BundleSpec:
    b = BundleSpec()
    b.gpu(0)
    b.gpus[0]["nvml"].update(start)
    for s in range(10):
        b.gpu_tick(0, T0 + s * 6, util, 10 * GIB)
    if end is not None:
        b.add_json("nvml/health_end.json", {"t": T0 + 60, "devices": [{"index": 0, "nvml": end}]})
    return b


class TestPcieDegraded:
    def test_narrow_link_for_the_whole_window(self, analyze: Analyze) -> None:
        (f,) = of_kind(analyze(_bundle(_pcie(width=8), _pcie(width=8))), "gpu-pcie-degraded")
        assert f["severity"] == "medium" and "x8 of x16 for the whole window" in f["summary"]
        assert (f["metrics"]["degraded_at_start"], f["metrics"]["degraded_at_end"]) == (1, 1)

    def test_a_link_back_to_full_by_the_end(self, analyze: Analyze) -> None:
        (f,) = of_kind(analyze(_bundle(_pcie(width=4), _pcie())), "gpu-pcie-degraded")
        assert "back to full by its end" in f["summary"] and f["metrics"]["degraded_at_end"] == 0

    def test_a_slower_generation_on_a_busy_gpu(self, analyze: Analyze) -> None:
        (f,) = of_kind(analyze(_bundle(_pcie(gen=3), _pcie(gen=3))), "gpu-pcie-degraded")
        assert "Gen3 of Gen5" in f["summary"] and "busy (90% mean utilization)" in f["summary"]

    def test_replays_alone_are_low_with_their_rate(self, analyze: Analyze) -> None:
        (f,) = of_kind(analyze(_bundle(_pcie(replays=10), _pcie(replays=130))), "gpu-pcie-degraded")
        assert f["severity"] == "low" and f["metrics"]["replays_in_window"] == 120
        assert "120 PCIe replay(s) during the 60 s window (120.0 per minute)" in f["summary"]

    def test_an_idle_gpu_at_a_low_generation_is_power_saving(self, analyze: Analyze) -> None:
        assert "gpu-pcie-degraded" not in kinds(analyze(_bundle(_pcie(gen=1), _pcie(gen=1), util=0)))

    def test_a_full_link_and_old_replays_are_no_finding(self, analyze: Analyze) -> None:
        # 500 replays since the driver loaded, none during the window
        doc = analyze(_bundle(_pcie(replays=500), _pcie(replays=500)))
        assert "gpu-pcie-degraded" not in kinds(doc)
        (r,) = [r for r in doc["ruled_out"] if r["kind"] == "gpu-pcie-degraded"]
        assert "full width (1 GPU(s)); no PCIe replay on 1 GPU(s) read at both ends" in r["statement"], r


class TestNvlinkErrors:
    def test_a_link_that_went_down_and_crc_errors_that_grew(self, analyze: Analyze) -> None:
        start = _nvlink([1, 1, 1], {(1, "CRC_FLIT"): 5})
        end = _nvlink([1, 0, 1], {(1, "CRC_FLIT"): 5, (2, "CRC_DATA"): 12, (2, "REPLAY"): 3})
        (f,) = of_kind(analyze(_bundle(start, end)), "gpu-nvlink-errors")
        assert f["severity"] == "high" and f["metrics"]["links_went_down"] == 1
        assert "link 1 went down during the window" in f["summary"]
        assert "link 2: CRC data +12 (12.0 per minute), replay +3 (3.0 per minute)" in f["summary"]
        assert f["metrics"]["links_with_errors"] == "2"

    def test_errors_that_did_not_grow_are_no_finding(self, analyze: Analyze) -> None:
        counters = {(0, "CRC_FLIT"): 900, (1, "REPLAY"): 4}
        doc = analyze(_bundle(_nvlink([1, 1], counters), _nvlink([1, 1], counters)))
        assert "gpu-nvlink-errors" not in kinds(doc)
        (r,) = [r for r in doc["ruled_out"] if r["kind"] == "gpu-nvlink-errors"]
        assert "(2 link(s) on 1 GPU(s) read at both ends)" in r["statement"]
        assert r["evidence"] and r["evidence"][0]["member"] == "nvml/devices.json"


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                     max_leaves=10)
_KEYS = st.sampled_from([*_pcie(), *_nvlink([1]), "nvmlDeviceGetNvLinkState(99)",
                         "nvmlDeviceGetNvLinkErrorCounter(x,NVML_NVLINK_ERROR_DL_REPLAY)"])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=st.dictionaries(_KEYS, _JSON, max_size=8), end=st.dictionaries(_KEYS, _JSON, max_size=8),
       t_end=_JSON)
def test_garbage_link_readings_never_raise(start: dict[str, Any], end: dict[str, Any], t_end: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        b = BundleSpec()
        b.gpu(0)
        b.gpus[0]["nvml"].update(start)
        b.add_json("nvml/health_end.json", {"t": t_end, "devices": [{"index": 0, "nvml": end}]})
        doc = analyze_bundles([b.write(Path(tmp))])
        assert not [lim for lim in doc["limitations"] if "could not be read" in lim or lim.startswith("rule ")]
        json.dumps(doc)
