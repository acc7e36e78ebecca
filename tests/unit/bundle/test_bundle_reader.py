"""The hostile-input reader and verify, at the library level (forensics/bundle/reader.py, verify.py).

The CLI-level cases (exit codes, messages, nothing written) are in tests/e2e/test_cli_foundation.py;
these check the typed errors and the Bundle API the analyzer relies on.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.bundle.reader import ReadLimits, open_bundle
from forensics.bundle.verify import check_integrity, verify_bundle
from forensics.errors import (
    BundleError,
    BundleIntegrityError,
    BundleInvalid,
    BundleTooLarge,
    BundleUnsafe,
    ForensicsError,
)
from tests.support import hostile_bundles as hb


@pytest.fixture
def genuine(tmp_path: Path) -> Path:
    return hb.build_bundle(tmp_path, {
        "host/host.json": b'{"hostname": "gpu-07"}\n',
        "nvml/samples.jsonl": b'{"t": 1}\n\n{"t": 2}\nnot json\n',
        "docker/bad.json": b'{"Id": ',
        "proc/1/cmdline": b"/sbin/init\x00splash\x00",
    })


class TestBundleApi:
    def test_members_and_manifest(self, genuine: Path) -> None:
        b = open_bundle(genuine)
        assert b.names() == ["docker/bad.json", "host/host.json", "nvml/samples.jsonl", "proc/1/cmdline"]
        assert b.top == genuine.name.removesuffix(".tgz")
        assert b.manifest["format_version"] == 1
        assert b.read_bytes("proc/1/cmdline") == b"/sbin/init\x00splash\x00"  # verbatim
        assert b.sha256("host/host.json") == hb.sha256(b'{"hostname": "gpu-07"}\n')
        assert b.manifest_entry("host/host.json")["size"] == 23  # type: ignore[index]
        assert b.manifest_entry("nope") is None

    def test_malformed_json_names_the_member(self, genuine: Path) -> None:
        b = open_bundle(genuine)
        with pytest.raises(BundleInvalid, match="member docker/bad.json is not valid JSON"):
            b.read_json("docker/bad.json")

    def test_jsonl_names_member_and_line(self, genuine: Path) -> None:
        it = open_bundle(genuine).iter_jsonl("nvml/samples.jsonl")
        assert next(it) == (1, {"t": 1})
        assert next(it) == (3, {"t": 2})  # blank line 2 skipped, numbering kept
        with pytest.raises(BundleInvalid, match="member nvml/samples.jsonl line 4"):
            next(it)

    def test_missing_member_is_a_bundle_error(self, genuine: Path) -> None:
        with pytest.raises(BundleInvalid, match="'kernel/kmsg.txt' is missing"):
            open_bundle(genuine).read_bytes("kernel/kmsg.txt")

    def test_reading_writes_nothing(self, genuine: Path) -> None:
        before = sorted(os.listdir(genuine.parent))
        cwd_before = sorted(os.listdir("."))
        open_bundle(genuine)
        assert sorted(os.listdir(genuine.parent)) == before
        assert sorted(os.listdir(".")) == cwd_before

    def test_deeply_nested_json_member_is_a_bundle_error(self, tmp_path: Path) -> None:
        p = hb.build_bundle(tmp_path, {"host/deep.json": b"[" * 100_000 + b"]" * 100_000})
        with pytest.raises(BundleInvalid, match="host/deep.json"):
            open_bundle(p).read_json("host/deep.json")


class TestCaps:
    def test_member_count_cap(self, tmp_path: Path) -> None:
        p = hb.build_bundle(tmp_path, {f"host/m{i}": b"x" for i in range(20)})
        with pytest.raises(BundleTooLarge, match="more than 10 members"):
            open_bundle(p, ReadLimits(max_members=10))
        assert len(open_bundle(p, ReadLimits(max_members=21)).members) == 20

    def test_member_and_total_size_caps(self, tmp_path: Path) -> None:
        p = hb.build_bundle(tmp_path, {"host/a": b"a" * 1000, "host/b": b"b" * 1000})
        with pytest.raises(BundleTooLarge, match="member host/a is 1000 bytes"):
            open_bundle(p, ReadLimits(max_member_bytes=999))
        with pytest.raises(BundleTooLarge, match="exceeds the cap"):
            open_bundle(p, ReadLimits(max_total_bytes=1500))

    def test_gzip_bomb_stops_without_inflating(self, tmp_path: Path) -> None:
        bomb = hb.gzip_bomb(tmp_path / "bomb.tgz", zero_mib=1024)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with pytest.raises(BundleTooLarge, match="1073741824 bytes"):
            open_bundle(bomb, ReadLimits(max_total_bytes=16 << 20, max_member_bytes=16 << 20))
        grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        assert grown_mib < 64, f"peak RSS grew {grown_mib:.0f} MiB reading a bomb"

    def test_pax_header_bomb_stops_at_the_header(self, tmp_path: Path) -> None:
        bomb = hb.pax_header_bomb(tmp_path / "pax.tgz", zero_mib=512)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with pytest.raises(BundleTooLarge):
            open_bundle(bomb)  # default caps (1 GiB): the header must not be read into memory
        grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        assert grown_mib < 64, f"peak RSS grew {grown_mib:.0f} MiB reading a PAX bomb"


@pytest.mark.parametrize("kind,exc", [("sym", BundleUnsafe), ("hard", BundleUnsafe), ("chr", BundleUnsafe),
                                      ("blk", BundleUnsafe), ("fifo", BundleUnsafe)])
def test_special_members_are_typed_errors(genuine: Path, tmp_path: Path, kind: str, exc: type[BundleError]) -> None:
    bad = hb.rewrite(genuine, tmp_path / "bad.tgz", hb.add_member("{top}/host/x", hb.special_member(kind, "")))
    with pytest.raises(exc):
        open_bundle(bad)


def test_every_reader_error_is_a_bundle_error(genuine: Path, tmp_path: Path) -> None:
    """The CLI maps ForensicsError to exit codes: nothing the reader raises may be anything else."""
    data = genuine.read_bytes()
    for cut in range(0, len(data), max(1, len(data) // 40)):
        p = tmp_path / f"cut{cut}.tgz"
        p.write_bytes(data[:cut])
        with pytest.raises(BundleError):
            open_bundle(p)
    flipped = bytearray(data)
    for i in range(10, len(data) - 8, max(1, len(data) // 40)):
        flipped[i] ^= 0xFF
        p = tmp_path / "flip.tgz"
        p.write_bytes(bytes(flipped))
        try:
            verify_bundle(p)
        except ForensicsError:
            pass
        flipped[i] ^= 0xFF


class TestVerify:
    def test_intact(self, genuine: Path) -> None:
        r = verify_bundle(genuine)
        assert r.members_checked == 4
        assert r.file_sha256 == hb.sha256(genuine.read_bytes())

    def test_problems_are_listed_by_member(self, genuine: Path, tmp_path: Path) -> None:
        def t(top: str, ms: list[tuple[str, bytes]]) -> list[hb.Member]:
            out: list[hb.Member] = []
            for n, d in ms:
                if n == "host/host.json":
                    d = d.replace(b"07", b"08")  # same size, other bytes
                if n == "proc/1/cmdline":
                    continue
                out.append((f"{top}/{n}", d))
            return [*out, (f"{top}/host/planted", b"x")]

        bad = hb.rewrite(genuine, tmp_path / "bad.tgz", t)
        with pytest.raises(BundleIntegrityError) as ei:
            verify_bundle(bad)
        assert ei.value.exit_code == 1
        assert ei.value.problems == [
            "hash mismatch: host/host.json",
            "missing member: proc/1/cmdline",
            "extra member not in manifest: host/planted",
        ]

    def test_malformed_manifest_entries_are_problems(self, genuine: Path) -> None:
        b = open_bundle(genuine)
        b.manifest["members"].append("junk")
        b.manifest["members"].append({"path": 5})
        problems = check_integrity(b)
        assert sum(p.startswith("malformed manifest entry") for p in problems) == 2


# -- fuzzing: whatever the bytes, only BundleError (the CLI's exit 1/2), never a crash -----------

_GENUINE_TAR: dict[str, bytes] = {}


def _genuine_tar() -> bytes:
    if not _GENUINE_TAR:
        import gzip
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            p = hb.build_bundle(Path(d), {"host/host.json": b'{"hostname": "gpu-07"}\n', "nvml/s.jsonl": b'{"t": 1}\n'})
            _GENUINE_TAR["tar"] = gzip.decompress(p.read_bytes())
    return _GENUINE_TAR["tar"]


def _read_everything(path: Path) -> None:
    from forensics.inventory import describe_bundle, format_inventory
    try:
        b = open_bundle(path, ReadLimits(max_total_bytes=1 << 20, max_members=100))
        check_integrity(b)
        format_inventory(describe_bundle(b))
        for name in b.names():
            b.sha256(name)
    except BundleError:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(min_value=0, max_value=10_000), st.binary(min_size=1, max_size=8)),
                      min_size=1, max_size=6),
       cut=st.one_of(st.none(), st.integers(min_value=0, max_value=10_000)))
def test_mutated_tar_never_crashes_the_reader(tmp_path: Path, edits: list[tuple[int, bytes]], cut: int | None) -> None:
    import gzip
    data = bytearray(_genuine_tar())
    for pos, patch in edits:
        pos %= len(data)
        data[pos:pos + len(patch)] = patch
    if cut is not None:
        del data[cut % len(data):]
    p = tmp_path / "fuzz.tgz"
    p.write_bytes(gzip.compress(bytes(data), mtime=0))
    _read_everything(p)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
                     lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
                     max_leaves=20)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=st.dictionaries(st.sampled_from(["members", "collectors", "capture", "host", "tool", "redaction", "hints"]),
                              _json, max_size=7))
def test_any_manifest_shape_never_crashes_the_reader(tmp_path: Path, fields: dict[str, object]) -> None:
    import json
    manifest = {"format": "gpuforensics-bundle", "format_version": 1, **fields}
    p = hb.write_tar(tmp_path / "m.tgz", [("top/manifest.json", json.dumps(manifest).encode()),
                                          ("top/host/host.json", b"{}")])
    _read_everything(p)
