"""Finding kinds: each declared once, beside its rule, and every table about kinds derived from that.

A rule module under ``forensics/analysis/rules/`` declares a kind with :class:`FindingKind` and
attaches its pieces with decorators::

    OOM_KILL = FindingKind("oom-kill", severity="high", needs=(), rank=70)

    @OOM_KILL.rule
    def oom_kill(model, cfg): ...          # (Model, AnalysisConfig) -> list[Finding]

    @OOM_KILL.harm
    def _harm(f, h): return f"OOM-killed at {h.when}"      # the verdict's impact phrase

    @OOM_KILL.ruled_out(rank=30)
    def _not_found(c): ...                 # (RuledOutCheck) -> (statement, evidence) | None

    @OOM_KILL.next_step
    def _step(f, h): return f"raise {h.victims}'s memory limit or find its leak"   # one line

(or ``FindingKind(..., next_step="drain the node")`` when the wording needs nothing of the finding).

Declaring registers the kind here; :mod:`forensics.analysis.rules` imports every module of its
package (no hand-kept list) and derives ``KINDS``, ``RULES`` and ``CAUSES`` from the registry; the
chain (:mod:`forensics.analysis.chain`) takes harm phrases and ruled-out statements from it.

A cause -> effect edge is declared once, by the kind that brought it: an effect names the kinds
that can cause it (``caused_by=``), a cause the kinds it can cause (``causes=``); :func:`edges`
joins both into one table, so a new kind, cause or effect, is one module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from forensics.analysis.findings import Evidence, Finding, Severity, Subject
from forensics.analysis.model import Model, NodeInfo
from forensics.analysis.samples import GPU_SAMPLE_ORIGINS, GpuSample, samples_from
from forensics.specs import Role, playing
from forensics.thresholds import AnalysisConfig

__all__ = [
    "FindingKind",
    "Harm",
    "Rule",
    "RuledOut",
    "RuledOutCheck",
    "StepWording",
    "edges",
    "registered",
]

Rule = Callable[[Model, AnalysisConfig], list[Finding]]


@dataclass(frozen=True)
class Harm:
    """What a kind's wordings know of a finding (the verdict's harm phrase, the next step):
    ``when`` its start (``14:02:10Z``), ``culprits`` their short names (``notebook, pod ml/x``,
    else ``another process``), ``gpu`` the GPU it names (``GPU 0``, else ``its GPU``),
    ``victims`` their short names (else ``the affected workload``)."""

    when: str
    culprits: str
    gpu: str
    victims: str = "the affected workload"
    victim: Subject | None = None  # the victim a harm phrase is for (its own ``time`` when it has one)


@dataclass(frozen=True)
class RuledOutCheck:
    """What a ruled-out check of one node sees: the model, the node, every kind found (on any
    node), the findings and the thresholds. ``evidence(family, excerpt)`` cites the member the
    node's ``family`` (nvml, kernel, cgroups, psi) was read from, or nothing when none was; the
    excerpt describes what was examined, so it is marked normalised (not a quotation)."""

    model: Model
    node: str
    info: NodeInfo
    found: frozenset[str]
    findings: tuple[Finding, ...]
    cfg: AnalysisConfig

    def evidence(self, family: str, excerpt: str) -> list[Evidence]:
        member = self.info.members_used.get(family)
        bundle = self.info.bundles[0] if self.info.bundles else ""
        return [Evidence(bundle, member, "", excerpt, normalised=True)] if member else []


HarmWording = Callable[[Finding, Harm], str]
# The one-line next step an operator takes on a finding of the kind (findings[].next_step).
StepWording = Callable[[Finding, Harm], str]
# A statement that the kind was looked for on the node and not found, with the evidence examined;
# None when the kind was found or its source is missing (then it is a limitation, not ruled out).
RuledOutWording = Callable[[RuledOutCheck], "tuple[str, list[Evidence]] | None"]


@dataclass(frozen=True)
class RuledOut:
    """A kind's ruled-out check and its place (``rank``, ascending) in ``ruled_out[]``."""

    rank: int
    check: RuledOutWording


