"""The cross-source timeline near the top of the report: one lane per GPU a finding cites, per
party container or pod, and for the kernel's and the cluster's (Docker, Kubernetes) events, with
the findings as bars on their parties' lanes. Pure: built from the document's ``findings`` and
``timeline``; :func:`forensics.report.charts.render_timeline_svg` draws it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from forensics.report.access import get_dict, get_dicts, get_str, unix
from forensics.report.charts import Lane, LaneItem, TimelineSpec
from forensics.report.findings import ViewContext

__all__ = ["LANE_CAP", "capture_window", "timeline_view"]

#: Most party lanes (GPUs, containers, pods); the kernel, cluster and host lanes come on top.
LANE_CAP = 10
#: Most events drawn per lane (the JSON report keeps the whole timeline).
EVENTS_PER_LANE = 200

_KERNEL = ("kernel", "kernel log")
_CLUSTER = ("cluster", "Docker / Kubernetes events")
_HOST = ("host", "host")


def _event_lane(entry: Mapping[str, Any], parties: Mapping[str, tuple[str, str]]) -> tuple[str, str] | None:
    """(group, lane label) of a document timeline entry, or None when no lane shows it."""
    kind, text = get_str(entry, "kind"), get_str(entry, "text")
    subject = get_dict(entry, "subject")
    sid = get_str(subject, "id")
    if kind == "xid":
        return _KERNEL
    if kind == "oom-kill":
        return _KERNEL if text.endswith("[kernel]") else _CLUSTER
    return parties.get(sid)


def timeline_view(ctx: ViewContext) -> TimelineSpec | None:
    """The timeline spec, or None when there is no finding to tell a story about."""
    findings = [f for f in ctx.findings if unix(f.start) is not None]
    if not findings:
        return None
    lanes: dict[tuple[str, str], list[LaneItem]] = {}
    parties: dict[str, tuple[str, str]] = {}  # subject id -> its lane (group, label)
    # A pod's containers share its lane: an SRE on Kubernetes reads pods, not kubelet names.
    pod_lane = {
        cid: f"pod {get_str(p, 'namespace')}/{get_str(p, 'name')}"
        for p in get_dicts(ctx.doc, "pods")
        for cid in p.get("containers") or []
        if isinstance(cid, str)
    }
    for f in findings:
        placed = False
        pods = {s.id for s in f.subjects if s.type == "pod"}
        for s in f.subjects:
            if s.type in ("gpu", "mig"):
                label = ctx.gpu_names.get(s.id, s.label)
            elif s.type == "container" and s.id in pod_lane:
                if pods:
                    continue  # its pod is a subject of the finding too: one bar, on the pod's lane
                label = pod_lane[s.id]
            elif s.type in ("container", "pod") and s.role != "witness":
                label = f"{s.type} {s.label}"
            else:
                continue
            key = ("gpu" if s.type in ("gpu", "mig") else s.type, label)
            if key not in lanes and len(lanes) >= LANE_CAP:
                continue
            parties.setdefault(s.id, key)
            items = lanes.setdefault(key, [])
            if not any(it.label == f.id for it in items):
                items.append(LaneItem(unix(f.start) or 0.0, f.id, "finding", f.severity, unix(f.end)))
            placed = True
        if not placed:  # a host-wide finding (host PSI, a GPU NVML does not list)
            group = _KERNEL if "xid" in f.kind or "bus" in f.kind else _HOST
            lanes.setdefault(group, []).append(
                LaneItem(unix(f.start) or 0.0, f.id, "finding", f.severity, unix(f.end))
            )
    for cid, label in pod_lane.items():  # a pod's containers' events go on the pod's lane
        if ("pod", label) in lanes:
            parties.setdefault(cid, ("pod", label))
    for entry in get_dicts(ctx.doc, "timeline"):
        at = unix(get_str(entry, "time"))
        if at is None or get_str(entry, "kind") == "finding":
            continue
        where = _event_lane(entry, parties)
        if where is None:
            continue
        items = lanes.setdefault(where, [])
        if len(items) < EVENTS_PER_LANE:
            items.append(LaneItem(at, get_str(entry, "text"), get_str(entry, "kind")))
    order = {"gpu": 0, "pod": 1, "container": 2, "host": 3, "kernel": 4, "cluster": 5}
    ranked = sorted(lanes.items(), key=lambda kv: order.get(kv[0][0], 9))
    window = capture_window(ctx)
    return TimelineSpec(
        "timeline",
        tuple(Lane(label, group, tuple(items)) for (group, label), items in ranked),
        window,
    )


def capture_window(ctx: ViewContext) -> tuple[float, float] | None:
    """The live capture: the earliest bundle's start to the latest's end (the charts mark what
    came before it as history)."""
    starts = [unix(get_str(b, "captured_start")) for b in ctx.bundles]
    ends = [unix(get_str(b, "captured_end")) for b in ctx.bundles]
    s = [x for x in starts if x is not None]
    e = [x for x in ends if x is not None]
    return (min(s), max(e)) if s and e and max(e) >= min(s) else None
