"""Label, annotation and event-attribute redaction where each source keeps them: Docker inspect,
the container list, events (``Actor.Attributes``, exec ``Action``), Kubernetes pod metadata and the
last-applied JSON inside it. The real-engine journey is tests/integration/test_label_redaction.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from forensics.bundle.redact import Redactor
from forensics.bundle.sink import EvidenceSink
from forensics.collect.context import CaptureOptions, CollectContext
from forensics.collectors.docker.redact import redact_container, redact_events, redact_listing
from forensics.collectors.kubernetes.redaction import LAST_APPLIED, redact_node, redact_pod
from forensics.collectors.kubernetes.redaction import redact_events as redact_kube_events

PSEUDO = re.compile(r"<redacted:[0-9a-f]{16}>")
TOKEN = "tok-unit-5f2e9a"


def _ctx(tmp_path: Path, enabled: bool = True) -> CollectContext:
    return CollectContext(CaptureOptions(), EvidenceSink(tmp_path), Redactor(enabled=enabled, key=b"k" * 32))


def _labels() -> dict[str, str]:
    return {"token": TOKEN, "io.kubernetes.pod.name": "trainer-0", "gpuforensics-test": "1"}


def test_docker_inspect_list_and_events_share_one_pseudonym(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    inspect = redact_container({"Config": {"Labels": _labels(), "Env": []}}, ctx)
    listing = redact_listing([{"Id": "c1", "Labels": _labels(), "Command": "sleep 600"}], ctx)
    events = redact_events([
        {"Type": "container", "Action": "start", "Actor": {"ID": "c1", "Attributes": {**_labels(), "name": "x"}}},
        {"Type": "container", "Action": "exec_create: sh -c true --password=pw-exec-1",
         "status": "exec_create: sh -c true --password=pw-exec-1", "Actor": {"ID": "c1", "Attributes": {}}},
    ], ctx)
    first = inspect["Config"]["Labels"]["token"]
    assert PSEUDO.fullmatch(first)
    assert listing[0]["Labels"]["token"] == events[0]["Actor"]["Attributes"]["token"] == first
    assert inspect["Config"]["Labels"]["io.kubernetes.pod.name"] == "trainer-0"
    assert events[0]["Actor"]["Attributes"]["name"] == "x"
    for key in ("Action", "status"):
        assert events[1][key].startswith("exec_create: sh -c true --password=<redacted:")
    blob = json.dumps([inspect, listing, events])
    assert TOKEN not in blob and "pw-exec-1" not in blob
    assert ctx.redactor.counts["labels"] == 3


def test_no_redact_keeps_docker_labels(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, enabled=False)
    events = redact_events([{"Action": "exec_start: x --password=p", "Actor": {"Attributes": _labels()}}], ctx)
    assert events[0]["Actor"]["Attributes"] == _labels() and events[0]["Action"] == "exec_start: x --password=p"


def _pod() -> dict[str, Any]:
    applied = {"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"labels": {"app": "t"}, "annotations": {"vault.io/agent-token": TOKEN}},
               "spec": {"template": {"metadata": {"labels": {"session-key": TOKEN}},
                                     "spec": {"containers": [{"env": [{"name": "X", "value": "v"}]}]}}}}
    return {"metadata": {"name": "p", "labels": {"app": "t", "db.password": TOKEN},
                         "annotations": {"note": "Authorization: Bearer abcdefgh12345678",
                                         LAST_APPLIED: json.dumps(applied)}},
            "spec": {"containers": []}}


def test_pod_labels_annotations_and_last_applied(tmp_path: Path) -> None:
    r = Redactor(key=b"k" * 32)
    pod = redact_pod(_pod(), r)
    meta = pod["metadata"]
    assert meta["labels"]["app"] == "t" and PSEUDO.fullmatch(meta["labels"]["db.password"])
    assert "abcdefgh12345678" not in meta["annotations"]["note"]
    applied = json.loads(meta["annotations"][LAST_APPLIED])
    assert applied["metadata"]["annotations"]["vault.io/agent-token"] == meta["labels"]["db.password"]
    assert PSEUDO.fullmatch(applied["spec"]["template"]["metadata"]["labels"]["session-key"])
    assert TOKEN not in json.dumps(pod)


def test_a_node_without_secrets_keeps_its_own_bytes_and_one_with_them_is_redacted() -> None:
    r = Redactor(key=b"k" * 32)
    clean = b'{"kind": "Node",  "metadata": {"name": "n", "labels": {"nvidia.com/gpu.count": "8"}}}\n'
    assert redact_node(clean, r) is clean
    assert redact_node(b"not json", r) == b"not json"
    dirty = json.dumps({"kind": "Node", "metadata": {"name": "n", "labels": {"api-token": TOKEN}}}).encode()
    out = json.loads(redact_node(dirty, r))
    assert PSEUDO.fullmatch(out["metadata"]["labels"]["api-token"]) and out["metadata"]["name"] == "n"
    assert redact_node(dirty, Redactor(enabled=False)) is dirty


def test_event_messages_and_notes() -> None:
    r = Redactor(key=b"k" * 32)
    events = redact_kube_events([{"message": f"pull failed: https://bot:{TOKEN}@reg.io/v2", "reason": "Failed"},
                            {"note": f"Authorization: Bearer {TOKEN}"}, "not an event"], r)
    assert TOKEN not in json.dumps(events)
    assert events[0]["reason"] == "Failed" and events[0]["message"].startswith("pull failed: https://bot:<redacted:")
    assert r.counts["events"] == 2
