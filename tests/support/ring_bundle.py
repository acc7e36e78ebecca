"""A bundle's flight-recorder members as the analysis reads them: ``ring/<member>`` rebuilt from
the ring segments the bundle carries (forensics.analysis.ring_view), or stored whole by a capture
of an earlier version; and a bundle made the way a user makes one: a recorder's ring
(``ring_from_sample``) and ``gpuforensics capture --since`` over it (``capture_since``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from forensics.analysis.ring_view import ring_view
from forensics.analysis.source import Source
from forensics.bundle.reader import open_bundle
from forensics.record.sources import DELTA_MEMBERS
from forensics.ring import RingWriter
from tests.support.hostile_bundles import read_members

__all__ = ["RING_SAMPLE", "bundle_members", "capture_since", "ring_from_sample", "ring_member"]

ROOT = Path(__file__).resolve().parents[2]
#: The sample bundle whose members ``ring_from_sample`` writes into a ring.
RING_SAMPLE = ROOT / "sample_bundles" / "unallocated-gpu-use.tgz"


def ring_member(bundle: Path, member: str) -> bytes:
    """``member`` (``ring/...``) of ``bundle``; AssertionError when the bundle has no such member."""
    opened = open_bundle(bundle)
    if member in opened.members:
        return bytes(opened.members[member])
    view = ring_view(Source(opened, bundle.name, opened.members))
    data = view.real_bytes(member) if view is not None else None
    assert data is not None, f"{member} not in {bundle} (nor rebuilt from its ring segments)"
    return bytes(data)


def bundle_members(bundle: Path) -> dict[str, bytes]:
    """The bundle's members by their path under its top directory."""
    return dict(read_members(bundle)[1])


def capture_since(ring: Path, out: Path, since: str) -> Path:
    """``gpuforensics capture --since SINCE --only ring --ring RING -o OUT``: the bundle it wrote."""
    out.mkdir()
    cap = subprocess.run([sys.executable, "-m", "forensics", "capture", "--since", since, "--only", "ring",
                          "--ring", str(ring), "-o", str(out), "--quiet"],
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, capture_output=True,
                         text=True, timeout=120)
    assert cap.returncode == 0, cap.stderr[-3000:]
    (bundle,) = out.glob("*.tgz")
    return bundle


def ring_from_sample(ring: Path, segment_bytes: int = 48 << 10, sample: Path = RING_SAMPLE) -> None:
    """The sample bundle's members as a recorder would have written them: each line of a JSON-lines
    member an append at its own ``t``, every other member a write (NVML and cgroup samples change-only)."""
    members = bundle_members(sample)
    started = json.loads(members.pop("manifest.json"))["capture"]["started"]
    t_start = time.mktime(time.strptime(started[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    records: list[tuple[float, float, str, str, bytes]] = []
    for name, data in sorted(members.items()):
        if name.endswith(".jsonl"):
            for line in data.splitlines(keepends=True):
                t = json.loads(line).get("t")
                t = float(t) if isinstance(t, int | float) else t_start
                records.append((t, t - t_start + 1000.0, name, "append", line))
        else:
            records.append((t_start - 30.0, 970.0, name, "write", data))
    records.sort(key=lambda r: (r[3] != "write", r[0]))
    w = RingWriter(ring, segment_bytes=segment_bytes, delta_members=DELTA_MEMBERS, retention_s=90 * 86400.0).open()
    for rec in records:
        w.append([rec])
    w.close(seal=False)  # the last segment stays active, as under a running recorder
