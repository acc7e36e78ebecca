"""Pure parsers for PSI pressure files: a cgroup's ``cpu.pressure``, ``memory.pressure``,
``io.pressure`` and the host's ``/proc/pressure/*`` (kernel docs
``Documentation/accounting/psi.rst``): ``some avg10=.. avg60=.. avg300=.. total=<usec>`` then
``full ...``.

Every function takes the text as read and raises only :class:`forensics.errors.ParseError`.
"""

from __future__ import annotations

from dataclasses import dataclass

from forensics.errors import ParseError
from forensics.parsing.cgroupfs import text_of, to_int

__all__ = ["Pressure", "PressureLine", "parse_pressure", "pressure_totals", "pressure_values"]


@dataclass(frozen=True)
class PressureLine:
    """One PSI line: share of wall time stalled (percent) over 10/60/300 s, total in usec."""

    avg10_pct: float
    avg60_pct: float
    avg300_pct: float
    total_usec: int


@dataclass(frozen=True)
class Pressure:
    """A PSI file: ``some`` always, ``full`` absent for host cpu on old kernels."""

    some: PressureLine
    full: PressureLine | None


_PRESSURE_KEYS = ("avg10=", "avg60=", "avg300=", "total=")


def pressure_values(text: str, what: str = "pressure") -> dict[str, dict[str, float | int]]:
    """A PSI file as plain dicts: ``{"some": {"avg10_pct", "avg60_pct", "avg300_pct",
    "total_usec"}, "full": {...}}`` (``full`` absent when the file has none). Fast and strict:
    the kernel's fixed ``avg10= avg60= avg300= total=`` order is required."""
    body = text_of(text, what)
    result: dict[str, dict[str, float | int]] = {}
    for number, line in enumerate(body.split("\n"), 1):
        if number > 4:
            raise ParseError(f"{what}: too many lines")
        fields = line.split()
        if not fields:
            continue
        kind = fields[0]
        if kind not in ("some", "full") or kind in result:
            raise ParseError(f"{what} line {number}: expected 'some' or 'full': {line[:80]!r}")
        if len(fields) != 5 or not all(
            f.startswith(k) for f, k in zip(fields[1:], _PRESSURE_KEYS, strict=True)
        ):
            raise ParseError(f"{what} line {number}: expected avg10= avg60= avg300= total=: "
                             f"{line[:80]!r}")
        try:
            a10, a60, a300 = float(fields[1][6:]), float(fields[2][6:]), float(fields[3][7:])
        except ValueError:
            raise ParseError(f"{what} line {number}: bad average: {line[:80]!r}") from None
        if not (0.0 <= a10 <= 100.0 and 0.0 <= a60 <= 100.0 and 0.0 <= a300 <= 100.0):
            raise ParseError(f"{what} line {number}: average out of range: {line[:80]!r}")
        result[kind] = {"avg10_pct": a10, "avg60_pct": a60, "avg300_pct": a300,
                        "total_usec": to_int(fields[4][6:], f"{what} total")}
    if "some" not in result:
        raise ParseError(f"{what}: no 'some' line")
    return result


def pressure_totals(text: str, what: str = "pressure") -> dict[str, int]:
    """Only the stall counters of a PSI file: ``{"some_total_usec": N, "full_total_usec": M}``
    (``full`` absent when the file has none). The per-tick form: the stall share over an
    interval is the difference of two totals divided by the interval."""
    body = text_of(text, what)
    fields = body.split()
    if (len(fields) == 10 and fields[0] == "some" and fields[5] == "full"
            and body.count("\n") <= 2 and fields[4][:6] == "total=" and fields[9][:6] == "total="
            and fields[1][:6] == "avg10=" and fields[6][:6] == "avg10="):
        some, full = fields[4][6:], fields[9][6:]
        if some.isdigit() and full.isdigit() and some.isascii() and full.isascii():
            return {"some_total_usec": int(some), "full_total_usec": int(full)}
    result: dict[str, int] = {}
    for number, line in enumerate(body.split("\n"), 1):
        if number > 4:
            raise ParseError(f"{what}: too many lines")
        fields = line.split()
        if not fields:
            continue
        key = f"{fields[0]}_total_usec"
        if fields[0] not in ("some", "full") or key in result or len(fields) != 5 \
                or not fields[4].startswith("total="):
            raise ParseError(f"{what} line {number}: not a PSI line: {line[:80]!r}")
        result[key] = to_int(fields[4][6:], f"{what} total")
    if "some_total_usec" not in result:
        raise ParseError(f"{what}: no 'some' line")
    return result


def _line(values: dict[str, float | int]) -> PressureLine:
    return PressureLine(float(values["avg10_pct"]), float(values["avg60_pct"]),
                        float(values["avg300_pct"]), int(values["total_usec"]))


def parse_pressure(text: str, what: str = "pressure") -> Pressure:
    """A PSI file (``cpu.pressure``, ``/proc/pressure/memory``...)."""
    values = pressure_values(text, what)
    full = values.get("full")
    return Pressure(_line(values["some"]), _line(full) if full is not None else None)
