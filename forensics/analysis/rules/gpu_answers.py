"""A GPU's own later state against a record that says it was lost: whether NVML read the GPU after it.

A fell-off-the-bus record (Xid 79, the driver's message without an Xid number, NVML's GpuIsLost)
says the GPU stopped answering at that moment. NVML reading the GPU's figures after it while the
capture sampled (a reading with its utilisation or memory; not a one-off snapshot, not an exporter's
copy) contradicts it from then on: the record is of an earlier episode (the GPU was reset or the driver reloaded since), and it
explains nothing that happened after the GPU answered again.
"""

from __future__ import annotations

from forensics.analysis.model import Model
from forensics.analysis.samples import NVML_SAMPLED, GpuSample, samples_from
from forensics.parsing.pci import pci_bus_key

__all__ = ["ANSWER_SLACK_S", "answered_after", "gpu_uuid_of"]

# A reading this soon after the record may have been taken before it (the kernel's and NVML's
# clocks are read apart): only a later one contradicts the record.
ANSWER_SLACK_S = 2.0
_SAMPLED = frozenset({NVML_SAMPLED})


def gpu_uuid_of(model: Model, node: str, uuid: str | None, pci: str | None) -> str | None:
    """The UUID of the node's GPU a record names by UUID or PCI address; None when no NVML GPU is it."""
    if uuid and (node, uuid) in model.gpus:
        return uuid
    if pci:
        want = pci_bus_key(pci)
        for (n, u), g in model.gpus.items():
            if n == node and g.pci_bus_id and pci_bus_key(g.pci_bus_id) == want:
                return u
    return None


def answered_after(model: Model, node: str, uuid: str | None, pci: str | None, t: float | None) -> GpuSample | None:
    """NVML's first sampled reading of the GPU with a value (utilisation or memory) more than
    :data:`ANSWER_SLACK_S` after ``t``: the GPU answering after a record said it was lost; None when
    none (or the record has no time, or names no NVML GPU)."""
    if t is None:
        return None
    gpu = gpu_uuid_of(model, node, uuid, pci)
    if gpu is None:
        return None
    for s in samples_from(model, _SAMPLED).get((node, gpu), ()):
        if s.t > t + ANSWER_SLACK_S and (s.util_gpu_pct is not None or s.memory_used_bytes is not None):
            return s
    return None
