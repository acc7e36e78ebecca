"""Findings: the claims the analyzer makes, each with its subjects and its evidence.

Serialised as described in docs/analysis-format.md (``findings[]``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from forensics.document_format import SEVERITIES, Severity, severity_rank

__all__ = [
    "ROLES",
    "SEVERITIES",
    "Evidence",
    "EvidenceRef",
    "Finding",
    "Role",
    "Severity",
    "Subject",
    "severity_rank",
]

Role = Literal["culprit", "victim", "witness"]

ROLES: tuple[Role, ...] = ("culprit", "victim", "witness")
# The finding kinds are declared beside their rules (forensics/analysis/kinds.py); the list of
# their ids is forensics.analysis.rules.KINDS.

EXCERPT_MAX_CHARS = 240


def shorten(text: str, limit: int = EXCERPT_MAX_CHARS) -> str:
    """A one-line excerpt of at most ``limit`` characters, cut with ``...``."""
    one_line = " ".join(text.split())
    if len(one_line) <= limit:
        return one_line
    return one_line[: limit - 3] + "..."


@dataclass(frozen=True, order=True)
class Subject:
    """An entity a finding is about: container (64-hex id), pod (UID), process (PID), gpu (UUID), host."""

    type: str
    id: str
    name: str
    node: str
    role: Role = "witness"
    # When the finding met this subject (unix s): a finding merging several records gives each
    # subject its own record's time (e.g. each PID of a multi-PID Xid finding); None when not its own.
    time: float | None = field(default=None, compare=False)

    def with_role(self, role: Role) -> Subject:
        return Subject(self.type, self.id, self.name, self.node, role, self.time)

    def at(self, t: float | None) -> Subject:
        return Subject(self.type, self.id, self.name, self.node, self.role, t)

    def key(self) -> tuple[str, str, str]:
        return (self.node, self.type, self.id)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "type": self.type, "id": self.id, "name": self.name,
                               "node": self.node}
        if self.time is not None:
            from forensics.parsing.timestamps import format_iso

            out["time"] = format_iso(self.time, precision="milli")
        return out


@dataclass(frozen=True)
class Evidence:
    """A quotation from a bundle member: ``locator`` is a JSON pointer, ``line N`` or ``""``."""

    bundle: str
    member: str
    locator: str
    excerpt: str

    def to_json(self) -> dict[str, Any]:
        return {
            "bundle": self.bundle,
            "member": self.member,
            "locator": self.locator,
            "excerpt": shorten(self.excerpt),
        }


@dataclass(frozen=True, slots=True)
class EvidenceRef:
    """A cheap, lazy pointer to evidence, built per sample and quoted only when a finding cites it.

    ``line`` (1-based) locates it in a text/JSON-lines member, else ``pointer`` (JSON pointer).
    ``payload`` is the raw line (bytes or str) or a JSON value; ``paths`` pick the values to quote
    out of a JSON payload (a raw line is parsed again only then).
    """

    bundle: str
    member: str
    line: int
    payload: Any
    paths: tuple[tuple[str | int, ...], ...] = ()
    pointer: str = ""
    source: Any = None  # an object with line_at(member, offset) -> bytes, when payload is None
    offset: int = -1

    @property
    def evidence(self) -> Evidence:
        import json

        p = self.payload
        if p is None and self.source is not None and self.offset >= 0:
            p = self.source.line_at(self.member, self.offset)
        locator = f"line {self.line}" if self.line else self.pointer
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
                return Evidence(self.bundle, self.member, locator, shorten(" ".join(parts)))
            except (ValueError, KeyError, IndexError, TypeError):
                pass
        if isinstance(p, bytes | bytearray):
            text = p[: EXCERPT_MAX_CHARS * 2].decode("utf-8", "replace")
        elif isinstance(p, str):
            text = p[: EXCERPT_MAX_CHARS * 2]
        else:
            text = json.dumps(p, separators=(",", ":"))
        return Evidence(self.bundle, self.member, locator, shorten(text))


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

    def subjects_with(self, role: Role) -> tuple[Subject, ...]:
        return tuple(s for s in self.subjects if s.role == role)

    def metric(self, name: str) -> float | int | str | None:
        for k, v in self.metrics:
            if k == name:
                return v
        return None
