"""Pure decoders for NVML values: enums and bitmasks to names, ctypes structures to JSON.

Sources: nvml.h / pynvml.py constants (``nvmlClocksEventReason*``, the old
``nvmlClocksThrottleReason*`` names, ``NVML_COMPUTEMODE_*``, ``nvmlEventType*``);
``nvidia-smi -q -d PERFORMANCE`` prints the same clock event reason names. An Xid event's
description is NVIDIA's catalog's, from the package's one Xid table
(:func:`forensics.parsing.xid_catalog.xid_description`, re-exported here for the sampler). These functions never call NVML; they raise :class:`forensics.errors.ParseError`
on values that cannot be what NVML returns (negative or over 64 bits).
"""

from __future__ import annotations

import ctypes
from typing import Any

from forensics.errors import ParseError
from forensics.parsing.xid_catalog import xid_description

__all__ = [
    "CLOCKS_EVENT_REASONS",
    "COMPUTE_MODES",
    "EVENT_TYPES",
    "RECOVERY_ACTIONS",
    "decode_bitmask",
    "decode_clocks_event_reasons",
    "decode_compute_mode",
    "decode_enable_state",
    "decode_event_types",
    "decode_recovery_action",
    "to_jsonable",
    "xid_description",
]

_U64 = (1 << 64) - 1

#: nvmlClocksEventReason* bits; 0x200 and 0x400 exist only under the old ThrottleReason names.
CLOCKS_EVENT_REASONS: dict[int, str] = {
    0x1: "GpuIdle",
    0x2: "ApplicationsClocksSetting",
    0x4: "SwPowerCap",
    0x8: "HwSlowdown",
    0x10: "SyncBoost",
    0x20: "SwThermalSlowdown",
    0x40: "HwThermalSlowdown",
    0x80: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
    0x200: "BoardLimit",
    0x400: "Reliability",
}

#: nvmlDeviceGpuRecoveryAction_t (NVML_GPU_RECOVERY_ACTION_*), the value of field
#: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION.
RECOVERY_ACTIONS: dict[int, str] = {
    0: "NONE",
    1: "GPU_RESET",
    2: "NODE_REBOOT",
    3: "DRAIN_P2P",
    4: "DRAIN_AND_RESET",
    5: "RECOVER_IMEX_DOMAIN",
    6: "BUS_RESET",
    7: "SYSTEM_REBOOT",
}

COMPUTE_MODES: dict[int, str] = {
    0: "Default",
    1: "ExclusiveThread",
    2: "Prohibited",
    3: "ExclusiveProcess",
}

#: nvmlEventType* bits.
EVENT_TYPES: dict[int, str] = {
    0x1: "SingleBitEccError",
    0x2: "DoubleBitEccError",
    0x4: "PState",
    0x8: "XidCriticalError",
    0x10: "Clock",
    0x80: "PowerSourceChange",
    0x100: "MigConfigChange",
    0x200: "SingleBitEccErrorStorm",
    0x400: "DramRetirementEvent",
    0x800: "DramRetirementFailure",
    0x1000: "NonFatalPoisonError",
    0x2000: "FatalPoisonError",
    0x4000: "GpuUnavailableError",
    0x8000: "GpuRecoveryAction",
}

