"""A long flight-recorder history analysed in consecutive slices: memory bounded by one slice, time
linear in the history's length.

``capture --since 24h`` carries a day of the ring's segments; one model of the whole day would hold
every sample of it (about 0.6 GB of rebuilt member bytes an hour at 8 GPUs x 64 processes, 1 Hz),
and the reader's cap on rebuilt bytes would cut it short. Where a bundle's ring history (its
provenance window) is longer than a slice, it is cut by the ring records' wall time into slices of
``slice_s`` (default :data:`SLICE_S`) counted back from the capture, the oldest taking the
remainder (one shorter than :data:`SLIVER` of a slice joins the slice after it, so a ``--since 1h``
history is one slice: analysed exactly as without slicing). Each slice is one model: the ring's
records of its window, with the state (write members: the allocations, the containers' inspect
documents...) as of its end (forensics.analysis.ring_view, ``window``); the capture's own members are
loaded with the last slice, the one at the capture. The rules run per slice; a finding's evidence is
already quoted (the member's own bytes, its ``ring/...`` member, line and ``derived_from``), so
nothing of the slice's model and its rebuilt bytes outlives it: it is dropped before the next is
built. The findings of all slices go on to the grouping of repeats, the chain, the incidents and the
document with the last slice's model.

What a slice cut means (stated in the document, :func:`slice_note`): a baseline is learned within a
slice; a span, duration or count is measured within a slice (an episode across a cut is two
occurrences of one finding, merged by forensics.analysis.occurrences); the tables of GPUs,
containers and pods are the last slice's. No one is accused because of a cut: a slice's model has
the state of its end, which the recorder copies at every segment's top (the allocations and gone
pods' grants with them), so a grant of an earlier slice still counts where it still applies; the
ring's kernel records the capture's own kernel log holds are judged once, with the capture's
(:func:`captured_kernel`, as in one model).
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from forensics.analysis.events import CudaOom, LogSignal, OomKill, XidEvent
from forensics.analysis.findings import Finding
from forensics.analysis.loaders import load_model
from forensics.analysis.loaders.kernel import load_kernel
from forensics.analysis.loaders.state import LoadState
from forensics.analysis.model import Model, NodeInfo
from forensics.analysis.ring_view import HistoryPart, RingSource, State, Window
from forensics.analysis.source import Source
from forensics.bundle.format import iso_from_unix
from forensics.specs.ring import PROVENANCE, SEGMENTS

__all__ = ["SLICE_S", "SLIVER", "Carried", "Sliced", "analyze_in_slices", "captured_kernel", "history_window",
           "slice_note", "slice_windows"]

#: a slice's span: the baseline rules need this much history in one model (the thresholds'
#: ``baseline_min_history_s``): a shorter slice would leave them without a baseline in every slice
SLICE_S = 3600.0
#: the events the document's timeline shows, carried from every slice into the last one's model
#: (a few per incident, their evidence quoted); the samples are not: each slice's rules judged them
TIMELINE_EVENTS: tuple[type, ...] = (OomKill, XidEvent, CudaOom, LogSignal)
#: the oldest slice shorter than this part of a slice joins the one after it (a ``--since 1h``
#: history, a few milliseconds over the hour, is one slice)
SLIVER = 0.1


def _time(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def history_window(src: Source) -> tuple[float, float] | None:
    """The span of a bundle's ring history: its provenance window (``ring/provenance.json``'s
    ``t_since``, ``t_until``) narrowed to the records its segments hold (their ``t_first``, ``t_last``:
    a ``--since`` of days over a ring of hours is hours to slice); None: no ring segments, no
    readable window, or segments whose last records are not in time order (a clock set back: a
    slice stops at the first segment past its end, ring_view's ``_in_window``, and would miss the
    records of a later one), then the history is read whole, as without slicing."""
    if not any(m.startswith(SEGMENTS) for m in src.members):
        return None
    prov = src.json(PROVENANCE)
    window = prov.get("window") if isinstance(prov, dict) else None
    if not isinstance(window, dict) or not (_time(window.get("t_since")) and _time(window.get("t_until"))):
        return None
    since, until = float(window["t_since"]), float(window["t_until"])
    segs = [s for s in prov.get("segments") or [] if isinstance(s, dict)] if isinstance(prov.get("segments"), list) else []
    firsts = [float(s["t_first"]) for s in segs if _time(s.get("t_first"))]
    lasts = [float(s["t_last"]) for s in segs if _time(s.get("t_last"))]
    if any(b < a for a, b in zip(lasts, lasts[1:], strict=False)):
        return None  # a slice reads the segments up to the first past its end: out of order, it would miss some
    if firsts and lasts and len(firsts) == len(lasts) == len(segs):
        since, until = max(since, min(firsts)), min(until, max(lasts))
    return (since, until) if until > since else None


def slice_windows(since: float, until: float, slice_s: float = SLICE_S) -> list[Window]:
    """``[since, until]`` as consecutive windows ``[t0, t1)`` of ``slice_s`` counted back from
    ``until``, the last one's end open (to the provenance window's end); the oldest takes the
    remainder, joining the next where it is shorter than :data:`SLIVER` of a slice. One window
    (``(since, None)``) where the history fits one slice."""
    if not slice_s > 0 or until - since <= slice_s * (1 + SLIVER):
        return [(since, None)]
    cuts = [until - slice_s]
    while cuts[-1] - since > slice_s * (1 + SLIVER):
        cuts.append(cuts[-1] - slice_s)
    cuts.reverse()
    starts = [since, *cuts]
    return [(t0, t1) for t0, t1 in zip(starts, cuts, strict=False)] + [(cuts[-1], None)]


def captured_kernel(src: Source, node: str) -> tuple[set[tuple[int, str]], set[str]]:
    """The keys and lines of the capture's own kernel log records (the kernel loader's, read alone
    into a scratch model): a slice before the capture's skips the ring's copies of them, as one model
    does, so each is judged once, with the capture's log."""
    loading = LoadState()
    loading.kernel_keys[node] = set()
    loading.kernel_lines[node] = set()
    load_model(lambda model, state: load_kernel(src, model, node, state), loading)
    return loading.kernel_keys[node], loading.kernel_lines[node]


