"""The reference to a JSON line a sample holds (forensics.analysis.findings.LineRef): packed into the
line number, it is a fifth of an EvidenceRef's size, and says and quotes the same as the EvidenceRef
it stands for: the member's own bytes, read again from the bundle."""

from __future__ import annotations

import json
import sys
from typing import Any

from forensics.analysis.findings import EvidenceRef, LineRef
from forensics.analysis.loaders.cgroups import load_cgroups
from forensics.analysis.loaders.state import LoadState
from forensics.analysis.model import Model
from forensics.analysis.samples import CpuSample, MemorySample
from forensics.analysis.source import Source

MEMBER = "cgroup/samples.jsonl"
PATH = "/system.slice/docker-" + "b" * 64 + ".scope"


class _Bundle:
    manifest: dict[str, Any] = {}

    def __init__(self, members: dict[str, bytes]) -> None:
        self.members = members

    def read_bytes(self, member: str) -> bytes:
        return self.members[member]


def _line(t: float, periods: int, current: int, limit: int | None = None) -> bytes:
    memory: dict[str, int] = {"current_bytes": current}
    if limit is not None:
        memory["limit_bytes"] = limit
    return json.dumps({"cgroup": PATH, "t": t, "values": {
        "cpu": {"nr_periods": periods, "nr_throttled": 1, "throttled_ns": 5000 * periods},
        "memory": memory}}, separators=(",", ":")).encode()


def _unpacked(ref: LineRef) -> EvidenceRef:
    return EvidenceRef(ref.bundle, ref.member, ref.line, ref.payload, ref.paths, ref.pointer, ref.source, ref.offset)


def test_a_line_reference_says_and_quotes_what_its_evidence_ref_would() -> None:
    lines = [b'{"t": 1.0, "x": "\xc3\xa9"}', b"", b'{"t": 2.0,  "nvml": {"a": 1, "b": [2, 3]}}', b'{"t": 3.0}']
    data = b"\n".join(lines) + b"\n"
    src = Source(_Bundle({"s.jsonl": data}), "b.tgz", ["s.jsonl"])
    refs = {no: (src.ref("s.jsonl", no, raw), src.ref("s.jsonl", no, raw, ("nvml", "b")))
            for no, _, raw in src.jsonl("s.jsonl")}
    assert sorted(refs) == [1, 3, 4]  # the empty line counted, not given
    whole, quoting = refs[3]
    assert isinstance(whole, LineRef) and isinstance(quoting, LineRef)
    assert (whole.bundle, whole.member, whole.line, whole.payload, whole.paths, whole.pointer) == \
        ("b.tgz", "s.jsonl", 3, None, (), "")
    assert whole.offset == data.index(lines[2]) and quoting.offset == whole.offset
    assert quoting.paths == (("nvml", "b"),)
    assert whole.evidence == _unpacked(whole).evidence
    assert whole.evidence.excerpt == lines[2].decode() and whole.evidence.locator == "line 3"
    assert quoting.evidence == _unpacked(quoting).evidence
    assert quoting.evidence.excerpt == '"b": [2, 3]' and quoting.evidence.excerpt.encode() in data
    first = refs[1][0].evidence  # re-read from its own offset, not the last line's
    assert first.excerpt == lines[0].decode() and first.locator == "line 1"
    # what the ring view does with a reference: the same one under another member name
    renamed = whole._replace(member="ring/s.jsonl")
    assert isinstance(renamed, EvidenceRef) and renamed.member == "ring/s.jsonl" and renamed.line == 3
    assert renamed.offset == whole.offset and renamed.source is src


def test_a_line_reference_is_small() -> None:
    data = b"".join(_line(float(t), t, 1 << 30) + b"\n" for t in range(1, 4))
    src = Source(_Bundle({MEMBER: data}), "b.tgz", [MEMBER])
    ref = next(src.ref(MEMBER, no, raw) for no, _, raw in src.jsonl(MEMBER))
    packed = _unpacked(ref)
    assert sys.getsizeof(ref) * 2 < sys.getsizeof(packed) + sys.getsizeof(packed.offset) + sys.getsizeof(10**6)


def test_a_pointer_or_a_held_value_keeps_its_evidence_ref() -> None:
    data = b'{"a": 1}\n'
    src = Source(_Bundle({"s.jsonl": data, "d.json": b'{"x": [1, 2]}'}), "b.tgz", ["s.jsonl", "d.json"])
    no, _, raw = next(src.jsonl("s.jsonl"))
    assert type(src.ref("s.jsonl", no, raw, pointer="/a")) is EvidenceRef
    held = src.ref("d.json", 0, [1, 2], pointer="/x")
    assert type(held) is EvidenceRef and held.evidence.excerpt == "[1, 2]"


def test_equal_memory_readings_share_their_values_and_every_sample_cites_its_line() -> None:
    lines = [_line(1.0, 10, 6 << 30, 8 << 30), _line(2.0, 20, 6 << 30, 8 << 30), _line(3.0, 30, 7 << 30, 8 << 30)]
    data = b"\n".join(lines) + b"\n"
    model = Model()
    load_cgroups(Source(_Bundle({MEMBER: data}), "b.tgz", [MEMBER]), model, "n", LoadState())
    memory = model.series(MemorySample)
    assert [(m.t, m.memory_bytes, m.limit_bytes) for m in memory] == \
        [(1.0, 6 << 30, 8 << 30), (2.0, 6 << 30, 8 << 30), (3.0, 7 << 30, 8 << 30)]
    assert memory[1].memory_bytes is memory[0].memory_bytes  # held once while it does not change
    assert memory[2].limit_bytes is memory[0].limit_bytes
    cpu = model.series(CpuSample)
    assert [c.evidence.locator for c in cpu] == ["line 1", "line 2", "line 3"]
    for c, line in zip(cpu, lines, strict=True):
        assert c.evidence.excerpt.encode() in line and f'"nr_periods":{c.nr_periods}' in c.evidence.excerpt
