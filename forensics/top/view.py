"""How a :class:`~forensics.top.snapshot.Snapshot` looks: lines of styled text for a width and height.

:func:`render` is the whole view, a pure function of the snapshot and :class:`ViewOptions` (sort,
filters, the selected row, the details pane): the terminal loop (forensics.top.screen) draws its
lines and ``--once`` prints them. Each line is a list of ``(text, style)`` segments; the one style
with a colour is ``alert`` (a GPU process without a grant on its GPU, or overlapping another's),
beside ``bold``, ``header``, ``dim`` and ``selected``, which a terminal without colour shows as
attributes (and ``--once`` as plain text, the mark ``!`` carrying the meaning).

Narrow terminals: the process table's columns have priorities; those that do not fit are dropped,
lowest priority first (80 columns keep PID, GPU, owner, grant, GPU memory, SM % and CPU %); the
owner column takes what is left. Wide terminals widen the owner column and show every column.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from forensics.humanize import format_bytes
from forensics.top.snapshot import ExitedRow, GpuRow, ProcessRow, Snapshot

__all__ = ["SORTS", "Line", "ViewOptions", "filtered", "render", "render_text"]

Segment = tuple[str, str]
Line = list[Segment]
SORTS = ("memory", "sm", "cpu")
_SPARK = "▁▂▃▄▅▆▇█"
_SPARK_ASCII = "_.-=+*#@"


@dataclass(frozen=True)
class ViewOptions:
    sort: str = "memory"  # memory | sm | cpu
    gpu: int | None = None  # only this GPU's processes
    namespace: str = ""  # only this Kubernetes namespace's pods
    text: str = ""  # only rows whose PID, user, command, owner or grant contain it
    selected: int = 0  # index into the filtered, sorted process rows
    details: bool = False  # the selected process' attribution and evidence instead of the tables
    unicode: bool = True
    interval_s: float = 2.0
    status: str = ""  # one line of state from the loop (a capture running, its bundle's path)
    prompt: str = ""  # the filter being typed
    hidden_notes: tuple[str, ...] = field(default_factory=tuple)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%"


def _gib(v: int | None) -> str:
    return "-" if v is None else f"{v / (1 << 30):.1f}"


def _bytes(v: int | None) -> str:
    return format_bytes(v, "-") if v is not None else "-"


def _mem_limit(p: ProcessRow) -> str:
    if p.memory_bytes is None:
        return "-"
    return f"{_bytes(p.memory_bytes)}/{_bytes(p.memory_limit_bytes) if p.memory_limit_bytes else 'nolimit'}"


def _grant_cell(p: ProcessRow) -> str:
    if p.mark == "none":
        return "! none"
    if p.mark == "overlap":
        return f"! {p.grant} overlap"
    return p.grant + (" shared" if p.grant_scope == "shared" else "")


@dataclass(frozen=True)
class _Col:
    title: str
    width: int
    priority: int  # lower: kept longer
    cell: Callable[[ProcessRow], str]
    right: bool = False


_COLUMNS: tuple[_Col, ...] = (
    _Col("PID", 7, 0, lambda p: str(p.pid), right=True),
    _Col("USER", 8, 5, lambda p: p.user or "?"),
    _Col("GPU", 3, 1, lambda p: str(p.gpu_index), right=True),
    _Col("POD / CONTAINER", 0, 0, lambda p: p.owner),
    _Col("GRANT", 14, 0, _grant_cell),
    _Col("GPU-MEM", 9, 1, lambda p: _bytes(p.used_memory_bytes), right=True),
    _Col("SM%", 4, 2, lambda p: _pct(p.sm_pct), right=True),
    _Col("CPU%", 5, 3, lambda p: _pct(p.cpu_pct), right=True),
    _Col("THR%", 5, 4, lambda p: _pct(p.throttled_pct), right=True),
    _Col("MEM/LIMIT", 19, 6, _mem_limit),
    _Col("COMMAND", 12, 7, lambda p: p.command or "?"),
)
_OWNER_MIN = 18


def _layout(width: int) -> list[tuple[_Col, int]]:
    """The columns that fit ``width`` (lowest priority dropped first) and each one's width."""
    cols = list(_COLUMNS)
    while True:
        fixed = sum(c.width for c in cols if c.width) + len(cols) - 1
        if fixed + _OWNER_MIN <= width or len(cols) <= 3:
            break
        drop = max((c for c in cols if c.priority > 0), key=lambda c: c.priority, default=None)
        if drop is None:
            break
        cols.remove(drop)
    owner = max(_OWNER_MIN, width - fixed)
    return [(c, c.width or owner) for c in cols]


