"""What a GPU held when a workload ran out of its memory: the framework's own figures beside NVML's.

A CUDA out-of-memory message says what the process itself held (PyTorch >= 2.1: allocated, of it in
CUDA graphs' private pools since 2.3, reserved but unallocated, the process's whole use, the other
processes NVML listed); NVML's reading of the same GPU nearest that moment (within :data:`NEAR_S`;
the sentence says how far) says what the whole GPU held and by whom. Side by side they tell who held the
rest: the memory the writer did not hold, per owner NVML listed. Used by ``workload-cuda-error``
(:mod:`.workload`); it names holders as witnesses, never as culprits (``gpu-memory-pressure`` judges
who is to blame).
"""

from __future__ import annotations

from dataclasses import dataclass

from forensics.analysis.findings import Evidence, Subject
from forensics.analysis.model import Model
from forensics.analysis.naming import fmt_bytes, fmt_time, label, with_pod
from forensics.analysis.samples import NVML_SAMPLED, NVML_SNAPSHOT, samples_from
from forensics.parsing.logsignals.cuda import CudaOom

__all__ = ["NEAR_S", "OomContext", "oom_context"]

NEAR_S = 15.0  # a reading this close to the message stands for "that moment" (the sentence gives the gap)
_NVML = frozenset({NVML_SAMPLED, NVML_SNAPSHOT})


@dataclass(frozen=True)
class OomContext:
    """The sentence, the evidence, the holders (witnesses) and the figures (metrics) of one OOM."""

    text: str
    evidence: tuple[Evidence, ...]
    holders: tuple[Subject, ...]
    metrics: tuple[tuple[str, int | None], ...]


def _own_figures(sig: CudaOom) -> str:
    parts: list[str] = []
    if sig.allocated_bytes is not None:
        held = f"{fmt_bytes(sig.allocated_bytes)} allocated"
        if sig.private_pool_bytes:
            held += f" ({fmt_bytes(sig.private_pool_bytes)} of it in CUDA graphs' private pools)"
        parts.append(held)
    if sig.reserved_bytes is not None:
        parts.append(f"{fmt_bytes(sig.reserved_bytes)} reserved")
    if sig.process_used_bytes is not None:
        parts.append(f"{fmt_bytes(sig.process_used_bytes)} in use by the process in all")
    return ("its framework held " + ", ".join(parts)) if parts else ""


def _same(model: Model, node: str, owner: Subject, writer: Subject) -> bool:
    """Whether a GPU process's owner is the log's writer (a pod's log: any container of that pod)."""
    if owner.key() == writer.key():
        return True
    c = model.container(node, owner.id) if owner.type == "container" else None
    return writer.type == "pod" and c is not None and c.pod_uid == writer.id


def oom_context(model: Model, node: str, uuid: str | None, sig: CudaOom, writer: Subject) -> OomContext:
    """The OOM's own figures and, when NVML read the GPU within :data:`NEAR_S` of it, the GPU's
    memory then and who held it (the writer's share apart)."""
    own = _own_figures(sig)
    metrics: list[tuple[str, int | None]] = [("allocated_bytes", sig.allocated_bytes),
                                             ("reserved_bytes", sig.reserved_bytes),
                                             ("private_pool_bytes", sig.private_pool_bytes),
                                             ("process_used_bytes", sig.process_used_bytes)]
    sample = None
    at = sig.t
    if uuid is not None and at is not None:
        near = [s for s in samples_from(model, _NVML).get((node, uuid), ())
                if abs(s.t - at) <= NEAR_S and s.memory_used_bytes is not None]
        sample = min(near, key=lambda s: abs(s.t - at), default=None)
    if sample is None or uuid is None:
        metrics += [("gpu_used_bytes", None), ("others_bytes", None)]
        return OomContext(f"; {own}" if own else "", (), (), tuple(metrics))
    held: dict[Subject, int] = {}
    refs: list[Evidence] = []
    for ps in model.proc_samples_by_gpu().get((node, uuid), ()):
        if ps.t == sample.t and ps.used_memory_bytes:
            owner = model.joins.owner(node, ps.pid).subject
            held[owner] = held.get(owner, 0) + ps.used_memory_bytes
            if len(refs) < 4:
                refs.append(ps.evidence)
    others = {s: b for s, b in held.items() if not _same(model, node, s, writer)}
    total = sample.memory_total_bytes
    text = f"; {own}" if own else ""
    gap = sample.t - at if at is not None else 0.0
    when = f" ({abs(gap):.0f} s {'after' if gap > 0 else 'before'} it)" if abs(gap) >= 1 else ""
    text += (f"; NVML read the GPU at {fmt_time(sample.t)}{when}: {fmt_bytes(sample.memory_used_bytes)}"
             + (f" of {fmt_bytes(total)}" if total else "") + " in use")
    if others:
        ranked = sorted(others.items(), key=lambda kv: -kv[1])
        text += ("; the rest held by " + ", ".join(f"{label(model, s, long=False)} {fmt_bytes(b)}"
                                                   for s, b in ranked[:4]))
    elif held:
        text += "; no other process was listed on it"
    holders = tuple(x for s in others for x in with_pod(model, s.with_role("witness")))
    metrics += [("gpu_used_bytes", sample.memory_used_bytes), ("others_bytes", sum(others.values()) if held else None)]
    return OomContext(text, (sample.evidence, *refs), holders, tuple(metrics))