_REGISTRY: dict[str, FindingKind] = {}


class FindingKind:
    """One finding kind, declared once in its rule module.

    ``id``: the stable kind id of ``findings[].kind``; ``severity``: the severity its findings get
    unless the rule raises or lowers it; ``needs``: the source roles
    (:mod:`forensics.specs.roles`) that no source answered on a node lowers a finding's confidence
    for (:meth:`confidence`; a role no spec declares is an error here); ``causes``: the kinds a finding of this kind can cause,
    ``caused_by``: the kinds that can cause a finding of this kind (the chain links only the pairs
    either side names, :func:`edges`; each pair is named by one side only); ``rank``: its place in ``KINDS`` and in the order rules run;
    ``gpu_samples``: the origins of GPU device samples (:data:`forensics.analysis.samples.GPU_SAMPLE_ORIGINS`)
    its claim can rest on, read through :meth:`gpu_samples` (every origin unless declared; a kind that
    leaves some out says why in ``unjudged``, the words of the limitation it writes when a GPU has
    only those); ``hardware``: a critical finding of the kind is a hardware fault (an incident holding one in the
    capture's lead-up stays on top, :mod:`forensics.analysis.incidents`; an Xid finding says so by
    its ``xid_class`` metric); ``next_step``: the next step's wording when it needs nothing of the finding.
    The rule, the harm wording and the ruled-out check are attached with the decorators.
    """

    __slots__ = ("caused_by", "causes", "hardware", "harm_wording", "id", "needs", "not_found", "rank", "run", "sample_origins",
                 "severity", "step_wording", "unjudged")

    def __init__(self, id: str, *, severity: Severity, needs: Iterable[Role] = (),  # noqa: A002 - the kind's id
                 causes: Iterable[str] = (), caused_by: Iterable[str] = (), rank: int, next_step: str | None = None,
                 hardware: bool = False, gpu_samples: Iterable[str] = GPU_SAMPLE_ORIGINS,
                 unjudged: str = "") -> None:
        if id in _REGISTRY:
            raise ValueError(f"finding kind {id!r} is declared twice")
        self.id = id
        self.severity: Severity = severity
        self.needs = tuple(needs)
        for role in self.needs:
            playing(role)  # a role no spec declares: raises, naming it
        self.causes = frozenset(causes)
        self.caused_by = frozenset(caused_by)
        self.rank = rank
        self.run: Rule | None = None
        self.harm_wording: HarmWording | None = None
        self.not_found: RuledOut | None = None
        self.step_wording: StepWording | str | None = next_step
        self.hardware = hardware
        self.sample_origins = frozenset(gpu_samples)
        unknown = sorted(self.sample_origins - set(GPU_SAMPLE_ORIGINS))
        if unknown:
            raise ValueError(f"finding kind {id!r} reads unknown GPU sample origins {unknown}")
        if self.sample_origins != frozenset(GPU_SAMPLE_ORIGINS) and not unjudged:
            raise ValueError(f"finding kind {id!r} leaves GPU samples out and does not say why (unjudged=)")
        self.unjudged = unjudged
        _REGISTRY[id] = self

    def __repr__(self) -> str:
        return f"FindingKind({self.id!r})"

    def rule(self, fn: Rule) -> Rule:
        """Decorator: ``fn`` is the kind's rule."""
        self.run = fn
        return fn

    def harm(self, fn: HarmWording) -> HarmWording:
        """Decorator: ``fn(finding, Harm)`` words what a finding of this kind did to its victim."""
        self.harm_wording = fn
        return fn

    def next_step(self, fn: StepWording) -> StepWording:
        """Decorator: ``fn(finding, Harm)`` words the one-line next step for a finding of this kind."""
        self.step_wording = fn
        return fn

    def step(self, f: Finding, h: Harm) -> str:
        """The next step for ``f``, one line (``""`` when the kind declares none)."""
        w = self.step_wording
        text = w if isinstance(w, str) else (w(f, h) if w is not None else "")
        return " ".join(text.split())

    def ruled_out(self, *, rank: int) -> Callable[[RuledOutWording], RuledOutWording]:
        """Decorator: the kind's ruled-out check, at place ``rank`` among the node's statements."""
        def attach(fn: RuledOutWording) -> RuledOutWording:
            self.not_found = RuledOut(rank, fn)
            return fn
        return attach

    def gpu_samples(self, model: Model) -> dict[tuple[str, str], list[GpuSample]]:
        """(node, GPU UUID) -> the GPU's device samples this kind's claim can rest on (their
        ``origin`` in its ``gpu_samples``). A GPU whose samples all come from other origins is not
        judged, and the analysis says so (a limitation naming the kind, the GPUs and why)."""
        kept = samples_from(model, self.sample_origins)
        every = model.samples_by_gpu()
        if kept is every:
            return kept
        left: dict[str, list[str]] = {}
        origins: set[str] = set()
        for (node, uuid), samples in sorted(every.items()):
            if (node, uuid) not in kept:
                gpu = model.gpus.get((node, uuid))
                left.setdefault(node, []).append(f"GPU {gpu.index}" if gpu is not None and gpu.index >= 0 else uuid)
                origins.update(s.origin for s in samples)
        for node, gpus in left.items():
            model.limit(f"{self.id} not judged on {node} ({', '.join(gpus)}): their readings come from "
                        f"{', '.join(sorted(origins))} only; {self.unjudged}")
        return kept

    def judged_on(self, model: Model, node: str) -> int:
        """How many of ``node``'s device samples this kind's claim can rest on (a ruled-out
        statement needs some)."""
        return sum(len(v) for (n, _), v in samples_from(model, self.sample_origins).items() if n == node)

    def confidence(self, model: Model, node: str, base: float, cfg: AnalysisConfig) -> float:
        """``base`` lowered by ``missing_source_confidence_factor`` for each role of ``needs`` that no
        source answered on ``node``."""
        c = base
        for role in self.needs:
            if not model.has_role(node, role):
                c *= cfg.missing_source_confidence_factor
        return round(max(0.05, min(1.0, c)), 2)


