"""The podresources collector: the kubelet's own map of which container holds which device.

Source: the kubelet pod-resources API v1 over its unix socket
(``/var/lib/kubelet/pod-resources/kubelet.sock``; ``--set podresources.socket=PATH`` overrides),
``List`` -> ``kubernetes/podresources/list.json`` and ``GetAllocatableResources`` ->
``kubernetes/podresources/allocatable.json`` (proto3 JSON with the proto's field names; see
docs/bundle-format/kubernetes.md); with ``--duration``, ``GetAllocatableResources`` again at the
end of the window -> ``kubernetes/podresources/allocatable-end.json`` (which GPU the device plugin
took out, or gave back, during the window). It needs no API server access, so it is its own collector:
it works on a node where the kubernetes collector has no configuration.

No socket -> ``unavailable``; a socket this user may not open -> ``unavailable`` (permission
denied); one method failing (timeout, UNIMPLEMENTED on kubelets before 1.21) -> ``partial``
with the reason, the other still written. The device manager only knows devices it handed out:
a pod that sees GPUs through ``NVIDIA_VISIBLE_DEVICES=all`` or privileged mode is not here.
"""

from __future__ import annotations

from forensics.collect.context import CollectContext
from forensics.collectors.podresources.client import OK, fetch
from forensics.errors import SourcePermissionDenied, SourceUnavailable
from forensics.specs.podresources import ALLOCATABLE, ALLOCATABLE_END, LIST, SPEC

__all__ = ["COLLECTOR", "PodResourcesCollector"]

_MEMBERS = {"List": LIST, "GetAllocatableResources": ALLOCATABLE}


class PodResourcesCollector:
    """``podresources``: the kubelet's own map of which container holds which device.

    See the module docstring.
    """

    name = SPEC.name
    order = SPEC.order
    timeout_s = 15.0

    def __init__(self, call_timeout_s: float | None = None) -> None:
        self.call_timeout_s = call_timeout_s  # None: the spec's default; --set wins over both

    def snapshot(self, ctx: CollectContext) -> None:
        settings = SPEC.read_settings(ctx.options.extra, call_timeout_s=self.call_timeout_s)
        socket_path = settings.socket
        result = fetch(socket_path, timeout_s=settings.call_timeout_s, deadline=ctx.deadline - 1.0)
        ctx.note(f"socket {socket_path}")
        written = 0
        for part in result.parts:
            if part.status == OK and part.document is not None:
                ctx.sink.write_json(_MEMBERS[part.method], part.document)
                written += 1
            else:
                ctx.partial(f"{part.method} {part.status}: {part.error}")
        if written == 0:
            reasons = "; ".join(f"{p.error}" for p in result.parts)
            if all(p.status == "permission-denied" for p in result.parts):
                raise SourcePermissionDenied(f"permission denied: {reasons}")
            raise SourceUnavailable(f"kubelet pod-resources API not answering: {reasons}")
        if result.list.document is not None:
            pods = result.list.document.get("pod_resources", [])
            devices = sum(len(d.get("device_ids", [])) for p in pods for c in p.get("containers", [])
                          for d in c.get("devices", []))
            ctx.note(f"{len(pods)} pods, {devices} device ids assigned")

    def end_sampling(self, ctx: CollectContext) -> None:
        """At the end of the window (the runner calls it once the window's time is up):
        ``GetAllocatableResources`` again -> ``kubernetes/podresources/allocatable-end.json``; a
        failed call is a partial reason and no member."""
        settings = SPEC.read_settings(ctx.options.extra, call_timeout_s=self.call_timeout_s)
        part = fetch(settings.socket, timeout_s=settings.call_timeout_s, deadline=ctx.deadline - 1.0).allocatable
        if part.status == OK and part.document is not None:
            ctx.sink.write_json(ALLOCATABLE_END, part.document)
        else:
            ctx.partial(f"end of window: {part.method} {part.status}: {part.error}")


COLLECTOR = PodResourcesCollector()
