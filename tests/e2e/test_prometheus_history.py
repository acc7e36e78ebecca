"""`capture --only prometheus` from a real Prometheus holding each incident's history, then `analyze`:
the same rules run on the history, and the exporter's blind spot is a finding of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.prometheus_server import (
    NodeScenario,
    misbehaving_prometheus,
    prometheus_factory,
    scenario_oom_killed_pod,
    scenario_throttled_pod,
    scenario_unlabelled_gpu_pod,
    scenario_xid_step,
)

__all__ = ["prometheus_factory"]


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def history(out: Path, url: str, sc: NodeScenario, *extra: str) -> Path:
    proc = cli("capture", "--only", "prometheus", "--prometheus", url, "--node", sc.node, "--since", _iso(sc.start),
               "--until", _iso(sc.end), "-o", str(out), "--quiet", *extra)
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip())


def analyze(bundle: Path) -> dict[str, Any]:
    proc = cli("analyze", str(bundle), "-f", "json")
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def kinds(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["kind"]: f for f in doc["findings"]}


class TestHistoryBundle:
    def test_blind_spot_from_history_alone(self, out_dir, prometheus_factory):
        sc = scenario_unlabelled_gpu_pod()
        bundle = history(out_dir, prometheus_factory(sc).url, sc)
        assert bundle.name.startswith("gpuforensics-gpu-07-"), "a history bundle is the node's, not this machine's"
        assert cli("verify", str(bundle)).returncode == 0
        doc = analyze(bundle)
        f = kinds(doc)["gpu-exporter-blind-spot"]
        assert f["severity"] == "high" and f["metrics"]["shape"] == "no-pod-named"
        assert {s["id"] for s in f["subjects"] if s["type"] == "gpu"} == {sc.expect["blind_gpu"]}
        assert abs(datetime.fromisoformat(f["start"].replace("Z", "+00:00")).timestamp() - sc.expect["onset"]) <= 15
        assert f["history"] == {"source": "prometheus", "step_s": 15.0,
                                "members": ["prometheus/query_range/DCGM_FI_DEV_GPU_UTIL.json"], "only": True}
        assert doc["nodes"][0]["history_step_s"] == 15.0
        # GPU 0 was busy too, but dcgm named trainer for it: no finding about GPU 0
        assert len([x for x in doc["findings"] if x["kind"] == "gpu-exporter-blind-spot"]) == 1
        pods = {p["namespace"] + "/" + p["name"] for p in doc["pods"]}
        assert pods == {"ml/trainer-0", "research/notebook-0"}, "gpu-08's pod is not this node's"

    def test_a_busy_nodes_memory_is_no_ghost(self, out_dir, prometheus_factory):
        """Both GPUs hold memory all along (61 000 and 52 000 MiB) and dcgm-exporter lists no process:
        its memory figures are no NVML reading with zero processes, so no gap is claimed, and the
        analysis says what it could not judge instead of ruling it out."""
        sc = scenario_unlabelled_gpu_pod()
        doc = analyze(history(out_dir, prometheus_factory(sc).url, sc))
        assert "gpu-memory-unattributed" not in kinds(doc), kinds(doc)["gpu-memory-unattributed"]["summary"]
        (lim,) = [lim for lim in doc["limitations"] if lim.startswith("gpu-memory-unattributed not judged")]
        assert "on gpu-07 (GPU 0, GPU 1): their readings come from dcgm-exporter only" in lim
        assert not [r for r in doc["ruled_out"] if r["kind"] == "gpu-memory-unattributed"], doc["ruled_out"]
        # what the history can show is still judged on it: GPU 1's memory level and its blind spot
        assert "gpu-exporter-blind-spot" in kinds(doc)

    def test_throttled_pod(self, out_dir, prometheus_factory):
        sc = scenario_throttled_pod()
        doc = analyze(history(out_dir, prometheus_factory(sc).url, sc))
        f = kinds(doc)["cpu-throttling"]
        assert [s["name"] for s in f["subjects"] if s["type"] == "pod"] == ["ml/loader-0"]
        assert f["metrics"]["throttled_ratio"] >= 0.2 and f["history"]["step_s"] == 15.0
        assert "pressure-stall" in kinds(doc)
        agree = [r for r in doc["ruled_out"] if r["statement"].startswith("dcgm-exporter named a pod whenever")]
        assert agree and agree[0]["evidence"][0]["member"] == "prometheus/queries.json", doc["ruled_out"]
        stand_in = [lim for lim in doc["limitations"] if "no cgroup data" in lim]
        assert stand_in and "Prometheus history at a 15 s step stands in for CFS throttling" in stand_in[0]

    def test_oom_killed_pod(self, out_dir, prometheus_factory):
        sc = scenario_oom_killed_pod()
        doc = analyze(history(out_dir, prometheus_factory(sc).url, sc))
        ooms = [f for f in doc["findings"] if f["kind"] == "oom-kill"]
        assert len(ooms) == 1, "cAdvisor's event and kube-state-metrics' reason are one kill"
        assert [s["name"] for s in ooms[0]["subjects"] if s["role"] == "victim"][0].startswith("data/etl-0")
        when = datetime.fromisoformat(ooms[0]["start"].replace("Z", "+00:00")).timestamp()
        assert abs(when - sc.expect["kill"]) <= 15
        assert "prometheus/query_range/container_oom_events_total.json" in ooms[0]["history"]["members"]

    @pytest.mark.parametrize("xid,kind", [(48, "gpu-xid-fault"), (79, "gpu-lost")])
    def test_xid_step_at_a_coarser_step(self, out_dir, prometheus_factory, xid, kind):
        """The counter stepping to an Xid is that Xid (79, fallen off the bus, is the GPU lost)."""
        sc = scenario_xid_step(xid=xid)
        doc = analyze(history(out_dir, prometheus_factory(sc).url, sc, "--set", "prometheus.step=1m"))
        f = kinds(doc)[kind]
        assert f["severity"] == "critical" and (kind != "gpu-xid-fault" or f["metrics"]["xid"] == xid)
        assert [s["id"] for s in f["subjects"] if s["type"] == "gpu"] == [sc.expect["xid_gpu"]]
        assert f["history"]["step_s"] == 60.0
        assert 0 <= datetime.fromisoformat(f["start"].replace("Z", "+00:00")).timestamp() - sc.expect["at"] <= 60


class TestBadInput:
    def test_unreachable_prometheus_is_unavailable_not_fatal(self, out_dir):
        proc = cli("capture", "--only", "prometheus", "--prometheus", "http://127.0.0.1:9", "--node", "gpu-07",
                   "--since", "1h", "-o", str(out_dir), "--quiet")
        assert proc.returncode == 0, proc.stderr
        manifest = _manifest(Path(proc.stdout.strip()))
        rec = {c["name"]: c for c in manifest["collectors"]}["prometheus"]
        assert rec["status"] == "unavailable" and "Connection refused" in rec["error"]

    def test_401_says_so(self, out_dir):
        with misbehaving_prometheus("401") as url:
            proc = cli("capture", "--only", "prometheus", "--prometheus", url, "--node", "gpu-07", "--since", "1h",
                       "-o", str(out_dir), "--quiet")
        rec = {c["name"]: c for c in _manifest(Path(proc.stdout.strip()))["collectors"]}["prometheus"]
        assert rec["status"] == "unavailable" and "HTTP 401" in rec["error"]

    def test_without_a_url_it_is_not_configured_and_costs_nothing(self, out_dir):
        proc = cli("capture", "--only", "host,prometheus", "-o", str(out_dir), "--quiet")
        assert proc.returncode == 0, proc.stderr
        bundle = Path(proc.stdout.strip())
        rec = {c["name"]: c for c in _manifest(bundle)["collectors"]}["prometheus"]
        assert rec["status"] == "skipped" and rec["error"].startswith("not configured (prometheus.url not given")
        doc = analyze(bundle)
        assert not [lim for lim in doc["limitations"] if "Prometheus" in lim or "prometheus" in lim]

    def test_only_prometheus_without_a_url_is_a_usage_error(self, out_dir):
        proc = cli("capture", "--only", "prometheus", "-o", str(out_dir), "--quiet")
        assert proc.returncode == 2 and "prometheus is not configured" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and not list(out_dir.iterdir())

    @pytest.mark.parametrize("args,message", [
        (("--since", "2h", "--until", "3h"), "--until (3h) is not after --since (2h)"),
        (("--until", "tomorrow"), "--until: not an ISO 8601 time"),
        (("--set", "prometheus.step=fast"), "prometheus.step='fast'"),
    ])
    def test_bad_window_or_step_is_a_usage_error(self, out_dir, args, message):
        proc = cli("capture", "--only", "prometheus", "--prometheus", "http://127.0.0.1:9", "-o", str(out_dir), *args)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def _manifest(bundle: Path) -> dict[str, Any]:
    import tarfile

    with tarfile.open(bundle) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/manifest.json"))
        f = tar.extractfile(member)
        assert f is not None
        doc: dict[str, Any] = json.loads(f.read())
        return doc
