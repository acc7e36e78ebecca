"""The flight recorder's Kubernetes events with the real client against the loopback API server:
``gpuforensics record`` follows the Events of its node and pods (list, then watch), and a later
``capture --since`` folds them in, so an OOM the API server has since forgotten is in the analysis."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from forensics.collectors.kubernetes.events import select_events
from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig
from tests.support.kube_objects import gpu_node_scenario, make_event
from tests.support.polling import wait_for
from tests.support.record_support import members, record_lines, ring_events
from tests.support.ring_bundle import ring_member

pytestmark = [pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
NODE = "gpu-node-07"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "NODE_NAME", "GPUFORENSICS_RING")}
    env.update(PYTHONPATH=str(REPO), HOME=str(home))
    return env


def _cli(*args: str, home: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", *args], env=_env(home), cwd=home,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def recorders() -> Iterator[list[subprocess.Popen[str]]]:
    """Every recorder a test starts is killed (by PID) at its end, pass or fail."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)


def _record(ring: Path, kubeconfig: Path, home: Path, started: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "forensics", "record", "--ring", str(ring), "--interval", "0.5",
                             "--sources", "kubernetes", "--kubeconfig", str(kubeconfig), "--node", NODE],
                            env=_env(home), cwd=home, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started.append(proc)
    return proc


def _stop(proc: subprocess.Popen[str]) -> dict:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _ring_events(ring: Path) -> list[dict]:
    if not (ring / "writer.json").exists():  # the recorder has not opened it yet
        return []
    return [ev for r in members(ring, "kubernetes/events.jsonl") for ev in record_lines(r)]


def _reasons(ring: Path) -> list[str]:
    return [ev["reason"] for ev in _ring_events(ring)]


def test_an_oom_the_api_server_forgot_is_folded_and_cited(tmp_path: Path, recorders: list) -> None:
    """The recorder lists the node's events, then watches: an OOM kill of a pod's process arrives
    while it runs and the API server drops the Event (TTL) before anyone captures; `capture
    --since 10m` folds the ring, and `analyze` has the OOM kill, citing the ring's member."""
    home = tmp_path / "home"
    home.mkdir()
    state = gpu_node_scenario()
    pod = next(p for p in state.pods if p["metadata"]["name"] == "trainer-0")
    other_node_pod = next(p for p in state.pods if p["spec"].get("nodeName") != NODE)
    with KubeAPIServer(state) as api:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
        ring = tmp_path / "ring"
        proc = _record(ring, kubeconfig, home, recorders)
        # what the API server held when the recorder started: listed, ours only
        wait_for(lambda: "Evicted" in _reasons(ring), 60)
        wait_for(lambda: api.watches >= 2, 30)
        at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=3)  # as node-problem-detector stamped it
        oom = api.add_event(make_event(
            pod, "OOMKilling", "Memory cgroup out of memory: Killed process 51234 (torchrun) total-vm:812345kB, "
            "anon-rss:2516582kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:6123kB oom_score_adj:999",
            at, type_="Warning", component="kernel-monitor", host=NODE))
        api.add_event(make_event(other_node_pod, "OOMKilling", "Killed process 777 (elsewhere)", at,
                                 type_="Warning", component="kernel-monitor", host="gpu-node-08"))
        wait_for(lambda: "OOMKilling" in [e["reason"] for e in _ring_events(ring)
                                          if e["metadata"]["uid"] == oom["metadata"]["uid"]], 30)
        # the Event expires from the API server before the capture
        api.set_objects(events=[e for e in api.state.events if e["metadata"]["uid"] != oom["metadata"]["uid"]])
        out = tmp_path / "out"
        out.mkdir()
        cap = _cli("capture", "--since", "10m", "--ring", str(ring), "--only", "kubernetes,ring",
                   "--kubeconfig", str(kubeconfig), "--node", NODE, "-o", str(out), "--quiet", home=home)
        assert cap.returncode == 0, cap.stderr
        status = _stop(proc)
    assert status["sources"]["kubernetes"]["status"] == "running", status
    bundle = Path(cap.stdout.strip())
    # the ring's events as the analysis rebuilds them from the segments the bundle carries
    lines = [json.loads(x) for x in ring_member(bundle, "ring/kubernetes/events.jsonl").splitlines()]
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
        live = json.loads(tar.extractfile(next(n for n in names if n.endswith("/kubernetes/events.json")
                                               and "/ring/" not in n)).read())  # type: ignore[union-attr]
    assert oom["metadata"]["uid"] in {e["metadata"]["uid"] for e in lines}
    assert oom["metadata"]["uid"] not in {e["metadata"]["uid"] for e in live["items"]}  # only the ring has it
    assert not any("elsewhere" in e["message"] for e in lines)  # another node's pod: not ours
    assert all(e["involvedObject"].get("name") == NODE or e["involvedObject"]["kind"] == "Pod" for e in lines)

    analysis = _cli("analyze", str(bundle), "-f", "json", home=home)
    assert analysis.returncode in (0, 1), analysis.stderr
    doc = json.loads(analysis.stdout)
    kills = [f for f in doc["findings"] if f["kind"] == "oom-kill"
             and any(s["type"] == "process" and s["id"] == "51234" for s in f["subjects"])]
    assert kills, [f["summary"] for f in doc["findings"]]
    cited = [e for e in kills[0]["evidence"] if e["member"] == "ring/kubernetes/events.jsonl"]
    assert cited and "OOMKilling" in cited[0]["excerpt"], kills[0]["evidence"]
    assert (kills[0]["before_capture_s"] or 0) >= 60, kills[0]  # a finding that began before the capture


