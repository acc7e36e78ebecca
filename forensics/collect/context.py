"""What a collector is given: options, an evidence sink, the redactor, hints and its deadline."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from forensics.bundle.format import iso_from_unix

if TYPE_CHECKING:
    from forensics.bundle.redact import Redactor
    from forensics.bundle.sink import EvidenceSink

__all__ = ["CaptureOptions", "CollectContext", "Collector", "Tick", "merge_hints"]


@dataclass(frozen=True)
class CaptureOptions:
    """Everything ``gpuforensics capture`` was asked to do."""

    duration_s: float = 0.0
    interval_s: float = 1.0
    timeout_s: float = 60.0
    redact: bool = True
    all_processes: bool = False
    since: datetime | None = None
    until: datetime | None = None  # end of the history window (prometheus); None: the capture's start
    lookback_s: float = 3600.0
    kubeconfig: str | None = None
    kube_context: str | None = None
    node_name: str | None = None
    nvml_library: str | None = None
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    capture_start: datetime = field(default_factory=lambda: datetime.now(UTC))
    extra: dict[str, str] = field(default_factory=dict)
    argv: tuple[str, ...] = ()
    # the flight recorder's trigger that asked for this capture (manifest ``trigger``), or None
    trigger: dict[str, Any] | None = None


@dataclass(frozen=True)
class Tick:
    """One sampling instant."""

    index: int
    time_unix: float

    @property
    def time_iso(self) -> str:
        return iso_from_unix(self.time_unix)


def merge_hints(into: dict[str, list[Any]], new: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Union of hint lists, order kept, duplicates dropped."""
    for key, values in new.items():
        current = into.setdefault(key, [])
        seen = {_hashable(v) for v in current}
        for v in values:
            h = _hashable(v)
            if h not in seen:
                seen.add(h)
                current.append(v)
    return into


def _hashable(v: Any) -> Any:
    return repr(v) if isinstance(v, (dict, list)) else v


class CollectContext:
    """Handed to ``snapshot``/``sample``; lives in the collector's own child process."""

    def __init__(
        self,
        options: CaptureOptions,
        sink: EvidenceSink,
        redactor: Redactor,
        hints: dict[str, list[Any]] | None = None,
        deadline: float | None = None,
        collector_name: str = "",
    ) -> None:
        self.options = options
        self.sink = sink
        self.redactor = redactor
        self.hints: dict[str, list[Any]] = {k: list(v) for k, v in (hints or {}).items()}
        self.published: dict[str, list[Any]] = {}
        self.deadline = deadline if deadline is not None else time.monotonic() + options.timeout_s
        self.collector_name = collector_name
        self.notes: list[str] = []
        self.partial_reasons: list[str] = []

    def hint(self, key: str) -> list[Any]:
        """Values published under ``key`` by collectors that ran before this one (and by this one)."""
        return list(self.hints.get(key, []))

    def publish(self, key: str, values: Iterable[Any]) -> None:
        """Hand values (JSON-able) to the collectors that run after this one."""
        vals = list(values)
        merge_hints(self.published, {key: vals})
        merge_hints(self.hints, {key: vals})

    def note(self, text: str) -> None:
        self.notes.append(text)

    def partial(self, reason: str) -> None:
        self.partial_reasons.append(reason)

    def remaining(self) -> float:
        """Seconds left before the runner kills this collector."""
        return self.deadline - time.monotonic()


@runtime_checkable
class Collector(Protocol):
    """A source of evidence; see docs/architecture.md."""

    name: str
    order: int
    timeout_s: float

    def snapshot(self, ctx: CollectContext) -> None: ...
