"""Loaders: one per source, each reading only its own members of a bundle into the model.

Order matters: NVML first (GPU UUIDs and PCI ids resolve Docker grants and Xid lines), then
processes, containers, pods, cgroups and the kernel log. A loader that meets something it
cannot read records a problem and goes on; :func:`load_source` never raises for bundle content.
"""

from __future__ import annotations

from collections.abc import Callable

from forensics.analysis.loaders.cgroups import load_cgroups
from forensics.analysis.loaders.docker import load_docker
from forensics.analysis.loaders.kernel import load_kernel
from forensics.analysis.loaders.kubernetes import load_kubernetes
from forensics.analysis.loaders.manifest import load_manifest, note_missing_sources
from forensics.analysis.loaders.nvml import load_nvml
from forensics.analysis.loaders.procfs import load_procfs
from forensics.analysis.model import Model
from forensics.analysis.source import Source

__all__ = ["LOADERS", "finalize", "load_manifest", "load_source", "note_missing_sources"]

Loader = Callable[[Source, Model, str], None]

LOADERS: tuple[tuple[str, Loader], ...] = (
    ("nvml", load_nvml),
    ("procfs", load_procfs),
    ("docker", load_docker),
    ("kubernetes", load_kubernetes),
    ("cgroups", load_cgroups),
    ("kernel", load_kernel),
)


def load_source(src: Source, model: Model, node: str) -> None:
    """Run every loader over one bundle; a loader's failure becomes a limitation, never an exception."""
    for name, loader in LOADERS:
        try:
            loader(src, model, node)
        except Exception as exc:  # noqa: BLE001 - hostile content must not stop the analysis
            model.limit(f"{src.name}: the {name} evidence could not be read "
                        f"({type(exc).__name__}: {str(exc)[:200]}); its findings are missing")
    for problem in src.problems:
        model.limit(problem)


def finalize(model: Model) -> None:
    """Merge what several bundles of one host said twice, and prefer cgroup counters to Docker's."""
    def dedupe(items: list, key: Callable) -> list:  # type: ignore[type-arg]
        seen: set[object] = set()
        out = []
        for item in items:
            k = key(item)
            if k not in seen:
                seen.add(k)
                out.append(item)
        return out

    from_cgroup = {(s.node, s.container_id) for s in model.cpu_samples if not s.ref.member.startswith("docker/")}
    model.cpu_samples = [s for s in model.cpu_samples
                         if not (s.ref.member.startswith("docker/") and (s.node, s.container_id) in from_cgroup)]
    if all(len(info.bundles) <= 1 for info in model.nodes.values()):
        return  # one bundle per host: nothing can be there twice
    model.gpu_samples = dedupe(model.gpu_samples, lambda s: (s.node, s.gpu_uuid, round(s.t, 3)))
    model.proc_samples = dedupe(model.proc_samples, lambda s: (s.node, s.gpu_uuid, s.pid, round(s.t, 3)))
    model.cpu_samples = dedupe(model.cpu_samples, lambda s: (s.node, s.container_id, round(s.t, 3)))
    model.memory_samples = dedupe(model.memory_samples, lambda s: (s.node, s.container_id, round(s.t, 3)))
    model.psi_samples = dedupe(model.psi_samples, lambda s: (s.node, s.scope, s.resource, round(s.t, 3)))
