"""What the loaders keep between themselves while one model loads: :class:`LoadState`.

A loader receives it beside the model (``load(src, model, node, loading)``); it is dropped when the
model is loaded and its joins resolved (:func:`forensics.analysis.loaders.load_model`), so rules,
the chain and the document never see it. What a rule may read belongs on the model instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["LoadState"]


@dataclass
class LoadState:
    """Scratch state of one load: thresholds the loaders filter by, and what one loader (or one
    pass over a bundle) leaves for another to compare with."""

    # PSI readings below both floors are counted but not kept (set from the thresholds).
    psi_some_floor: float = 0.0
    psi_full_floor: float = 0.0
    # (node, pid) -> (comm, start ticks) NVML's collector saw: the procfs loader detects a PID reused
    # before procfs read it.
    nvml_identity: dict[tuple[str, int], tuple[str | None, int | None]] = field(default_factory=dict)
    # (node, scope) -> resource -> [t, some_total_usec, full_total_usec] of the previous PSI counter
    # reading (updated in place): the cgroups loader turns cumulative counters into per-interval
    # stall shares.
    psi_counters: dict[tuple[str, str], dict[str, list[Any]]] = field(default_factory=dict)
    # node -> (microseconds since boot, message) of every kernel record a rule reads that the capture's
    # own log held: the flight recorder's kernel history adds only those not among them (a reboot, a
    # wrapped buffer). A node is present only where its bundles have ring history to compare.
    kernel_keys: dict[str, set[tuple[int, str]]] = field(default_factory=dict)
    # node -> the other lines of the capture's own /dev/kmsg members (no rule reads them; counted once)
    kernel_lines: dict[str, set[str]] = field(default_factory=dict)
    # node -> the keys and the other lines of the kernel records the ring's history held in the
    # slices read before this one (forensics.analysis.slices; updated in place): a record a recorder
    # run read again is read once, as in one model of the whole history
    kernel_history_seen: dict[str, tuple[set[tuple[int, str]], set[str]]] = field(default_factory=dict)
