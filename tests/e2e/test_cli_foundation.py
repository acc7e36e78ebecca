"""The foundation through the real command line (``python -m forensics``), as a user runs it.

Round trip: capture -> bundle path on stdout -> verify -> inspect shows each collector's status.
Hostile bundles: each is refused with the documented exit code and one line on stderr, no
traceback, and nothing is written anywhere (the temp dir and the working directory are listed
before and after; escape targets are checked by name).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import stat
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from forensics.specs import spec_named
from tests.support import hostile_bundles as hb

BUNDLE_NAME_RE = re.compile(r"^gpuforensics-[A-Za-z0-9.-]+-\d{8}T\d{6}Z\.tgz$")


def run_cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GPUFORENSICS_DEBUG",)}
    return subprocess.run([sys.executable, "-m", "forensics", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and mtime (ns)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def assert_one_line_error(proc: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    err = proc.stderr
    assert proc.returncode == code, f"exit {proc.returncode}, stderr: {err!r}"
    assert "Traceback" not in err and "Traceback" not in proc.stdout
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one stderr line, got: {err!r}"
    assert lines[0].startswith("gpuforensics: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert proc.stdout == ""
    return lines[0]


# -- round trip ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("capture")
    proc = run_cli("capture", "-o", str(out), "--only", "host", cwd=out)
    return out, proc


def test_capture_prints_only_the_bundle_path(captured: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, proc = captured
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.endswith("\n") and proc.stdout.count("\n") == 1
    path = Path(proc.stdout.strip())
    assert path.parent.resolve() == out.resolve()
    assert BUNDLE_NAME_RE.match(path.name), path.name
    assert path.is_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # nothing else left behind: no staging directory, no partial file
    assert sorted(p.name for p in out.iterdir()) == [path.name]


def test_capture_name_carries_host_and_utc_start(captured: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    _, proc = captured
    path = Path(proc.stdout.strip())
    manifest = hb.manifest_of(path)
    stamp = manifest["capture"]["started"]  # 2026-11-30T05:35:32.559517Z
    compact = stamp[:19].replace("-", "").replace(":", "") + "Z"
    assert path.name.endswith(f"-{compact}.tgz")
    host = re.sub(r"[^A-Za-z0-9.-]+", "_", manifest["host"]["hostname"]).strip("._-")
    assert path.name.startswith(f"gpuforensics-{host}-")


def test_verify_accepts_a_fresh_bundle(captured: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, proc = captured
    path = proc.stdout.strip()
    v = run_cli("verify", path, cwd=out)
    assert v.returncode == 0, v.stderr
    assert v.stdout.startswith("OK ")
    assert re.search(r"bundle sha256 [0-9a-f]{64}", v.stdout)
    members = len(hb.manifest_of(Path(path))["members"])
    assert f"{members} members" in v.stdout


def test_inspect_shows_each_collectors_status(captured: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, proc = captured
    path = Path(proc.stdout.strip())
    manifest = hb.manifest_of(path)
    statuses = {c["name"]: c["status"] for c in manifest["collectors"]}
    assert statuses["host"] == "ok"
    assert all(s == "skipped" for n, s in statuses.items() if n != "host"), statuses

    text = run_cli("inspect", str(path), cwd=out)
    assert text.returncode == 0, text.stderr
    for name, status in statuses.items():
        assert re.search(rf"^\s+{re.escape(name)}\s+{status}\b", text.stdout, re.M), (name, text.stdout)

    js = run_cli("inspect", str(path), "-f", "json", cwd=out)
    assert js.returncode == 0, js.stderr
    desc = json.loads(js.stdout)
    assert {c["name"]: c["status"] for c in desc["collectors"]} == statuses
    assert desc["format_version"] == 1
    assert desc["interrupted"] is False
    assert desc["sources"]["host"]["members"] == len(manifest["members"])


def test_host_evidence_is_in_the_bundle(captured: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    _, proc = captured
    _, members = hb.read_members(Path(proc.stdout.strip()))
    by_name = dict(members)
    facts = json.loads(by_name["host/host.json"])
    assert facts["hostname"] == os.uname().nodename
    assert facts["cpu"]["count_online"] == os.cpu_count()
    assert facts["boot_time_unix"] and abs(facts["boot_time_unix"] - (time.time() - float(
        Path("/proc/uptime").read_text().split()[0]))) < 5
    assert by_name["host/proc/loadavg"].count(b" ") >= 4


def test_analyze_json_reports_the_bundle(captured: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    if not _has_analysis():
        if os.environ.get("CI") == "true":
            pytest.fail("forensics.analysis.analyze_bundles is missing (CI expects it)")
        pytest.skip("forensics.analysis has no analyze_bundles yet (written by another engineer)")
    _, proc = captured
    target = tmp_path / "analysis.json"
    a = run_cli("analyze", proc.stdout.strip(), "--format", "json", "-o", str(target), cwd=tmp_path)
    assert a.returncode == 0, a.stderr
    doc = json.loads(target.read_text())
    assert any(c.get("name") == "host" and c.get("status") == "ok" for c in doc.get("collectors", [])), doc.get("collectors")


def test_capture_refuses_an_unknown_collector(tmp_path: Path) -> None:
    proc = run_cli("capture", "-o", str(tmp_path), "--only", "no-such-collector", cwd=tmp_path)
    assert_one_line_error(proc, 2, "--only", "no-such-collector")
    assert list(tmp_path.iterdir()) == []


def test_capture_into_a_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_cli("capture", "-o", str(tmp_path / "nope"), "--only", "host", cwd=tmp_path)
    assert_one_line_error(proc, 2, "nope")
    assert list(tmp_path.iterdir()) == []


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert_one_line_error(run_cli("verify", cwd=tmp_path), 2)
    assert_one_line_error(run_cli("no-such-command", cwd=tmp_path), 2)
    assert_one_line_error(run_cli("capture", "--interval", "0", cwd=tmp_path), 2, "--interval")
    assert_one_line_error(run_cli("capture", "--duration", "1", "--interval", "2", "-o", str(tmp_path),
                                  cwd=tmp_path), 2, "--interval")
    assert list(tmp_path.iterdir()) == []


def _has_analysis() -> bool:
    try:
        return hasattr(importlib.import_module("forensics.analysis"), "analyze_bundles")
    except ImportError:
        return False


# -- hostile inputs --------------------------------------------------------------------------


@dataclass(frozen=True)
class Hostile:
    id: str
    build: Callable[[Path, Path, str], Path]  # (genuine bundle, destination dir, token) -> file
    exit_code: int = 2
    needles: tuple[str, ...] = ()
    verify_args: tuple[str, ...] = ()
    outside: Callable[[Path, str], list[Path]] = lambda _tmp, _tok: []  # paths that must not appear


def _rw(transform: Callable[[str, list[tuple[str, bytes]]], list[hb.Member]]) -> Callable[[Path, Path, str], Path]:
    return lambda good, d, _tok: hb.rewrite(good, d / "hostile.tgz", transform)


def _slip(good: Path, d: Path, tok: str) -> Path:
    return hb.rewrite(good, d / "slip.tgz", hb.add_member(f"{{top}}/../../slip-{tok}.txt", b"pwned\n"))


def _absolute(good: Path, d: Path, tok: str) -> Path:
    return hb.rewrite(good, d / "abs.tgz", hb.add_member(f"/tmp/gpuforensics-abs-{tok}.txt", b"pwned\n"))


def _special(kind: str, target: str = "/etc/passwd") -> Callable[[Path, Path, str], Path]:
    return lambda good, d, tok: hb.rewrite(
        good, d / f"{kind}.tgz", hb.add_member("{top}/host/special-" + tok, hb.special_member(kind, "", target)))


def _manifest_edit(edit: Callable[[bytes], bytes | None]) -> Callable[[Path, Path, str], Path]:
    def t(top: str, members: list[tuple[str, bytes]]) -> list[hb.Member]:
        out: list[hb.Member] = []
        for name, data in members:
            if name == "manifest.json":
                new = edit(data)
                if new is None:
                    continue
                data = new
            out.append((f"{top}/{name}", data))
        return out
    return _rw(t)


def _json_edit(fn: Callable[[dict], None]) -> Callable[[bytes], bytes]:
    def e(data: bytes) -> bytes:
        m = json.loads(data)
        fn(m)
        return json.dumps(m).encode()
    return e


def _member_edit(target: str, new: bytes | None) -> Callable[[Path, Path, str], Path]:
    def t(top: str, members: list[tuple[str, bytes]]) -> list[hb.Member]:
        return [(f"{top}/{n}", new if n == target else d) for n, d in members if not (n == target and new is None)]
    return _rw(t)


def _truncated(good: Path, d: Path, _tok: str) -> Path:
    data = good.read_bytes()
    p = d / "truncated.tgz"
    p.write_bytes(data[: len(data) // 2])
    return p


def _gzip_of(payload: bytes, name: str) -> Callable[[Path, Path, str], Path]:
    import gzip

    def b(_good: Path, d: Path, _tok: str) -> Path:
        p = d / name
        p.write_bytes(gzip.compress(payload))
        return p
    return b


def _raw(payload: bytes, name: str) -> Callable[[Path, Path, str], Path]:
    def b(_good: Path, d: Path, _tok: str) -> Path:
        p = d / name
        p.write_bytes(payload)
        return p
    return b


HOSTILE = [
    Hostile("tar-slip", _slip, needles=("escaping",),
            outside=lambda tmp, tok: [tmp.parent / f"slip-{tok}.txt", tmp / f"slip-{tok}.txt",
                                      tmp.parent.parent / f"slip-{tok}.txt"]),
    Hostile("absolute-path", _absolute, needles=("absolute",),
            outside=lambda _tmp, tok: [Path(f"/tmp/gpuforensics-abs-{tok}.txt")]),
    Hostile("symlink", _special("sym"), needles=("link member refused",)),
    Hostile("hardlink", _special("hard"), needles=("link member refused",)),
    Hostile("hardlink-inside", _special("hard", "x/host/host.json"), needles=("link member refused",)),
    Hostile("char-device", _special("chr"), needles=("device",)),
    Hostile("block-device", _special("blk"), needles=("device",)),
    Hostile("fifo", _special("fifo"), needles=("FIFO",)),
    Hostile("gzip-bomb", lambda _g, d, _t: hb.gzip_bomb(d / "bomb.tgz"), needles=("cap",),
            verify_args=("--max-bundle-mb", "16")),
    Hostile("gzip-bomb-default-caps", lambda _g, d, _t: hb.gzip_bomb(d / "bomb.tgz"), needles=("cap",)),
    Hostile("pax-header-bomb", lambda _g, d, _t: hb.pax_header_bomb(d / "pax.tgz"), needles=("refused",),
            verify_args=("--max-bundle-mb", "16")),
    Hostile("100k-members", lambda _g, d, _t: hb.many_members(d / "many.tgz"), needles=("more than 50000 members",)),
    Hostile("100k-members-low-cap", lambda _g, d, _t: hb.many_members(d / "many.tgz"),
            needles=("more than 1000 members",), verify_args=("--max-members", "1000")),
    Hostile("truncated-gzip", _truncated, needles=("truncated or corrupt",)),
    Hostile("not-gzip", _raw(b"this is a text file, not a bundle\n" * 20, "notes.tgz"), needles=("not gzip",)),
    Hostile("gzip-not-tar", _gzip_of(b"hello, not a tarball\n" * 100, "text.tgz"), needles=("not a valid tar",)),
    Hostile("empty-file", _raw(b"", "empty.tgz"), needles=("not gzip",)),
    Hostile("manifest-missing", _manifest_edit(lambda _d: None), needles=("no manifest.json",)),
    Hostile("manifest-not-json", _manifest_edit(lambda d: d[: len(d) // 2]), needles=("manifest.json is not valid JSON",)),
    Hostile("manifest-a-list", _manifest_edit(lambda _d: b"[1, 2, 3]"), needles=("not a gpuforensics bundle",)),
    Hostile("manifest-other-format", _manifest_edit(_json_edit(lambda m: m.update(format="something-else"))),
            needles=("not a gpuforensics bundle",)),
    Hostile("manifest-members-not-a-list", _manifest_edit(_json_edit(lambda m: m.update(members=5))),
            needles=("no list of members",)),
    Hostile("manifest-members-missing", _manifest_edit(_json_edit(lambda m: m.pop("members"))),
            needles=("no list of members",)),
    Hostile("unknown-format-version", _manifest_edit(_json_edit(lambda m: m.update(format_version=99))),
            needles=("format_version 99",)),
    Hostile("two-top-directories", _rw(lambda top, ms: [*hb.full(top, ms), ("other-top/host/x", b"x")]),
            needles=("two top directories",)),
    Hostile("duplicate-member", _rw(lambda top, ms: [*hb.full(top, ms), (f"{top}/host/host.json", b"{}")]),
            needles=("duplicate member host/host.json",)),
    Hostile("unsafe-member-name", _rw(lambda top, ms: [*hb.full(top, ms), (f"{top}/host/a b;rm", b"x")]),
            needles=("unsafe member name",)),
    # integrity failures: readable bundles whose members do not match the manifest (verify: exit 1)
    Hostile("hash-mismatch", _member_edit("host/proc/loadavg", b"9.99 0.02 0.03 1/100 4242\n"),
            exit_code=1, needles=("integrity check failed", "hash mismatch: host/proc/loadavg")),
    Hostile("size-mismatch", _member_edit("host/host.json", b"{}\n"),
            exit_code=1, needles=("size mismatch: host/host.json",)),
    Hostile("missing-member", _member_edit("host/host.json", None),
            exit_code=1, needles=("missing member: host/host.json",)),
    Hostile("extra-member", _rw(lambda top, ms: [*hb.full(top, ms), (f"{top}/host/extra.txt", b"planted\n")]),
            exit_code=1, needles=("extra member not in manifest: host/extra.txt",)),
]


@pytest.fixture(scope="module")
def genuine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hb.build_bundle(tmp_path_factory.mktemp("genuine"))


@pytest.mark.parametrize("case", HOSTILE, ids=[h.id for h in HOSTILE])
def test_hostile_bundle_is_refused(case: Hostile, genuine: Path, tmp_path: Path) -> None:
    tok = uuid.uuid4().hex[:12]
    src = tmp_path / "in"
    src.mkdir()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    bundle = case.build(genuine, src, tok)
    assert bundle.stat().st_size < 8 << 20, "hostile bundles stay small on disk"
    before = listing(tmp_path)
    parent_before = sorted(p.name for p in tmp_path.parent.iterdir())

    t0 = time.monotonic()
    v = run_cli("verify", str(bundle), *case.verify_args, cwd=cwd)
    elapsed = time.monotonic() - t0
    assert_one_line_error(v, case.exit_code, *case.needles)
    if case.exit_code == 2:  # the reader itself refuses it: every reading command does the same
        i = run_cli("inspect", str(bundle), *case.verify_args, cwd=cwd)
        assert_one_line_error(i, 2, *case.needles)
        if _has_analysis():
            a = run_cli("analyze", str(bundle), *case.verify_args, cwd=cwd)
            assert_one_line_error(a, 2, *case.needles)
    # bombs and floods stop at the cap: seconds, not the minutes that inflating 4 GiB would take
    assert elapsed < 20, f"verify took {elapsed:.1f} s"

    assert listing(tmp_path) == before, "a refused bundle must not write anything"
    assert sorted(p.name for p in tmp_path.parent.iterdir()) == parent_before
    for p in case.outside(tmp_path, tok):
        assert not p.exists(), f"{p} was written"


@pytest.mark.parametrize("args", [("verify",), ("inspect",)])
def test_missing_and_directory_arguments(args: tuple[str, ...], tmp_path: Path) -> None:
    assert_one_line_error(run_cli(*args, str(tmp_path / "nope.tgz"), cwd=tmp_path), 2, "no such file")
    assert_one_line_error(run_cli(*args, str(tmp_path), cwd=tmp_path), 2, "directory")


def test_gzip_bomb_stops_in_well_under_a_second_of_work(tmp_path: Path) -> None:
    """The 4 GiB member is refused from its header: far less time than inflating it would take."""
    bomb = hb.gzip_bomb(tmp_path / "bomb.tgz")
    t0 = time.monotonic()
    v = run_cli("verify", "--max-bundle-mb", "16", str(bomb), cwd=tmp_path)
    elapsed = time.monotonic() - t0
    assert_one_line_error(v, 2, "4294967296 bytes", "cap")
    baseline0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import forensics.cli"], check=True, timeout=60)
    baseline = time.monotonic() - baseline0
    assert elapsed < baseline + 3, (elapsed, baseline)


def test_integrity_failure_names_every_member(genuine: Path, tmp_path: Path) -> None:
    def t(top: str, ms: list[tuple[str, bytes]]) -> list[hb.Member]:
        return [(f"{top}/{n}", d + b" " if n.startswith("host/") else d) for n, d in ms]
    bad = hb.rewrite(genuine, tmp_path / "bad.tgz", t)
    line = assert_one_line_error(run_cli("verify", str(bad), cwd=tmp_path), 1)
    for name in ("host/host.json", "host/proc/loadavg"):
        assert f"hash mismatch: {name}" in line


def test_member_caps_count_members_not_bytes(tmp_path: Path) -> None:
    """The cap counts archive members (evidence plus manifest.json): exactly at the cap passes."""
    good = hb.build_bundle(tmp_path, {f"host/m{i}": b"x" for i in range(5)})
    ok = run_cli("verify", "--max-members", "6", str(good), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "5 members" in ok.stdout
    assert_one_line_error(run_cli("verify", "--max-members", "5", str(good), cwd=tmp_path), 2, "more than 5 members")


def test_no_traceback_even_with_a_tarball_we_did_not_write(tmp_path: Path) -> None:
    """A plain tar.gz of files (someone's logs) is a clear 'not a bundle', not a crash."""
    (tmp_path / "a.txt").write_text("log\n")
    with tarfile.open(tmp_path / "logs.tgz", "w:gz") as tar:
        tar.add(tmp_path / "a.txt", arcname="logs/a.txt")
    assert_one_line_error(run_cli("verify", str(tmp_path / "logs.tgz"), cwd=tmp_path), 2, "no manifest.json")


# -- every collector on this machine ---------------------------------------------------------


def test_full_capture_with_sampling_on_this_machine(tmp_path: Path) -> None:
    """Every registered collector runs (whatever this machine lacks is 'unavailable', never a crash),
    a short sampling window is recorded, and the bundle verifies and inspects."""
    t0 = time.monotonic()
    proc = run_cli("capture", "-o", str(tmp_path), "--duration", "1", "--interval", "0.5", "--timeout", "60",
                   cwd=tmp_path)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    path = Path(proc.stdout.strip())
    assert elapsed < 60 + 1 + 15, f"capture took {elapsed:.0f} s"
    manifest = hb.manifest_of(path)
    listed = run_cli("collectors", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]
    assert [c["name"] for c in manifest["collectors"]] == names
    for c in manifest["collectors"]:
        assert c["status"] in ("ok", "partial", "failed", "unavailable", "skipped"), c
        spec = spec_named(c["name"])
        if spec is not None and spec.configured_by is not None:  # optional (prometheus): not configured here
            assert c["status"] == "skipped" and c["error"].startswith("not configured ("), c
            continue
        assert c["status"] != "skipped", f"{c['name']} was skipped in a full capture: {c['error']}"
        if c["status"] in ("failed", "unavailable", "partial"):
            assert c["error"] and "\n" not in c["error"], c
        if "sampling" in c:
            assert c["sampling"]["ticks"] is None or c["sampling"]["ticks"] >= 1, c
    assert next(c for c in manifest["collectors"] if c["name"] == "host")["status"] == "ok"
    assert manifest["capture"]["window"]["duration_s"] == 1.0
    v = run_cli("verify", str(path), cwd=tmp_path)
    assert v.returncode == 0, v.stderr
    i = run_cli("inspect", str(path), cwd=tmp_path)
    assert i.returncode == 0, i.stderr
    for c in manifest["collectors"]:
        assert re.search(rf"^\s+{re.escape(c['name'])}\s+{c['status']}\b", i.stdout, re.M), c["name"]
    if _has_analysis():
        out = tmp_path / "analysis.json"
        a = run_cli("analyze", str(path), "-f", "json", "-o", str(out), cwd=tmp_path)
        assert a.returncode == 0, a.stderr
        assert json.loads(out.read_text())


def test_manifest_fields_of_the_wrong_type_never_crash(genuine: Path, tmp_path: Path) -> None:
    """Members intact, descriptive fields garbled: verify passes, nothing ends in a traceback."""
    build = _manifest_edit(_json_edit(lambda m: m.update(
        capture="x", host=[1], tool=5, redaction=5,
        collectors=[1, {"name": 5, "status": [], "duration_s": "x", "error": {"a": 1}}])))
    bundle = build(genuine, tmp_path, "")
    for args in (["verify"], ["inspect"], ["inspect", "-f", "json"], ["analyze"], ["analyze", "-f", "json"]):
        if args[0] == "analyze" and not _has_analysis():
            continue
        p = run_cli(*args, str(bundle), cwd=tmp_path)
        assert "Traceback" not in p.stderr and p.returncode in (0, 2), (args, p.returncode, p.stderr)
        if p.returncode == 2:
            assert_one_line_error(p, 2)
        elif args[0] != "analyze":
            assert p.stdout


def test_capture_never_overwrites_an_existing_bundle(tmp_path: Path) -> None:
    """Bundles already named for the next seconds are left alone; capture fails with exit 2."""
    import socket
    from datetime import UTC, datetime, timedelta

    from forensics.bundle.format import bundle_stem

    now = datetime.now(UTC)
    planted = {}
    for s in range(-1, 30):
        p = tmp_path / f"{bundle_stem(socket.gethostname(), now + timedelta(seconds=s))}.tgz"
        p.write_bytes(b"precious evidence")
        planted[p] = p.stat().st_mtime_ns
    proc = run_cli("capture", "-o", str(tmp_path), "--only", "host", cwd=tmp_path)
    assert_one_line_error(proc, 2, "refusing to overwrite")
    for p, mtime in planted.items():
        assert p.read_bytes() == b"precious evidence" and p.stat().st_mtime_ns == mtime
    assert sorted(tmp_path.iterdir()) == sorted(planted)  # no staging directory or partial file left


@pytest.mark.parametrize("args,needle", [
    (["--since", "yesterday"], "--since"),
    (["--set", "novalue"], "--set"),
    (["--only", "host", "--skip", "nope"], "--skip"),
])
def test_capture_option_errors(tmp_path: Path, args: list[str], needle: str) -> None:
    assert_one_line_error(run_cli("capture", "-o", str(tmp_path), *args, cwd=tmp_path), 2, needle)
    assert list(tmp_path.iterdir()) == []
