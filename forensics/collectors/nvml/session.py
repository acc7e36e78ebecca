"""The one way NVML is read: :class:`Session` runs each call in a worker thread the collector
stops waiting for at its deadline or when one call hangs (a GPU off the bus), and keeps *why* a
value is missing (:class:`Reading`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from forensics.collectors.nvml.decode import (
    to_jsonable,
)
from forensics.collectors.nvml.errors import MissingValue, missing_from, skipped_lost
from forensics.errors import ParseError
from forensics.specs.nvml import NvmlSettings

__all__ = ["DEFAULT_CALL_TIMEOUT_S", "Abandoned", "Reading", "Session"]

#: How long one NVML call may run before the GPU is taken as wedged (``--set nvml.call_timeout_s``).
DEFAULT_CALL_TIMEOUT_S: float = NvmlSettings().call_timeout_s


@dataclass(frozen=True)
class Reading:
    """One NVML call's outcome: the value (as JSON) and its decoding, or why it is missing."""

    call: str
    value: Any = None
    decoded: Any = None
    missing: MissingValue | None = None
    raw: Any = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.missing is None

    def as_json(self) -> dict[str, Any]:
        if self.missing is not None:
            return self.missing.as_json()
        out: dict[str, Any] = {"value": self.value}
        if self.decoded is not None:
            out["decoded"] = self.decoded
        return out


class Abandoned(Exception):
    """The collector stopped waiting for NVML; the worker thread must not touch the results."""


class Session:
    """One NVML session. ``query`` is the only way values are read; results are stored under a
    lock that the collector takes over when it stops waiting, so a late worker cannot change them."""

    def __init__(self, nv: Any, call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> None:
        self.nv = nv
        self.call_timeout_s = call_timeout_s
        self.lock = threading.Lock()
        self.current: str | None = None
        self.current_since = 0.0
        self.abandoned = False
        self.hung: str | None = None
        self.hung_for_s = 0.0  # how long the hung call had run when the collector stopped waiting
        self.lost: dict[str, str] = {}
        self.calls = 0

    def query(self, call: str, fn: Callable[[], Any], *, device: str | None = None,
              decode: Callable[[Any], Any] | None = None, jsonable: bool = False) -> Reading:
        """``fn()`` as a :class:`Reading`; ``jsonable``: ``fn`` already answers JSON values (taken as they are)."""
        if device is not None and device in self.lost:
            return Reading(call, missing=skipped_lost(self.lost[device]))
        # No lock around the call's bookkeeping (two lock round trips a call, ~100 calls a sampling
        # tick): only this thread writes these, and the watchdog (run_guarded) reads them. The start
        # is written before the name, so a watchdog that sees this call's name sees its start, and
        # one that sees the last call's name with this start does not think it stalled. What must
        # not happen after the watchdog gave up, results written into what the caller reads, is
        # still ruled out under the lock, by put and add.
        if self.abandoned:
            raise Abandoned
        self.current_since = time.monotonic()
        self.current = call if device is None else f"{call} on {device}"
        self.calls += 1
        try:
            raw = fn()
        except Exception as exc:  # noqa: BLE001 - every failure becomes evidence
            miss = missing_from(exc, self.nv)
            if miss.reason == "gpu_is_lost" and device is not None:
                self.lost.setdefault(device, call)
            reading = Reading(call, missing=miss)
        else:
            value = raw if jsonable else to_jsonable(raw)
            decoded = None
            if decode is not None:
                try:
                    decoded = decode(value)
                except (ParseError, TypeError, ValueError, IndexError, KeyError) as exc:
                    decoded = {"undecodable": f"{type(exc).__name__}: {exc}"}
            reading = Reading(call, value=value, decoded=decoded, raw=raw)
        self.current = None
        if self.abandoned:
            raise Abandoned
        return reading

    def put(self, target: dict[str, Any], key: str, value: Any) -> None:
        with self.lock:
            if self.abandoned:
                raise Abandoned
            target[key] = value.as_json() if isinstance(value, Reading) else value

    def add(self, target: list[Any], item: Any) -> None:
        with self.lock:
            if self.abandoned:
                raise Abandoned
            target.append(item)

    def record(self, target: dict[str, Any], call: str, fn: Callable[[], Any], *,
               device: str | None = None, decode: Callable[[Any], Any] | None = None) -> Reading:
        """``query`` and store the result under ``call`` in ``target``."""
        reading = self.query(call, fn, device=device, decode=decode)
        self.put(target, call, reading)
        return reading

    def run_guarded(self, work: Callable[[], None], budget_s: float) -> str | None:
        """Run ``work`` in a daemon thread for at most ``budget_s``; None when it finished, else
        the NVML call it is stuck in (the session is then abandoned for good; ``hung_for_s`` says
        how long that call had run)."""
        errors: list[BaseException] = []

        def target() -> None:
            try:
                work()
            except Abandoned:
                pass
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                errors.append(exc)

        worker = threading.Thread(target=target, name="nvml-reads", daemon=True)
        started = time.monotonic()
        worker.start()
        # Stop waiting at the budget, or as soon as one call has hung for call_timeout_s: NVML
        # answers in milliseconds, and a call that hangs (a GPU fallen off the bus, Xid 79/45)
        # would hang the next one too, so waiting out the whole deadline only delays the
        # collectors after this one.
        end = time.monotonic() + max(budget_s, 0.0)
        while worker.is_alive():
            now = time.monotonic()
            if now >= end:
                break
            with self.lock:
                stalled = self.current is not None and now - self.current_since > self.call_timeout_s
            if stalled:
                break
            worker.join(min(0.05, end - now))
        if worker.is_alive():
            with self.lock:
                self.abandoned = True
                self.hung = self.current or "NVML"
                self.hung_for_s = time.monotonic() - (self.current_since if self.current else started)
            return self.hung
        if errors:
            raise errors[0]
        return None


