"""``capture --since`` carries the flight recorder's segments verbatim; the analysis rebuilds the
``ring/<member>`` members from them. What a user checks: the segments are the ring's own (the
ring index's SHA-256), the rebuilt members are the bytes the window's records make (the fold of
earlier versions), the analysis finds the same things from them as from those whole members, its
excerpts are in the rebuilt members and say which segment record they come from, and a changed
byte in a segment is caught by ``verify`` and by ``analyze``."""

from __future__ import annotations

import gzip
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis import analyze_bundles
from forensics.analysis.ring_view import rebuild_ring, ring_view
from forensics.analysis.source import Source
from forensics.bundle.reader import ReadLimits, open_bundle
from forensics.bundle.verify import check_bundle, verify_bundle
from forensics.errors import BundleIntegrityError
from forensics.record.sources import DELTA_MEMBERS
from forensics.ring import RingReader, RingWriter
from tests.golden.test_excerpts import check_excerpts
from tests.support.hostile_bundles import add_member, build_bundle, read_members, rewrite, write_tar
from tests.support.ring_bundle import RING_SAMPLE as SAMPLE
from tests.support.ring_bundle import bundle_members as _members
from tests.support.ring_bundle import capture_since, ring_from_sample


def _whole_members(ring: Path, since: float, until: float) -> dict[str, bytes]:
    """The window's members as the fold of earlier versions wrote them: appends in the order
    written, each write member as of the capture start (the ring reader's records)."""
    out: dict[str, bytes] = {}
    for rec in RingReader(ring).records(since=since, until=until, keep_writes=True):
        out[rec.member] = rec.data if rec.op == "write" else out.get(rec.member, b"") + rec.data
    return out