def registered() -> tuple[FindingKind, ...]:
    """Every declared kind, by rank; a kind without a rule or a next step, naming an undeclared
    kind as its cause or effect, or naming an edge its other end names too, is an error."""
    kinds = sorted(_REGISTRY.values(), key=lambda k: (k.rank, k.id))
    for k in kinds:
        if k.run is None:
            raise ValueError(f"finding kind {k.id!r} has no rule")
        if k.step_wording is None:
            raise ValueError(f"finding kind {k.id!r} has no next step")
        unknown = sorted(k.causes - _REGISTRY.keys())
        if unknown:
            raise ValueError(f"finding kind {k.id!r} causes undeclared kinds {unknown}")
        unknown = sorted(k.caused_by - _REGISTRY.keys())
        if unknown:
            raise ValueError(f"finding kind {k.id!r} is caused by undeclared kinds {unknown}")
        twice = sorted(c for c in k.caused_by if k.id in _REGISTRY[c].causes)
        if twice:
            raise ValueError(f"finding kind {k.id!r} names its causes {twice}, which name it too (declare an edge once)")
    return tuple(kinds)


def edges(kinds: Iterable[FindingKind]) -> dict[str, frozenset[str]]:
    """Kind -> the kinds it can cause: its own ``causes`` and every kind naming it in ``caused_by``."""
    kinds = tuple(kinds)
    return {k.id: k.causes | {e.id for e in kinds if k.id in e.caused_by} for k in kinds}
