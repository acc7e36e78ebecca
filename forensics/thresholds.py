"""Named, configurable rule thresholds (``gpuforensics analyze --config FILE``).

The file is TOML (``.toml``) or JSON (anything else) holding a flat table of threshold names,
optionally under a ``[thresholds]`` table::

    [thresholds]
    gpu_memory_pressure_ratio = 0.9
    cpu_throttled_ratio = 0.2

A top-level ``triggers`` list (rules for ``gpuforensics record --config``, docs/triggers.md) is
not a threshold and is ignored here, so one file serves both.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from forensics.errors import UsageError

__all__ = ["AnalysisConfig", "config_from_mapping", "load_config", "read_config_file"]


@dataclass(frozen=True)
class AnalysisConfig:
    """Thresholds of the rules; every field can be overridden from a config file."""

    # gpu-compute-hog: a process/container holding at least this share of a shared GPU's SM time
    # while another process on the same GPU gets at most the starved share.
    gpu_hog_share_ratio: float = 0.7
    gpu_starved_share_ratio: float = 0.2
    gpu_hog_min_samples: int = 3
    # gpu-memory-pressure: used / total at or above this ratio.
    gpu_memory_pressure_ratio: float = 0.9
    # cpu-throttling: throttled periods / periods over the window (or any interval).
    cpu_throttled_ratio: float = 0.2
    cpu_throttled_ratio_high: float = 0.5
    # baselines (forensics.analysis.baseline): a workload's normal over this trailing window, once
    # it has this much history and this many one-minute buckets; a deviation is K robust spreads
    # (MAD x 1.4826) from the median, and at least this many percentage points.
    baseline_window_s: float = 86400.0
    baseline_min_history_s: float = 3600.0
    baseline_min_buckets: int = 30
    baseline_bucket_s: float = 60.0
    baseline_k: float = 3.0
    baseline_min_delta_pct: float = 10.0
    # below-baseline judges a fall only from at least this many samples of the workload since the
    # incident began, spanning at least this many seconds (one sample is a moment, not a fall)
    baseline_min_recent_samples: int = 3
    baseline_min_recent_s: float = 2.0
    # GPU counted idle when its utilization is at or below this.
    gpu_idle_util_pct: float = 10.0
    # pressure-stall: PSI "some" avg10 (%) at or above this.
    psi_some_avg10_pct: float = 20.0
    psi_full_avg10_pct: float = 10.0
    # io-stall: a container's read or write rate at or above this share of its io.max / blkio
    # throttle limit counts as pinned at the limit; its GPU "dropped" when its utilisation during
    # the stall is at or below gpu_idle_util_pct or this many points under its utilisation outside it.
    io_limit_pinned_ratio: float = 0.8
    io_stall_gpu_drop_pct: float = 20.0
    # network-saturation: a link's rx or tx rate at or above this share of its link rate, in at
    # least net_saturation_min_intervals sampling intervals (or port_xmit_wait rising in as many).
    net_saturation_ratio: float = 0.9
    net_saturation_min_intervals: int = 2
    # network-errors: error counters rising by at least net_errors_min, drops by net_drops_min.
    net_errors_min: int = 1
    net_drops_min: int = 100
    # gpu-clock-throttle: fraction of samples with a thermal/power/hardware slowdown bit.
    clock_throttle_min_ratio: float = 0.1
    # gpu-pcie-degraded: a PCIe generation below the maximum counts only on a GPU this busy (mean
    # utilization, %): an idle GPU lowers its link speed to save power.
    pcie_gen_busy_util_pct: float = 10.0
    # A GPU process counts as "active" when it has SM utilization above this or holds memory.
    process_active_sm_pct: float = 1.0
    # gpu-exporter-blind-spot: a GPU counted busy at this utilization (%), for at least this many
    # consecutive Prometheus steps with no pod named by dcgm-exporter.
    exporter_busy_util_pct: float = 50.0
    exporter_blind_min_steps: int = 4
    # Confidence multiplier per missing source relevant to a finding.
    missing_source_confidence_factor: float = 0.7
    # An effect must follow its cause within this many seconds to be linked in the chain.
    chain_link_window_s: float = 600.0
    # gpu-xid-fault / gpu-lost: Xids of one GPU at most this far apart are one burst (first = cause).
    # NVIDIA's Xid catalog looks 30 s back for a link-down behind an NVLink Xid (CHECK_NVLINK_FAILURE_FLOW).
    xid_burst_window_s: float = 30.0
    # gpu-memory-unattributed: device memory used minus the processes' memory at or above this many bytes
    # (and ratio of the total) in at least ghost_memory_min_samples samples.
    ghost_memory_min_bytes: int = 1 << 30
    ghost_memory_min_ratio: float = 0.05
    ghost_memory_min_samples: int = 2

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def load_config(path: Path | str) -> AnalysisConfig:
    """Read thresholds from a TOML or JSON file; unknown names or bad values raise UsageError."""
    return config_from_mapping(read_config_file(path), origin=str(path))


def read_config_file(path: Path | str) -> Any:
    """The parsed TOML or JSON of a config file (``record --config`` reads the same file)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read config {p}: {exc.strerror or exc}") from exc
    try:
        data: Any
        if p.suffix.lower() == ".toml":
            data = tomllib.loads(raw.decode("utf-8"))
        else:
            data = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"config {p} is not valid {'TOML' if p.suffix == '.toml' else 'JSON'}: {exc}") from exc
    return data


def config_from_mapping(data: Any, origin: str = "config") -> AnalysisConfig:
    """Build an AnalysisConfig from a mapping (optionally nested under ``thresholds``)."""
    if not isinstance(data, dict):
        raise UsageError(f"{origin}: expected a table of thresholds")
    data = {k: v for k, v in data.items() if k != "triggers"}  # the flight recorder's rules (record --config)
    if isinstance(data.get("thresholds"), dict):
        data = data["thresholds"]
    known = {f.name: f for f in fields(AnalysisConfig)}
    values: dict[str, Any] = {}
    for name, value in data.items():
        if name not in known:
            raise UsageError(f"{origin}: unknown threshold {name!r} (known: {', '.join(sorted(known))})")
        default = getattr(AnalysisConfig(), name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise UsageError(f"{origin}: threshold {name!r} must be a number, got {value!r}")
        if not math.isfinite(value):  # nan/inf would silently switch the rule off
            raise UsageError(f"{origin}: threshold {name!r} must be a finite number, got {value!r}")
        if isinstance(default, int) and not isinstance(default, bool):
            if int(value) != value:
                raise UsageError(f"{origin}: threshold {name!r} must be an integer")
            value = int(value)
        else:
            value = float(value)
        if value < 0:
            raise UsageError(f"{origin}: threshold {name!r} must not be negative")
        values[name] = value
    return replace(AnalysisConfig(), **values)
