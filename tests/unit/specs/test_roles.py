"""Source roles: declared in the specs, asked by the rules, never a list of source names."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import forensics.specs
from forensics.analysis.kinds import FindingKind
from forensics.analysis.loaders.order import loader_order
from forensics.analysis.model import Model
from forensics.specs import Role, all_specs, playing, roles

ANALYSIS = Path(__file__).parents[3] / "forensics" / "analysis"
# roles.py holds the roles several sources play or several rules ask; a source's own role may sit in its spec module
DECLARED = {v for info in pkgutil.iter_modules(forensics.specs.__path__)
            for v in vars(importlib.import_module(f"forensics.specs.{info.name}")).values() if isinstance(v, Role)}


def test_every_role_is_played_by_a_spec_and_every_played_role_is_declared() -> None:
    for role in DECLARED:
        assert playing(role), role
    played = {r for s in all_specs() for r in s.roles}
    assert played == DECLARED
    assert len({r.name for r in DECLARED}) == len(DECLARED)
    assert not {r.name for r in DECLARED} & {s.name for s in all_specs()}  # a role never reads as a source


def test_container_runtimes_are_docker_and_podman_and_cri() -> None:
    # podman is read by the docker collector through its Docker-compatible API
    assert playing(roles.CONTAINER_RUNTIME) == {"docker", "cri"}
    assert playing(roles.KERNEL_LOG) == {"kernel"}


def test_a_role_no_spec_declares_fails_where_it_is_asked() -> None:
    typo = Role("kernel-logs", "a typo of kernel-log")
    with pytest.raises(ValueError, match="kernel-logs"):
        FindingKind("role-typo-kind", severity="low", needs=(typo,), rank=999)
    with pytest.raises(ValueError, match="kernel-logs"):
        Model().has_role("gpu-07", typo)


def test_has_role_counts_any_source_of_the_role() -> None:
    m = Model()
    m.node("n").collector_status.update({"docker": "unavailable", "cri": "partial", "kernel": "failed"})
    assert m.has_role("n", roles.CONTAINER_RUNTIME)
    assert not m.has_role("n", roles.KERNEL_LOG)
    assert not m.has_role("elsewhere", roles.CONTAINER_RUNTIME)


def test_a_loader_needing_a_role_runs_after_every_source_of_it() -> None:
    order = [ld.source for ld in loader_order()]
    for runtime in playing(roles.CONTAINER_RUNTIME):
        assert order.index(runtime) < order.index("kubernetes")
        assert order.index(runtime) < order.index("prometheus")


def test_analysis_asks_roles_not_sources() -> None:
    """No rule, kind or naming helper asks ``has_source`` or lists source names in ``needs``."""
    offenders = []
    for path in sorted(ANALYSIS.rglob("*.py")):
        if path.name == "model.py" or "loaders" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
                if name == "has_source" and not (path.name == "naming.py"):
                    offenders.append(f"{path.name}:{node.lineno} has_source")
                for kw in node.keywords:
                    if kw.arg == "needs" and any(isinstance(e, ast.Constant) for e in ast.walk(kw.value)):
                        offenders.append(f"{path.name}:{node.lineno} needs= names a source")
    assert offenders == []
