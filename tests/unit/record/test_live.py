"""The recorder's live state, fed a sample bundle's members as the samplers' records (one record
per member write, one per tick of a JSON-lines member), and compared with what the analysis says."""

from __future__ import annotations

import json
import tarfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis import analyze_bundles
from forensics.record.live.state import LiveState
from forensics.record.live.summaries import SUMMARIZED, summarize
from forensics.record.protocol import decode_header, encode_header

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "sample_bundles"
REPLAYED = ("nvml/", "proc/", "docker/", "cgroup/samples.jsonl", "kernel/window.jsonl")


def replay(bundle: Path, state: LiveState, until_tick: int | None = None, from_tick: int = 0,
           summaries: bool = False, child: Callable[[str, Any], Any] | None = None) -> None:
    """Feed ``state`` the bundle's members in the order a recorder would have received them;
    ``summaries``: with each sampled line's summary as a sampler child sends it (through JSON);
    ``child``: made by this summarizer (a sampler child's, given each line's object) instead of
    ``summarize``, through the frame header's encoding."""
    with tarfile.open(bundle) as tar:
        members = {m.name.split("/", 1)[1]: tar.extractfile(m).read()  # type: ignore[union-attr]
                   for m in tar.getmembers() if m.isfile() and "/" in m.name}
    writes = [(n, d) for n, d in sorted(members.items()) if n.startswith(REPLAYED) and not n.endswith(".jsonl")]
    for name, data in writes if from_tick == 0 else ():
        state.feed(0.0, 0.0, name, "write", data.decode())
    ticks: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for name, data in sorted(members.items()):
        if not name.endswith(".jsonl") or not name.startswith(REPLAYED):
            continue
        for line in data.decode().splitlines():
            tick = json.loads(line).get("tick", 0)
            ticks[tick if isinstance(tick, int) else 0].append((name, line))
    for tick in sorted(ticks):
        if until_tick is not None and tick > until_tick:
            break
        if tick < from_tick:
            continue
        by_member: dict[str, list[str]] = defaultdict(list)
        for name, line in ticks[tick]:
            by_member[name].append(line)
        for name, lines in by_member.items():
            summary = None
            if child is not None and name in SUMMARIZED:
                got = [x for x in (child(name, json.loads(ln)) for ln in lines) if x is not None]
                summary = decode_header(encode_header({"summary": got}))["summary"]
            elif summaries and name in SUMMARIZED:
                summary = json.loads(json.dumps([x for x in (summarize(name, json.loads(ln)) for ln in lines)
                                                 if x is not None]))
            state.feed(0.0, 0.0, name, "append", "\n".join(lines) + "\n", summary)


def test_gpu_figures_and_grants_match_the_analysis() -> None:
    bundle = SAMPLES / "unallocated-gpu-use.tgz"
    state = LiveState()
    replay(bundle, state)
    assert state.refresh() and not state.refresh()  # once on change, then nothing to do
    gpus = state.gpus()
    assert [g.index for g in gpus] == [0, 1] and gpus[0].util_pct == 99 and gpus[0].memory_used_pct > 90
    # each GPU named as nvml/devices.json names it (its UUID is under nvml.nvmlDeviceGetUUID)
    assert [g.name for g in gpus] == ["NVIDIA H100 80GB HBM3"] * 2
    by_name = {p.owner.container_name: p for p in state.processes()}
    assert set(by_name) == {"trainer", "notebook"}, by_name
    assert (by_name["trainer"].grant.allocated, by_name["trainer"].grant.grant) == (True, "explicit")
    nb = by_name["notebook"]
    assert (nb.grant.allocated, nb.grant.grant, nb.grant.unallocated) == (False, "blanket", True)
    assert nb.used_memory_bytes and nb.used_memory_bytes > 60 << 30
    doc = analyze_bundles([bundle])
    flagged = {s["id"] for f in doc["findings"] if f["kind"] == "unallocated-gpu-use"
               for s in f["subjects"] if s["role"] == "culprit" and s["type"] == "container"}
    live_flagged = {p.owner.container_id for p in state.processes() if p.grant.unallocated}
    assert flagged == live_flagged