@dataclass
class Carried:
    """What each slice hands the next, through the loading of its model (forensics.analysis's
    ``_load_all``): the ring's state as of its end and its appended members' line counts (the next
    slice's :class:`~forensics.analysis.ring_view.HistoryPart`), the history each node held so far
    (so the last slice's notes on the sources the ring stands in for give the whole history's span),
    the capture's own kernel records by node (:func:`captured_kernel`, read once), and the notes on
    the sources an earlier slice made (not carried into the document: the last slice's say it all)."""

    line_base: dict[str, int] = field(default_factory=dict)
    state: State = field(default_factory=dict)
    held: dict[str, dict[str, tuple[float, float] | None]] = field(default_factory=dict)
    kernel: dict[str, tuple[set[tuple[int, str]], set[str]]] = field(default_factory=dict)
    notes: set[str] = field(default_factory=set)
    #: node -> the keys and lines of the ring's kernel records read so far (one a recorder run read
    #: again, its copy in a later slice, is read once: the kernel loader's)
    kernel_seen: dict[str, tuple[set[tuple[int, str]], set[str]]] = field(default_factory=dict)
    #: node -> the kernel records and PSI readings read so far (a ruled-out check counts them all)
    counted: dict[str, tuple[int, int]] = field(default_factory=dict)

    def part(self, window: Window) -> HistoryPart:
        """The ring's history to rebuild for ``window``, after what the slices before it read."""
        return HistoryPart(window, self.line_base, self.state)

    def after(self, view: RingSource | None, info: NodeInfo) -> None:
        """Take what the slice's ``view`` read (its state, its members' lines) and the history its
        node ``info`` held and the records it counted; the node holds from now on the history and the
        counts of every slice so far."""
        if view is not None and view.rebuilt is not None:
            base = dict(self.line_base)  # a new one: the view numbers its evidence with the old
            for member, lines in view.rebuilt.lines.items():  # the appended members
                base[member] = base.get(member, 0) + lines
            self.line_base, self.state = base, view.rebuilt.state
        spans = self.held.setdefault(info.host, {})
        for folder, span in info.history_held.items():
            spans[folder] = _joined(spans.get(folder), span, folder in spans)
        info.history_held.update(spans)
        kernel, psi = self.counted.get(info.host, (0, 0))
        info.kernel_records += kernel
        info.psi_readings += psi
        self.counted[info.host] = (info.kernel_records, info.psi_readings)


