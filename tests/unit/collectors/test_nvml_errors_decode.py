"""The pynvml error seam and the pure NVML decoders."""

from __future__ import annotations

import ctypes

import pynvml
import pytest
from hypothesis import given
from hypothesis import strategies as st

from forensics.collectors.nvml.decode import (
    CLOCKS_EVENT_REASONS,
    EVENT_TYPES,
    decode_bitmask,
    decode_clocks_event_reasons,
    decode_compute_mode,
    decode_enable_state,
    decode_event_types,
    to_jsonable,
    xid_description,
)
from forensics.collectors.nvml.errors import (
    REASONS,
    MissingValue,
    missing_from,
    skipped_lost,
    timed_out,
)
from forensics.errors import ParseError

ERROR_CLASSES = sorted(n for n in dir(pynvml) if n.startswith("NVMLError_"))
KNOWN_REASONS = {
    "uninitialized", "invalid_argument", "not_supported", "no_permission", "not_found", "driver_error",
    "hardware_error", "driver_not_loaded", "timed_out", "library_not_found", "library_mismatch",
    "gpu_is_lost", "reset_required", "busy", "unknown",
}


class TestErrorSeam:
    def test_every_pynvml_error_class_is_mapped(self) -> None:
        """A pynvml with a new NVMLError_* class must fail here until REASONS maps it."""
        assert ERROR_CLASSES, "pynvml defines no NVMLError_* classes?"
        unmapped = [n for n in ERROR_CLASSES if n not in REASONS]
        assert unmapped == []

    def test_no_stale_entries(self) -> None:
        assert sorted(REASONS) == ERROR_CLASSES

    def test_reasons_are_from_the_documented_set(self) -> None:
        assert set(REASONS.values()) <= KNOWN_REASONS

    @pytest.mark.parametrize("name", ERROR_CLASSES)
    def test_each_class_translates_with_its_code(self, name: str) -> None:
        cls = getattr(pynvml, name)
        exc = cls()
        miss = missing_from(exc, pynvml)
        assert miss == MissingValue(REASONS[name], name, exc.value, miss.message)
        assert miss.message  # str() of the error, e.g. "Not Supported"

    def test_key_reasons(self) -> None:
        assert missing_from(pynvml.NVMLError_NotSupported(), pynvml).reason == "not_supported"
        assert missing_from(pynvml.NVMLError_NoPermission(), pynvml).reason == "no_permission"
        assert missing_from(pynvml.NVMLError_GpuIsLost(), pynvml).reason == "gpu_is_lost"
        assert missing_from(pynvml.NVMLError_Unknown(), pynvml).reason == "unknown"
        assert missing_from(pynvml.NVMLError_Timeout(), pynvml).reason == "timed_out"

    def test_library_mismatch_is_not_an_nvmlerror_but_is_mapped(self) -> None:
        exc = pynvml.NVMLLibraryMismatchError("Unversioned function called ...")
        assert not isinstance(exc, pynvml.NVMLError)
        miss = missing_from(exc, pynvml)
        assert (miss.reason, miss.error, miss.nvml_return) == ("library_mismatch", "NVMLLibraryMismatchError", None)

    def test_bare_nvmlerror_with_unknown_code(self) -> None:
        miss = missing_from(pynvml.NVMLError(12345), pynvml)
        assert (miss.reason, miss.error, miss.nvml_return) == ("unknown", "NVMLError", 12345)

    def test_other_exceptions(self) -> None:
        miss = missing_from(TypeError("bad argument"), pynvml)
        assert (miss.reason, miss.error, miss.message) == ("error", "TypeError", "bad argument")

    def test_json_forms(self) -> None:
        assert timed_out("nvmlDeviceGetTemperature on GPU 1", 2.5).as_json() == {
            "missing": "timed_out", "error": "TimedOut", "nvml_return": None,
            "message": "nvmlDeviceGetTemperature on GPU 1 did not return within 2.5 s"}
        assert skipped_lost("nvmlDeviceGetUUID").as_json()["missing"] == "gpu_is_lost"


