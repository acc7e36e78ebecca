"""The shape of a source declaration: :class:`SourceSpec`, its typed settings, absence and hints.

A spec is data: it names a source once (volatility order, collector module, settings, what its
absence costs the analysis, the hints it publishes and reads). Capture derives its registry and
settings table from the specs, analysis its loader order and missing-source limitations. This
module imports nothing from capture, analysis, collectors or report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

from forensics.parsing.durations import parse_duration_s
from forensics.specs.roles import Role

__all__ = [
    "Absence", "Excuse", "Hint", "HintReader", "HintWriter", "NoSettings", "Setting", "SettingKind",
    "SettingsGroup", "SourceSpec", "StandIn", "check_value", "setting",
]

SettingKind = Literal["path", "positive-int", "non-negative-int", "positive-seconds", "bool", "url", "duration"]

_BOOLS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
_PROBLEMS: dict[str, str] = {"positive-int": "expected a positive integer",
                             "non-negative-int": "expected an integer >= 0",
                             "bool": "expected true or false", "path": "expected a path", "url": "expected a URL"}
_CHECKS: dict[str, Callable[[str], bool]] = {
    "positive-int": lambda v: v.isdigit() and int(v) > 0,
    "non-negative-int": lambda v: v.isdigit(),
    "bool": lambda v: v.lower() in _BOOLS,
    "path": lambda v: bool(v.strip()) and "\0" not in v,
    "url": lambda v: bool(v.strip()),
}


def check_value(kind: SettingKind, value: str) -> str | None:
    """Why ``value`` is not a valid ``kind`` (the constraint a kind carries), or None."""
    if kind == "positive-seconds":
        try:
            f = float(value)
        except ValueError:
            return "expected a number of seconds"
        return None if 0 < f < 86400 and f == f else "expected seconds between 0 and 86400"
    if kind == "duration":  # 15s, 1m, 2h, or plain seconds
        try:
            parse_duration_s(value)
        except ValueError as exc:
            return str(exc)
        return None
    return None if _CHECKS[kind](value) else _PROBLEMS[kind]


def _convert(kind: SettingKind, value: str) -> object:
    if kind in ("positive-int", "non-negative-int"):
        return int(value)
    if kind == "positive-seconds":
        return float(value)
    if kind == "duration":
        return parse_duration_s(value)
    if kind == "bool":
        return _BOOLS[value.lower()]
    return value


def setting(kind: SettingKind, help: str, default: Any, *, shown: str | None = None) -> Any:
    """A field of a source's settings dataclass: its kind (type and constraint), one-line help and
    default. ``shown`` is how the default reads in ``collectors --settings`` when it is not a
    plain value (``None`` meaning "worked out at run time")."""
    return field(default=default, metadata={"kind": kind, "help": help, "shown": shown})


@dataclass(frozen=True)
class Setting:
    """One ``--set SOURCE.NAME=VALUE`` key, as ``collectors --settings`` lists it."""

    key: str
    name: str
    kind: SettingKind
    default: object
    summary: str
    shown: str | None = None

    @property
    def help(self) -> str:
        """The one-line help with the default filled in from the spec."""
        if self.shown is not None:
            return f"{self.summary} (default: {self.shown})"
        default = self.default
        text = ("true" if default else "false") if isinstance(default, bool) else (
            f"{default:g}" if isinstance(default, float) else str(default))
        return f"{self.summary} (default {text})"

    def problem(self, value: str) -> str | None:
        return check_value(self.kind, value)


@dataclass(frozen=True)
class NoSettings:
    """The settings of a source that takes none."""


S = TypeVar("S")
T = TypeVar("T")


class HintReader(Protocol):
    def hint(self, key: str) -> list[Any]: ...


class HintWriter(Protocol):
    def publish(self, key: str, values: Iterable[Any]) -> None: ...


@dataclass(frozen=True)
class Hint(Generic[T]):
    """A typed hint key: what an earlier collector hands to later ones (``ctx.publish``/``ctx.hint``)."""

    key: str
    item: type[T]
    help: str

    def read(self, ctx: HintReader) -> list[T]:
        """The values published under this key that have the declared type (JSON round trips and
        collectors of other versions can hand anything)."""
        return [v for v in ctx.hint(self.key) if isinstance(v, self.item)]

    def publish(self, ctx: HintWriter, values: Iterable[T]) -> None:
        ctx.publish(self.key, values)


@dataclass(frozen=True)
class Excuse:
    """When a source's absence costs nothing: its status is one of ``statuses`` (None: no record of
    it in the bundle) and, with ``when_ok``, that other source was ``ok`` or ``partial``."""

    statuses: frozenset[str | None]
    why: str
    when_ok: str | None = None

    def applies(self, status: str | None, statuses: Mapping[str, str]) -> bool:
        if status not in self.statuses:
            return False
        return self.when_ok is None or statuses.get(self.when_ok) in ("ok", "partial")


@dataclass(frozen=True)
class Absence:
    """What the analysis loses when the source is absent or failed, and when that is no loss."""

    meaning: str
    excuses: tuple[Excuse, ...] = ()

    def costs(self, status: str | None, statuses: Mapping[str, str]) -> bool:
        return not any(e.applies(status, statuses) for e in self.excuses)


def _setting_table(prefix: str, settings: type[Any]) -> dict[str, Setting]:
    out: dict[str, Setting] = {}
    for f in dataclasses.fields(settings):
        meta = f.metadata
        key = f"{prefix}.{f.name}"
        out[key] = Setting(key, f.name, meta["kind"], f.default, meta["help"], meta["shown"])
    return out


def _read_settings(prefix: str, settings: type[T], extra: Mapping[str, str] | None, given: Mapping[str, Any]) -> T:
    values: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    for key, s in _setting_table(prefix, settings).items():
        raw = (extra or {}).get(key)
        if raw is None or raw == "" or check_value(s.kind, raw) is not None:
            continue
        values[s.name] = _convert(s.kind, raw)
    return settings(**values)


@dataclass(frozen=True)
class SettingsGroup(Generic[S]):
    """Settings several sources' collectors read (``--set logs.max_bytes=``: the docker and the
    kubernetes collectors both take workload logs), declared once; a source names the groups it
    reads in ``SourceSpec.shared``, and the settings table lists each group once."""

    name: str
    settings: type[S]

    def setting_table(self) -> dict[str, Setting]:
        return _setting_table(self.name, self.settings)

    def read_settings(self, extra: Mapping[str, str] | None, **given: Any) -> S:
        return _read_settings(self.name, self.settings, extra, given)


@dataclass(frozen=True)
class StandIn:
    """What this source gives back when ``source`` is absent (exporter history stands in for part
    of NVML's samples): worded after that source's missing-source limitation."""

    source: str
    gives: str
    #: where it stands in only on a node whose analysis read records under this prefix (the flight
    #: recorder's history of ``source``: ``ring/nvml/``), said with their span; "": wherever this
    #: source answered
    held_under: str = ""
    #: what it gives is all the absence's meaning says is lost (the recorder's NVML history is the
    #: NVML evidence, from before the capture): said instead of the meaning, not after it
    replaces: bool = False


@dataclass(frozen=True)
class SourceSpec(Generic[S]):
    """One evidence source, declared once. ``collector`` is the dotted module holding its
    ``COLLECTOR`` (imported lazily, so a missing client library costs only that source).

    ``configured_by``: a setting without which the source is not configured (a Prometheus needs its
    URL): it is then skipped, never imported or run, and recorded as "not configured". ``stands_in``
    and ``stand_in_label``: what the source gives back of other sources' absence, and what it is
    called in that sentence. ``roles``: the questions of the analysis the source answers when it was
    read (:mod:`forensics.specs.roles`: a rule asks a role, never a list of sources). ``remote``: the
    source asks a service over the network about the node named by ``--node`` (it runs as well from
    a laptop); a capture of remote sources alone is that node's bundle."""

    name: str
    order: int
    collector: str
    settings: type[S]
    absence: Absence | None = None
    publishes: tuple[Hint[Any], ...] = ()
    reads: tuple[Hint[Any], ...] = ()
    configured_by: str | None = None
    stands_in: tuple[StandIn, ...] = ()
    stand_in_label: str = ""
    remote: bool = False
    shared: tuple[SettingsGroup[Any], ...] = ()
    roles: tuple[Role, ...] = ()

    def unconfigured(self, extra: Mapping[str, str] | None) -> str | None:
        """Why the source is not configured (its ``configured_by`` setting not given), or None."""
        if self.configured_by is None:
            return None
        key = f"{self.name}.{self.configured_by}"
        if (extra or {}).get(key, "").strip():
            return None
        return f"not configured ({key} not given: {self.setting_table()[key].summary})"

    def setting_table(self) -> dict[str, Setting]:
        """``{"SOURCE.NAME": Setting}`` from the fields of the settings dataclass."""
        return _setting_table(self.name, self.settings)

    def read_settings(self, extra: Mapping[str, str] | None, **given: Any) -> S:
        """The typed settings object: ``--set`` values first, then ``given`` (a collector built with
        explicit values, as tests do), then the spec's defaults. A value that does not parse (a
        caller that skipped :func:`forensics.capture.settings.validate_settings`) keeps the default."""
        return _read_settings(self.name, self.settings, extra, given)
