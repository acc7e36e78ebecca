"""Findings: the claims the analyzer makes, each with its subjects and its evidence.

Serialised as described in docs/analysis-format.md (``findings[]``).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NamedTuple

from forensics.analysis.excerpt import EXCERPT_MAX_CHARS, JsonText, cut, pointer_path, quote
from forensics.document_format import SEVERITIES, Severity, severity_rank
from forensics.parsing.timestamps import format_iso

__all__ = [
    "ROLES",
    "SEVERITIES",
    "Evidence",
    "EvidenceRef",
    "Finding",
    "LineRef",
    "Occurrences",
    "Role",
    "Severity",
    "Subject",
    "severity_rank",
]

Role = Literal["culprit", "victim", "witness"]

ROLES: tuple[Role, ...] = ("culprit", "victim", "witness")
# The finding kinds are declared beside their rules (forensics/analysis/kinds.py); the list of
# their ids is forensics.analysis.rules.KINDS.


def shorten(text: str, limit: int = EXCERPT_MAX_CHARS) -> str:
    """A one-line description of at most ``limit`` characters (whitespace runs made one space),
    cut with ``...``: for text we wrote, never for a quotation (:func:`cut`)."""
    one_line = " ".join(text.split())
    if len(one_line) <= limit:
        return one_line
    return one_line[: limit - 3] + "..."


@dataclass(frozen=True, order=True)
class Subject:
    """An entity a finding is about: container (64-hex id), pod (UID), process (PID), gpu (UUID), host.

    ``time`` (unix seconds): in a finding that merges several records (repeated OOM kills), when
    this subject's own record happened; None otherwise (the finding's start is everyone's time).
    """

    type: str
    id: str
    name: str
    node: str
    role: Role = "witness"
    time: float | None = None

    def with_role(self, role: Role) -> Subject:
        return Subject(self.type, self.id, self.name, self.node, role, self.time)

    def at(self, time: float | None) -> Subject:
        """The subject with its own record's time."""
        return Subject(self.type, self.id, self.name, self.node, self.role, time)

    def key(self) -> tuple[str, str, str]:
        return (self.node, self.type, self.id)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "type": self.type, "id": self.id, "name": self.name,
                               "node": self.node}
        if self.time is not None:
            out["time"] = format_iso(self.time, precision="milli")
        return out


@dataclass(frozen=True)
class Evidence:
    """A quotation from a bundle member: ``locator`` is a JSON pointer, ``line N``, ``entry N``,
    ``POINTER#POINTER`` (into a JSON document held as a string: a CRI runtime's verbose info) or ``""``.

    ``excerpt`` is the member's own text (:mod:`forensics.analysis.excerpt`); ``normalised`` says it
    is not: a value re-serialised because its text could not be located, or, for the whole member
    (locator ``""``), a description of what was examined (``412 records``).
    """

    bundle: str
    member: str
    locator: str
    excerpt: str
    normalised: bool = False
    #: a member rebuilt at read time (the flight recorder's ``ring/<member>``, rebuilt from the ring
    #: segments the bundle carries): the segment member and the line of the record it comes from
    derived_from: tuple[str, int] | None = None
    #: False where that segment's SHA-256 was not checked against ``ring/provenance.json`` (the
    #: bundle has no readable one: forensics.bundle.verify.segment_faults reads the segments unverified)
    derived_verified: bool = True

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "bundle": self.bundle,
            "member": self.member,
            "locator": self.locator,
            "excerpt": shorten(self.excerpt) if self.normalised else cut(self.excerpt),
            "excerpt_normalised": self.normalised,
        }
        if self.derived_from is not None:
            member, line = self.derived_from
            out["derived_from"] = {"member": member, "segment": member.rsplit("/", 1)[-1], "line": line}
            if not self.derived_verified:  # said only where not: documents of verified segments unchanged
                out["derived_from"]["verified"] = False
        return out


def _text(p: bytes | bytearray | str) -> tuple[str, bool]:
    """The text of raw member bytes, and whether it had to be repaired (not valid UTF-8)."""
    if isinstance(p, str):
        return p, False
    try:
        return bytes(p).decode("utf-8"), False
    except UnicodeDecodeError:
        return bytes(p).decode("utf-8", "replace"), True