def _fit(text: str, width: int, right: bool = False) -> str:
    if len(text) > width:
        text = text[:max(0, width - 1)] + "~" if width > 1 else text[:width]
    return text.rjust(width) if right else text.ljust(width)


def _sort_key(sort: str) -> Callable[[ProcessRow], tuple[float, int]]:
    def key(p: ProcessRow) -> tuple[float, int]:
        v = {"memory": p.used_memory_bytes, "sm": p.sm_pct, "cpu": p.cpu_pct}.get(sort)
        return (-(v if v is not None else -1.0), p.pid)
    return key


def filtered(snap: Snapshot, o: ViewOptions) -> list[ProcessRow]:
    """The process rows the view lists, filtered and sorted as ``o`` says."""
    rows = list(snap.processes)
    if o.gpu is not None:
        rows = [p for p in rows if p.gpu_index == o.gpu]
    if o.namespace:
        rows = [p for p in rows if p.pod_namespace == o.namespace]
    if o.text:
        needle = o.text.lower()
        rows = [p for p in rows if needle in " ".join((str(p.pid), p.user, p.command, p.owner, p.container_id,
                                                       p.grant, p.grant_kind)).lower()]
    return sorted(rows, key=_sort_key(o.sort if o.sort in SORTS else "memory"))


def _spark(values: Sequence[float], width: int, unicode: bool) -> str:
    chars = _SPARK if unicode else _SPARK_ASCII
    vals = list(values)[-width:]
    return "".join(chars[min(len(chars) - 1, int(max(0.0, min(100.0, v)) * len(chars) / 100.0))] for v in vals)


