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
    """KINDS, RULES and CAUSES hold exactly the declared kinds, in rank order."""
    assert KINDS == tuple(k.id for k in sorted(SPECS, key=lambda k: k.rank))
    assert list(RULES) == list(KINDS)
    assert set(CAUSES) == set(KINDS)
    for k in SPECS:
        assert RULES[k.id] is k.run
        assert CAUSES[k.id] == k.causes <= set(KINDS)
        assert k.severity in SEVERITIES


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
