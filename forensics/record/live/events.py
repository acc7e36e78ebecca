"""The events the live state hands the triggers, read from the samplers' event members.

- :func:`kernel_events`: ``kernel/window.jsonl`` lines: an OOM kill (``oom``, with the container
  the kernel's memcg names), an Xid (``xid``), and Xid 79 again as ``gpu-lost``;
- :func:`nvml_xid_events`: ``nvml/events.jsonl``: NVML's XidCriticalError events (``xid``, and
  ``gpu-lost`` for Xid 79);
- :func:`destroyed_containers`: ``docker/events.jsonl``: the containers Docker destroyed (the live
  state forgets their members a while later).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from forensics.parsing.timestamps import parse_iso_unix
from forensics.record.live.decode import json_lines
from forensics.record.live.nvml import num
from forensics.record.live.views import LiveEvent
from forensics.specs import kernel as kernel_spec
from forensics.specs import nvml as nvml_spec

__all__ = ["XID_GPU_LOST", "destroyed_containers", "kernel_events", "nvml_xid_events"]

XID_GPU_LOST = 79  # "GPU has fallen off the bus"
_XID_CRITICAL_EVENT = 0x8  # nvmlEventTypeXidCriticalError


def kernel_events(record_t: float, data: str, container_name: Callable[[str], str]) -> Iterator[LiveEvent]:
    """The OOM kills and Xids of a ``kernel/window.jsonl`` record (``record_t``: its time, for a
    line without one); ``container_name``: a container id's name, for the summary."""
    for ev in json_lines(data):
        t = parse_iso_unix(ev.get("time")) or record_t
        if ev.get("type") == "oom":
            attr = ev.get("oom_attribution") or ev.get("task_attribution") or {}
            cid = attr.get("container_id") if isinstance(attr, dict) else None
            pid = ev.get("pid") if isinstance(ev.get("pid"), int) else None
            name = container_name(cid) if isinstance(cid, str) else ""
            who = f"container {name or cid[:12]}" if isinstance(cid, str) else f"memcg {ev.get('oom_memcg') or '?'}"
            yield LiveEvent("oom", t, f"OOM kill of pid {pid} ({ev.get('comm')}) in {who}",
                            container_id=cid if isinstance(cid, str) else None, pid=pid, member=kernel_spec.WINDOW)
        elif ev.get("type") == "xid" and isinstance(ev.get("xid"), int):
            xid, bus = int(ev["xid"]), str(ev.get("pci_bus_id") or "")
            yield LiveEvent("xid", t, f"Xid {xid} on {bus}: {ev.get('description') or ''}".rstrip(": "),
                            xid=xid, gpu=bus, pid=ev.get("pid") if isinstance(ev.get("pid"), int) else None,
                            member=kernel_spec.WINDOW)
            if xid == XID_GPU_LOST:
                yield LiveEvent("gpu-lost", t, f"Xid 79 on {bus}: the GPU fell off the bus",
                                xid=xid, gpu=bus, member=kernel_spec.WINDOW)


def nvml_xid_events(data: str) -> Iterator[LiveEvent]:
    """The XidCriticalError events of an ``nvml/events.jsonl`` record (nvmlEventSetWait)."""
    for ev in json_lines(data):
        etype = ev.get("eventType")
        if ev.get("kind") != "event" or not isinstance(etype, int) or not etype & _XID_CRITICAL_EVENT:
            continue
        xid = ev.get("eventData") if isinstance(ev.get("eventData"), int) else None
        uuid = ev.get("uuid") if isinstance(ev.get("uuid"), str) else None
        t = num(ev.get("t")) or 0.0
        yield LiveEvent("xid", t, f"Xid {xid} on GPU {ev.get('gpu_index')} (NVML event)",
                        xid=xid, gpu=uuid, member=nvml_spec.EVENTS)
        if xid == XID_GPU_LOST:
            yield LiveEvent("gpu-lost", t, f"Xid 79 on GPU {ev.get('gpu_index')} (NVML event)",
                            xid=xid, gpu=uuid, member=nvml_spec.EVENTS)


def destroyed_containers(data: str) -> Iterator[str]:
    """The ids of the containers a ``docker/events.jsonl`` record says were destroyed (``Type``
    container, ``Action`` destroy)."""
    if '"destroy' not in data:
        return
    for ev in json_lines(data):
        actor = ev.get("Actor")
        cid = actor.get("ID") if isinstance(actor, dict) else None
        action = str(ev.get("Action") or ev.get("status") or "").split(":", 1)[0]
        if ev.get("Type") == "container" and action == "destroy" and isinstance(cid, str) and cid:
            yield cid