class EvidenceRef(NamedTuple):
    """A cheap, lazy pointer to evidence, built per sample and quoted only when a finding cites it.

    A NamedTuple: one or two are made per line of every sampled member (hundreds of thousands in an
    hour at 1 Hz), and a tuple is made several times faster than a frozen dataclass; immutable all
    the same.

    ``line`` (1-based) locates it in a text/JSON-lines member, else ``pointer`` (JSON pointer).
    ``payload`` is the raw line (bytes or str) or a JSON value; ``paths`` pick the values to quote
    out of it (relative to the line, or to the pointer's value). The excerpt is the member's own
    text: the line, the pointer's value, or the picked ``"key": value`` spans, located in the
    line's or the member's text (``source``: an object with ``line_at(member, offset) -> bytes``
    and ``json_text(member) -> JsonText | None``); only when that text is not at hand is the value
    re-serialised, and the evidence says so (``normalised``).
    """

    bundle: str
    member: str
    line: int
    payload: Any
    paths: tuple[tuple[str | int, ...], ...] = ()
    pointer: str = ""
    source: Any = None
    offset: int = -1

    @property
    def evidence(self) -> Evidence:
        ev = self._quoted()
        # a source over rebuilt members (the flight recorder's ring view) says where a line came from
        derived = getattr(self.source, "derived", None)
        return derived(ev, self.line) if derived is not None else ev

    def _quoted(self) -> Evidence:
        p = self.payload
        if p is None and self.source is not None and self.offset >= 0:
            p = self.source.line_at(self.member, self.offset)
        locator = f"line {self.line}" if self.line else self.pointer
        doc: JsonText | None = None
        base: list[str | int] = []
        repaired = False
        if self.line and isinstance(p, bytes | bytearray | str):
            text, repaired = _text(p[: 1 << 20])
            if not self.paths:
                return Evidence(self.bundle, self.member, locator, cut(text), repaired)
            doc = JsonText(text)
        elif not self.line and self.source is not None:
            doc = self.source.json_text(self.member)
            if doc is not None:
                base = pointer_path(self.pointer, doc)
        if doc is not None:
            spans = [doc.span([*base, *path], with_key=bool(path) and isinstance(path[-1], str))
                     for path in self.paths] if self.paths else [doc.span(base)]
            if spans and all(sp is not None for sp in spans):
                return Evidence(self.bundle, self.member, locator,
                                quote(doc.text, [sp for sp in spans if sp is not None]), repaired)
        return self._normalised(p, locator)

    def _normalised(self, p: Any, locator: str) -> Evidence:
        """The values re-serialised (compact JSON), said to be so: the member's text is not at hand."""
        import json

        if self.paths:
            try:
                doc = json.loads(p) if isinstance(p, bytes | bytearray | str) else p
                parts = []
                for path in self.paths:
                    cur = doc
                    for key in path:
                        cur = cur[key]
                    quoted = {path[-1]: cur} if path and isinstance(path[-1], str) else cur
                    parts.append(json.dumps(quoted, separators=(",", ":")))
                return Evidence(self.bundle, self.member, locator, shorten(" ".join(parts)), True)
            except (ValueError, KeyError, IndexError, TypeError):
                pass
        if isinstance(p, bytes | bytearray | str):
            text, repaired = _text(p[: EXCERPT_MAX_CHARS * 2])
            return Evidence(self.bundle, self.member, locator, cut(text), repaired)
        return Evidence(self.bundle, self.member, locator, shorten(json.dumps(p, separators=(",", ":"))), True)


class LineTable:
    """What every :class:`LineRef` to the lines of one JSON-lines member shares: the bundle's name,
    the member, the source that reads its lines again, and each line's byte offset (``offsets[N]``
    for line N; -1 for a line no reference was made to)."""

    __slots__ = ("_classes", "bundle", "member", "offsets", "source")

    def __init__(self, bundle: str, member: str, source: Any) -> None:
        self.bundle, self.member, self.source = bundle, member, source
        self.offsets = array("q", (-1,))  # no line 0
        self._classes: dict[tuple[tuple[str | int, ...], ...], type[LineRef]] = {}

    def at(self, line: int, offset: int) -> None:
        """Line ``line`` starts at byte ``offset``."""
        offsets = self.offsets
        if line >= len(offsets):
            offsets.extend([-1] * (line - len(offsets) + 1))
        offsets[line] = offset

    def ref_class(self, paths: tuple[tuple[str | int, ...], ...] = ()) -> type[LineRef]:
        """The :class:`LineRef` class of these lines quoting ``paths`` of them (() the whole line):
        ``cls(line_number)`` is a reference."""
        cls = self._classes.get(paths)
        if cls is None:
            cls = self._classes[paths] = type("LineRef", (LineRef,), {
                "__slots__": (), "table": self, "bundle": self.bundle, "member": self.member, "source": self.source,
                "paths": paths})
        return cls