@dataclass
class Sliced:
    """What a sliced analysis leaves: the last slice's model (the limitations and the history held
    of every slice added), and the findings of all of them, in slice order."""

    model: Model
    findings: list[Finding]
    windows: list[Window]
    #: the number of findings of each slice
    per_slice: list[int] = field(default_factory=list)


def analyze_in_slices(windows: list[Window], build: Callable[[Window, bool], Model],
                      rules: Callable[[Model], list[Finding]], notes: set[str] | None = None,
                      on_dropped: Callable[[Model], Any] | None = None, slice_s: float = SLICE_S) -> Sliced:
    """Each window's model (``build(window, last)``: the capture's own members with the last one),
    its rules' findings kept, the model dropped before the next is built (``on_dropped``: told of each
    model dropped, a test's weak reference). The last slice's model is returned with the limitations
    of the earlier ones (but ``notes``: the earlier slices' notes on the sources, which the last
    slice's say of the whole history) and the note that the history was sliced (``slice_s``: the
    span the windows were cut by, :func:`slice_windows`)."""
    findings: list[Finding] = []
    carried: list[str] = []
    events: dict[type, list[object]] = {kind: [] for kind in TIMELINE_EVENTS}
    per_slice: list[int] = []
    final: Model | None = None
    for k, window in enumerate(windows):
        last = k == len(windows) - 1
        model = build(window, last)
        found = rules(model)
        per_slice.append(len(found))
        findings.extend(found)  # quoted: Evidence holds the member's bytes, not the model's source
        if last:
            final = model
            break
        carried.extend(x for x in model.limitations if x not in carried and x not in (notes or ()))
        for kind, kept in events.items():  # quoted already: their Evidence holds no source
            kept.extend(model.series(kind))
        if on_dropped is not None:
            on_dropped(model)
        del model, found
        gc.collect()  # the slice's samples (a cycle or two among them) before the next slice's
    assert final is not None
    own = list(final.limitations)
    final.limitations[:] = carried + [x for x in own if x not in carried]
    for kind, kept in events.items():
        series: list[Any] = final.series(kind)
        series[:0] = kept  # the earlier slices' first, in the order they were loaded
    if len(windows) > 1:
        final.limit(slice_note(windows, slice_s))
    return Sliced(final, findings, windows, per_slice)


def _joined(had: tuple[float, float] | None, span: tuple[float, float] | None,
            present: bool) -> tuple[float, float] | None:
    if not present:
        return span
    if had is None or span is None:
        return had or span
    return (min(had[0], span[0]), max(had[1], span[1]))


def slice_note(windows: list[Window], size: float = SLICE_S) -> str:
    """The limitation that says the history was analysed in slices of ``size`` seconds (the oldest
    its remainder), and what that means."""
    first, last_start = windows[0][0], windows[-1][0]
    return (f"the flight recorder's history (from {iso_from_unix(first)} to the capture) was analysed in "
            f"{len(windows)} consecutive slices of {size / 3600:.3g} h counted back from the capture (the oldest "
            f"{(windows[1][0] - first) / 3600:.3g} h), so that memory holds one slice, not the whole history: each "
            "slice's rules saw only its own samples, with the ring's state (allocations, containers, pods) as of "
            "the slice's end and every grant an earlier slice knew; a baseline is learned within a slice, and a "
            "span, duration, share or count is measured within one (an episode across a cut is found on both "
            "sides and shown as one finding with its occurrences; one too short on each side for a rule's minimum "
            "samples or duration is not found, never made up); the tables of GPUs, containers and pods are the "
            f"last slice's (from {iso_from_unix(last_start)}, with the capture's own members), and so are the "
            "sample counts a ruled-out check quotes (but the kernel records' and PSI readings'; a kind found in any "
            "slice is not ruled out); the timeline's events are every slice's")
