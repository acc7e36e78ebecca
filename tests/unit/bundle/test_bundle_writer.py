"""The bundle writer and evidence sink (forensics/bundle/writer.py, sink.py, format.py)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tarfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forensics.bundle.format import bundle_stem, check_member_name, iso
from forensics.bundle.reader import open_bundle
from forensics.bundle.sink import TEMP_PREFIX, EvidenceSink
from forensics.bundle.verify import verify_bundle
from forensics.bundle.writer import STAGING_PREFIX, BundleWriter
from forensics.errors import BundleUnsafe, CaptureError
from tests.support import hostile_bundles as hb

WHEN = datetime(2026, 11, 29, 14, 5, 0, tzinfo=UTC)


def _writer(out: Path, **kw: object) -> BundleWriter:
    return BundleWriter(out, "gpu-07", when=WHEN, **kw)  # type: ignore[arg-type]


class TestWriter:
    def test_bundle_is_mode_0600_named_by_host_and_utc_time(self, tmp_path: Path) -> None:
        w = _writer(tmp_path)
        w.sink.write_text("host/a.txt", "hello\n")
        path = w.finish({"collectors": []})
        assert path == tmp_path / "gpuforensics-gpu-07-20261129T140500Z.tgz"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600

    def test_staging_dir_is_private_and_removed_after_finish(self, tmp_path: Path) -> None:
        w = _writer(tmp_path)
        assert w.staging.parent == tmp_path and w.staging.name.startswith(STAGING_PREFIX)
        assert stat.S_IMODE(w.staging.stat().st_mode) == 0o700
        w.sink.write_text("host/a.txt", "x")
        assert stat.S_IMODE((w.staging / "host/a.txt").stat().st_mode) == 0o600
        path = w.finish({})
        assert not w.staging.exists()
        assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no partial temp file left

    def test_manifest_lists_every_member_with_sha256_and_size(self, tmp_path: Path) -> None:
        members = {"host/a.txt": b"alpha\n", "nvml/devices.json": b"[]\n", "proc/1/cmdline": b"init\x00"}
        w = _writer(tmp_path)
        for name, data in members.items():
            w.sink.write_bytes(name, data)
        path = w.finish({"host": {"hostname": "gpu-07"}, "collectors": [{"name": "host", "status": "ok"}]})
        m = hb.manifest_of(path)
        assert m["format"] == "gpuforensics-bundle" and m["format_version"] == 1
        assert m["tool"]["name"] == "gpuforensics"
        assert m["host"] == {"hostname": "gpu-07"}
        assert m["members"] == [{"path": n, "sha256": hashlib.sha256(d).hexdigest(), "size": len(d)}
                                for n, d in sorted(members.items())]
        top, got = hb.read_members(path)
        assert top == "gpuforensics-gpu-07-20261129T140500Z"
        assert dict(got) == {**members, "manifest.json": dict(got)["manifest.json"]}
        assert got[0][0] == "manifest.json"  # first, so readers find it before the evidence

    def test_archive_entries_are_plain_files_mode_0600_no_owner(self, tmp_path: Path) -> None:
        w = _writer(tmp_path)
        w.sink.write_bytes("host/a", b"a")
        path = w.finish({})
        with tarfile.open(path) as tar:
            for info in tar:
                assert info.isfile() and info.mode == 0o600 and info.uname == "" and info.uid == 0
                assert info.mtime == int(WHEN.timestamp())

    def test_round_trip_through_reader_and_verify(self, tmp_path: Path) -> None:
        w = _writer(tmp_path)
        w.sink.write_json("host/host.json", {"b": 1, "a": [1, 2]})
        w.sink.append_jsonl("nvml/samples.jsonl", {"t": 1.5, "util": 90})
        w.sink.append_jsonl("nvml/samples.jsonl", {"t": 2.5, "util": 91})
        path = w.finish({"collectors": [{"name": "host", "status": "ok"}]})
        b = open_bundle(path)
        assert b.read_json("host/host.json") == {"a": [1, 2], "b": 1}
        assert b.read_text("host/host.json") == '{"a": [1, 2], "b": 1}\n'  # sorted keys, compact
        assert [o["util"] for _, o in b.iter_jsonl("nvml/samples.jsonl")] == [90, 91]
        assert b.collectors() == [{"name": "host", "status": "ok"}]
        res = verify_bundle(path)
        assert res.members_checked == 2
        assert res.file_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()

    def test_never_overwrites_an_existing_bundle(self, tmp_path: Path) -> None:
        existing = tmp_path / "gpuforensics-gpu-07-20261129T140500Z.tgz"
        existing.write_bytes(b"precious")
        with pytest.raises(CaptureError, match="refusing to overwrite"):
            _writer(tmp_path)
        assert existing.read_bytes() == b"precious"
        assert [p.name for p in tmp_path.iterdir()] == [existing.name]  # no staging dir left behind

    def test_never_overwrites_a_bundle_that_appeared_during_capture(self, tmp_path: Path) -> None:
        w = _writer(tmp_path)
        w.sink.write_text("host/a", "x")
        w.final_path.write_bytes(b"someone else's bundle")
        with pytest.raises(CaptureError, match="refusing to overwrite"):
            w.finish({})
        assert w.final_path.read_bytes() == b"someone else's bundle"
        leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".partial"))
        assert leftovers == []  # the temporary archive is removed
        w.cleanup()
        assert not w.staging.exists()

    def test_two_captures_in_the_same_second_do_not_clobber(self, tmp_path: Path) -> None:
        first = _writer(tmp_path)
        first.sink.write_text("host/a", "1")
        first.finish({})
        with pytest.raises(CaptureError):
            _writer(tmp_path)

    def test_missing_output_directory(self, tmp_path: Path) -> None:
        with pytest.raises(CaptureError, match="does not exist"):
            _writer(tmp_path / "nope")

    def test_empty_bundle_is_still_a_valid_bundle(self, tmp_path: Path) -> None:
        path = _writer(tmp_path).finish({"collectors": [{"name": "host", "status": "failed", "error": "boom"}]})
        b = open_bundle(path)
        assert b.names() == [] and b.collectors()[0]["error"] == "boom"
        verify_bundle(path)

    def test_failure_while_packing_leaves_no_final_file(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        w = _writer(tmp_path)
        w.sink.write_bytes("host/big", os.urandom(1 << 16))

        def boom(*_a: object, **_k: object) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "fsync", boom)
        with pytest.raises(CaptureError, match="No space left"):
            w.finish({})
        assert not w.final_path.exists()
        assert not any(p.name.endswith(".partial") for p in tmp_path.iterdir())


class TestSink:
    @pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a/../../b", "", "a//b", "a/./b", "a b", "a\\b",
                                      "host/\x00", "x" * 600])
    def test_unsafe_member_names_refused(self, tmp_path: Path, name: str) -> None:
        sink = EvidenceSink(tmp_path)
        with pytest.raises(BundleUnsafe):
            sink.write_bytes(name, b"x")
        assert list(tmp_path.iterdir()) == []

    def test_collectors_may_not_write_the_manifest(self, tmp_path: Path) -> None:
        with pytest.raises(BundleUnsafe, match="manifest"):
            EvidenceSink(tmp_path).write_json("manifest.json", {})

    def test_size_cap(self, tmp_path: Path) -> None:
        sink = EvidenceSink(tmp_path, max_bytes=10)
        sink.write_bytes("a/b", b"12345")
        with pytest.raises(CaptureError, match="cap"):
            sink.write_bytes("a/c", b"123456")
        assert not (tmp_path / "a/c").exists()
        assert sink.bytes_written == 5

    def test_jsonl_lines_survive_independently(self, tmp_path: Path) -> None:
        sink = EvidenceSink(tmp_path)
        for i in range(3):
            sink.append_jsonl("s/x.jsonl", {"i": i, "obj": object() if i == 2 else None})
        lines = (tmp_path / "s/x.jsonl").read_text().splitlines()
        assert [json.loads(line)["i"] for line in lines] == [0, 1, 2]
        assert json.loads(lines[2])["obj"].startswith("<object object")  # stringified, never a crash
        assert sink.members == {"s/x.jsonl"}

    def test_write_json_is_deterministic(self, tmp_path: Path) -> None:
        sink = EvidenceSink(tmp_path)
        sink.write_json("a/1.json", {"b": 1, "a": "é"})
        sink.write_json("a/2.json", dict(reversed(list({"b": 1, "a": "é"}.items()))))
        assert (tmp_path / "a/1.json").read_bytes() == (tmp_path / "a/2.json").read_bytes()
        assert "é" in (tmp_path / "a/1.json").read_text(encoding="utf-8")


class TestFormat:
    def test_bundle_stem_sanitises_host_names(self) -> None:
        assert bundle_stem("gpu-07.example.com", WHEN) == "gpuforensics-gpu-07.example.com-20261129T140500Z"
        assert bundle_stem("../../etc/x y", WHEN) == "gpuforensics-etc_x_y-20261129T140500Z"
        assert bundle_stem("", WHEN) == "gpuforensics-host-20261129T140500Z"
        assert bundle_stem("a" * 300, WHEN).count("a") == 64

    def test_stem_is_utc(self) -> None:
        from datetime import timedelta, timezone
        local = WHEN.astimezone(timezone(timedelta(hours=-5)))
        assert bundle_stem("h", local).endswith("20261129T140500Z")
        assert iso(local) == "2026-11-29T14:05:00.000000Z"

    @given(st.text(max_size=80))
    def test_accepted_member_names_never_escape(self, name: str) -> None:
        try:
            check_member_name(name)
        except BundleUnsafe:
            return
        parts = name.split("/")
        assert not name.startswith("/") and ".." not in parts and "." not in parts and "" not in parts

    @given(st.text(max_size=40))
    def test_stem_is_always_a_safe_file_name(self, host: str) -> None:
        stem = bundle_stem(host, WHEN)
        assert "/" not in stem and stem.startswith("gpuforensics-") and ".." not in stem.split("-")
        check_member_name(stem)


class TestReplaceJson:
    def test_rewrites_atomically_and_counts_only_the_growth(self, tmp_path: Path) -> None:
        sink = EvidenceSink(tmp_path, max_bytes=200)
        for n in range(20):  # 20 rewrites of ~60 bytes fit a 200-byte cap: only growth counts
            sink.replace_json("nvml/devices.json", {"complete": False, "devices": list(range(n % 5))})
        assert json.loads((tmp_path / "nvml/devices.json").read_text())["devices"] == [0, 1, 2, 3]
        assert sorted(p.name for p in (tmp_path / "nvml").iterdir()) == ["devices.json"]

    def test_a_temporary_left_by_a_kill_is_not_packed(self, tmp_path: Path) -> None:
        w = _writer(tmp_path)
        w.sink.replace_json("nvml/devices.json", {"complete": False})
        (w.staging / "nvml" / f"{TEMP_PREFIX}123-devices.json").write_text('{"comp')  # cut short
        b = open_bundle(w.finish({}))
        assert b.names() == ["nvml/devices.json"]
        assert b.read_json("nvml/devices.json") == {"complete": False}
