"""``docker``: containers as the Docker Engine API reports them, and what GPUs each was given.

Sources (Engine API: at a unix socket over plain HTTP, forensics.collectors.docker.unix_client, with
no SDK import on the snapshot's path; elsewhere through the docker SDK's low-level ``APIClient``;
the engine's own JSON is kept, not SDK objects; ``DOCKER_HOST``/``DOCKER_TLS_VERIFY``/``DOCKER_CERT_PATH`` honoured through
``docker.from_env``, ``--set docker.host=URL`` overriding; podman's compatible socket too):

- ``GET /version``, ``GET /info``                -> ``docker/version.json``, ``docker/info.json``
- ``GET /containers/json?all=1``                 -> ``docker/containers.json``
- ``GET /containers/{id}/json``                  -> ``docker/containers/<id>/inspect.json``
- podman only: ``GET /libpod/containers/{id}/json`` -> ``docker/containers/<id>/libpod-inspect.json``
  (its own inspect: the OCI runtime, annotations, the creating command line with its CDI devices)
  and the file it names, ``OCIConfigPath`` -> ``docker/containers/<id>/oci-config.json`` (the OCI
  runtime spec the container was started with: hooks, device nodes, environment; redacted)
- ``GET /containers/{id}/top?ps_args=...``       -> ``docker/containers/<id>/top.json``
- ``GET /containers/{id}/stats?stream=0&one-shot=1`` -> ``docker/containers/<id>/stats.json``
- ``GET /containers/{id}/logs?timestamps=1&since=<window start>&tail=N`` -> ``docker/containers/<id>/logs.txt``
  (the newest ``logs.max_bytes`` of it, cut at a line start; a line longer than that keeps its end,
  the part of a token the cut began in redacted: forensics.bundle.secrets.cut)
- ``GET /exec/{id}/json`` (inspect's ExecIDs)    -> ``docker/containers/<id>/execs/<exec>.json``
- ``GET /images/{id}/json``                      -> ``docker/images/<hex>/inspect.json``
- ``GET /events?since=..&until=..``              -> ``docker/events.jsonl`` (one event a line)
- ``/proc/<State.Pid>/cgroup`` + each hierarchy's ``cgroup.procs`` (forensics.collectors.docker.pids)
  -> ``docker/containers/<id>/processes.json``

Derived: ``docker/engine.json`` (cgroup version and driver, runtimes, default runtime),
``docker/allocations.json`` (forensics.parsing.gpu_allocation), ``docker/index.json`` (which
containers were taken and why, every call's outcome and duration). With ``--duration``:
``docker/samples.jsonl`` (newest frame of a streaming stats connection per running container per
tick), then ``docker/window/events.jsonl`` and ``inspect-end.json`` of containers with events.
Layout and field meanings: docs/bundle-format/docker.md.

Containers taken (forensics.collectors.docker.taken): running (and paused/restarting) ones, plus
those created, or exited, within the look-back window (``--since``, else capture start minus
``lookback_s``).

Redaction (forensics.collectors.docker.redact) before anything is written; registry auth is
never read. Calls run in parallel (forensics.collectors.docker.calls) with a per-call timeout and
a total budget: a wedged engine costs its deadline and the collector reports ``partial`` with
what it got; no engine is ``unavailable``; an engine that does not answer is ``failed``
(timed out).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from forensics.bundle.format import iso, iso_from_unix
from forensics.bundle.sink import dumps_json
from forensics.collect.context import CollectContext, Tick
from forensics.collectors.docker.calls import (
    Call,
    CallPool,
    describe_error,
    is_race,
)
from forensics.collectors.docker.engine import (
    MAX_EVENTS,
    STATS_REQUEST,
    StatsStream,
    connect,
    connect_snapshot,
    engine_essentials,
    image_hex,
    libpod_inspect,
    libpod_version,
    logs,
    pool_call_timeout,
    read_events,
    read_oci_config,
    stats,
    top,
)
from forensics.collectors.docker.pids import container_processes
from forensics.collectors.docker.redact import (
    redact_container,
    redact_events,
    redact_exec,
    redact_info,
    redact_libpod,
    redact_listing,
    redact_oci_config,
    redact_top,
)
from forensics.collectors.docker.taken import (
    RUNNING_STATES,
    parse_docker_time,
    record_taken,
    window_start,
)
from forensics.collectors.docker.window_logs import append_window_logs, last_line_record
from forensics.errors import (
    SourceTimeout,
    SourceUnavailable,
)
from forensics.hostfs.mounts import host_cgroup_mounts
from forensics.parsing.docker_top import TOP_PS_ARGS
from forensics.parsing.logsignals.line import newest_lines
from forensics.specs import docker as dspec
from forensics.specs.docker import SPEC, DockerSettings
from forensics.specs.logs import LOGS

__all__ = ["COLLECTOR", "DockerCollector", "docker_settings"]

_MAX_CONTAINERS = 2000
_MAX_EXECS = 50  # exec sessions inspected per container (the engine keeps them for a while)


# ---------------------------------------------------------------------------------------------
# settings and the client


def docker_settings(ctx: CollectContext) -> DockerSettings:
    """The typed ``docker.*`` settings, ``$DOCKER_HOST`` filling an unset host, bounded."""
    s = SPEC.read_settings(ctx.options.extra)
    return replace(s, host=s.host or os.environ.get("DOCKER_HOST"), call_timeout_s=max(0.2, s.call_timeout_s),
                   workers=max(1, min(s.workers, 32)), logs_tail=max(0, min(s.logs_tail, 100_000)))


class DockerCollector:
    """``docker``: inspect, top, stats, image inspect and events of the engine's containers."""

    name = SPEC.name
    order = SPEC.order
    timeout_s = 30.0

    def __init__(self) -> None:
        self._sample_client: Any = None
        self._streams: dict[str, StatsStream] = {}
        self._seen_running: dict[str, None] = {}  # containers seen running by a tick, in order

    # -- snapshot -------------------------------------------------------------------------------
    def snapshot(self, ctx: CollectContext) -> None:
        settings = docker_settings(ctx)
        # leave a margin before the runner's hard deadline so the index is always written
        budget_end = ctx.deadline - min(2.0, max(0.2, ctx.remaining() * 0.1))
        client = connect_snapshot(settings)
        pool = CallPool(settings.workers)
        index: dict[str, Any] = {
            # set once the stats calls are out (the first redaction compiles the secret rules)
            "docker_host": None,
            "call_timeout_s": settings.call_timeout_s,
            "top_ps_args": TOP_PS_ARGS,
            "stats": settings.stats,
            "window_start": iso(window_start(ctx)),
            "containers": {},
            "calls": [],
        }
        try:
            self._collect(ctx, client, pool, budget_end, index, settings)
        finally:
            pool.close()
            index["calls"] = [
                {"kind": c.key[0], "subject": c.key[1],
                 "duration_s": None if c.duration_s is None else round(c.duration_s, 4),
                 "error": c.error, "race": is_race(c.error)}
                for c in sorted(pool.calls.values(), key=lambda c: c.key)
            ]
            failed = [c for c in pool.calls.values() if c.error and not is_race(c.error)]
            if failed:
                first = failed[0]
                ctx.partial(f"{len(failed)} of {len(pool.calls)} engine calls failed "
                            f"(first: {first.key[0]} {first.key[1][:12]}: {first.error})")
            self._redact_host(ctx, index, settings)
            ctx.sink.write_json(dspec.INDEX, index)
            client.close()

    def _collect(self, ctx: CollectContext, client: Any, pool: CallPool, budget_end: float,
                 index: dict[str, Any], settings: DockerSettings) -> None:
        start = window_start(ctx)
        until = datetime.now(UTC)
        pool.submit("info", "engine", client.info)
        pool.submit("version", "engine", client.version)
        pool.submit("list", "containers", lambda: client.containers(all=True))
        pool.submit("events", "engine", lambda: read_events(client, start, until, budget_end))
        first_end = min(budget_end, time.monotonic() + 3 * pool_call_timeout(client))
        # the list first: the calls on its containers go out with it in hand, while the engine
        # still answers /version (it runs its runtimes' binaries to learn their versions)
        wave1 = {c.key: r for c, r in pool.wait(first_end, only={("list", "containers")})}
        listing = wave1.get(("list", "containers"))
        stats_fallbacks: dict[str, str] = {}
        chosen = self._choose(listing, start) if isinstance(listing, list) else []
        if settings.stats:
            index["stats_request"] = STATS_REQUEST
            index["stats_not_one_shot"] = stats_fallbacks
            # first, before anything is written: a one-shot stats call returns only at the
            # engine's next stats tick (its collector loop sleeps 1 s between ticks), so the
            # wait overlaps every other call and write
            for c in chosen:
                if c.get("State") in RUNNING_STATES:
                    pool.submit("stats", c["Id"],
                                functools.partial(stats, client, c["Id"], stats_fallbacks), wide=True)
        images: set[str] = set()
        # inspects first (quick; each one's answer starts that container's logs call), then the
        # tops, which make the engine run ps each: the heaviest calls queue behind the light ones
        for c in chosen:
            pool.submit("inspect", c["Id"], functools.partial(client.inspect_container, c["Id"]))
            img = c.get("ImageID")
            if isinstance(img, str) and img and img not in images:
                images.add(img)
                pool.submit("image", img, functools.partial(client.inspect_image, img))
        for c in chosen:
            if c.get("State") in RUNNING_STATES:
                pool.submit("top", c["Id"], functools.partial(top, client, c["Id"]))
        # events may still be streaming: they are taken with the second wave
        wave1.update((c.key, r) for c, r in pool.wait(first_end, only={("info", "engine"), ("version", "engine")}))
        info = wave1.get(("info", "engine"))
        version = wave1.get(("version", "engine"))
        self._redact_host(ctx, index, settings)
        if isinstance(info, dict):
            ctx.sink.write_json(dspec.INFO, redact_info(info, ctx))
        if isinstance(version, dict):
            ctx.sink.write_json(dspec.VERSION, version)
        essentials = engine_essentials(info, version, index)
        ctx.sink.write_json(dspec.ENGINE, essentials)
        if essentials["engine"]:
            ctx.note(f"engine: {essentials['engine']} {essentials['server_version'] or ''}".rstrip())
        podman = libpod_version(version) if essentials["engine"] == "podman" else None
        if not isinstance(listing, list):
            err = pool.calls[("list", "containers")].error or "no answer in time"
            if "time" in err.lower() or "budget" in err:
                raise SourceTimeout(f"container list: {err}")
            raise SourceUnavailable(f"container list failed: {err}")
        ctx.sink.write_json(dspec.CONTAINERS, redact_listing(listing, ctx))
        chosen_ids = {x["Id"] for x in chosen}
        running_ids = {x["Id"] for x in chosen if x.get("State") in RUNNING_STATES}
        for c in listing:
            if isinstance(c, dict) and c.get("Id") not in chosen_ids:
                index["containers"][str(c.get("Id"))] = {
                    "taken": False, "why": f"over the cap of {_MAX_CONTAINERS} newest containers"}

        max_log_bytes = LOGS.read_settings(ctx.options.extra).max_bytes
        index["logs_max_bytes"] = max_log_bytes
        mounts, resolver = host_cgroup_mounts(ctx)
        if resolver is not None and resolver.error is not None:
            ctx.note(f"cgroup root from {resolver.origin}: {resolver.error}; container PIDs from top only")
        scratch: dict[str, dict[str, Any]] = {}
        inspects: dict[str, dict[str, Any]] = {}
        image_docs: dict[str, dict[str, Any]] = {}
        events_done = False
        recorded: list[bool] = []

        def record() -> None:
            if not recorded:
                recorded.append(True)
                record_taken(ctx, chosen, inspects, image_docs, info, index, scratch)

        for call, result in _until_only_stats_left(pool, budget_end, record):
            kind, subject = call.key
            if kind == "events":
                events_done = True
                self._write_events(ctx, result, call, index)
                continue
            if result is None:
                continue
            if kind == "inspect":
                doc = redact_container(result, ctx)
                inspects[subject] = doc
                ctx.sink.write_json(dspec.container_member(subject, "inspect.json"), doc)
                if podman:  # the compatible inspect drops the runtime, CDI devices and annotations
                    pool.submit("libpod", subject, functools.partial(libpod_inspect, client, subject, podman))
                raw_state = doc.get("State")
                state: dict[str, Any] = raw_state if isinstance(raw_state, dict) else {}
                finished = parse_docker_time(state.get("FinishedAt"))
                # logs once inspect is here: it says whether the container has a TTY (how the
                # stream is framed) and, for one not running, whether it ended in the window
                if settings.logs_tail > 0 and (
                        state.get("Running") or subject in running_ids
                        or (finished is not None and finished >= start)):
                    raw_config = doc.get("Config")
                    config: dict[str, Any] = raw_config if isinstance(raw_config, dict) else {}
                    pool.submit("logs", subject, functools.partial(
                        logs, client, subject, start, settings.logs_tail,
                        bool(config.get("Tty"))))
                if doc.get("State", {}).get("Running") and doc["State"].get("Pid"):
                    procs = container_processes(int(doc["State"]["Pid"]), mounts,
                                                container_id=subject, resolver=resolver)
                    scratch.setdefault(subject, {})["cgroup"] = procs
                    for exec_id in (doc.get("ExecIDs") or [])[:_MAX_EXECS]:
                        if isinstance(exec_id, str) and exec_id.isalnum():
                            pool.submit("exec", exec_id,
                                        functools.partial(client.exec_inspect, exec_id))
            elif kind == "libpod" and isinstance(result, dict):
                oci = read_oci_config(result)  # before redaction: the path is podman's own
                libpod_doc = redact_libpod(result, ctx)
                ctx.sink.write_json(dspec.container_member(subject, dspec.LIBPOD_INSPECT), libpod_doc)
                scratch.setdefault(subject, {})["libpod"] = libpod_doc
                if isinstance(oci, dict):
                    oci = redact_oci_config(oci, ctx)
                    ctx.sink.write_json(dspec.container_member(subject, dspec.OCI_CONFIG), oci)
                    scratch[subject]["oci_config"] = oci
                else:
                    index["containers"].setdefault(subject, {})["oci_config"] = oci
            elif kind == "top":
                ctx.sink.write_json(dspec.container_member(subject, "top.json"),
                                    redact_top(result, ctx))
                scratch.setdefault(subject, {}).update(
                    top=result, top_time=iso_from_unix(call.finished_unix or time.time()))
            elif kind == "exec":
                doc = redact_exec(result, ctx)
                owner = doc.get("ContainerID")
                if isinstance(owner, str) and owner.isalnum():
                    ctx.sink.write_json(dspec.exec_member(owner, subject), doc)
                    scratch.setdefault(owner, {}).setdefault("execs", []).append(doc)
            elif kind == "logs":
                data = result if isinstance(result, bytes) else b""
                kept, dropped = newest_lines(data, max_log_bytes)
                # a line longer than logs.max_bytes keeps its end: the kept text may begin inside
                # a token, whose part left there is redacted too (and the line's timestamp, not
                # the cut text's first word, is the record's)
                cut_start = dropped > 0 and data[dropped - 1:dropped] != b"\n"
                head = data.rfind(b"\n", 0, dropped) + 1
                line_head = data[head:min(head + 64, dropped)] if cut_start else b""
                index["containers"].setdefault(subject, {})["logs"] = {
                    "received_bytes": len(data), "kept_bytes": len(kept), "dropped_oldest_bytes": dropped,
                    # where a --duration window's read of this log resumes (window_logs)
                    "last_line": last_line_record(kept, cut_line_head=line_head)}
                # the whole text at once: a PEM block spans lines
                ctx.sink.write_text(dspec.container_member(subject, "logs.txt"),
                                    ctx.redactor.text(kept.decode("utf-8", "replace"), "logs",
                                                      cut_start=cut_start))
            elif kind == "stats":
                ctx.sink.write_json(dspec.container_member(subject, "stats.json"), result)
            elif kind == "image":
                image_docs[subject] = redact_container(result, ctx)
                ctx.sink.write_json(dspec.image_inspect(image_hex(subject)),
                                    image_docs[subject])
        if not events_done:
            call = pool.calls[("events", "engine")]
            index["events"] = {"complete": False, "error": call.error}
        record()

    @staticmethod
    def _redact_host(ctx: CollectContext, index: dict[str, Any], settings: DockerSettings) -> None:
        if index["docker_host"] is None:
            index["docker_host"] = ctx.redactor.text(settings.host or "(docker.from_env default)")

    def _write_events(self, ctx: CollectContext, events: Any, call: Call,
                      index: dict[str, Any]) -> None:
        if not isinstance(events, list):
            index["events"] = {"complete": False, "error": call.error}
            return
        lines = redact_events([ev for ev in events if isinstance(ev, dict)], ctx)
        # the lines append_jsonl would write, in one write: the events are all in hand, and one
        # open per line cost more than every other member of the collector together
        ctx.sink.write_text(dspec.EVENTS,
                            "".join(dumps_json(ev) + "\n" for ev in lines))
        index["events"] = {"complete": len(lines) < MAX_EVENTS, "count": len(lines),
                           "error": None}

    @staticmethod
    def _choose(listing: list[Any], start: datetime) -> list[dict[str, Any]]:
        """Running containers and those created in the window, plus non-running ones whose
        inspect is needed to see when they finished (the list has no FinishedAt): all of them,
        newest first, up to a cap; ``_finish`` drops those that ended before the window."""
        items = [c for c in listing if isinstance(c, dict) and isinstance(c.get("Id"), str)]
        items.sort(key=lambda c: -int(c.get("Created") or 0))
        return items[:_MAX_CONTAINERS]

    # -- sampling ---------------------------------------------------------------------------------
    def sample(self, ctx: CollectContext, tick: Tick) -> None:
        """The latest stats frame of each running container (``docker/samples.jsonl``).

        One streaming stats connection per running container (``GET /containers/{id}/stats``,
        as ``docker stats`` does; the engine pushes a frame a second) is opened the first tick
        it is seen; each tick writes the newest frame per container, with no engine call but the
        list of running containers. Cheap for the engine and for us, and never waits a second
        for the engine's stats tick.
        """
        if self._sample_client is None:
            self._sample_client = connect(docker_settings(ctx))
        client = self._sample_client
        running = client.containers(filters={"status": "running"})
        ids = [c["Id"] for c in running if isinstance(c, dict) and isinstance(c.get("Id"), str)]
        self._seen_running.update(dict.fromkeys(ids))
        for cid in ids:
            if cid not in self._streams:
                self._streams[cid] = StatsStream.start(client, cid)
        for cid in sorted(ids):
            stream = self._streams[cid]
            with stream.lock:
                frame, error, seen = stream.frame, stream.error, stream.frames
            ctx.sink.append_jsonl(dspec.SAMPLES, {
                "t": tick.time_unix, "time": tick.time_iso, "tick": tick.index,
                "container_id": cid, "frames_seen": seen,
                "stats": frame, "error": error if frame is None else None})

    def end_sampling(self, ctx: CollectContext) -> None:
        """After the window: the engine's events since capture start (``docker/window/events.jsonl``)
        and a fresh inspect of every container they name (``docker/containers/<id>/inspect-end.json``),
        so a container that died, was OOM-killed or started during the window is on record
        (``State.OOMKilled`` is only set once the container has exited); then the lines each
        container seen running, or named by an event, printed during the window, appended to its
        ``logs.txt`` (forensics.collectors.docker.window_logs)."""
        client = self._sample_client
        if client is None:
            return
        try:
            since = ctx.options.capture_start.astimezone(UTC)
            until = datetime.now(UTC)
            events = read_events(client, since, until, ctx.deadline - 1.0)
            ids: list[str] = []
            kept = redact_events([ev for ev in events if isinstance(ev, dict)], ctx)
            ctx.sink.write_text(dspec.WINDOW_EVENTS,
                                "".join(dumps_json(ev) + "\n" for ev in kept))
            for ev in kept:
                actor = ev.get("Actor") or {}
                cid = actor.get("ID") if isinstance(actor, dict) else None
                if ev.get("Type") == "container" and isinstance(cid, str) and cid not in ids:
                    ids.append(cid)
            for cid in ids:
                if ctx.remaining() < 1.0:
                    ctx.note("end of sampling: no time left to inspect every container with events")
                    break
                try:
                    doc = client.inspect_container(cid)
                except Exception as exc:  # noqa: BLE001 - removed containers are expected
                    ctx.note(f"end of sampling: inspect {cid[:12]}: {describe_error(exc)}")
                    continue
                ctx.sink.write_json(dspec.container_member(cid, "inspect-end.json"),
                                    redact_container(doc, ctx))
            # what they printed during the window: the snapshot read their logs only once
            append_window_logs(ctx, client, docker_settings(ctx), [*self._seen_running, *ids])
        finally:
            self._seen_running.clear()
            for stream in self._streams.values():
                stream.close()
            self._streams.clear()
            client.close()
            self._sample_client = None


def _until_only_stats_left(pool: CallPool, budget_end: float,
                           then: Callable[[], None]) -> Iterator[tuple[Call, Any]]:
    """The pool's results as they complete; ``then()`` runs once the caller has handled every
    result but the stats calls', which return only at the engine's next stats tick: what the
    other calls gave (processes, allocations) is written while the stats are still awaited."""
    for item in pool.as_completed(budget_end):
        yield item
        if pool.waiting_only_for({"stats"}):
            then()


COLLECTOR = DockerCollector()
