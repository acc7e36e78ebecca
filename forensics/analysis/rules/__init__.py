"""The rules: small pure functions ``(Model, AnalysisConfig) -> list[Finding]``, one module per family.

Each module declares its finding kinds with :class:`forensics.analysis.kinds.FindingKind` beside
their rules. Every module of this package is imported here (no hand-kept list), and the tables
about kinds are derived from those declarations: ``KINDS`` (the kind ids, by rank), ``RULES``
(kind -> rule, in the order rules run) and ``CAUSES`` (kind -> the kinds it can cause: its own
``causes=`` and the kinds naming it in their ``caused_by=``).
"""

from __future__ import annotations

import importlib
import pkgutil

from forensics.analysis.kinds import FindingKind, Rule, edges, registered

__all__ = ["CAUSES", "KINDS", "RULES", "SPECS", "Rule"]

for _module in pkgutil.iter_modules(__path__, f"{__name__}."):
    importlib.import_module(_module.name)

SPECS: tuple[FindingKind, ...] = registered()
KINDS: tuple[str, ...] = tuple(k.id for k in SPECS)
RULES: dict[str, Rule] = {k.id: k.run for k in SPECS if k.run is not None}
CAUSES: dict[str, frozenset[str]] = edges(SPECS)