def _gpu_lines(gpus: Sequence[GpuRow], width: int, unicode: bool) -> list[Line]:
    head = f"{'GPU':>3} {'NAME':<18} {'UTIL':>4} {'MEMORY GiB':>12} {'TEMP':>4} {'POWER':>5} {'XID':>3} "
    rest = width - len(head)
    slow_w = max(0, min(28, rest // 2)) if rest > 20 else (rest if rest > 8 else 0)
    spark_w = max(0, rest - slow_w - 1) if rest > 20 else 0
    out: list[Line] = [[(_fit(head + ("SLOWDOWN".ljust(slow_w) + " " + "HISTORY" if spark_w else "SLOWDOWN"), width), "header")]]
    for g in gpus:
        name = g.name.replace("NVIDIA ", "")
        mem = f"{_gib(g.memory_used_bytes)}/{_gib(g.memory_total_bytes)}"
        temp = "-" if g.temperature_c is None else f"{g.temperature_c:.0f}C"
        power = "-" if g.power_w is None else f"{g.power_w:.0f}W"
        text = f"{g.index:>3} {_fit(name, 18)} {_pct(g.util_pct):>4} {mem:>12} {temp:>4} {power:>5} {g.xids:>3} "
        if g.lost:
            out.append([(_fit(text + "GPU LOST (fell off the bus)", width), "alert")])
            continue
        slow = ",".join(g.slowdown) or "-"
        line: Line = [(text, "")]
        if slow_w:
            line.append((_fit(slow, slow_w), "alert" if g.slowdown else ""))
        if spark_w:
            line.append((" " + _spark(g.history, spark_w, unicode), "dim"))
        out.append(line)
    return out


def _process_lines(rows: Sequence[ProcessRow], width: int, selected: int | None, first: int, count: int) -> list[Line]:
    layout = _layout(width)
    out: list[Line] = [[(" ".join(_fit(c.title, w, c.right) for c, w in layout)[:width], "header")]]
    for i, p in enumerate(rows[first:first + count], start=first):
        segs: Line = []
        for k, (c, w) in enumerate(layout):
            cell = _fit(c.cell(p), w, c.right) + (" " if k < len(layout) - 1 else "")
            style = "alert" if c.title == "GRANT" and p.mark else ""
            segs.append((cell, style))
        if selected == i:
            segs = [(t, "selected" if not s else s + "+selected") for t, s in segs]
        out.append(segs)
    return out


def _ago(t: float, now: float) -> str:
    s = max(0, int(now - t))
    return f"{s}s ago" if s < 120 else f"{s // 60}m ago"


def _exited_lines(rows: Sequence[ExitedRow], now: float, width: int, count: int) -> list[Line]:
    out: list[Line] = [[(_fit(f"RECENTLY EXITED ({len(rows)})", width), "header")]]
    for r in rows[:count]:
        name = r.name or (r.container_id[:12] if r.container_id else "?")
        if r.kind == "container":
            text = f"container {name} ({r.container_id[:12]}) gone {_ago(r.gone_at, now)}"
        else:
            where = f" in {name}" if name and name != "?" else ""
            text = f"process {r.pid} ({r.command or '?'}) on GPU {r.gpu_index}{where} gone {_ago(r.gone_at, now)}"
        out.append([(_fit(text, width), "dim")])
    if len(rows) > count and count:
        out[-1] = [(_fit(f"... and {len(rows) - count + 1} more", width), "dim")]
    return out


def _details(p: ProcessRow, width: int) -> list[Line]:
    def kv(k: str, v: str, style: str = "") -> Line:
        return [(_fit(f"{k:<16}", 16), "bold"), (_fit(v, max(1, width - 16)), style)]

    lines: list[Line] = [[(_fit(f"PROCESS {p.pid} on GPU {p.gpu_index}  (esc: back)", width), "header")],
                         kv("command", p.command or "?"), kv("user", p.user or "?"),
                         kv("gpu", p.gpu_uuid + (f" MIG {p.mig_uuid}" if p.mig_uuid else "")),
                         kv("owner", f"{p.owner_kind}: {p.owner}")]
    if p.container_id:
        lines.append(kv("container id", p.container_id))
    if p.pod_name:
        lines.append(kv("pod", f"{p.pod_namespace}/{p.pod_name}"))
    mark = {"none": "  ! no grant covers this GPU", "overlap": "  ! another owner holds an exclusive grant on it too"}
    lines += [kv("grant", f"{p.grant} ({p.grant_kind}, {p.grant_scope}){mark.get(p.mark, '')}", "alert" if p.mark else ""),
              kv("grant detail", p.grant_detail or "-"),
              kv("gpu memory", _bytes(p.used_memory_bytes)), kv("sm", _pct(p.sm_pct)),
              kv("container cpu", f"{_pct(p.cpu_pct)} of a core, throttled {_pct(p.throttled_pct)}"),
              kv("container mem", _mem_limit(p)), kv("cgroup", p.cgroup or "-"),
              [(_fit("evidence (the members the attribution read; a capture writes them into its bundle):", width), "bold")]]
    lines += [[(_fit("  " + m, width), "")] for m in p.evidence or ("none kept yet",)]
    return lines


def _clip(line: Line, width: int) -> Line:
    out: Line = []
    left = width
    for text, style in line:
        if left <= 0:
            break
        out.append((text[:left], style))
        left -= len(text[:left])
    return out


def render(snap: Snapshot, o: ViewOptions, width: int, height: int | None = None) -> list[Line]:
    """The screen's lines for a terminal ``width`` x ``height`` (None: every row, for ``--once``)."""
    return [_clip(line, max(20, width)) for line in _render(snap, o, width, height)]


def _render(snap: Snapshot, o: ViewOptions, width: int, height: int | None) -> list[Line]:
    width = max(20, width)
    height = None if height is None else max(1, height)
    rows = filtered(snap, o)
    selected = min(max(0, o.selected), len(rows) - 1) if rows else None
    clock = time.strftime("%H:%M:%S", time.localtime(snap.t))
    filters = " ".join(f for f in (f"gpu={o.gpu}" if o.gpu is not None else "",
                                   f"ns={o.namespace}" if o.namespace else "", f"text={o.text}" if o.text else "") if f)
    head = (f"gpuforensics top  {clock}  {len(snap.gpus)} GPUs  {len(snap.processes)} GPU processes  "
            f"{snap.source}  sort:{o.sort}" + (f"  filter:{filters}" if filters else ""))
    top: list[Line] = [[(_fit(head, width), "bold")]]
    if o.details and selected is not None:
        body = _details(rows[selected], width)
        if height is None:
            return top + body
        foot = _footer(o, width, height)
        return (top + body[:max(0, height - 1 - len(foot))] + foot)[-height:]
    gpu = _gpu_lines(snap.gpus, width, o.unicode)
    notes = [[(_fit("note: " + n, width), "dim")] for n in snap.notes if n not in o.hidden_notes]
    legend: list[Line] = [[(_fit("! none: no grant covers this GPU  ! overlap: another owner's exclusive grant too", width), "dim")]] \
        if any(p.mark for p in rows) else []
    if height is None:  # text (--once): a note is wrapped, never cut (it says how to fix what is missing)
        notes = [[(_fit(part, width), "dim")] for n in snap.notes if n not in o.hidden_notes
                 for part in textwrap.wrap("note: " + n, width, subsequent_indent="  ", break_on_hyphens=False)]
        return (top + gpu + [[("", "")]] + _process_lines(rows, width, None, 0, len(rows)) + legend + [[("", "")]]
                + _exited_lines(snap.exited, snap.t, width, len(snap.exited)) + notes)
    # a terminal: GPUs first (up to half the screen), then processes, then what exited, notes, keys
    foot = _footer(o, width, height)
    room = height - 1 - len(foot)  # the title, the status and the keys
    gpu = gpu[:max(2, min(len(gpu), room // 2))]
    room -= len(gpu)
    notes = notes[:max(0, min(len(notes), room - 4))]
    room -= len(notes) + len(legend)
    exited_n = min(len(snap.exited), max(0, room // 4), 5)
    exited = _exited_lines(snap.exited, snap.t, width, exited_n) if snap.exited else []
    room -= len(exited)
    count = max(0, room - 1)
    first = 0
    if selected is not None and count and selected >= count:
        first = selected - count + 1
    procs = _process_lines(rows, width, selected, first, count)
    procs += [[("", "")]] * (count + 1 - len(procs))
    lines = top + gpu + procs + legend + exited + notes
    return (lines[:max(0, height - len(foot))] + foot)[-height:]


def _footer(o: ViewOptions, width: int, height: int) -> list[Line]:
    """The last lines: the status (a capture running, the bundle's path: wrapped, cut only where
    the terminal has fewer lines than it needs) and the keys, or the filter being typed."""
    if o.prompt:
        return [[(_fit(o.prompt, width), "bold")]]
    status = [[(_fit(o.status[i:i + width], width), "bold")] for i in range(0, len(o.status), width)]
    status = status[:max(0, height - 1)]
    return status + [[(_fit("m/s/u sort mem/SM/CPU  g gpu  n namespace  / text  x clear  enter details  c capture  q quit",
                            width), "dim")]]


def render_text(snap: Snapshot, width: int = 160, o: ViewOptions | None = None) -> str:
    """``top --once``: every row, plain text."""
    o = o or ViewOptions()
    o = replace(o, unicode=o.unicode)
    return "\n".join("".join(t for t, _ in line).rstrip() for line in render(snap, o, width, None)) + "\n"
