"""Engine calls in parallel under a budget, for the docker collector.

Each call runs in a thread with the client's per-call socket timeout; the collector takes results
as they complete and stops waiting at its budget, so a wedged engine costs its deadline, not the
whole capture. A thread cannot be killed: an abandoned call ends at its own socket timeout, and
the collector's child process never waits for it.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["WIDE_WORKERS", "Call", "CallPool", "describe_error", "first_line", "is_race"]

WIDE_WORKERS = 64  # threads for calls that mostly wait (stats)


def is_race(error: str | None) -> bool:
    """A container removed or stopped between the list and a call on it: not a failure."""
    return bool(error) and (str(error).startswith("NotFound:") or "is not running" in str(error))


def first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]


def describe_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {first_line(str(exc))}"


@dataclass
class Call:
    key: tuple[str, str]             # (kind, subject)
    fn: Callable[[], Any]
    started: float = 0.0
    duration_s: float | None = None
    finished_unix: float | None = None
    error: str | None = None


@dataclass
class CallPool:
    """Runs calls in threads; ``wait`` returns at the budget whether or not all finished.

    Two executors: ``workers`` threads for calls that make the engine work (inspect, top, ...),
    and a wide one for calls that mostly wait: one-shot stats return at the engine's next
    one-second stats tick, so they are all issued at once and come back together.
    """

    workers: int
    wide_workers: int = WIDE_WORKERS
    calls: dict[tuple[str, str], Call] = field(default_factory=dict)
    futures: dict[cf.Future[Any], Call] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.executor = cf.ThreadPoolExecutor(max_workers=self.workers,
                                              thread_name_prefix="docker-call")
        self.wide = cf.ThreadPoolExecutor(max_workers=self.wide_workers,
                                          thread_name_prefix="docker-wait")

    def submit(self, kind: str, subject: str, fn: Callable[[], Any], wide: bool = False) -> None:
        call = Call((kind, subject), fn)
        self.calls[call.key] = call

        def run() -> Any:
            call.started = time.monotonic()
            try:
                return fn()
            finally:
                call.duration_s = time.monotonic() - call.started
                call.finished_unix = time.time()

        self.futures[(self.wide if wide else self.executor).submit(run)] = call

    def wait(self, deadline: float,
             only: set[tuple[str, str]] | None = None) -> list[tuple[Call, Any]]:
        """Results of the calls (all, or those keyed in ``only``) done by ``deadline``."""
        return list(self.as_completed(deadline, only))

    def as_completed(self, deadline: float,
                     only: set[tuple[str, str]] | None = None) -> Iterator[tuple[Call, Any]]:
        """Yield ``(call, result)`` as calls finish (result None on error, recorded on the call)
        until all are done or ``deadline`` (monotonic) passes; then, when waiting on every call,
        the unfinished ones are marked and abandoned. Calls submitted meanwhile are included."""
        while True:
            pending = {f for f, c in self.futures.items() if only is None or c.key in only}
            left = deadline - time.monotonic()
            if not pending or left <= 0:
                break
            done, _ = cf.wait(pending, timeout=left, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                call = self.futures.pop(fut)
                try:
                    result = fut.result()
                except Exception as exc:  # noqa: BLE001 - recorded per call
                    call.error = describe_error(exc)
                    result = None
                yield call, result
        if only is None:
            for fut, call in list(self.futures.items()):
                self.futures.pop(fut)
                call.error = "did not finish within the collector's budget"
                fut.cancel()

    def waiting_only_for(self, kinds: set[str]) -> bool:
        """Whether every call not yet taken from the pool is of one of ``kinds``."""
        return all(c.key[0] in kinds for c in self.futures.values())

    def close(self) -> None:
        # a wedged call keeps its thread until its own socket timeout; never wait for it
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.wide.shutdown(wait=False, cancel_futures=True)