class LineRef(int):
    """An :class:`EvidenceRef` to a line of a JSON-lines member, packed into its line number.

    The loaders make one per line of every sampled member (a sample holds its line's): as an
    EvidenceRef (a tuple of eight, its line number and byte offset two more integers) that is about
    170 bytes a line; as an int whose class holds what the member's lines share (the
    :class:`LineTable`, which has the line's offset, and the paths quoted), 48.
    ``table.ref_class(paths)(N)`` makes one (a class per member read and paths quoted); it has
    EvidenceRef's attributes (``bundle``, ``member``, ``line``, ``payload`` None, ``paths``,
    ``pointer`` "", ``source``, ``offset``), its ``evidence`` and its ``_replace`` (which gives the
    EvidenceRef). As an int it is the line number: compare references by their attributes, not ``==``.
    """

    __slots__ = ()
    # what every line of the member shares: class attributes (set by LineTable.ref_class), read as
    # fast as a tuple's fields (``s.ref.member`` is asked of every sample by some passes)
    table: ClassVar[LineTable]
    bundle: ClassVar[str]
    member: ClassVar[str]
    source: ClassVar[Any]
    paths: ClassVar[tuple[tuple[str | int, ...], ...]] = ()
    payload: ClassVar[None] = None
    pointer: ClassVar[str] = ""

    @property
    def line(self) -> int:
        return int(self)

    @property
    def offset(self) -> int:
        return self.table.offsets[self]

    def unpacked(self) -> EvidenceRef:
        t = self.table
        return EvidenceRef(t.bundle, t.member, int(self), None, self.paths, "", t.source, t.offsets[self])

    def _replace(self, **changes: Any) -> EvidenceRef:
        return self.unpacked()._replace(**changes)

    @property
    def evidence(self) -> Evidence:
        return self.unpacked().evidence

    def __repr__(self) -> str:
        return f"LineRef({self.table.member!r}, line {int(self)})"


@dataclass(frozen=True)
class Occurrences:
    """A finding found again and again (:mod:`forensics.analysis.occurrences`): how many times, and
    the first, the last and the worst occurrence's span (unix seconds; None when unknown)."""

    count: int
    first_start: float | None
    first_end: float | None
    last_start: float | None
    last_end: float | None
    worst_start: float | None
    worst_end: float | None
    worst_summary: str

    def to_json(self) -> dict[str, Any]:
        def iso(t: float | None) -> str | None:
            return format_iso(t, precision="milli")

        return {"count": self.count,
                "first": {"start": iso(self.first_start), "end": iso(self.first_end)},
                "last": {"start": iso(self.last_start), "end": iso(self.last_end)},
                "worst": {"start": iso(self.worst_start), "end": iso(self.worst_end), "summary": self.worst_summary}}


@dataclass(frozen=True)
class Finding:
    """One claim: a kind, a severity, a confidence, subjects with roles, a time span, evidence.

    ``start``/``end`` are unix seconds (None when unknown); ``key`` identifies the finding before
    ids (F1..) are assigned, and ``cause_keys`` names the keys of findings this one caused.
    """

    kind: str
    severity: Severity
    confidence: float
    summary: str
    start: float | None
    end: float | None
    node: str
    subjects: tuple[Subject, ...]
    evidence: tuple[Evidence, ...]
    metrics: tuple[tuple[str, float | int | str | None], ...] = ()
    key: str = ""
    cause_keys: tuple[str, ...] = field(default=())
    headline: str = ""  # one sentence for the verdict and the chain, with the numbers
    # When an effect with the same culprit follows it in the verdict, ``lead`` (the headline
    # without its numbers) is joined with the effect's ``follow`` clause, which brings them:
    # "container notebook, which had no GPU allocation, took GPU 0 (allocated to trainer)"
    # + ": " + "92% of its compute; trainer fell from 95% to 7% SM".
    lead: str = ""
    follow: str = ""
    next_step: str = ""  # what an operator does next, one line (its kind's wording; set by the chain)
    before_capture_s: float | None = None  # how long before the capture started it began (None: not before)
    # when its subject's own later state contradicts the claim (a GPU NVML read after a record said
    # it was lost): from then on it is no cause of anything (the chain links no later effect to it)
    contradicted_at: float | None = None
    occurrences: Occurrences | None = None  # repeats merged into this one (None: found once)

    def subjects_with(self, role: Role) -> tuple[Subject, ...]:
        return tuple(s for s in self.subjects if s.role == role)

    def metric(self, name: str) -> float | int | str | None:
        for k, v in self.metrics:
            if k == name:
                return v
        return None
