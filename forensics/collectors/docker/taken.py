"""Which containers the docker collector keeps, and the record of what it kept.

A container is taken when it is running (or paused/restarting), or was created or exited within the
look-back window (``--since``, else capture start minus ``lookback_s``). ``record_taken`` writes
each taken container's ``processes.json``, the ``docker/allocations.json`` model
(forensics.parsing.gpu_allocation) and the why of each entry in ``docker/index.json``, drops the
members of containers that ended before the window, and publishes the container PIDs and cgroup
paths for the collectors after it.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

from forensics.bundle.format import iso
from forensics.collect.context import CollectContext
from forensics.collectors.docker.pids import merge_pids
from forensics.errors import ParseError
from forensics.parsing.gpu_allocation import allocation_from_inspect, allocations_document
from forensics.parsing.libpod_allocation import allocation_from_libpod
from forensics.parsing.timestamps import is_zero_time, parse_iso
from forensics.specs import docker as dspec
from forensics.specs.hints import CGROUP_PATHS, PIDS

__all__ = ["RUNNING_STATES", "drop_container_members", "parse_docker_time", "record_taken", "window_start"]

RUNNING_STATES = frozenset({"running", "paused", "restarting"})


def window_start(ctx: CollectContext) -> datetime:
    """The look-back window's start: ``--since``, else capture start minus ``lookback_s``."""
    if ctx.options.since is not None:
        return ctx.options.since.astimezone(UTC)
    return ctx.options.capture_start.astimezone(UTC) - timedelta(seconds=ctx.options.lookback_s)


def parse_docker_time(value: Any) -> datetime | None:
    """``2026-11-30T05:31:14.123456789Z`` (nanoseconds) -> datetime; zero time -> None."""
    if not isinstance(value, str) or is_zero_time(value):
        return None
    return parse_iso(value)


def record_taken(ctx: CollectContext, chosen: list[dict[str, Any]],
            inspects: dict[str, dict[str, Any]], image_docs: dict[str, dict[str, Any]],
            info: Any, index: dict[str, Any], scratch: dict[str, dict[str, Any]]) -> None:
    start = window_start(ctx)
    allocations = []
    pids: set[int] = set()
    cgroup_paths: set[str] = set()
    container_ids: list[str] = []
    for c in chosen:
        cid = c["Id"]
        entry = index["containers"].setdefault(cid, {})
        doc = inspects.get(cid)
        state = (doc or {}).get("State") or {}
        running = bool(state.get("Running")) or c.get("State") in RUNNING_STATES
        finished = parse_docker_time(state.get("FinishedAt"))
        created = parse_docker_time((doc or {}).get("Created")) or (
            datetime.fromtimestamp(int(c.get("Created") or 0), UTC))
        if running:
            entry["why"] = "running"
        elif finished is not None and finished >= start:
            entry["why"] = f"exited {iso(finished)} (in window)"
        elif finished is None and created >= start:
            entry["why"] = f"created {iso(created)}, never started (in window)"
        elif doc is None:
            entry["why"] = "inspect failed; kept because state is unknown"
        else:
            entry.update(taken=False, why="not running, ended before the window")
            drop_container_members(ctx, cid)
            continue
        entry["taken"] = True
        entry["name"] = (c.get("Names") or [""])[0].lstrip("/")
        container_ids.append(cid)
        seen = scratch.get(cid, {})
        if doc is not None:
            try:
                image, engine_info = image_docs.get(str(doc.get("Image"))), info if isinstance(info, dict) else None
                libpod = seen.get("libpod")  # podman: its own inspect holds the runtime and CDI devices
                alloc = (allocation_from_libpod(libpod, image, engine_info, None, seen.get("oci_config"))
                         if isinstance(libpod, dict)
                         else allocation_from_inspect(doc, image, engine_info))
                allocations.append(alloc)
            except ParseError as exc:
                ctx.note(f"allocation model for {cid[:12]}: {exc}")
        procs, top_doc, top_time = seen.get("cgroup"), seen.get("top"), seen.get("top_time")
        if procs is not None or top_doc is not None:
            processes = merge_pids(procs, top_doc, top_time, seen.get("execs") or [])
            ctx.sink.write_json(dspec.container_member(cid, "processes.json"), processes)
            pids.update(int(p) for p in processes["pids"])
            cgroup_paths.update(processes["cgroup_paths"].values())
            entry["pids"] = len(processes["pids"])
    ctx.sink.write_json(dspec.ALLOCATIONS, allocations_document(allocations))
    PIDS.publish(ctx, sorted(pids))
    CGROUP_PATHS.publish(ctx, sorted(cgroup_paths))
    ctx.note(f"{len(container_ids)} containers taken, {len(pids)} container PIDs")


def drop_container_members(ctx: CollectContext, cid: str) -> None:
    """Containers outside the window were inspected only to learn that; keep the bundle lean."""
    root = getattr(ctx.sink, "root", None)
    if root is None:
        return
    directory = root / dspec.CONTAINERS_DIR / cid
    members = getattr(ctx.sink, "members", None)
    try:
        files = [p for p in directory.rglob("*") if p.is_file()]
    except OSError:
        return
    for path in files:
        try:
            size = path.stat().st_size
            path.unlink()
        except OSError:
            continue
        if isinstance(members, set):
            members.discard(path.relative_to(root).as_posix())
        if hasattr(ctx.sink, "bytes_written"):
            ctx.sink.bytes_written -= size
    for d in sorted((p for p in directory.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            d.rmdir()
    with contextlib.suppress(OSError):
        directory.rmdir()
