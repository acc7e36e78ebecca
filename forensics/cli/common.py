"""What the commands share: option parsers (durations, sizes, times, ``--set``), bundle read
limits, the progress printers and the exit codes (documented in :mod:`forensics.cli`)."""

from __future__ import annotations

import math
import sys
from datetime import UTC, datetime
from typing import Any

import click

from forensics.errors import UsageError

__all__ = ["EXIT_BUG", "EXIT_FINDINGS", "EXIT_INTERRUPTED", "EXIT_NOT_WRITTEN", "EXIT_OK", "EXIT_USAGE",
           "RING_HELP", "finite", "live_printer", "names", "parse_bytes", "parse_seconds", "parse_since",
           "progress_printer", "read_limits", "settings_map", "with_limits"]

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_NOT_WRITTEN, EXIT_BUG = 0, 1, 2, 3, 4, 70

def names(value: str | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in (value or "").split(",") if n.strip())


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
RING_HELP = "(default: $GPUFORENSICS_RING, then /var/lib/gpuforensics/ring)"


def settings_map(settings: tuple[str, ...]) -> dict[str, str]:
    """``--set KEY=VALUE`` options as a dict (checked later by ``validate_settings``)."""
    extra: dict[str, str] = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set expects KEY=VALUE, got {item!r}")
        extra[key.strip()] = value
    return extra


def parse_since(value: str | None, opt: str = "--since") -> datetime | None:
    """``--since``/``--until``: an ISO 8601 time (UTC if no zone), a UTC clock time (14:00) or a
    duration ago such as 30m, 2h, 1d (:func:`forensics.parsing.timestamps.parse_moment`)."""
    if not value:
        return None
    from forensics.parsing.timestamps import parse_moment

    try:
        return parse_moment(value, datetime.now(UTC))
    except ValueError as exc:
        raise UsageError(f"{opt}: {exc}") from None


def finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """Refuse nan and inf (click's FloatRange lets them through): they would sample forever or
    land in the manifest as JSON no strict reader accepts."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number")
    return value


def progress_printer(enabled: bool) -> Any:
    if not enabled:
        return None

    def show(msg: str) -> None:
        click.echo(f"gpuforensics: {msg}", err=True)

    return show


def live_printer(enabled: bool) -> Any:
    """The one status line capture rewrites in place while it runs (a terminal only: in a log
    file the carriage returns would be noise); ``""`` clears it."""
    if not enabled or not sys.stderr.isatty():
        return None

    def show(msg: str) -> None:
        sys.stderr.write("\r\x1b[K" + (f"gpuforensics: {msg}" if msg else ""))
        sys.stderr.flush()

    return show




def parse_seconds(option: str, value: str) -> float:
    """A duration: plain seconds or a number with s, m, h or d."""
    units = _UNITS
    number, unit = (value[:-1], units[value[-1]]) if value[-1:] in units else (value, 1)
    try:
        seconds = float(number) * unit
    except ValueError:
        raise UsageError(f"{option}: not a duration like 90, 30m or 24h: {value!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(f"{option}: must be a positive duration, not {value!r}")
    return seconds


def parse_bytes(option: str, value: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    text = value.strip().lower().removesuffix("ib").removesuffix("b")
    number, unit = (text[:-1], units[text[-1]]) if text[-1:] in units else (text, 1)
    try:
        n = int(float(number) * unit)
    except (ValueError, OverflowError):
        raise UsageError(f"{option}: not a size like 512M or 2G: {value!r}") from None
    if n <= 0:
        raise UsageError(f"{option}: must be positive, not {value!r}")
    return n


def read_limits(max_bundle_mb: int | None, max_members: int | None) -> Any:
    from forensics.bundle import ReadLimits

    d = ReadLimits()
    return ReadLimits(
        max_total_bytes=(max_bundle_mb << 20) if max_bundle_mb else d.max_total_bytes,
        max_member_bytes=min(d.max_member_bytes, (max_bundle_mb << 20)) if max_bundle_mb else d.max_member_bytes,
        max_members=max_members or d.max_members,
    )


_LIMIT_OPTIONS = [
    click.option("--max-bundle-mb", type=click.IntRange(min=1), help="Refuse bundles whose content exceeds this many MiB (default 1024)."),
    click.option("--max-members", type=click.IntRange(min=1), help="Refuse bundles with more members (default 50000)."),
]


def with_limits(f: Any) -> Any:
    for opt in reversed(_LIMIT_OPTIONS):
        f = opt(f)
    return f
