"""Finding kinds are declared once, beside their rules, and every table about kinds is derived."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from forensics.analysis import chain, kinds
from forensics.analysis.findings import SEVERITIES, Finding, Subject
from forensics.analysis.kinds import FindingKind
from forensics.analysis.rules import CAUSES, KINDS, RULES, SPECS

DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_every_table_is_derived_from_the_declarations() -> None:
    """KINDS, RULES and CAUSES hold exactly the declared kinds, in rank order; each cause -> effect
    edge in CAUSES is declared by exactly one of its ends (the cause's causes=, the effect's caused_by=)."""
    assert KINDS == tuple(k.id for k in sorted(SPECS, key=lambda k: k.rank))
    assert list(RULES) == list(KINDS)
    assert set(CAUSES) == set(KINDS)
    by_id = {k.id: k for k in SPECS}
    for k in SPECS:
        assert RULES[k.id] is k.run
        assert k.causes <= CAUSES[k.id] <= set(KINDS)
        assert all(k.id in CAUSES[c] for c in k.caused_by)
        assert k.severity in SEVERITIES
    for cause, effects in CAUSES.items():
        for effect in effects:
            assert (effect in by_id[cause].causes) != (cause in by_id[effect].caused_by), (cause, effect)


def test_each_rule_module_declares_its_kinds_and_is_discovered() -> None:
    """A module under forensics/analysis/rules/ that declares a kind is found without a list."""
    declared = {k.run.__module__ for k in SPECS if k.run is not None}
    rules_dir = Path(kinds.__file__).parent / "rules"
    with_kinds = {f"forensics.analysis.rules.{p.stem}" for p in rules_dir.glob("*.py")
                  if "FindingKind(" in p.read_text(encoding="utf-8")}
    assert declared == with_kinds


def test_the_order_rules_run_in_is_the_documented_order() -> None:
    """docs/analysis-format.md's table of kinds lists every kind, in KINDS order."""
    text = (DOCS / "analysis-format.md").read_text(encoding="utf-8")
    section = text.split("### Finding kinds", 1)[1].split("\n## ", 1)[0]
    assert tuple(re.findall(r"^\| `([a-z-]+)` \|", section, re.M)) == KINDS


def test_a_kind_declared_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        FindingKind("oom-kill", severity="high", rank=1)


def test_a_kind_without_a_rule_or_next_step_or_causing_an_unknown_kind_is_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kinds, "_REGISTRY", dict(kinds._REGISTRY))
    orphan = FindingKind("test-orphan", severity="low", rank=999)
    with pytest.raises(ValueError, match="has no rule"):
        kinds.registered()
    orphan.rule(lambda model, cfg: [])
    with pytest.raises(ValueError, match="has no next step"):
        kinds.registered()
    orphan.next_step(lambda f, h: f"look at {h.gpu}")
    assert kinds.registered()[-1] is orphan
    monkeypatch.setattr(kinds, "_REGISTRY", dict(kinds._REGISTRY))
    FindingKind("test-cause", severity="low", rank=998, causes=("no-such-kind",),
                next_step="x").rule(lambda model, cfg: [])
    with pytest.raises(ValueError, match="undeclared kinds"):
        kinds.registered()
    monkeypatch.setattr(kinds, "_REGISTRY", dict(kinds._REGISTRY))
    FindingKind("test-effect", severity="low", rank=997, caused_by=("no-such-kind",),
                next_step="x").rule(lambda model, cfg: [])
    with pytest.raises(ValueError, match="caused by undeclared kinds"):
        kinds.registered()