class TestDecoders:
    @given(st.integers(min_value=0, max_value=(1 << 64) - 1))
    def test_bitmask_round_trip(self, value: int) -> None:
        names = decode_bitmask(value, CLOCKS_EVENT_REASONS)
        by_name = {v: k for k, v in CLOCKS_EVENT_REASONS.items()}
        back = 0
        for n in names:
            back |= by_name[n] if n in by_name else int(n, 16)
        assert back == value
        assert len(names) == bin(value).count("1")

    @given(st.one_of(st.integers(max_value=-1), st.integers(min_value=1 << 64)))
    def test_bitmask_out_of_range(self, value: int) -> None:
        with pytest.raises(ParseError):
            decode_event_types(value)

    @given(st.one_of(st.text(), st.floats(), st.booleans(), st.none()))
    def test_non_integers_raise_parse_error_only(self, value: object) -> None:
        with pytest.raises(ParseError):
            decode_clocks_event_reasons(value)  # type: ignore[arg-type]

    def test_named_values(self) -> None:
        assert decode_clocks_event_reasons(0x44) == ["SwPowerCap", "HwThermalSlowdown"]
        assert decode_clocks_event_reasons(0x600) == ["BoardLimit", "Reliability"]
        assert decode_clocks_event_reasons(0) == []
        assert decode_event_types(0x8) == ["XidCriticalError"]
        assert EVENT_TYPES[0x8] == "XidCriticalError"
        assert decode_compute_mode(3) == "ExclusiveProcess"
        assert decode_compute_mode(9) == "Unknown(9)"
        assert decode_enable_state(1) == "Enabled"
        assert xid_description(79) == "GPU has fallen off the bus"
        assert xid_description(48) == "Double Bit ECC Error"  # NVIDIA's catalog's words, its one table
        assert xid_description(999) is None

    def test_reason_bits_match_pynvml(self) -> None:
        for bit, name in CLOCKS_EVENT_REASONS.items():
            const = getattr(pynvml, f"nvmlClocksEventReason{name}", None) or getattr(
                pynvml, f"nvmlClocksThrottleReason{name}")
            assert const == bit, name
        for bit, name in EVENT_TYPES.items():
            const = getattr(pynvml, f"nvmlEventType{name}", None) or getattr(pynvml, f"nvmlEvent{name}")
            assert const == bit, name  # pynvml spells 0x100 nvmlEventMigConfigChange

    def test_to_jsonable_structures(self) -> None:
        mem = pynvml.c_nvmlMemory_v2_t()
        mem.version, mem.total, mem.reserved, mem.free, mem.used = pynvml.nvmlMemory_v2, 10, 1, 4, 5
        assert to_jsonable(mem) == {"version": pynvml.nvmlMemory_v2, "total": 10, "reserved": 1, "free": 4, "used": 5}
        pci = pynvml.nvmlPciInfo_t()
        pci.busId = b"00000000:3B:00.0"
        assert to_jsonable(pci)["busId"] == "00000000:3B:00.0"
        assert to_jsonable((ctypes.c_uint * 2)(7, 8)) == [7, 8]
        assert to_jsonable([ctypes.c_ulonglong(5), b"x", None]) == [5, "x", None]

    def test_to_jsonable_reads_fields_as_pynvml_does(self) -> None:
        """The descriptor fast paths (a flat sample list in one comprehension, a structure's
        numbers without pynvml's ``__getattribute__``) give what reading each attribute gives."""
        samples = (pynvml.c_nvmlProcessUtilizationSample_t * 3)()
        for i, smp in enumerate(samples):
            smp.pid, smp.timeStamp, smp.smUtil, smp.memUtil = 100 + i, (1 << 62) + i, i, 2 * i
        listed = samples[0:3]  # what pynvml's nvmlDeviceGetProcessUtilization returns
        expected = [{f[0]: getattr(smp, f[0]) for f in smp._fields_} for smp in listed]
        assert to_jsonable(listed) == expected
        assert list(to_jsonable(listed)[0]) == ["pid", "timeStamp", "smUtil", "memUtil", "encUtil", "decUtil"]
        assert to_jsonable(samples) == expected
        mixed = [listed[0], pynvml.c_nvmlMemory_v2_t()]  # not one flat class: element by element
        assert to_jsonable(mixed) == [expected[0], to_jsonable(mixed[1])]
        procs = [pynvml.nvmlFriendlyObject({"pid": 7 + i, "usedGpuMemory": None if i else 1 << 30, "_x": 1})
                 for i in range(2)]  # what nvmlDeviceGetComputeRunningProcesses returns
        assert to_jsonable(procs) == [{"pid": 7, "usedGpuMemory": 1 << 30}, {"pid": 8, "usedGpuMemory": None}]
        assert to_jsonable([None, None]) == [None, None] and to_jsonable([b"a", b"b"]) == ["a", "b"]
        pci = pynvml.nvmlPciInfo_t()
        pci.busId, pci.domain, pci.bus = b"00000000:3B:00.0", 0, 0x3B  # bytes fields: still decoded
        got = to_jsonable(pci)
        assert got["busId"] == "00000000:3B:00.0" and got["bus"] == 0x3B and isinstance(got["busIdLegacy"], str)
