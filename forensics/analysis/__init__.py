"""The analyzer: bundles -> model (entities, joins, timeline) -> rules -> findings -> evidence chain -> JSON.

``analyze_bundles(paths)`` returns the analysis document described in docs/analysis-format.md.
It reads bundles through :mod:`forensics.bundle.reader` only (never a live source). A bundle that
cannot be opened raises the reader's :class:`forensics.errors.BundleError`; anything missing or
malformed *inside* a bundle lowers confidence and becomes a limitation, never an exception.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from forensics.analysis.chain import build_chain, ruled_out
from forensics.analysis.document import build_document
from forensics.analysis.findings import Finding, severity_rank
from forensics.analysis.incidents import WindowSpec, build_incidents, parse_window, window_for
from forensics.analysis.loaders import (
    LoadState,
    finalize,
    load_manifest,
    load_model,
    load_source,
    note_missing_sources,
)
from forensics.analysis.loaders.clocks import align_clocks
from forensics.analysis.model import Model
from forensics.analysis.occurrences import merge_repeats
from forensics.analysis.ring_view import Window
from forensics.analysis.rules import RULES
from forensics.analysis.slices import (
    SLICE_S,
    Carried,
    analyze_in_slices,
    captured_kernel,
    history_window,
    slice_windows,
)
from forensics.analysis.source import Source
from forensics.bundle.reader import ReadLimits, open_bundle
from forensics.bundle.verify import check_bundle
from forensics.thresholds import AnalysisConfig, load_config

__all__ = ["AnalysisConfig", "SlicePart", "analyze_bundles", "build_model", "load_config", "mark_before_capture",
           "mark_history", "parse_window", "ring_slices", "run_rules"]


def build_model(paths: Sequence[Path | str], limits: ReadLimits | None = None,
                config: AnalysisConfig | None = None, part: SlicePart | None = None) -> Model:
    """Open each bundle and load every source into one model (several bundles of a host: one timeline),
    then resolve its joins (process -> container -> pod -> allocation) once. ``part``: one slice of a
    long ring history (forensics.analysis.slices), not all of it."""
    cfg = config or AnalysisConfig()
    loading = LoadState(psi_some_floor=cfg.psi_some_avg10_pct, psi_full_floor=cfg.psi_full_avg10_pct)
    # Loading creates hundreds of thousands of small, acyclic records: the cyclic collector would
    # rescan them again and again (quadratic time), so it is paused while they are made.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return load_model(lambda model, loading: _load_all(model, loading, paths, limits, part), loading)
    finally:
        if was_enabled:
            gc.enable()


@dataclass
class SlicePart:
    """One slice of a bundle's ring history to load (forensics.analysis.slices): its window, whether
    the capture's own members are loaded with it (the last slice's), and what the slices before it
    carried (updated as it is loaded)."""

    window: Window
    own: bool
    carried: Carried


def _load_all(model: Model, loading: LoadState, paths: Sequence[Path | str], limits: ReadLimits | None,
              part: SlicePart | None = None) -> None:
    seen_files: dict[str, str] = {}
    for raw in paths:
        path = Path(raw)
        bundle = open_bundle(path, limits)
        if bundle.file_sha256 in seen_files:  # the same bundle twice (or a copy): count it once
            model.limit(f"{path.name} is the same bundle as {seen_files[bundle.file_sha256]} "
                        "(identical SHA-256); analysed once")
            continue
        seen_files[bundle.file_sha256] = path.name
        checked = check_bundle(bundle)
        problems = checked.problems
        if problems:
            # the ring segments' facts are stated here, each with what the ring view does about it
            # (which then says nothing of them): all of them, past the first three problems too
            stated = {f.problem: f.stated() for f in checked.segments}
            shown = problems[:3] + [p for p in stated if p not in problems[:3]]
            model.limit(f"INTEGRITY CHECK FAILED: {path.name}: {len(problems)} problem(s) "
                        f"({'; '.join(stated.get(p, p) for p in shown)}"
                        f"{f'; and {len(problems) - len(shown)} more' if len(problems) > len(shown) else ''}): "
                        "the evidence was altered or damaged after capture; run `gpuforensics verify` and treat "
                        "the findings as untrusted")
        src = Source(bundle, path.name, bundle.members.keys())
        src.integrity = checked
        hashes = {m: bundle.sha256(m) for m in sorted(bundle.members)}
        node = load_manifest(src, model, path, bundle.file_sha256, hashes)
        model.bundles[-1]["integrity"] = {"ok": not problems, "problems": problems[:20]}
        if part is None:
            load_source(src, model, node, loading)
        else:
            carried = part.carried
            if not part.own:  # the ring's copies of the capture's kernel records are the last slice's
                if node not in carried.kernel:
                    carried.kernel[node] = captured_kernel(src, node)
                keys, lines = carried.kernel[node]
                loading.kernel_keys[node], loading.kernel_lines[node] = set(keys), set(lines)
            loading.kernel_history_seen[node] = carried.kernel_seen.setdefault(node, (set(), set()))
            view = load_source(src, model, node, loading, carried.part(part.window), part.own)
            carried.after(view, model.node(node))
            del view
        del bundle, src
    finalize(model)
    before = len(model.limitations)
    note_missing_sources(model)
    if part is not None:
        part.carried.notes.update(model.limitations[before:])
    nodes = sorted(model.nodes)
    if len(nodes) > 1:
        unaligned = align_clocks(model)
        if len(unaligned) == len(nodes) - 1:
            model.limit(f"{len(nodes)} nodes analysed together ({', '.join(nodes)}): their clocks were not "
                        "synchronised by the capture, so cross-node times may be off by the nodes' clock offsets")
        else:
            worst = max(model.nodes[n].clock_uncertainty_s or 0.0 for n in nodes if n not in unaligned)
            text = (f"{len(nodes)} nodes analysed together ({', '.join(nodes)}): clocks aligned to {nodes[0]}'s "
                    f"within ±{worst:.3g} s")
            if unaligned:
                text += f"; not {', '.join(unaligned)} (no clock reference shared with {nodes[0]})"
            model.limit(text)


def run_rules(model: Model, config: AnalysisConfig) -> list[Finding]:
    """Every rule over the model; a rule that fails is reported as a limitation."""
    findings: list[Finding] = []
    for kind, rule in RULES.items():
        try:
            findings.extend(rule(model, config))
        except Exception as exc:  # noqa: BLE001 - one broken rule must not hide the others
            model.limit(f"rule {kind} failed ({type(exc).__name__}: {str(exc)[:200]}); its findings are missing")
    return findings


def mark_history(model: Model, findings: list[Finding]) -> list[Finding]:
    """Findings that ended before the capture's look-back window (``--lookback``, default 1 h: a
    kernel ring buffer often holds days of records) are history, not this incident: kept and
    cited, but as ``low`` and said to be earlier, so they do not become the verdict."""
    out: list[Finding] = []
    for f in findings:
        info = model.nodes.get(f.node)
        last = f.end if f.end is not None else f.start
        if (info is not None and info.start is not None and info.lookback_s is not None and last is not None
                and last < info.start - info.lookback_s
                and severity_rank(f.severity) < severity_rank("low")):
            hours = (info.start - last) / 3600
            when = f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} days"
            f = replace(f, severity="low",
                        summary=f"earlier history ({when} before the capture, outside its "
                                f"{info.lookback_s / 60:g}-minute look-back): {f.summary}",
                        headline=f"earlier, {when} before the capture: {f.headline or f.summary}")
        out.append(f)
    return out


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s earlier"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min earlier"
    return f"{seconds / 3600:.1f} h earlier"


def mark_before_capture(model: Model, findings: list[Finding]) -> list[Finding]:
    """Findings that began before their node's capture started (the lead-up, the kernel ring
    buffer) say so: ``before_capture_s`` and "before capture (N min earlier)" in their summary
    and headline, so that every format shows it (history already says how much earlier)."""
    out: list[Finding] = []
    for f in findings:
        info = model.nodes.get(f.node)
        if info is None or info.start is None or f.start is None or info.start - f.start < 1.0:
            out.append(f)
            continue
        ago = info.start - f.start
        f = replace(f, before_capture_s=round(ago, 3))
        if not f.summary.startswith("earlier history"):
            ended = f.end is None or f.end < info.start
            phrase = f"{'before' if ended else 'began before'} capture ({_ago(ago)})"
            f = replace(f, summary=f"{phrase}: {f.summary}",
                        headline=f"{phrase}: {f.headline}" if f.headline else "",
                        lead=f"{phrase}: {f.lead}" if f.lead else "")
        out.append(f)
    return out


def ring_slices(paths: Sequence[Path | str], limits: ReadLimits | None = None,
                slice_s: float = SLICE_S) -> list[Window]:
    """The slices a bundle's ring history is analysed in (forensics.analysis.slices): one window
    (``(since, None)``) where it fits one slice, none where there is no ring history to slice or
    several bundles are analysed together (one model, as without slicing)."""
    if len(paths) != 1:
        return []
    bundle = open_bundle(Path(paths[0]), limits)
    found = history_window(Source(bundle, Path(paths[0]).name, bundle.members.keys()))
    return [] if found is None else slice_windows(found[0], found[1], slice_s)


def analyze_bundles(paths: Sequence[Path | str], config: AnalysisConfig | None = None,
                    limits: ReadLimits | None = None, window: str | WindowSpec | None = None,
                    slice_s: float = SLICE_S) -> dict[str, Any]:
    """Analyse one or more bundles and return the analysis JSON document (a dict).

    ``window``: the window under investigation (``START..END``, :func:`parse_window`); by default
    the capture window and its lead-up. It ranks the incidents; it hides nothing. ``slice_s``: a ring
    history longer than this (and a tenth) is analysed in consecutive slices of it (forensics.analysis.slices).
    """
    cfg = config or AnalysisConfig()
    spec = parse_window(window) if isinstance(window, str) else window
    windows = ring_slices(paths, limits, slice_s)
    if len(windows) > 1:
        carried = Carried()

        def rules(model: Model) -> list[Finding]:
            was = gc.isenabled()
            gc.disable()  # as below
            try:
                return run_rules(model, cfg)
            finally:
                if was:
                    gc.enable()

        sliced = analyze_in_slices(
            windows, lambda w, last: build_model(paths, limits, cfg, SlicePart(w, last, carried)), rules, carried.notes,
            slice_s=slice_s)
        model, raw = sliced.model, sliced.findings
        del sliced
    else:
        model = build_model(paths, limits, cfg)
        raw = None
    was_enabled = gc.isenabled()
    gc.disable()  # rules and the document also make many acyclic records (see build_model)
    try:
        if raw is None:
            raw = run_rules(model, cfg)
        findings = mark_before_capture(model, mark_history(model, merge_repeats(raw)))
        result = build_chain(findings, cfg, model)
        win = window_for(model, spec)
        incidents = build_incidents(result.findings, model, cfg, win)
        ruled = ruled_out(model, list(result.findings), cfg)
        return build_document(model, result, ruled, cfg, generated_at=time.time(),
                              incidents=incidents, window=win)
    finally:
        if was_enabled:
            gc.enable()