def test_an_effect_declares_its_causes_in_its_own_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new effect kind names what causes it (caused_by=) and the edge table gains it, no cause's
    declaration edited; an edge named by both of its ends is an error (one place per edge)."""
    monkeypatch.setattr(kinds, "_REGISTRY", dict(kinds._REGISTRY))
    FindingKind("test-effect", severity="low", rank=997, caused_by=("oom-kill", "gpu-xid-fault"),
                next_step="x").rule(lambda model, cfg: [])
    table = kinds.edges(kinds.registered())
    assert "test-effect" in table["oom-kill"] and "test-effect" in table["gpu-xid-fault"]
    assert table["oom-kill"] - {"test-effect"} == CAUSES["oom-kill"]
    assert table["test-effect"] == frozenset()
    monkeypatch.setattr(kinds, "_REGISTRY", dict(kinds._REGISTRY))
    FindingKind("test-twice", severity="low", rank=996, caused_by=("gpu-memory-pressure",),
                next_step="x").rule(lambda model, cfg: [])
    FindingKind("test-cause", severity="low", rank=995, causes=("test-twice",),
                next_step="x").rule(lambda model, cfg: [])
    FindingKind("test-loop", severity="low", rank=994, caused_by=("test-cause",),
                next_step="x").rule(lambda model, cfg: [])
    assert kinds.edges(kinds.registered())["test-cause"] == {"test-twice", "test-loop"}
    monkeypatch.setattr(kinds, "_REGISTRY", dict(kinds._REGISTRY))
    FindingKind("test-both-cause", severity="low", rank=993, causes=("test-both-effect",),
                next_step="x").rule(lambda model, cfg: [])
    FindingKind("test-both-effect", severity="low", rank=992, caused_by=("test-both-cause",),
                next_step="x").rule(lambda model, cfg: [])
    with pytest.raises(ValueError, match="declare an edge once"):
        kinds.registered()


def _finding(kind: str, **metrics: float | str) -> Finding:
    subjects = (Subject("container", "c" * 64, "notebook", "n1", "culprit"), Subject("gpu", "GPU-1", "GPU 0", "n1"))
    return Finding(kind, "high", 0.9, "s", 0.0, 1.0, "n1", subjects, (), tuple(metrics.items()))


def test_every_kind_words_a_one_line_next_step_from_its_finding() -> None:
    """The next step is declared beside the kind and names the finding's own parties."""
    for k in SPECS:
        step = chain.next_step(_finding(k.id, xid=48, xid_class="device", action="RESTART_BM", resource="memory",
                                        pid=7, verdict="rma-candidate", meaning="node reboot",
                                        sharing="mps", contract="CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25"))
        assert step and "\n" not in step and len(step) < 300, k.id
    assert "drain the node" in chain.next_step(_finding("gpu-xid-fault", xid=48, xid_class="device", action="RESTART_BM"))
    assert "GPU 0" in chain.next_step(_finding("gpu-xid-fault", xid=48, xid_class="device", action="RESTART_BM"))
    assert "reset" in chain.next_step(_finding("gpu-xid-fault", xid=95, xid_class="device", action="RESET_GPU"))
    assert "application" in chain.next_step(_finding("gpu-xid-fault", xid=13, xid_class="application",
                                                     action="RESTART_APP"))
    assert "look up Xid 999" in chain.next_step(_finding("gpu-xid-fault", xid=999, xid_class="unknown"))
    assert "RMA" in chain.next_step(_finding("gpu-lost"))
    assert "RMA" in chain.next_step(_finding("gpu-memory-health", verdict="rma-candidate"))
    assert "reset" in chain.next_step(_finding("gpu-memory-health", verdict="reset-needed"))
    assert "node reboot" in chain.next_step(_finding("gpu-recovery-action", meaning="node reboot"))
    share = chain.next_step(_finding("gpu-share-exceeded", sharing="mps", contract="CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25"))
    assert "notebook" in share and "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in share
    assert "notebook" in chain.next_step(_finding("unallocated-gpu-use"))


def test_harm_is_worded_by_the_kind_and_defaults_to_kind_and_time() -> None:
    assert chain._harm(_finding("unallocated-gpu-use")) == "GPU 0, allocated to it, used by notebook from 00:00:00Z"
    assert chain._harm(_finding("cpu-throttling", throttled_ratio=0.5)) == "CPU-throttled in 50% of its periods"
    assert chain._harm(_finding("gpu-clock-throttle")) == "gpu-clock-throttle from 00:00:00Z"
