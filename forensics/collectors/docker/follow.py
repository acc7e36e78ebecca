"""Docker for the flight recorder: the engine's event stream followed as it happens, and each
container inspected when it is first seen (attribution at first sight), so a container that has
exited before any capture is still named, with its grant.

Sources: ``GET /info`` and ``GET /version`` on every (re)connection (``docker/info.json``,
``docker/version.json``); ``GET /containers/json`` (running ones) and ``GET /containers/{id}/json``
(``docker/containers/<id>/inspect.json``, redacted as capture redacts it) and ``GET /images/{id}/json``
(``docker/images/<hex>/inspect.json``) for each container when first seen and again when an event
says it started, died, was OOM-killed or was renamed; ``GET /events`` followed (``docker/events.jsonl``,
one event a line, as the engine sent it). On podman, with each inspect, its own inspect and the OCI
runtime spec it names (``libpod-inspect.json``, ``oci-config.json``: where a podman container's grant
is read). The members are capture's own (docs/bundle-format/docker.md).

When the engine goes away (dockerd restart) the stream ends: the follower reconnects with a
backoff and writes one ``recorder/events.jsonl`` line of kind ``gap`` (source ``docker``, from the
last moment the stream was known alive to the reconnection), then asks for the events since the
last one it saw (the engine keeps recent events in memory; after a restart they are gone, hence
the gap). Runs in a thread of the recorder's docker sampler process; ``flush`` never blocks.
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

from forensics.bundle.format import iso_from_unix
from forensics.bundle.sink import dumps_json
from forensics.collect.context import CollectContext, Tick
from forensics.collectors.docker.calls import describe_error
from forensics.collectors.docker.docker import docker_settings
from forensics.collectors.docker.engine import (
    connect,
    engine_product,
    image_hex,
    libpod_inspect,
    libpod_version,
    read_oci_config,
)
from forensics.collectors.docker.redact import (
    redact_container,
    redact_info,
    redact_libpod,
    redact_oci_config,
)
from forensics.specs.docker import (
    EVENTS,
    INFO,
    LIBPOD_INSPECT,
    OCI_CONFIG,
    VERSION,
    container_member,
    image_inspect,
)
from forensics.specs.ring import RECORDER_EVENTS

__all__ = ["DockerFollower", "REINSPECT_ACTIONS"]

#: container events after which the container is inspected again (its State changed)
REINSPECT_ACTIONS = frozenset({"create", "start", "die", "oom", "rename", "update", "kill", "stop"})
_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)
REPLAY_S = 60.0  # events this much older than the resume point are not remembered (see _remember_event)


class DockerFollower:
    """``start`` once, then ``sample`` every tick (it only notes whether the follower is alive)."""

    name = "docker"

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._written: dict[str, str] = {}  # member -> sha256 of what was last written
        # the events written, by sha256, with their time (oldest first): an event is written once
        # though a reconnect replays those since the last one's second; kept for REPLAY_S only
        self._events: dict[str, float] = {}
        self._images: set[str] = set()
        self._libpod: str | None = None  # podman's libpod API version, when the engine is podman
        self.connected = False
        self.connections = 0

    def start(self, ctx: CollectContext) -> None:
        self._thread = threading.Thread(target=self._run, args=(ctx,), name="docker-follow", daemon=True)
        self._thread.start()

    def sample(self, ctx: CollectContext, tick: Tick) -> None:
        """Nothing to read per tick: the follower thread writes as events come."""

    def stop(self) -> None:
        self._stop.set()

    # -- the follower thread ----------------------------------------------------------------
    def _run(self, ctx: CollectContext) -> None:
        since: float | None = None
        lost_at: float | None = None
        lost_why = ""
        attempt = 0
        while not self._stop.is_set():
            try:
                client = connect(docker_settings(ctx))
            except Exception as exc:  # noqa: BLE001 - any failure to connect is retried
                if lost_at is None:
                    lost_at, lost_why = time.time(), describe_error(exc)
                    if not self.connections:  # never reached: said once, not left to look recorded
                        ctx.note(f"no Docker engine answers ({lost_why}): no Docker events or inspects are "
                                 f"recorded until one does (retried every {_BACKOFF_S[-1]:g} s at most)")
                self._stop.wait(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])
                attempt += 1
                continue
            attempt = 0
            self.connected = True
            self.connections += 1
            now = time.time()
            if lost_at is not None:
                reason = (f"Docker engine connection lost ({lost_why}); reconnected" if self.connections > 1 else
                          f"no Docker engine answered ({lost_why}) until then: its events meanwhile are not recorded")
                ctx.sink.append_jsonl(RECORDER_EVENTS, {
                    "kind": "gap", "source": "docker", "from": lost_at, "to": now,
                    "from_time": iso_from_unix(lost_at), "to_time": iso_from_unix(now), "reason": reason})
            lost_at = None
            try:
                self._engine(ctx, client)
                self._containers(ctx, client)
                if since is None:
                    since = now
                for ev in client.events(since=int(since), decode=True):
                    if self._stop.is_set():
                        return
                    if not isinstance(ev, dict):
                        continue
                    stamp = ev.get("timeNano")
                    if isinstance(stamp, int):
                        since = max(since, stamp / 1e9)
                    key = hashlib.sha256(dumps_json(ev).encode()).hexdigest()
                    if key not in self._events:  # else replayed after a reconnect
                        self._remember_event(key, stamp / 1e9 if isinstance(stamp, int) else time.time(), since)
                        ctx.sink.append_jsonl(EVENTS, ev)
                    actor = ev.get("Actor") if isinstance(ev.get("Actor"), dict) else {}
                    cid = actor.get("ID") if isinstance(actor, dict) else None
                    action = str(ev.get("Action") or ev.get("status") or "").split(":", 1)[0]
                    if ev.get("Type") == "container" and isinstance(cid, str) and action in REINSPECT_ACTIONS:
                        self._inspect(ctx, client, cid)
                    elif ev.get("Type") == "container" and isinstance(cid, str) and action == "destroy":
                        # gone for good: its inspect is on record, its digest need not be kept
                        for name in ("inspect.json", LIBPOD_INSPECT, OCI_CONFIG):
                            self._written.pop(container_member(cid, name), None)
                lost_why = "event stream ended"
            except Exception as exc:  # noqa: BLE001 - the engine went away mid-stream
                lost_why = describe_error(exc)
            self.connected = False
            lost_at = time.time()
            try:
                client.close()
            except Exception:  # noqa: BLE001
                pass

    def _remember_event(self, key: str, t: float, since: float) -> None:
        """Remember an event written; forget those older than ``REPLAY_S`` before ``since`` (a
        reconnect asks for the events from ``since``'s second on: older ones never come again)."""
        events = self._events
        events[key] = t
        while len(events) > 1:
            oldest = next(iter(events))
            if events[oldest] >= since - REPLAY_S:
                break
            del events[oldest]

    def _write_if_changed(self, ctx: CollectContext, member: str, doc: Any) -> None:
        text = dumps_json(doc)
        digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
        if self._written.get(member) != digest:
            self._written[member] = digest
            ctx.sink.write_json(member, doc)

    def _engine(self, ctx: CollectContext, client: Any) -> None:
        info = client.info()
        if isinstance(info, dict):
            self._write_if_changed(ctx, INFO, redact_info(info, ctx))
        version = client.version()
        if isinstance(version, dict):
            self._write_if_changed(ctx, VERSION, version)
        self._libpod = libpod_version(version) if engine_product(version) == "podman" else None

    def _podman_records(self, ctx: CollectContext, client: Any, cid: str, api: str) -> None:
        """Podman's own inspect and the OCI spec it names, as capture keeps them."""
        try:
            own = libpod_inspect(client, cid, api)
        except Exception:  # noqa: BLE001 - removed meanwhile
            return
        if not isinstance(own, dict):
            return
        oci = read_oci_config(own)
        self._write_if_changed(ctx, container_member(cid, LIBPOD_INSPECT), redact_libpod(own, ctx))
        if isinstance(oci, dict):
            self._write_if_changed(ctx, container_member(cid, OCI_CONFIG), redact_oci_config(oci, ctx))

    def _containers(self, ctx: CollectContext, client: Any) -> None:
        for c in client.containers():
            cid = c.get("Id") if isinstance(c, dict) else None
            if isinstance(cid, str):
                self._inspect(ctx, client, cid)

    def _inspect(self, ctx: CollectContext, client: Any, cid: str) -> None:
        try:
            doc = client.inspect_container(cid)
        except Exception:  # noqa: BLE001 - removed meanwhile: its events are on record
            return
        if not isinstance(doc, dict):
            return
        self._write_if_changed(ctx, container_member(cid, "inspect.json"), redact_container(doc, ctx))
        if self._libpod is not None:
            self._podman_records(ctx, client, cid, self._libpod)
        image = doc.get("Image")
        if isinstance(image, str) and image not in self._images:
            try:
                idoc = client.inspect_image(image)
            except Exception:  # noqa: BLE001 - an image removed since
                return
            self._images.add(image)
            if isinstance(idoc, dict):
                self._write_if_changed(ctx, image_inspect(image_hex(image)),
                                       redact_container(idoc, ctx))
