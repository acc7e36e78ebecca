"""Loaders: one per source, each reading only its own members of a bundle into the model.

Each loader module declares a ``LOADER`` (:class:`~forensics.analysis.loaders.common.Loader`)
naming its source and the sources whose entities it reads; :func:`loader_order` (:mod:`.order`) finds them by
walking this package and orders them from those declarations (NVML first: GPU UUIDs and PCI ids
resolve Docker grants and Xid lines; then processes, containers, pods, ...), ties broken by the
sources' volatility order. A loader that meets something it cannot read records a problem and
goes on; :func:`load_source` never raises for bundle content.

A model is made by :func:`load_model` alone: the loaders fill it, with their scratch state in a
:class:`~forensics.analysis.loaders.state.LoadState` they share, then its joins are resolved; only
then does anyone else see it (never half-built, never with the loaders' scratch state).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from forensics.analysis.allocation_kubernetes import with_gpu_indexes
from forensics.analysis.joins import resolve_joins
from forensics.analysis.loaders.common import Loader
from forensics.analysis.loaders.kernel import load_kernel_history
from forensics.analysis.loaders.manifest import load_manifest, note_missing_sources
from forensics.analysis.loaders.order import loader_order
from forensics.analysis.loaders.state import LoadState
from forensics.analysis.model import Model
from forensics.analysis.ring_view import HistoryPart, RingSource, history_spans, ring_view
from forensics.analysis.samples import (
    CpuSample,
    GpuSample,
    IoSample,
    MemorySample,
    NetSample,
    ProcessGpuSample,
    PsiSample,
)
from forensics.analysis.source import Source
from forensics.specs import docker as docker_spec
from forensics.specs import kernel as kernel_spec
from forensics.specs.ring import folded

__all__ = ["LoadState", "Loader", "finalize", "load_manifest", "load_model", "load_source", "loader_order",
           "note_missing_sources"]

_Sample = TypeVar("_Sample", CpuSample, IoSample, NetSample)


#: loaders not run over the ring's history in its pass: the capture's own kernel collector reads the
#: whole kernel ring buffer, which holds most of what the recorder followed; the ring's kernel records
#: are read after the capture's, those it does not hold only (kernel.load_kernel_history)
RING_SKIPS = frozenset({kernel_spec.SPEC.name})


def load_model(fill: Callable[[Model, LoadState], None], loading: LoadState) -> Model:
    """A new model, filled by ``fill`` (which runs the loaders over its sources with ``loading``:
    :func:`load_source`, then :func:`finalize`), with its joins (process -> container -> pod ->
    allocation) resolved once: the only way a model is made."""
    model = Model()
    fill(model, loading)
    resolve_joins(model)
    return model


def load_source(src: Source, model: Model, node: str, loading: LoadState, part: HistoryPart | None = None,
                own: bool = True) -> RingSource | None:
    """Run every loader over one bundle; a loader's failure becomes a limitation, never an exception.

    A bundle with the flight recorder's history (members under ``ring/``) is loaded twice: the
    ring's members first, through the same loaders (forensics.analysis.ring_view), then the
    capture's own, so history and live samples are one series and live identities win. The ring's
    kernel records come last, those the capture's kernel log does not hold (from before a reboot,
    or overwritten in a busy kernel buffer), each timed by its own boot.

    ``part``: only that part of the ring's history (forensics.analysis.slices); ``own`` False: the
    ring's history alone, not the capture's own members (a slice before the capture's). Returns the
    ring view read (None: none)."""
    try:
        view = ring_view(src, part)
    except Exception as exc:  # noqa: BLE001 - a bundle's ring segments are hostile input too
        view = None
        model.limit(f"{src.name}: the flight recorder's history (ring/) could not be rebuilt "
                    f"({type(exc).__name__}: {str(exc)[:200]}); only the capture's own members are analysed")
    passes: list[tuple[Source, frozenset[str]]] = [(src, frozenset())] if own else []
    if view is not None:
        passes.insert(0, (view, RING_SKIPS))
        info = model.node(node)
        # the capture's kernel records are kept to compare the ring's with
        loading.kernel_keys.setdefault(node, set())
        loading.kernel_lines.setdefault(node, set())
        skipped = {folded(name + "/") for name in RING_SKIPS}  # the kernel's: held where read (load_kernel_history)
        info.history_held.update(
            (folder, span) for folder, span in history_spans(view).items() if folder not in skipped)
    for source, skips in passes:
        for loader in loader_order():
            name = loader.source
            if name in skips:
                continue
            try:
                loader.load(source, model, node, loading)
            except Exception as exc:  # noqa: BLE001 - hostile content must not stop the analysis
                model.limit(f"{src.name}: the {name} evidence could not be read "
                            f"({type(exc).__name__}: {str(exc)[:200]}); its findings are missing")
    if view is not None:
        try:
            load_kernel_history(view, model, node, loading)
        except Exception as exc:  # noqa: BLE001 - hostile content must not stop the analysis
            model.limit(f"{src.name}: the flight recorder's kernel history could not be read "
                        f"({type(exc).__name__}: {str(exc)[:200]}); only the capture's own kernel log is analysed")
    for problem in src.problems:
        model.limit(problem)
    return view


def _prefer_kernel_files(samples: list[_Sample]) -> list[_Sample]:
    """Docker's stats figures for a container only where no collector read the kernel's own files
    for it (the engine copies the same counters, at another time)."""
    own = {(s.node, s.container_id) for s in samples if not s.ref.member.startswith(docker_spec.PREFIX)}
    return [s for s in samples if not (s.ref.member.startswith(docker_spec.PREFIX) and (s.node, s.container_id) in own)]


def _name_gpus_by_index(model: Model) -> None:
    """Allocations read in the ring's pass, before the capture's GPUs were: their GPUs named by
    index as everywhere else (``GPU 0, GPU-8550...``), now that the GPUs are known."""
    for key, c in list(model.containers.items()):
        named = with_gpu_indexes(c.allocation, model.node_gpus(c.node))
        if named is not c.allocation:
            model.containers[key] = replace(c, allocation=named)
    for uid, pod in list(model.pods.items()):
        allocs = tuple((name, with_gpu_indexes(a, model.node_gpus(pod.node))) for name, a in pod.allocations)
        if any(new is not old for (_, new), (_, old) in zip(allocs, pod.allocations, strict=True)):
            model.pods[uid] = replace(pod, allocations=allocs)


def finalize(model: Model) -> None:
    """Merge what several bundles of one host said twice, and prefer cgroup and /proc counters to Docker's."""
    def dedupe(items: list, key: Callable) -> list:  # type: ignore[type-arg]
        seen: set[object] = set()
        out = []
        for item in items:
            k = key(item)
            if k not in seen:
                seen.add(k)
                out.append(item)
        return out

    _name_gpus_by_index(model)
    model.series(CpuSample)[:] = _prefer_kernel_files(model.series(CpuSample))
    model.series(IoSample)[:] = _prefer_kernel_files(model.series(IoSample))  # blkio_stats beside io.stat/blkio files
    netns = [s for s in model.series(NetSample) if s.kind == "netns"]
    if any(s.ref.member.startswith(docker_spec.PREFIX) for s in netns):  # networks beside /proc/<pid>/net/dev
        kept = set(map(id, _prefer_kernel_files(netns)))
        model.series(NetSample)[:] = [s for s in model.series(NetSample) if s.kind != "netns" or id(s) in kept]
    if all(len(info.bundles) <= 1 for info in model.nodes.values()):
        return  # one bundle per host: nothing can be there twice
    model.series(GpuSample)[:] = dedupe(model.series(GpuSample), lambda s: (s.node, s.gpu_uuid, round(s.t, 3)))
    model.series(ProcessGpuSample)[:] = dedupe(model.series(ProcessGpuSample), lambda s: (s.node, s.gpu_uuid, s.pid, round(s.t, 3)))
    model.series(CpuSample)[:] = dedupe(model.series(CpuSample), lambda s: (s.node, s.container_id, round(s.t, 3)))
    model.series(MemorySample)[:] = dedupe(model.series(MemorySample), lambda s: (s.node, s.container_id, round(s.t, 3)))
    model.series(PsiSample)[:] = dedupe(model.series(PsiSample), lambda s: (s.node, s.scope, s.resource, round(s.t, 3)))