def _findings(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    return sorted((f["kind"], f["summary"], json.dumps(f["subjects"], sort_keys=True),
                   json.dumps([{k: e[k] for k in ("member", "locator", "excerpt")} for e in f["evidence"]],
                              sort_keys=True)) for f in doc["findings"])


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("segfold")
    ring = tmp / "ring"
    ring_from_sample(ring)
    return ring, capture_since(ring, tmp / "out", "2026-11-29T00:00:00Z")


def test_the_bundle_carries_the_rings_segments_verbatim(captured: tuple[Path, Path]) -> None:
    ring, bundle = captured
    members = _members(bundle)
    prov = json.loads(members["ring/provenance.json"])
    index = {json.loads(line)["name"]: json.loads(line) for line in (ring / "index.jsonl").read_text().splitlines()}
    segs = prov["segments"]
    assert len(segs) >= 3 and segs[-1]["sealed"] is False and all(s["sealed"] for s in segs[:-1])
    for s in segs:
        data = members[s["member"]]
        assert hashlib.sha256(data).hexdigest() == s["sha256"]
        if s["sealed"]:
            assert s["sha256"] == index[s["segment"]]["sha256"] and data == (ring / s["segment"]).read_bytes()
        else:
            assert (ring / s["segment"]).read_bytes().startswith(data) and data.endswith(b"\n")
    assert not [m for m in members if m.startswith("ring/") and not m.startswith("ring/segments/")
                and m != "ring/provenance.json"]  # no member is written twice
    verify_bundle(bundle)


def test_the_rebuilt_members_are_the_windows_records(captured: tuple[Path, Path]) -> None:
    ring, bundle = captured
    opened = open_bundle(bundle)
    view = ring_view(Source(opened, bundle.name, opened.members))
    assert view is not None and view.rebuilt is not None and not view.problems
    window = json.loads(opened.members["ring/provenance.json"])["window"]
    expected = _whole_members(ring, window["t_since"], window["t_until"])
    assert view.rebuilt.members == expected
    assert {"nvml/samples.jsonl", "cgroup/samples.jsonl", "nvml/devices.json"} <= set(expected)


def test_the_analysis_finds_the_same_as_from_whole_members(captured: tuple[Path, Path], tmp_path: Path) -> None:
    """The same window folded the old way (whole members under ring/) analyses the same; every
    ring-derived excerpt is in its rebuilt member and names its segment and line."""
    ring, bundle = captured
    members = _members(bundle)
    manifest = json.loads(members.pop("manifest.json"))
    window = json.loads(members["ring/provenance.json"])["window"]
    whole = {n: d for n, d in members.items() if not n.startswith("ring/segments/")}
    whole.update({"ring/" + m: d for m, d in _whole_members(ring, window["t_since"], window["t_until"]).items()})
    old = build_bundle(tmp_path, whole, manifest_fields={k: manifest[k] for k in ("host", "capture", "collectors")})
    new_doc, old_doc = analyze_bundles([bundle]), analyze_bundles([old])
    assert _findings(new_doc) == _findings(old_doc) and new_doc["findings"]
    cited = [e for f in new_doc["findings"] for e in f["evidence"] if e["member"].startswith("ring/")]
    assert cited and all(e["member"] not in members for e in cited)  # rebuilt, not stored
    assert check_excerpts(bundle, new_doc) > 0
    for e in cited:
        origin = e["derived_from"]
        seg = members[origin["member"]]
        text = gzip.decompress(seg) if origin["member"].endswith(".gz") else seg
        line = text.splitlines()[origin["line"] - 1]
        assert json.loads(line)["member"] == e["member"].removeprefix("ring/"), (e, line[:200])
    assert not any("derived_from" in e for f in old_doc["findings"] for e in f["evidence"])


def test_a_window_inside_a_segment_is_clipped_by_wall_time(tmp_path: Path) -> None:
    ring = tmp_path / "ring"
    now = time.time()
    w = RingWriter(ring, segment_bytes=4096, delta_members=DELTA_MEMBERS).open()
    w.append([(now - 500, 1.0, "nvml/devices.json", "write", b'{"devices": ["old"]}\n')])
    for n in range(300):
        t = now - 300 + n
        line = b'{"gpu_index": 0, "kind": "device", "n": %d, "t": %.1f}\n' % (n, t)
        w.append([(t, 10.0 + n, "nvml/samples.jsonl", "append", line)])
        if n == 200:
            w.append([(t, 10.0 + n, "nvml/devices.json", "write", b'{"devices": ["new"]}\n')])
    w.close()
    bundle = capture_since(ring, tmp_path / "out", "120s")
    prov = json.loads(_members(bundle)["ring/provenance.json"])
    since = prov["window"]["t_since"]
    first = prov["segments"][0]
    assert first["t_first"] < since < first["t_last"]  # the first segment starts before the window
    assert len(prov["segments"]) < len(RingReader(ring).segments())  # older segments are not carried
    opened = open_bundle(bundle)
    view = ring_view(Source(opened, bundle.name, opened.members))
    assert view is not None and view.rebuilt is not None
    got = [json.loads(line)["n"] for line in view.rebuilt.members["nvml/samples.jsonl"].splitlines()]
    assert got == [n for n in range(300) if now - 300 + n >= since]
    assert view.rebuilt.members["nvml/devices.json"] == b'{"devices": ["new"]}\n'


def _tampered(bundle: Path, dst: Path, fix_manifest: bool) -> Path:
    """``bundle`` with one byte of a sealed segment member changed (and the manifest's hash of it
    changed to match, when ``fix_manifest``: only the provenance then tells)."""
    top, members = read_members(bundle)
    prov = json.loads(dict(members)["ring/provenance.json"])
    target = next(s["member"] for s in prov["segments"] if s["sealed"])
    out = []
    changed = b""
    for name, data in members:
        if name == target:
            raw = bytearray(gzip.decompress(data))
            at = raw.index(b'"data":"') + 9
            raw[at] = ord("Z") if raw[at] != ord("Z") else ord("Y")
            changed = data = gzip.compress(bytes(raw))
        out.append((name, data))
    if fix_manifest:
        manifest = json.loads(dict(out)["manifest.json"])
        for entry in manifest["members"]:
            if entry["path"] == target:
                entry["sha256"], entry["size"] = hashlib.sha256(changed).hexdigest(), len(changed)
        out = [(n, json.dumps(manifest).encode() if n == "manifest.json" else d) for n, d in out]
    return write_tar(dst, [(f"{top}/{n}", d) for n, d in out])


@pytest.mark.parametrize("fix_manifest", [False, True], ids=["member-only", "manifest-too"])
def test_a_changed_byte_in_a_segment_is_caught_by_verify_and_analyze(
        captured: tuple[Path, Path], tmp_path: Path, fix_manifest: bool) -> None:
    _ring, bundle = captured
    bad = _tampered(bundle, tmp_path / "bad.tgz", fix_manifest)
    with pytest.raises(BundleIntegrityError) as caught:
        verify_bundle(bad)
    assert any("ring segment hash mismatch: ring/segments/" in p for p in caught.value.problems), caught.value.problems
    doc = analyze_bundles([bad])
    limits = " | ".join(doc["limitations"])
    assert "INTEGRITY CHECK FAILED" in limits and "altered after capture; its records are left out" in limits


def test_hostile_segments_are_problems_not_tracebacks(captured: tuple[Path, Path], tmp_path: Path) -> None:
    """Segment members rewritten with their provenance (so the hashes agree): a gzip bomb, not
    gzip, and the active one cut mid-line. Each is named in the limitations, the rest of the
    history is still read, and inflation stops at the cap."""
    _ring, bundle = captured
    bomb = gzip.compress(b"\0" * (8 << 20))

    def transform(top: str, members: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
        by_name = dict(members)
        prov = json.loads(by_name["ring/provenance.json"])
        segs = prov["segments"]
        by_name[segs[0]["member"]] = bomb
        by_name[segs[1]["member"]] = b"not gzip at all"
        active = by_name[segs[-1]["member"]]
        by_name[segs[-1]["member"]] = active[: active.rindex(b"\n", 0, len(active) - 1) + 40]
        for s in (segs[0], segs[1], segs[-1]):
            s["sha256"] = hashlib.sha256(by_name[s["member"]]).hexdigest()
        by_name["ring/provenance.json"] = json.dumps(prov).encode()
        return [(f"{top}/{name}", data) for name, data in by_name.items()]

    bad = rewrite(bundle, tmp_path / "hostile.tgz", transform)
    doc = analyze_bundles([bad])
    limits = " | ".join(doc["limitations"])
    assert "seg-0000000002.jsonl.gz: cannot decompress" in limits, limits
    assert "bytes after line" in limits and "are not whole ring records" in limits, limits
    assert any(e["member"].startswith("ring/") for f in doc["findings"] for e in f["evidence"])
    opened = open_bundle(bad, ReadLimits(max_member_bytes=1 << 20))  # the caps analyze --max-bundle-mb sets
    rebuilt = rebuild_ring(Source(opened, bad.name, opened.members))
    assert any("inflates past the cap of 1048576 bytes" in p for p in rebuilt.problems), rebuilt.problems
    assert rebuilt.members.get("nvml/samples.jsonl")


class _MemBundle:
    """A bundle's members in memory, read under ``limits`` (as open_bundle's)."""

    def __init__(self, members: dict[str, bytes], limits: ReadLimits) -> None:
        self.members, self.limits, self.manifest = members, limits, {}

    def read_bytes(self, member: str) -> bytes:
        return self.members[member]


def _segment(records: list[dict[str, Any]], sealed: bool = False) -> bytes:
    text = "\n".join(json.dumps(r) for r in [{"ring": 1, "run": "r"}, *records]) + "\n"
    return gzip.compress(text.encode()) if sealed else text.encode()


def _rebuild(members: dict[str, bytes], **limits: int) -> Any:
    return rebuild_ring(Source(_MemBundle(members, ReadLimits(**limits)), "b.tgz", members))


def _bomb(key_bytes: int, repeats: int) -> str:
    """One key line of ``key_bytes`` and ``repeats`` change-only lines ("[0,n]=", the same changes
    as the line before), each rebuilding the whole key line."""
    key_line = "k, " + ", ".join(f"v{i}" for i in range(key_bytes // 7))
    count = key_line.count(", ") + 1
    return key_line + "\n" + f"[0,{count}]\t1\tx\n" + f"[0,{count}]=\n" * repeats


def test_change_only_lines_cannot_inflate_past_the_cap() -> None:
    """A 40 kB segment of change-only lines that rebuild 40 MB: the rebuild stops at the reader's
    cap (its memory stays near it), says so, and keeps what came before."""
    import tracemalloc

    cap = 1 << 20
    seg = _segment([{"t": 1.0, "mono": 1.0, "member": "host/a.jsonl", "op": "append", "data": "kept\n"},
                    {"t": 2.0, "mono": 2.0, "member": "cgroup/samples.jsonl", "op": "delta",
                     "data": _bomb(20_000, 2000)}])
    assert len(seg) < 50_000
    tracemalloc.start()
    try:
        rebuilt = _rebuild({"ring/segments/seg-1.jsonl": seg}, max_total_bytes=cap)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * cap, peak
    assert rebuilt.members["host/a.jsonl"] == b"kept\n"
    assert "cgroup/samples.jsonl" not in rebuilt.members
    assert any("seg-1.jsonl line 3: the change-only lines of cgroup/samples.jsonl rebuild more than the reader's "
               "budget" in p for p in rebuilt.problems), rebuilt.problems


def test_a_time_out_of_range_with_the_cap_passed_is_a_limitation(tmp_path: Path) -> None:
    """A record at t=1e300 (no date: formatting it overflows) among records that pass the cap:
    analyze reports the cap, no traceback, and still analyses the capture's own members."""
    seg = _segment([{"t": 100.0, "mono": 1.0, "member": "host/a.jsonl", "op": "append", "data": "a" * 6000 + "\n"},
                    {"t": 1e300, "mono": 2.0, "member": "host/a.jsonl", "op": "append", "data": "b" * 6000 + "\n"}],
                   sealed=True)
    bundle = build_bundle(tmp_path, {"host/host.json": b'{"hostname": "gpu-07"}\n',
                                     "ring/segments/seg-1.jsonl.gz": seg})
    doc = analyze_bundles([bundle], limits=ReadLimits(max_total_bytes=10_000))
    limits = " | ".join(doc["limitations"])
    assert "pass the reader's cap (10000 bytes): records from t=1e+300" in limits, limits


def test_a_failing_rebuild_is_a_limitation_and_the_live_members_are_analysed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever goes wrong rebuilding the ring (here: an error no check foresaw), analyze names
    the ring in a limitation and reads the capture's own members."""
    from forensics.analysis import ring_view as ring_view_module

    def broken(src: Source, limits: ReadLimits | None = None) -> Any:
        raise OverflowError("date value out of range")

    monkeypatch.setattr(ring_view_module, "rebuild_ring", broken)
    bundle = rewrite(SAMPLE, tmp_path / "b.tgz", add_member("{top}/ring/segments/seg-1.jsonl", _segment([])))
    doc = analyze_bundles([bundle])
    limits = " | ".join(doc["limitations"])
    assert "the flight recorder's history (ring/) could not be rebuilt (OverflowError: date value out of range)" \
        in limits, limits
    assert _findings(doc) == _findings(analyze_bundles([SAMPLE]))



@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_record_without_a_finite_time_is_not_in_the_window(bad: float) -> None:
    """NaN passes every comparison (and so any window), Infinity is no time: both are bad lines,
    each named and left out (the records after them would be read)."""
    seg = _segment([{"t": 100.0, "mono": 1.0, "member": "a.jsonl", "op": "append", "data": "in\n"},
                    {"t": bad, "mono": 2.0, "member": "a.jsonl", "op": "append", "data": "BAD-T\n"},
                    {"t": 101.0, "mono": bad, "member": "a.jsonl", "op": "append", "data": "BAD-MONO\n"}])
    prov = {"window": {"t_since": 50, "t_until": 200},
            "segments": [{"member": "ring/segments/seg-1.jsonl", "sha256": hashlib.sha256(seg).hexdigest()}]}
    rebuilt = _rebuild({"ring/provenance.json": json.dumps(prov).encode(), "ring/segments/seg-1.jsonl": seg})
    assert rebuilt.members["a.jsonl"] == b"in\n"
    for line in (3, 4):
        assert any(f"seg-1.jsonl line {line}: not a ring record (its time is not a finite number" in p
                   for p in rebuilt.problems), rebuilt.problems


def test_the_text_of_all_segments_together_is_capped() -> None:
    """Segments whose records all lie outside the window count toward no rebuilt member, but
    their text is inflated all the same: together at most twice the reader's cap, then a limitation."""
    rec = {"t": 10.0, "mono": 1.0, "member": "a.jsonl", "op": "append", "data": "x" * 100_000 + "\n"}
    seg = _segment([rec] * 6, sealed=True)  # 600 kB of text from about 1 kB
    names = [f"ring/segments/seg-{n}.jsonl.gz" for n in range(1, 6)]
    prov = {"window": {"t_since": 50, "t_until": 200},
            "segments": [{"member": m, "sha256": hashlib.sha256(seg).hexdigest(), "sealed": True} for m in names]}
    members = {"ring/provenance.json": json.dumps(prov).encode(), **dict.fromkeys(names, seg)}
    rebuilt = _rebuild(members, max_total_bytes=1 << 20, max_member_bytes=1 << 20)
    assert rebuilt.segments == names[:3]
    assert any(f"passes {2 << 20} bytes in all (twice the reader's cap) at {names[3]}: it and the segments after "
               "it are left out" in p for p in rebuilt.problems), rebuilt.problems


def test_a_segment_the_provenance_does_not_list_is_caught_and_left_out(
        captured: tuple[Path, Path], tmp_path: Path) -> None:
    """A segment member added after capture (and put in the manifest, so only the provenance
    tells): verify names it, and analyze leaves its records out, saying so."""
    _ring, bundle = captured
    top, members = read_members(bundle)
    prov = json.loads(dict(members)["ring/provenance.json"])
    added = "ring/segments/seg-9999999999.jsonl"
    seg = _segment([{"t": prov["window"]["t_since"] + 1, "mono": 1.0, "member": "host/injected.jsonl",
                     "op": "append", "data": "INJECTED\n"}])
    manifest = json.loads(dict(members)["manifest.json"])
    manifest["members"].append({**manifest["members"][-1], "path": added,
                                "sha256": hashlib.sha256(seg).hexdigest(), "size": len(seg)})
    out = [(n, json.dumps(manifest).encode() if n == "manifest.json" else d) for n, d in members]
    bad = write_tar(tmp_path / "added.tgz", [(f"{top}/{n}", d) for n, d in [*out, (added, seg)]])
    with pytest.raises(BundleIntegrityError) as caught:
        verify_bundle(bad)
    assert caught.value.problems == [f"ring segment not listed in ring/provenance.json: {added}"]
    opened = open_bundle(bad)
    rebuilt = rebuild_ring(Source(opened, bad.name, opened.members))
    assert "host/injected.jsonl" not in rebuilt.members and added not in rebuilt.segments
    assert any(f"ring segment not listed in ring/provenance.json: {added}: capture did not copy it" in p
               for p in rebuilt.problems), rebuilt.problems
    assert rebuilt.members.get("nvml/samples.jsonl")


def test_a_line_that_is_not_a_record_costs_the_view_only_itself() -> None:
    """A bundle's segment with a record at t=NaN in its middle: named, and the records after it are
    in the rebuilt members, the evidence lines naming their true segment lines."""
    seg = _segment([{"t": 1.0, "mono": 1.0, "member": "host/a.jsonl", "op": "append", "data": "one\n"},
                    {"t": float("nan"), "mono": 2.0, "member": "host/a.jsonl", "op": "append", "data": "nan\n"},
                    {"t": 3.0, "mono": 3.0, "member": "host/a.jsonl", "op": "append", "data": "three\n"}], sealed=True)
    rebuilt = _rebuild({"ring/segments/seg-1.jsonl.gz": seg})
    assert rebuilt.members["host/a.jsonl"] == b"one\nthree\n"
    assert rebuilt.origin("host/a.jsonl", 2) == ("ring/segments/seg-1.jsonl.gz", 4)
    assert rebuilt.problems[1:] == ["b.tgz: ring/segments/seg-1.jsonl.gz line 3: not a ring record (its time is not a "
                                "finite number (t nan, mono 2.0)): left out; the records after it are read"]


def test_a_tampered_segment_is_one_fact_stated_once(captured: tuple[Path, Path], tmp_path: Path) -> None:
    """The segment's mismatch with its provenance is one limitation, the integrity check's, which
    says what is done about it; its records are left out of the series all the same."""
    _ring, bundle = captured
    for fix_manifest in (False, True):
        bad = _tampered(bundle, tmp_path / f"bad-{fix_manifest}.tgz", fix_manifest)
        target = next(s["member"] for s in json.loads(_members(bad)["ring/provenance.json"])["segments"]
                      if s["sealed"])
        doc = analyze_bundles([bad])
        named = [lim for lim in doc["limitations"] if target in lim]
        assert len(named) == 1, named
        assert named[0].startswith(f"INTEGRITY CHECK FAILED: {bad.name}: ") and (
            "ring segment hash mismatch" in named[0] and "its records are left out" in named[0])
        assert doc["bundles"][0]["integrity"]["ok"] is False
        assert not any(e.get("derived_from", {}).get("member") == target
                       for f in doc["findings"] for e in f["evidence"])
        opened = open_bundle(bad)
        src = Source(opened, bad.name, opened.members)
        src.integrity = check_bundle(opened)  # as analyze reads it
        view = ring_view(src)
        assert view is not None and view.rebuilt is not None
        assert target not in view.rebuilt.segments and view.rebuilt.segments
        assert not [p for p in view.rebuilt.problems if target in p]


def _rewritten(bundle: Path, dst: Path, change: Any) -> Path:
    """``bundle`` with ``change(members)`` applied (a dict, changed in place) and the manifest made
    to match, so that only the ring's provenance can tell."""
    top, members = read_members(bundle)
    by_name = dict(members)
    change(by_name)
    manifest = json.loads(by_name.pop("manifest.json"))
    manifest["members"] = [{**e, "sha256": hashlib.sha256(by_name[e["path"]]).hexdigest(),
                            "size": len(by_name[e["path"]])} for e in manifest["members"] if e["path"] in by_name]
    by_name["manifest.json"] = json.dumps(manifest).encode()
    return write_tar(dst, [(f"{top}/{n}", d) for n, d in by_name.items()])


def test_segments_the_provenance_does_not_cover_are_not_verifiable(captured: tuple[Path, Path], tmp_path: Path) -> None:
    """A provenance whose ``segments`` is empty (or missing) vouches for no segment: each segment
    member is an integrity problem for verify and analyze, and its records are left out, as for a
    segment a non-empty list does not name; a bundle without any provenance cannot be checked at
    all: said so, once, and its segments read unverified."""
    _ring, bundle = captured
    segs = sorted(m for m in _members(bundle) if m.startswith("ring/segments/"))

    def no_list(key: str | None) -> Any:
        def change(members: dict[str, bytes]) -> None:
            prov = json.loads(members["ring/provenance.json"])
            if key is None:
                del prov["segments"]
            else:
                prov["segments"] = []
            members["ring/provenance.json"] = json.dumps(prov).encode()
        return change

    for n, change in enumerate((no_list(""), no_list(None))):
        bad = _rewritten(bundle, tmp_path / f"empty-{n}.tgz", change)
        with pytest.raises(BundleIntegrityError) as caught:
            verify_bundle(bad)
        assert caught.value.problems == [f"ring segment not listed in ring/provenance.json: {m}" for m in segs]
        doc = analyze_bundles([bad])
        assert doc["bundles"][0]["integrity"]["ok"] is False
        (named,) = [lim for lim in doc["limitations"] if segs[0] in lim]
        assert named.startswith("INTEGRITY CHECK FAILED") and "its records are left out" in named
        assert all(m in named for m in segs)  # every one, past the first three problems too
        assert not any(e["member"].startswith("ring/") for f in doc["findings"] for e in f["evidence"])

    bad = _rewritten(bundle, tmp_path / "no-provenance.tgz", lambda members: members.pop("ring/provenance.json"))
    with pytest.raises(BundleIntegrityError) as caught:
        verify_bundle(bad)
    assert caught.value.problems == [f"{len(segs)} ring segment(s) without ring/provenance.json (such as {segs[0]}): "
                                     "their SHA-256 cannot be checked"]
    doc = analyze_bundles([bad])
    named = [lim for lim in doc["limitations"] if "ring/provenance.json" in lim]
    assert len(named) == 1 and named[0].startswith("INTEGRITY CHECK FAILED") and "read unverified" in named[0], named
    assert any(e["member"].startswith("ring/") for f in doc["findings"] for e in f["evidence"])


@pytest.mark.parametrize("provenance", [None, b"{not json"], ids=["absent", "not-json"])
def test_evidence_from_segments_never_checked_says_so(
        captured: tuple[Path, Path], tmp_path: Path, provenance: bytes | None) -> None:
    """Without a readable ``ring/provenance.json`` the segments are read unverified: every evidence
    rebuilt from them says so (``derived_from.verified`` false), where a checked segment's says
    nothing (its document as before)."""
    _ring, bundle = captured

    def change(members: dict[str, bytes]) -> None:
        if provenance is None:
            del members["ring/provenance.json"]
        else:
            members["ring/provenance.json"] = provenance

    bad = _rewritten(bundle, tmp_path / "unverified.tgz", change)
    derived = [e["derived_from"] for f in analyze_bundles([bad])["findings"] for e in f["evidence"]
               if "derived_from" in e]
    assert derived and all(d["verified"] is False for d in derived), derived
    checked = [e["derived_from"] for f in analyze_bundles([bundle])["findings"] for e in f["evidence"]
               if "derived_from" in e]
    assert checked and all(set(d) == {"member", "segment", "line"} for d in checked), checked