def _check_u64(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParseError(f"{what}: expected an integer, got {type(value).__name__}")
    if value < 0 or value > _U64:
        raise ParseError(f"{what}: {value} is not an unsigned 64-bit value")
    return value


def decode_bitmask(value: int, names: dict[int, str], what: str = "bitmask") -> list[str]:
    """Names of the set bits, lowest first; unnamed bits as ``0x...`` so nothing is dropped."""
    _check_u64(value, what)
    out: list[str] = []
    bit = 1
    while bit <= value:
        if value & bit:
            out.append(names.get(bit, f"0x{bit:x}"))
        bit <<= 1
    return out


def decode_clocks_event_reasons(value: int) -> list[str]:
    """``nvmlDeviceGetCurrentClocksEventReasons`` (or ``...ThrottleReasons``) bitmask to names."""
    return decode_bitmask(value, CLOCKS_EVENT_REASONS, "clocks event reasons")


def decode_event_types(value: int) -> list[str]:
    """``nvmlEventType*`` bitmask (``nvmlDeviceGetSupportedEventTypes``, event ``eventType``)."""
    return decode_bitmask(value, EVENT_TYPES, "event types")


def decode_compute_mode(value: int) -> str:
    """``nvmlDeviceGetComputeMode``: ``nvidia-smi --query-gpu=compute_mode``."""
    _check_u64(value, "compute mode")
    return COMPUTE_MODES.get(value, f"Unknown({value})")


def decode_recovery_action(value: int) -> str:
    """``NVML_GPU_RECOVERY_ACTION_<name>`` of a recovery action value, ``Unknown(<n>)`` if new."""
    _check_u64(value, "recovery action")
    return RECOVERY_ACTIONS.get(value, f"Unknown({value})")


def decode_enable_state(value: int) -> str:
    """``nvmlEnableState_t`` (persistence, ECC, accounting, MIG modes)."""
    _check_u64(value, "enable state")
    return {0: "Disabled", 1: "Enabled"}.get(value, f"Unknown({value})")


_SCALARS = frozenset({int, float, str, bool, type(None)})
#: per structure class, its fields' names and their ctypes descriptors' getters: reading a field
#: through the descriptor skips pynvml's ``_PrintableStructure.__getattribute__`` (Python code on
#: every attribute read, which only changes bytes: those are read through it still)
_FIELD_GETTERS: dict[type, tuple[tuple[str, Any], ...]] = {}
#: ctypes whose fields read as plain int/float/bool (never bytes, never a nested object)
_NUMBER_CTYPES = frozenset({ctypes.c_bool, ctypes.c_byte, ctypes.c_ubyte, ctypes.c_short, ctypes.c_ushort,
                            ctypes.c_int, ctypes.c_uint, ctypes.c_long, ctypes.c_ulong, ctypes.c_longlong,
                            ctypes.c_ulonglong, ctypes.c_float, ctypes.c_double})
#: structure classes whose every field is such a number (pynvml's per-process utilisation sample):
#: a list of them is converted in one comprehension (:func:`_uniform`), ``True``/``False`` once per class
_FLAT: dict[type, bool] = {}


def _getters(kind: type, obj: Any) -> tuple[tuple[str, Any], ...]:
    getters = _FIELD_GETTERS.get(kind)
    if getters is None:
        getters = _FIELD_GETTERS[kind] = tuple((f[0], getattr(kind, f[0]).__get__) for f in obj._fields_)
        _FLAT[kind] = all(len(f) == 2 and f[1] in _NUMBER_CTYPES for f in obj._fields_)
    return getters


#: types to_jsonable reads by their own branch; an object of any other class is read by its vars()
_NOT_PLAIN = (bool, int, float, str, bytes, ctypes.Structure, ctypes.Array, ctypes._SimpleCData, list, tuple, dict)
_PLAIN: dict[type, bool] = {}  # class -> read by vars() (pynvml's nvmlFriendlyObject)


def _uniform(obj: list[Any] | tuple[Any, ...]) -> list[dict[str, Any]] | None:
    """A list of one class read field by field (structures whose fields are all numbers; pynvml's
    nvmlFriendlyObject, read by its vars()) in one comprehension, as to_jsonable reads each; None
    when the list is not one."""
    kind = type(obj[0])
    if any(type(x) is not kind for x in obj):
        return None
    if issubclass(kind, ctypes.Structure):
        getters = _getters(kind, obj[0])
        return [{name: get(x, kind) for name, get in getters} for x in obj] if _FLAT[kind] else None
    plain = _PLAIN.get(kind)
    if plain is None:
        plain = _PLAIN[kind] = not issubclass(kind, _NOT_PLAIN) and hasattr(obj[0], "__dict__")
    if not plain:
        return None
    return [{k: (v if type(v) in _SCALARS else to_jsonable(v)) for k, v in vars(x).items() if not k.startswith("_")}
            for x in obj]


def to_jsonable(obj: Any) -> Any:
    """A pynvml result as JSON: structures by their NVML field names, bytes decoded, arrays listed.

    Handles ``ctypes.Structure`` (pynvml's ``c_nvml*`` classes), pynvml's ``nvmlFriendlyObject``,
    ctypes arrays and scalars, lists, dicts and plain values. (Scalars are passed through without
    recursion: this runs on every process of every GPU at every sampling tick.)
    """
    kind = type(obj)
    if kind in _SCALARS:
        return obj
    if isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    if isinstance(obj, ctypes.Structure):
        out = {}
        for name, get in _getters(kind, obj):
            v = get(obj, kind)
            if type(v) is bytes:
                v = getattr(obj, name)  # as the structure's own class reads it (pynvml decodes)
            out[name] = v if type(v) in _SCALARS else to_jsonable(v)
        return out
    if isinstance(obj, ctypes.Array):
        return [to_jsonable(x) for x in obj]
    if isinstance(obj, ctypes._SimpleCData):
        return to_jsonable(obj.value)
    if isinstance(obj, list | tuple):
        same = _uniform(obj) if obj else None
        return same if same is not None else [x if type(x) in _SCALARS else to_jsonable(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if hasattr(obj, "__dict__"):  # pynvml.nvmlFriendlyObject
        return {k: (v if type(v) in _SCALARS else to_jsonable(v))
                for k, v in vars(obj).items() if not k.startswith("_")}
    return str(obj)