def test_a_new_gpu_process_makes_the_attribution_run_again() -> None:
    state = LiveState()
    replay(SAMPLES / "unallocated-gpu-use.tgz", state, until_tick=2)
    state.refresh()
    assert {p.owner.container_name for p in state.processes()} == {"trainer"}
    assert not state.dirty
    replay(SAMPLES / "unallocated-gpu-use.tgz", state, from_tick=3)
    assert state.dirty and state.refresh()
    assert {p.owner.container_name for p in state.processes()} == {"trainer", "notebook"}


def test_oom_kill_is_an_event_naming_the_container() -> None:
    state = LiveState()
    replay(SAMPLES / "memcg-oom.tgz", state)
    state.refresh()
    ooms = [e for e in state.take_events() if e.kind == "oom"]
    assert ooms and ooms[0].container_id and ooms[0].pid
    assert state.take_events() == []  # taken once


def test_throttling_and_pressure_per_interval() -> None:
    state = LiveState()
    replay(SAMPLES / "cpu-throttled-loader.tgz", state)
    state.refresh()
    throttled = [c for c in state.cgroups() if c.container_id and (c.throttled_pct or 0) > 20]
    assert throttled and throttled[0].container_name, state.cgroups()
    assert all(0 <= v <= 100 for c in state.cgroups() for r in c.psi_pct.values() for v in r.values())


@pytest.mark.parametrize("line", ["{", "[]", '{"kind": "device", "gpu_index": "x"}', '{"cgroup": 3}'])
def test_malformed_lines_are_ignored(line: str) -> None:
    state = LiveState()
    for member in ("nvml/samples.jsonl", "cgroup/samples.jsonl", "kernel/window.jsonl", "nvml/events.jsonl"):
        state.feed(0.0, 0.0, member, "append", line + "\n")
    assert state.gpus() == () and state.cgroups() == () and state.take_events() == []


def test_what_the_live_state_keeps_is_bounded() -> None:
    state = LiveState(max_identity_bytes=1 << 20)
    line = json.dumps({"pid": 1, "pad": "x" * 200}) + "\n"
    for _ in range(20_000):  # PIDs seen over a long run: the newest lines are kept, whole
        state.feed(0.0, 0.0, "proc/window.jsonl", "append", line)
    kept = state._identity["proc/window.jsonl"]
    assert len(kept) <= state.max_window_bytes and kept.endswith(b"\n") and kept.startswith(b"{")
    for i in range(3000):
        state.feed(0.0, 0.0, f"proc/{i}/cgroup", "write", "0::/" + "y" * 1000 + "\n")
    assert state._identity_bytes <= state.max_identity_bytes


def test_gpu_pids_gone_a_while_are_forgotten_at_the_next_attribution() -> None:
    state = LiveState()
    replay(SAMPLES / "unallocated-gpu-use.tgz", state)
    state.refresh()
    assert any(m.startswith("proc/6768/") for m in state._identity)
    later = json.dumps({"kind": "device", "tick": 10_000, "t": 1796021931.0 + 3600, "gpu_index": 0, "uuid": "GPU-x",
                        "nvml": {}, "processes": [{"pid": 424242, "usedGpuMemory": 1}]})
    state.feed(0.0, 0.0, "nvml/samples.jsonl", "append", later + "\n")
    assert state.refresh()
    assert not any(m.startswith(("proc/6768/", "proc/6718/")) for m in state._identity)
    assert any(m.startswith("docker/") for m in state._identity)  # only the gone PIDs' files


@pytest.mark.parametrize("bundle", sorted(SAMPLES.glob("*.tgz")), ids=lambda p: p.stem)
def test_the_samplers_summaries_fold_as_the_lines_do(bundle: Path) -> None:
    """The recorder's live state folds what the sampler children summarised (never parsing the
    lines); it must end where folding the lines' JSON ends, for every sample bundle."""
    states = []
    for summaries in (False, True):
        state = LiveState()
        replay(bundle, state, summaries=summaries)
        state.refresh()
        states.append((state.gpus(), state.processes(), state.cgroups(), state.host_psi(), state.take_events(),
                       state._nvml_tick, state.refreshes))
    assert states[0] == states[1]


