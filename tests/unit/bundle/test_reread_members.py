"""A big member is not held: the reader keeps where it is in the gzip stream and reads it again
(forensics/bundle/reader.py ``Members``, forensics/bundle/inflate.py), byte for byte."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import tarfile
import tracemalloc
from pathlib import Path

import pytest

from forensics.analysis.source import Source
from forensics.bundle.reader import ReadLimits, open_bundle
from forensics.bundle.verify import check_integrity
from forensics.errors import BundleInvalid
from tests.support import hostile_bundles as hb

BIG = "nvml/samples.jsonl"


def _samples(n: int, seed: int = 7) -> bytes:
    """JSON lines that do not compress to nothing (a gzip point every 2 MiB of them)."""
    rnd = random.Random(seed)
    return b"".join(json.dumps({"t": 1764424800 + i / 8, "gpu": i % 8, "util": rnd.random(),
                                "mem": rnd.randrange(1 << 34), "id": rnd.getrandbits(64)}).encode() + b"\n"
                    for i in range(n))


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    data = _samples(70_000)  # about 7 MiB
    assert len(data) > ReadLimits().held_member_bytes
    path = hb.build_bundle(tmp_path_factory.mktemp("big"), {BIG: data, "host/host.json": b'{"hostname": "n"}\n'})
    return path, data


def _resplit(src: Path, dst: Path, cuts: int) -> Path:
    """The same tar stream as ``cuts`` + 1 gzip members, zero padding between them (gzip reads it)."""
    raw = gzip.decompress(src.read_bytes())
    step = len(raw) // (cuts + 1) + 1
    dst.write_bytes(b"".join(gzip.compress(raw[i:i + step]) + b"\0" * 7 for i in range(0, len(raw), step)))
    return dst


def test_the_big_member_reads_back_byte_for_byte_without_being_held(big: tuple[Path, bytes]) -> None:
    path, data = big
    tracemalloc.start()
    try:
        bundle = open_bundle(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < len(data) // 3  # read and hashed as it streamed by, not kept
    assert bundle.read_bytes(BIG) == data
    assert b"".join(bundle.read_chunks(BIG, 1 << 16)) == data
    assert bundle.size(BIG) == len(data)
    assert bundle.read_bytes("host/host.json") == b'{"hostname": "n"}\n'
    rnd = random.Random(1)
    for _ in range(40):
        at, n = rnd.randrange(len(data)), rnd.randrange(1, 3 << 20)
        assert bundle.read_at(BIG, at, n) == data[at:at + n]
    # the integrity check uses the digests taken as it was read: the manifest's SHA-256
    assert check_integrity(bundle) == []
    assert bundle.digests[BIG] == (hashlib.sha256(data).hexdigest(), len(data))


def test_a_gzip_stream_of_several_members_reads_back_the_same(big: tuple[Path, bytes], tmp_path: Path) -> None:
    path, data = big
    split = _resplit(path, tmp_path / path.name, cuts=5)
    bundle = open_bundle(split)
    assert bundle.file_sha256 != open_bundle(path).file_sha256
    assert bundle.read_bytes(BIG) == data
    rnd = random.Random(2)
    for _ in range(40):
        at, n = rnd.randrange(len(data)), rnd.randrange(1, 2 << 20)
        assert bundle.read_at(BIG, at, n) == data[at:at + n]


def test_a_line_quoted_from_the_big_member_is_its_own(big: tuple[Path, bytes]) -> None:
    path, data = big
    bundle = open_bundle(path)
    src = Source(bundle, path.name, bundle.members.keys())
    lines = data.split(b"\n")
    refs = {no: src.ref(BIG, no, raw) for no, _, raw in src.jsonl(BIG) if no % 9973 == 1}
    assert len(refs) == 8 and not src.problems
    for no, ref in refs.items():
        ev = ref.evidence
        assert (ev.member, ev.locator, ev.normalised) == (BIG, f"line {no}", False)
        assert ev.excerpt.removesuffix("...")[:200] == lines[no - 1].decode()[:200]


def test_a_bundle_replaced_under_its_name_is_still_read_from_the_file_that_was_read(
        big: tuple[Path, bytes], tmp_path: Path) -> None:
    path, data = big
    copy = tmp_path / path.name
    copy.write_bytes(path.read_bytes())
    bundle = open_bundle(copy)
    os.replace(_resplit(path, tmp_path / "other.tgz", cuts=2), copy)  # another file under the same name
    assert bundle.read_bytes(BIG) == data
    copy.unlink()
    assert bundle.read_at(BIG, 1000, 100) == data[1000:1100]


def test_a_bundle_changed_in_place_after_it_was_read_is_an_error_not_other_bytes(
        big: tuple[Path, bytes], tmp_path: Path) -> None:
    path, _ = big
    copy = tmp_path / path.name
    copy.write_bytes(path.read_bytes())
    bundle = open_bundle(copy)
    src = Source(bundle, copy.name, bundle.members.keys())
    with open(copy, "r+b") as f:  # the same file, written over
        f.seek(100)
        f.write(b"\0" * 64)
    os.utime(copy, ns=(1, 1))
    with pytest.raises(BundleInvalid, match="changed on disk"):
        bundle.read_bytes(BIG)
    assert list(src.jsonl(BIG)) == []
    assert any("changed on disk" in p for p in src.problems)


def test_nothing_is_held_when_the_limits_hold_nothing(big: tuple[Path, bytes]) -> None:
    path, data = big
    bundle = open_bundle(path, ReadLimits(held_member_bytes=0))
    assert bundle.read_bytes("host/host.json") == b'{"hostname": "n"}\n'
    assert bundle.read_bytes(BIG) == data
    assert bundle.manifest["members"]
    with tarfile.open(path) as tar:
        names = {m.name.split("/", 1)[1] for m in tar if m.isfile()} - {"manifest.json"}
    assert set(bundle.members) == names