def test_a_restarted_recorder_resumes_without_writing_events_twice(tmp_path: Path, recorders: list) -> None:
    """Stopped and started again, the recorder lists the events again: those already in the ring
    are not written again, one that came while it was down is."""
    home = tmp_path / "home"
    home.mkdir()
    state = gpu_node_scenario()
    node = next(n for n in state.nodes if n["metadata"]["name"] == NODE)
    with KubeAPIServer(state) as api:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
        ring = tmp_path / "ring"
        proc = _record(ring, kubeconfig, home, recorders)
        wait_for(lambda: "Evicted" in _reasons(ring), 60)
        _stop(proc)
        first = _ring_events(ring)
        down = api.add_event(make_event(node, "SystemOOM", "System OOM encountered, victim process: python, pid: 4242",
                                        datetime.now(UTC).replace(microsecond=0), type_="Warning", host=NODE))
        proc = _record(ring, kubeconfig, home, recorders)
        wait_for(lambda: "SystemOOM" in _reasons(ring), 60)
        _stop(proc)
    keys = [(e["metadata"]["uid"], e["metadata"]["resourceVersion"]) for e in _ring_events(ring)]
    assert len(keys) == len(set(keys)), "an event written twice"
    assert len(keys) == len(first) + 1 and down["metadata"]["uid"] in {k[0] for k in keys}
    assert len([e for e in ring_events(ring) if e["kind"] == "start"]) == 2


def test_an_api_server_outage_is_a_gap_and_what_came_meanwhile_is_listed(tmp_path: Path, recorders: list) -> None:
    """The API server goes away (its watches end, every request answered 503) and comes back:
    the recorder records a gap from when to when, lists again and writes the event of the outage,
    and nothing it had already written is written twice."""
    home = tmp_path / "home"
    home.mkdir()
    state = gpu_node_scenario()
    node = next(n for n in state.nodes if n["metadata"]["name"] == NODE)
    scopes = 1 + len({p["metadata"]["namespace"] for p in state.pods if p["spec"].get("nodeName") == NODE})
    with KubeAPIServer(state) as api:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
        ring = tmp_path / "ring"
        proc = _record(ring, kubeconfig, home, recorders)
        uids = {p["metadata"]["uid"] for p in state.pods if p["spec"].get("nodeName") == NODE}
        before = len(select_events(state.events, NODE, uids, None))  # what capture keeps of the same list
        wait_for(lambda: api.watches >= scopes and len(_ring_events(ring)) >= before, 60)
        api.unavailable = True
        api.end_watches()
        lost = time.time()
        wait_for(lambda: api.open_watches == 0, 10)
        meanwhile = api.add_event(make_event(node, "SystemOOM", "System OOM encountered, victim process: java, pid: 9001",
                                             datetime.now(UTC).replace(microsecond=0), type_="Warning", host=NODE))
        time.sleep(2.0)
        api.unavailable = False
        wait_for(lambda: meanwhile["metadata"]["uid"] in {e["metadata"]["uid"] for e in _ring_events(ring)}, 60)
        wait_for(lambda: [e for e in ring_events(ring) if e["kind"] == "gap"], 30)
        _stop(proc)
    keys = [(e["metadata"]["uid"], e["metadata"]["resourceVersion"]) for e in _ring_events(ring)]
    assert len(keys) == len(set(keys)) == before + 1
    gaps = [e for e in ring_events(ring) if e["kind"] == "gap" and e["source"] == "kubernetes"]
    assert len(gaps) == 1, gaps
    assert lost - 1 <= gaps[0]["from"] < gaps[0]["to"] and gaps[0]["to"] - gaps[0]["from"] >= 1.5, gaps[0]
    assert "503" in gaps[0]["reason"] or "unable to handle" in gaps[0]["reason"], gaps[0]


def test_an_expired_resource_version_is_listed_again_without_a_gap(tmp_path: Path, recorders: list) -> None:
    """The watch cache moved past the recorder's resourceVersion (410 Expired, as after an API
    server's compaction): it lists again, writes what it had not seen, and records no gap."""
    from tests.support.kube_objects import _rv

    home = tmp_path / "home"
    home.mkdir()
    state = gpu_node_scenario()
    node = next(n for n in state.nodes if n["metadata"]["name"] == NODE)
    with KubeAPIServer(state) as api:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
        ring = tmp_path / "ring"
        proc = _record(ring, kubeconfig, home, recorders)
        wait_for(lambda: api.watches >= 2 and "Evicted" in _reasons(ring), 60)
        opened = api.watches
        unseen = make_event(node, "SystemOOM", "System OOM encountered, victim process: ray, pid: 31337",
                            datetime.now(UTC).replace(microsecond=0), type_="Warning", host=NODE)
        api.state.events.append(unseen)  # in the lists only: no watch streams it
        api.compacted_rv = int(_rv())  # every version the watches hold is older
        api.end_watches()
        wait_for(lambda: unseen["metadata"]["uid"] in {e["metadata"]["uid"] for e in _ring_events(ring)}, 30)
        wait_for(lambda: api.watches >= 2 * opened, 30)  # each scope: a refused watch, then a new one
        _stop(proc)
    keys = [(e["metadata"]["uid"], e["metadata"]["resourceVersion"]) for e in _ring_events(ring)]
    assert len(keys) == len(set(keys))
    assert not [e for e in ring_events(ring) if e["kind"] == "gap"]
