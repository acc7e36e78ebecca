"""``gpuforensics sanitize`` as a user runs it: on every sample bundle, on a two-node incident, on a
bundle that carries the flight recorder's segments; the copy verifies, its analysis is the
original's with the pseudonyms (kinds, severities, subjects, evidence at the same locators, every
excerpt re-read from the copy), and no original name is left in any member's bytes or path."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis import analyze_bundles
from forensics.bundle.reader import open_bundle
from tests.golden.test_golden import BUNDLES
from tests.support.analysis_bundles import GIB, T0, BundleSpec
from tests.support.sanitized import (
    MapOracle,
    assert_excerpts_reread,
    assert_no_original_left,
    comparable_findings,
    json_field_names,
)

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("user", "namespace", "pod", "container", "image")
DNS = ("hostname", "domain")


def gf(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})


def sanitize(tmp: Path, *bundles: Path, map_name: str = "incident.map.json") -> tuple[list[Path], Path]:
    out, map_path = tmp / "outside", tmp / map_name
    res = gf("sanitize", *bundles, "-o", out, "--map", map_path)
    assert res.returncode == 0, res.stderr
    copies = [Path(line.split("  (from ", 1)[0]) for line in res.stdout.splitlines()]
    assert len(copies) == len(bundles) and all(c.parent == out for c in copies), res.stdout
    return copies, map_path


def assert_same_analysis(originals: list[Path], copies: list[Path], map_path: Path) -> MapOracle:
    oracle = MapOracle(map_path)
    for copy in copies:
        res = gf("verify", copy)
        assert res.returncode == 0, res.stderr
    before, after = analyze_bundles(originals), analyze_bundles(copies)
    names = {o.name: c.name for o, c in zip(originals, copies, strict=True)}
    assert comparable_findings(after, None, {}) == comparable_findings(before, oracle, names)
    assert [r["kind"] for r in after["ruled_out"]] == [r["kind"] for r in before["ruled_out"]]
    assert sorted(oracle.text(n["host"]) for n in before["nodes"]) == sorted(n["host"] for n in after["nodes"])
    if before["findings"]:
        assert assert_excerpts_reread(before, after, copies, oracle) > 0
    for original, copy in zip(originals, copies, strict=True):  # lines kept, JSON still JSON
        before_members, after_members = open_bundle(original).members, open_bundle(copy).members
        assert sorted(map(oracle.text, before_members)) == sorted(after_members)
        for name, data in before_members.items():
            new = bytes(after_members[oracle.text(name)])
            if not name.endswith(".gz"):
                assert new.count(b"\n") == bytes(data).count(b"\n"), name
            if name.endswith(".json"):
                json.loads(new)
            elif name.endswith(".jsonl"):
                assert all(json.loads(line) is not None for line in new.splitlines() if line.strip())
    fields = set().union(*(json_field_names(o) for o in originals))
    for copy in copies:
        assert_no_original_left(copy, oracle.originals(*NAMES), oracle.originals(*DNS), fields)
    return oracle


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.stem for b in BUNDLES])
def test_every_sample_bundle_sanitised_analyses_the_same(tmp_path: Path, bundle: Path) -> None:
    (copy,), map_path = sanitize(tmp_path, bundle)
    oracle = assert_same_analysis([bundle], [copy], map_path)
    assert "gpu-07" in oracle.pairs and oracle.pairs["gpu-07"] in copy.name
    manifest = open_bundle(copy).manifest
    sanitized = manifest["sanitized"]
    assert sanitized["replacements"]["hostname"] > 0 and sanitized["names"]["hostname"] >= 1
    assert sanitized["source_sha256"] == open_bundle(bundle).file_sha256
    assert manifest["host"]["hostname"] == oracle.pairs["gpu-07"]
    assert stat.S_IMODE(map_path.stat().st_mode) == 0o600
    opened = open_bundle(copy)
    content = b"".join(bytes(d) for d in opened.members.values()) + json.dumps(opened.manifest).encode()
    assert b"gpuforensics-sanitize-map" not in content and str(map_path).encode() not in content


def _node(host: str, peer: str, ip: str, peer_ip: str, mac: str) -> BundleSpec:
    """One node of an incident: ``notebook`` (a private image, no GPU asked) takes GPU 0 from
    ``trainer``; the node's kernel log names its peer node, addresses and a user's home."""
    b = BundleSpec(host=host, start=T0, duration_s=60)
    b.gpu(0)
    image = "registry.acme-corp.net:5000/research/notebook:v3"
    trainer = b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=0", "USER=alice", "HOME=/home/alice"])
    notebook = b.container("notebook", image=image, env=["USER=bob"])
    b.process(4101, "python", container=trainer, environ=["USER=alice", "HOME=/home/alice", "PATH=/usr/bin"])
    b.process(4202, "python", container=notebook, environ=["USER=bob", "PATH=/usr/bin"])

    def gpu0(s: float) -> tuple[float, int, dict[int, tuple[int, float | None]]]:
        if s < 20:
            return 96, 30 * GIB, {4101: (30 * GIB, 95.0)}
        return 99, 76 * GIB, {4101: (30 * GIB, 7.0), 4202: (46 * GIB, 88.0)}

    b.gpu_series(0, range(0, 60), gpu0)
    b.kmsg(T0 + 5, f"eth0: link up, address {mac}, {ip}/24 via fe80::3efd:feff:fe12:{mac[-5:].replace(':', '')}")
    b.kmsg(T0 + 6, f"nccl: rank 1 on {peer}.dc1.acme-corp.net ({peer_ip}) unreachable from {host}")
    b.kmsg(T0 + 7, "python[4101]: opening /home/alice/ckpt/step-900.pt")
    return b


def test_two_node_incident_same_pseudonyms_and_same_analysis(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = _node("gpu-a7", "gpu-b8", "10.20.30.41", "10.20.30.42", "3c:fd:fe:12:34:41").write(tmp_path / "a")
    b = _node("gpu-b8", "gpu-a7", "10.20.30.42", "10.20.30.41", "3c:fd:fe:12:34:42").write(tmp_path / "b")
    copies, map_path = sanitize(tmp_path, a, b)
    oracle = assert_same_analysis([a, b], copies, map_path)
    names = json.loads(map_path.read_text())["names"]
    assert {"gpu-a7", "gpu-b8", "registry.acme-corp.net"} <= set(names["hostname"])
    assert set(names["domain"]) == {"dc1.acme-corp.net", "acme-corp.net"}
    assert {"alice", "bob"} <= set(names["user"]) and {"trainer", "notebook"} <= set(names["container"])
    assert names["image"] == {"registry.acme-corp.net:5000/research/notebook": "registry.example/image-0001"}
    assert {"10.20.30.41", "10.20.30.42"} <= set(names["ipv4"]) and len(names["mac"]) == 2 and names["ipv6"]
    # the same pseudonyms in both copies: node b's name as a's kernel log gives it, as b's own host
    kmsg_a = open_bundle(copies[0]).members["kernel/kmsg.txt"].decode()
    host_b = open_bundle(copies[1]).manifest["host"]["hostname"]
    assert f"rank 1 on {host_b}.{names['domain']['dc1.acme-corp.net']} ({names['ipv4']['10.20.30.42']})" in kmsg_a
    assert f"/home/{names['user']['alice']}/ckpt/step-900.pt" in kmsg_a
    image = json.loads(next(d for m, d in open_bundle(copies[1]).members.items()
                            if m.startswith("docker/images/") and b"registry" in d))
    assert image["RepoTags"] == ["registry.example/image-0001:v3"]
    assert all(oracle.pairs[h] in c.name for h, c in zip(("gpu-a7", "gpu-b8"), copies, strict=True))

    # one bundle at a time with the same map: the same pseudonyms again, the map unchanged
    kept = map_path.read_bytes()
    res = gf("sanitize", b, "-o", tmp_path / "again", "--map", map_path)
    assert res.returncode == 0, res.stderr
    (again,) = (tmp_path / "again").glob("*.tgz")
    assert again.name == copies[1].name and map_path.read_bytes() == kept
    assert open_bundle(again).members["kernel/kmsg.txt"] == open_bundle(copies[1]).members["kernel/kmsg.txt"]


def test_bundles_read_twice_when_too_large_to_hold_give_the_same_copies(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the memory budget every bundle is read once to learn the names and again to rewrite."""
    import forensics.bundle.sanitize as sanitize_module

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = _node("gpu-a7", "gpu-b8", "10.20.30.41", "10.20.30.42", "3c:fd:fe:12:34:41").write(tmp_path / "a")
    b = _node("gpu-b8", "gpu-a7", "10.20.30.42", "10.20.30.41", "3c:fd:fe:12:34:42").write(tmp_path / "b")
    held = sanitize_module.sanitize_bundles([a, b], tmp_path / "held", tmp_path / "m1.json")
    monkeypatch.setattr(sanitize_module, "_HOLD_BYTES", 0)
    streamed = sanitize_module.sanitize_bundles([a, b], tmp_path / "streamed", tmp_path / "m2.json")
    assert (tmp_path / "m1.json").read_bytes() == (tmp_path / "m2.json").read_bytes()
    for x, y in zip(held, streamed, strict=True):
        assert x.output.name == y.output.name and x.counts == y.counts
        assert open_bundle(x.output).members == open_bundle(y.output).members


