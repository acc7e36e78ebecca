"""The one seam where pynvml's errors become *why a value is missing*.

Every NVML read in the nvml collector goes through :func:`missing_from`, which turns whatever the
call raised into a :class:`MissingValue`: a stable ``reason`` (what an investigator reads), the
exact error class name (``NVMLError_NotSupported``) and the NVML return code. Source: pynvml.py
(nvidia-ml-py), which generates one ``NVMLError_<Name>`` subclass per ``NVML_ERROR_*`` constant, and
raises ``NVMLLibraryMismatchError`` (not an ``NVMLError``) when an unversioned wrapper meets a
library without the versioned symbol it calls.

``REASONS`` names every ``NVMLError_*`` class that nvidia-ml-py 13.x defines; a test fails when
pynvml grows a class this table does not map (so a new error never degrades to "unknown" unseen).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["REASONS", "MissingValue", "missing_from", "timed_out", "skipped_lost"]

#: pynvml error class name -> reason recorded in the bundle.
REASONS: dict[str, str] = {
    "NVMLError_Uninitialized": "uninitialized",
    "NVMLError_InvalidArgument": "invalid_argument",
    "NVMLError_NotSupported": "not_supported",
    "NVMLError_NoPermission": "no_permission",
    "NVMLError_AlreadyInitialized": "driver_error",
    "NVMLError_NotFound": "not_found",
    "NVMLError_InsufficientSize": "driver_error",
    "NVMLError_InsufficientPower": "hardware_error",
    "NVMLError_DriverNotLoaded": "driver_not_loaded",
    "NVMLError_Timeout": "timed_out",
    "NVMLError_IrqIssue": "hardware_error",
    "NVMLError_LibraryNotFound": "library_not_found",
    "NVMLError_FunctionNotFound": "library_mismatch",
    "NVMLError_CorruptedInforom": "hardware_error",
    "NVMLError_GpuIsLost": "gpu_is_lost",
    "NVMLError_ResetRequired": "reset_required",
    "NVMLError_OperatingSystem": "no_permission",
    "NVMLError_LibRmVersionMismatch": "library_mismatch",
    "NVMLError_InUse": "busy",
    "NVMLError_Memory": "driver_error",
    "NVMLError_NoData": "not_found",
    "NVMLError_VgpuEccNotSupported": "not_supported",
    "NVMLError_InsufficientResources": "driver_error",
    "NVMLError_FreqNotSupported": "not_supported",
    "NVMLError_ArgumentVersionMismatch": "library_mismatch",
    "NVMLError_Deprecated": "not_supported",
    "NVMLError_NotReady": "busy",
    "NVMLError_GpuNotFound": "gpu_is_lost",
    "NVMLError_InvalidState": "driver_error",
    "NVMLError_ResetTypeNotSupported": "not_supported",
    "NVMLError_Unknown": "unknown",
}


@dataclass(frozen=True)
class MissingValue:
    """Why an NVML value is absent.

    ``reason``: one of the values of ``REASONS`` or ``library_mismatch`` (pynvml's
    ``NVMLLibraryMismatchError``), ``timed_out`` (the call did not return before the collector's
    deadline), ``gpu_is_lost`` (also when skipped after an earlier call on the device said so), or
    ``error`` (anything else pynvml raised). ``error``: the exception class name, ``nvml_return``:
    the NVML return code when there is one.
    """

    reason: str
    error: str
    nvml_return: int | None = None
    message: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "missing": self.reason,
            "error": self.error,
            "nvml_return": self.nvml_return,
            "message": self.message,
        }


def missing_from(exc: BaseException, nvml: Any) -> MissingValue:
    """Translate an exception raised by a pynvml call (module ``nvml``) into a MissingValue."""
    name = type(exc).__name__
    nvml_error = getattr(nvml, "NVMLError", None)
    mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
    if mismatch is not None and isinstance(exc, mismatch):
        return MissingValue("library_mismatch", name, None, _text(exc))
    if nvml_error is not None and isinstance(exc, nvml_error):
        value = getattr(exc, "value", None)
        reason = REASONS.get(name)
        if reason is None:  # a bare NVMLError with a code pynvml has no class for
            reason = "unknown"
        return MissingValue(reason, name, int(value) if isinstance(value, int) else None, _text(exc))
    return MissingValue("error", name, None, _text(exc))


def timed_out(call: str, budget_s: float) -> MissingValue:
    """The value a call would have given, had it returned within the ``budget_s`` it was waited for."""
    return MissingValue("timed_out", "TimedOut", None,
                        f"{call} did not return within {budget_s:.1f} s")


def skipped_lost(by_call: str) -> MissingValue:
    """Not asked: an earlier call on the same device answered GpuIsLost."""
    return MissingValue("gpu_is_lost", "Skipped", None,
                        f"not queried: {by_call} reported the GPU lost")


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - pynvml's __str__ itself calls NVML
        return type(exc).__name__
