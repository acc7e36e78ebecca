"""The recorder's Kubernetes objects kept at first sight (forensics.collectors.kubernetes.follow_objects):
a pod, claim or slice stays in the written member after it is gone, the member is written again only
on change, the gone ones are bounded, and a restarted recorder resumes from the ring's latest copy
(a real ring written by the ring's own writer)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from forensics.bundle.sink import dumps_json
from forensics.collectors.kubernetes import follow_objects
from forensics.collectors.kubernetes.follow_objects import KeptObjects, KubeObjectKeeper
from forensics.ring import RingWriter
from forensics.specs import kubernetes as kspec


def _obj(uid: str, rv: str = "1", pad: int = 0) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": uid, "namespace": "ml", "resourceVersion": rv,
                         "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
            "spec": {"pad": "x" * pad}}


def test_gone_objects_stay_after_the_live_ones_and_only_changes_count() -> None:
    kept = KeptObjects()
    assert kept.update([_obj("a"), _obj("b")])
    assert not kept.update([_obj("a"), _obj("b")])  # nothing new: no write
    assert kept.update([_obj("a", "2"), _obj("b")])  # a's resourceVersion moved
    assert kept.update([_obj("b")])  # a is deleted: still there, after the live ones
    assert [o["metadata"]["uid"] for o in kept.items()] == ["b", "a"]
    assert kept.items()[1]["metadata"]["resourceVersion"] == "2"  # its last version seen
    assert all("managedFields" not in o["metadata"] for o in kept.items())
    assert not kept.update([_obj("b")])
    assert kept.update([_obj("a", "2"), _obj("b")])  # listed again: live again, once
    assert [o["metadata"]["uid"] for o in kept.items()] == ["a", "b"]


def test_the_gone_are_bounded_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follow_objects, "MAX_GONE", 3)
    kept = KeptObjects()
    for n in range(6):
        kept.update([_obj(f"p{n}")])  # each list: one pod, the one before it gone
    assert [o["metadata"]["uid"] for o in kept.items()] == ["p5", "p2", "p3", "p4"]
    big = _obj("big", pad=2500)
    size = len(dumps_json({"metadata": {k: v for k, v in big["metadata"].items() if k != "managedFields"},
                           "spec": big["spec"]}, indent=None))
    monkeypatch.setattr(follow_objects, "MAX_GONE_BYTES", size + 10)  # the big one and no other
    kept.update([big])
    kept.update([])
    assert [o["metadata"]["uid"] for o in kept.items()] == ["big"]  # its size pushed the others out
    assert kept.gone_bytes == size


def test_a_restarted_recorder_resumes_the_gone_from_the_rings_latest_copy(tmp_path: Path) -> None:
    ring = tmp_path / "ring"
    w = RingWriter(ring, max_bytes=1 << 20, segment_bytes=1 << 16).open()
    now = time.time()
    for n, items in enumerate(([_obj("old")], [_obj("gone-pod"), _obj("live-pod")])):
        doc = {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}
        w.append([(now - 10 + n, time.monotonic(), kspec.PODS, "write", json.dumps(doc).encode())])
    claims = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimList", "metadata": {}, "items": [_obj("c1")]}
    w.append([(now - 5, time.monotonic(), kspec.RESOURCE_CLAIMS, "write", json.dumps(claims).encode())])
    w.close()
    keeper = KubeObjectKeeper()
    assert keeper.resume(str(ring), time.time()) == 3  # the latest copy of each member
    assert {o["metadata"]["uid"] for o in keeper.pods.items()} == {"gone-pod", "live-pod"}
    assert keeper.pods.update([_obj("live-pod"), _obj("new-pod")])
    assert [o["metadata"]["uid"] for o in keeper.pods.items()] == ["live-pod", "new-pod", "gone-pod"]
    assert [o["metadata"]["uid"] for o in keeper.claims.items()] == ["c1"]
    assert KubeObjectKeeper().resume(str(tmp_path / "no-ring"), time.time()) == 0
