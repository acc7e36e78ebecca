"""Change-only ring records, end to end: a real recorder (simulated NVML, the host's cgroups) writes
its samples change-only into its ring and, through a tee, every record whole into a second ring
(as the ring stored them before the change); both fold into bundles with the same member bytes
and give the same analysis series."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forensics.analysis import build_model
from forensics.analysis.findings import EvidenceRef, LineRef
from forensics.analysis.samples import (
    CpuSample,
    GpuSample,
    MemorySample,
    ProcessGpuSample,
    PsiSample,
)
from forensics.ring import RingReader
from forensics.specs import cgroups as cgroups_spec
from forensics.specs import nvml as nvml_spec
from tests.support.nvmlsim import Scenario, subprocess_env
from tests.support.nvmlsim import fixtures as nvf
from tests.support.polling import wait_for
from tests.support.record_support import wait_for_writer
from tests.support.ring_bundle import ring_member

sim_lib = nvf.sim_lib
pytestmark = [pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30


_TEE_RECORDER = r"""
import json, sys
from pathlib import Path
from forensics.record import recorder
from forensics.ring import RingWriter

class Tee(RingWriter):
    # the recorder's writer, change-only; each batch also goes whole to a plain writer
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.plain = RingWriter(sys.argv[2], segment_bytes=kwargs.get("segment_bytes"))
    def open(self):
        self.plain.open()
        return super().open()
    def append(self, records, remember=True):
        records = list(records)
        self.plain.append(records, remember)
        return super().append(records, remember)
    def close(self, seal=True):
        self.plain.close(seal)
        super().close(seal)

recorder.RingWriter = Tee
o = json.loads(sys.argv[1])
o["ring"] = Path(o["ring"])
o["sources"] = tuple(o["sources"])
print(json.dumps(recorder.run_recorder(recorder.RecordOptions(**o))), flush=True)
"""


def _capture(ring: Path, out: Path, env: dict[str, str]) -> Path:
    out.mkdir()
    cap = subprocess.run([sys.executable, "-m", "forensics", "capture", "--since", "10m", "--only", "ring",
                          "--ring", str(ring), "-o", str(out), "--quiet"],
                         env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert cap.returncode == 0, cap.stderr[-3000:]
    (bundle,) = out.glob("*.tgz")
    return bundle


def _ring_lines(ring: Path, member: str) -> int:
    """Lines the ring holds for one member so far (the open segment too)."""
    return sum(r.data.count(b"\n") for r in RingReader(ring).records(members=(member,)) if r.member == member)


def _plain(sample: tuple[object, ...]) -> tuple[object, ...]:
    """A sample's fields, its evidence reference as (member, line): the same bytes in the same
    place cite the same line."""
    return tuple((v.member, v.line) if isinstance(v, EvidenceRef | LineRef) else repr(v) for v in sample)


def _series(bundle: Path) -> dict[str, list[tuple[object, ...]]]:
    """The model's sampled series, field by field."""
    model = build_model([bundle])
    kinds: dict[str, type[tuple[object, ...]]] = {
        "gpu_samples": GpuSample, "proc_samples": ProcessGpuSample, "cpu_samples": CpuSample,
        "memory_samples": MemorySample, "psi_samples": PsiSample}
    return {name: sorted(_plain(s) for s in model.series(kind)) for name, kind in kinds.items()}


def test_change_only_ring_folds_the_same_series_as_the_whole_lines(sim_lib: Path, tmp_path: Path) -> None:
    sc = Scenario()
    for _ in range(2):
        sc.add_gpu(name="NVIDIA H100 80GB HBM3", gpu_util=[(0, 40), (2, 95)], memory_total_bytes=80 * GIB)
    for k in range(12):  # utilisation that moves for some processes and stays for the others
        sc.add_process(pid=200000 + k, gpu=k % 2, used_memory_bytes=(k + 1) << 28,
                       sm_util=[(0, 10), (1.5, 60)] if k % 3 == 0 else 25, mem_util=5, end_s=3.0 if k == 5 else None)
    env = subprocess_env(sc.write(tmp_path / "sc.tsv"), sim_lib)
    ring, whole = tmp_path / "ring", tmp_path / "whole"
    options = {"ring": str(ring), "interval_s": 0.2, "nvml_library": str(sim_lib), "sources": ["nvml", "cgroups"],
               "segment_bytes": 64 << 10}
    rec = subprocess.Popen([sys.executable, "-c", _TEE_RECORDER, json.dumps(options), str(whole)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**env, "PYTHONPATH": str(ROOT)})
    try:
        wait_for_writer(ring, rec)
        time.sleep(5.0)
        # a loaded machine skips ticks: wait, rather than sleep longer for everyone, until the
        # ring holds the lines the assertions below count
        wait_for(lambda: _ring_lines(ring, cgroups_spec.SAMPLES) > 25, timeout=90.0, interval=1.0)
    finally:
        rec.send_signal(signal.SIGTERM)
        _out, err = rec.communicate(timeout=30)
    assert rec.returncode == 0, err[-3000:]

    reader = RingReader(ring)
    stored = [r for seg in reader.segments() for _, r in reader._segment_lines(seg)[0][1:]]
    for member in (nvml_spec.SAMPLES, cgroups_spec.SAMPLES):
        assert any(r["member"] == member and r["op"] == "delta" for r in stored), member
    assert len(reader.segments()) > 1  # the segments rotated: each decodes alone
    list(reader.records())
    assert not reader.report.problems
    assert not any(r["op"] == "delta" for seg in RingReader(whole).segments()
                   for _, r in RingReader(whole)._segment_lines(seg)[0][1:])

    a = _capture(ring, tmp_path / "a", env)
    b = _capture(whole, tmp_path / "b", env)
    for member in (nvml_spec.SAMPLES, cgroups_spec.SAMPLES):  # as the analysis rebuilds them from the segments
        data = ring_member(a, f"ring/{member}")
        assert data == ring_member(b, f"ring/{member}") and data.count(b"\n") > 20, member
    sa, sb = _series(a), _series(b)
    assert sa == sb
    assert len(sa["gpu_samples"]) > 20 and len(sa["proc_samples"]) > 100, {k: len(v) for k, v in sa.items()}
    assert {s[5] for s in sa["proc_samples"]} >= {"10.0", "60.0", "25.0"}  # moving and steady utilisation