def test_the_nvml_summary_reads_every_device_line_as_the_generic_reading_does() -> None:
    """The summary's processes come from one comprehension per field when a line is in the common
    shape; the entry-by-entry reading (any shape) must give the same, for every sample bundle's
    device lines and for lines out of shape."""
    from forensics.record.live import nvml as live_mod

    lines = []
    for bundle in sorted(SAMPLES.glob("*.tgz")):
        with tarfile.open(bundle) as tar:
            member = next((m for m in tar.getmembers() if m.name.endswith("/nvml/samples.jsonl")), None)
            if member is not None:
                data = tar.extractfile(member).read()  # type: ignore[union-attr]
                lines += [json.loads(ln) for ln in data.splitlines() if b'"kind": "device"' in ln]
    assert any(line.get("processes") for line in lines)
    odd = [{"pid": 7, "usedGpuMemory": None, "mig_uuid": "MIG-x"}, {"pid": True}, {"usedGpuMemory": 5}, "x",
           {"pid": 8, "usedGpuMemory": "lots"}, {"pid": 9, "mig_uuid": ""}]
    lines += [{**lines[0], "processes": odd}, {**lines[0], "processes": odd[:1]}, {**lines[0], "processes": odd[-1:]}]
    sm_of = {7: 12.5, 9: 0}
    fast_ones = 0
    for line in lines:
        plist = line.get("processes") or []
        fast = live_mod._processes_fast(plist, sm_of)
        assert fast is None or fast == live_mod._processes(plist, sm_of)
        fast_ones += fast is not None
    assert fast_ones >= 10  # the sample bundles' lines with processes take the fast reading
    assert live_mod._processes_fast(odd[:1], sm_of) == [[7], ["MIG-x"], [None], [12.5]]
    assert live_mod._processes(odd, sm_of) == [[7, 8, 9], ["MIG-x", None, ""], [None, None, None], [12.5, None, 0]]


def test_a_pod_granted_by_a_dra_claim_is_dra_live() -> None:
    """The DRA node's sample with the members the recorder's Kubernetes follower writes (its pods,
    their ResourceClaims, the node's ResourceSlices: forensics.collectors.kubernetes.follow_objects):
    the live grant of each claim's pod on its claim's GPU is ``dra`` naming the claim, and the pod on
    another GPU is unallocated, as the analysis says."""
    bundle = SAMPLES / "k8s-dra-node.tgz"
    state = LiveState()
    replay(bundle, state)
    state.refresh()
    assert not [p for p in state.processes() if p.grant.grant == "dra"]  # without the pods: no claim known
    with tarfile.open(bundle) as tar:
        for name in ("kubernetes/pods.json", "kubernetes/resourceclaims.json", "kubernetes/resourceslices.json"):
            member = next(m for m in tar.getmembers() if m.name.endswith("/" + name))
            state.feed(0.0, 0.0, name, "write", tar.extractfile(member).read().decode())  # type: ignore[union-attr]
    assert state.dirty and state.refresh()
    live = {p.owner.container_id: p.grant for p in state.processes()}
    doc = analyze_bundles([bundle])
    claims = {c["id"]: c["gpu_allocation"].get("claims") for c in doc["containers"]
              if c["gpu_allocation"]["kind"] == "dra"}
    accused = {s["id"] for f in doc["findings"] if f["kind"] == "unallocated-gpu-use"
               for s in f["subjects"] if s["role"] == "culprit" and s["type"] == "container"}
    assert accused and accused <= set(claims)  # the sample's ml/train-1 runs on another GPU than its claim's
    assert {cid for cid, g in live.items() if g.unallocated} == accused
    dra = {cid: g.claim for cid, g in live.items() if g.grant == "dra" and g.allocated}
    assert len(dra) >= 3 and dra == {cid: ", ".join(c or []) for cid, c in claims.items()
                                     if cid in live and cid not in accused}, (live, claims)
