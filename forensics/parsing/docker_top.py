"""Parse ``GET /containers/{id}/top`` (``docker top``) JSON: ``{"Titles": [...], "Processes": [[...]]}``.

dockerd runs the host's ``ps`` with the given ``ps_args`` and keeps the rows whose PID is in the
container, so PIDs are host PIDs. It splits each row on whitespace and joins the surplus into the
last column, which is why capture asks for ``-o pid,ppid,user,%cpu,rss,etimes,args``: every column
but the last (``args``) is one token. (``lstart`` prints five tokens and would be torn across two
columns; the start time is the top call's time minus ``etimes``.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from forensics.errors import ParseError

__all__ = ["TOP_PS_ARGS", "TopProcess", "parse_top"]

TOP_PS_ARGS = "-o pid,ppid,user,%cpu,rss,etimes,args"

# ps header -> our column key; procps prints these titles for the -o keywords above
_COLUMNS = {"PID": "pid", "PPID": "ppid", "USER": "user", "UID": "user", "%CPU": "cpu",
            "RSS": "rss", "RSZ": "rss", "ELAPSED": "etimes", "COMMAND": "args", "CMD": "args"}


@dataclass(frozen=True)
class TopProcess:
    """One row of ``docker top``; absent columns are None."""

    pid: int
    ppid: int | None
    user: str | None
    cpu_percent: float | None
    rss_bytes: int | None
    elapsed_s: int | None
    args: str | None


def _int(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ParseError(f"docker top: {what} is not an integer: {value[:40]!r}") from None


def parse_top(doc: Any) -> tuple[TopProcess, ...]:
    """Rows of a top document as typed records; raises ParseError on another shape."""
    if not isinstance(doc, Mapping):
        raise ParseError("docker top: expected a JSON object")
    titles = doc.get("Titles")
    rows = doc.get("Processes")
    if not isinstance(titles, list) or not all(isinstance(t, str) for t in titles):
        raise ParseError("docker top: Titles is not a list of strings")
    if rows is None:
        rows = []
    if not isinstance(rows, list):
        raise ParseError("docker top: Processes is not a list")
    index = {_COLUMNS[t]: i for i, t in enumerate(titles) if t in _COLUMNS}
    if "pid" not in index:
        raise ParseError("docker top: no PID column")
    out: list[TopProcess] = []
    for n, row in enumerate(rows):
        if not isinstance(row, list) or not all(isinstance(v, str) for v in row):
            raise ParseError(f"docker top: row {n} is not a list of strings")
        if len(row) != len(titles):
            raise ParseError(f"docker top: row {n} has {len(row)} columns, Titles has {len(titles)}")

        def col(key: str, row: list[str] = row) -> str | None:
            return row[index[key]] if key in index else None

        pid = _int(col("pid") or "", "PID")
        ppid = col("ppid")
        cpu = col("cpu")
        rss = col("rss")
        et = col("etimes")
        try:
            cpu_percent = float(cpu) if cpu is not None else None
        except ValueError:
            raise ParseError(f"docker top: %CPU is not a number: {str(cpu)[:40]!r}") from None
        out.append(TopProcess(
            pid=pid,
            ppid=_int(ppid, "PPID") if ppid is not None else None,
            user=col("user"),
            cpu_percent=cpu_percent,
            rss_bytes=_int(rss, "RSS") * 1024 if rss is not None else None,
            elapsed_s=_int(et, "ELAPSED") if et is not None else None,
            args=col("args"),
        ))
    return tuple(out)
