"""The loaders make their per-line records with ``tuple.__new__`` (a NamedTuple's own ``__new__`` is
a Python call per process per tick): every record must still have each of its type's fields, so a
field added to a sample type and not to its loader fails here, not as an IndexError in a rule."""

from __future__ import annotations

from pathlib import Path

from forensics.analysis import build_model
from forensics.analysis.samples import CpuSample, MemorySample, ProcessGpuSample, PsiSample
from tests.support.analysis_bundles import GIB, T0, BundleSpec


def test_every_sample_record_has_every_field_of_its_type(tmp_path: Path) -> None:
    b = BundleSpec(duration_s=5)
    b.gpu(0)
    cid = b.container("job", env=["NVIDIA_VISIBLE_DEVICES=0"], nano_cpus=1_000_000_000)
    b.process(4242, "python", container=cid)
    for s in range(5):
        b.gpu_tick(0, T0 + s, 90, 2 * GIB, procs={4242: (2 * GIB, 50.0)})
        b.cgroup_tick(T0 + s, f"/system.slice/docker-{cid}.scope", nr_periods=10 * s, nr_throttled=s,
                      throttled_usec=100 * s, memory=GIB, psi={"cpu": (30.0, 10.0), "memory": (0.0, 0.0), "io": (0.0, 0.0)})
    model = build_model([b.write(tmp_path)])
    series = {"proc": model.series(ProcessGpuSample), "cpu": model.series(CpuSample), "memory": model.series(MemorySample),
              "psi": model.series(PsiSample)}
    assert all(series.values()), {k: len(v) for k, v in series.items()}
    for name, records in series.items():
        for r in records:
            assert len(r) == len(type(r)._fields), (name, r)
    p = model.series(ProcessGpuSample)[-1]
    assert (p.pid, p.used_memory_bytes, p.sm_util_pct, p.gpu_instance_id) == (4242, 2 * GIB, 50.0, None)
    c = model.series(CpuSample)[-1]
    assert (c.container_id, c.nr_periods, c.nr_throttled, c.throttled_usec) == (cid, 40, 4, 400)