def test_a_cluster_directory_stands_for_its_bundles_and_its_summary_is_copied(tmp_path: Path) -> None:
    """A `cluster capture` directory (NODE.tgz and cluster.json, a node that gave no bundle): the
    copies' directory has a sanitised cluster.json naming the copies, which `analyze` reads."""
    from forensics.bundle.cluster_dir import CLUSTER_FORMAT, bundles_in_directory

    incident = tmp_path / "incident"
    incident.mkdir()
    nodes = []
    for host, peer, ip, peer_ip, mac in (("gpu-a7", "gpu-b8", "10.20.30.41", "10.20.30.42", "3c:fd:fe:12:34:41"),
                                         ("gpu-b8", "gpu-a7", "10.20.30.42", "10.20.30.41", "3c:fd:fe:12:34:42")):
        written = _node(host, peer, ip, peer_ip, mac).write(incident)
        kept = written.rename(incident / f"{host}.tgz")
        nodes.append({"node": host, "status": "ok", "pod": f"gpuforensics-{host}", "bundle": kept.name,
                      "bundle_name": written.name.removesuffix(".tgz"), "sha256": "x", "bytes": 1, "error": None})
    nodes.append({"node": "gpu-c9", "status": "failed", "pod": "gpuforensics-gpu-c9", "bundle": None,
                  "error": "exec on gpuforensics-gpu-c9: connection to gpu-c9.dc1.acme-corp.net (10.20.30.43) refused"})
    (incident / "cluster.json").write_text(json.dumps({"format": CLUSTER_FORMAT, "format_version": 1, "nodes": nodes,
                                                       "selection": {"nodes": ["gpu-a7", "gpu-b8", "gpu-c9"]}}))
    out, map_path = tmp_path / "outside", tmp_path / "m.json"
    res = gf("sanitize", incident, "-o", out, "--map", map_path)
    assert res.returncode == 0, res.stderr
    copies = sorted(out.glob("*.tgz"))
    kept, missing = bundles_in_directory(out)  # as `analyze outside/` reads it
    oracle = assert_same_analysis([incident / "gpu-a7.tgz", incident / "gpu-b8.tgz"], kept, map_path)
    assert sorted(kept) == copies and len(missing) == 1
    summary = (out / "cluster.json").read_text()
    for original in ("gpu-a7", "gpu-b8", "gpu-c9", "10.20.30.43", "acme-corp", "dc1"):
        # as a word: "dc1" also stands inside a copy's SHA-256 now and then (a hex digest is no name)
        assert not re.search(rf"(?<![0-9A-Za-z]){re.escape(original)}(?![0-9A-Za-z])", summary), original
    assert f"node {oracle.pairs['gpu-c9']}: no bundle (failed: exec on " in missing[0]
    assert stat.S_IMODE((out / "cluster.json").stat().st_mode) == 0o600
    names = json.loads(map_path.read_text())["names"]  # met only in the summary, kept in the map too
    assert "10.20.30.43" in names["ipv4"] and "gpu-c9" in names["hostname"]
    res = gf("analyze", out, "-f", "json")
    assert res.returncode == 0 and len(json.loads(res.stdout)["bundles"]) == 2, res.stderr


