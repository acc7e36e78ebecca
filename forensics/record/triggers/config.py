"""``record --config FILE``: the same thresholds file as ``analyze --config`` (TOML or JSON, a
flat table or ``[thresholds]``), plus an optional top-level ``triggers`` list of rules::

    triggers = ["gpu.util>90%:5m", "gpu.memory:1m", "oom"]

    [thresholds]
    gpu_memory_pressure_ratio = 0.95   # gpu.memory without a threshold fires at >= 95 %
"""

from __future__ import annotations

from pathlib import Path

from forensics.errors import UsageError
from forensics.thresholds import AnalysisConfig, config_from_mapping, read_config_file

__all__ = ["load_trigger_config"]


def load_trigger_config(path: Path | str | None) -> tuple[AnalysisConfig, tuple[str, ...]]:
    """The thresholds and the rules a config file holds (defaults and no rules without one)."""
    if path is None:
        return AnalysisConfig(), ()
    data = read_config_file(path)
    cfg = config_from_mapping(data, origin=str(path))
    rules = data.get("triggers", []) if isinstance(data, dict) else []
    if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
        raise UsageError(f"{path}: 'triggers' must be a list of rules (strings)")
    return cfg, tuple(rules)