def test_ring_segments_rewritten_and_re_hashed(tmp_path: Path) -> None:
    from tests.support.ring_bundle import capture_since, ring_from_sample

    ring_from_sample(tmp_path / "ring")
    bundle = capture_since(tmp_path / "ring", tmp_path / "cap", "2020-01-01T00:00:00Z")
    assert any(m.startswith("ring/segments/") and m.endswith(".gz") for m in open_bundle(bundle).members)
    (copy,), map_path = sanitize(tmp_path, bundle)
    assert_same_analysis([bundle], [copy], map_path)
    prov = json.loads(open_bundle(copy).members["ring/provenance.json"])
    assert prov["segments"] and all(s["sha256_of"].endswith("sanitize") for s in prov["segments"])


@pytest.mark.parametrize(("case", "code", "message"), [
    ("broken bundle", 2, "not gzip-compressed"),
    ("existing output", 2, "refusing to overwrite existing output"),
    ("unreadable map", 2, "not a sanitize map"),
    ("map a directory", 2, "is a directory"),
    ("map inside the output", 2, "must never travel"),
    ("output is the input directory", 2, "beside the originals"),
    ("altered bundle", 1, "integrity check failed, not sanitised"),
    ("unredacted bundle", 2, "captured with --no-redact"),
])
def test_bad_input_one_line_and_exit_code(tmp_path: Path, case: str, code: int, message: str) -> None:
    sample = BUNDLES[0]
    args: list[Any] = [sample, "-o", tmp_path / "out", "--map", tmp_path / "m.json"]
    if case == "broken bundle":
        (tmp_path / "x.tgz").write_bytes(b"not a bundle")
        args[0] = tmp_path / "x.tgz"
    elif case == "existing output":
        assert gf("sanitize", *args).returncode == 0
    elif case == "unreadable map":
        (tmp_path / "m.json").write_text("{broken")
    elif case == "map a directory":
        (tmp_path / "m.json").mkdir()
    elif case == "map inside the output":
        args[-1] = tmp_path / "out" / "m.json"
    elif case == "output is the input directory":
        (tmp_path / "out").mkdir()
        args[0] = tmp_path / "out"
    elif case == "altered bundle":
        from tests.support.hostile_bundles import full, rewrite

        def alter(top: str, members: list[tuple[str, bytes]]) -> list[Any]:
            return full(top, [(n, d.replace(b"gpu-07", b"gpu-08") if n == "host/host.json" else d)
                              for n, d in members])

        args[0] = rewrite(sample, tmp_path / "altered.tgz", alter)
    elif case == "unredacted bundle":  # its secrets are verbatim: a copy for outside would carry them
        from tests.support.hostile_bundles import full, rewrite

        def unredacted(top: str, members: list[tuple[str, bytes]]) -> list[Any]:
            def manifest(data: bytes) -> bytes:
                doc = json.loads(data)
                doc["redaction"] = {"enabled": False, "counts": {}}
                return json.dumps(doc).encode()
            return full(top, [(n, manifest(d) if n == "manifest.json" else d) for n, d in members])

        args[0] = rewrite(sample, tmp_path / "unredacted.tgz", unredacted)
        assert gf("verify", args[0]).returncode == 0
    res = gf("sanitize", *args)
    assert res.returncode == code, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuforensics: error: ") and message in lines[0], res.stderr
    if case != "existing output":
        assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
