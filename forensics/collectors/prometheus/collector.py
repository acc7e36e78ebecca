"""The prometheus collector: this node's exporter history over the capture window, as Prometheus sent it.

Sources (Prometheus HTTP API, ``GET`` only, through client.py):

- ``/api/v1/status/buildinfo`` -> ``prometheus/buildinfo.json`` (verbatim): which server answered;
  also the reachability and credentials probe;
- ``/api/v1/series?match[]=...&start&end`` -> ``prometheus/series.json`` (verbatim): which of the
  catalogue's metrics have series for this node, and under which node label (catalogue.py);
- ``/api/v1/query_range?query&start&end&step`` -> ``prometheus/query_range/<metric>.json``
  (verbatim), one member per metric that has series;
- ``prometheus/queries.json`` (derived): for every metric of the catalogue, its member, the query,
  the URL asked (never with credentials), when it was asked, the HTTP status, size, series and
  point counts (NaN points counted apart), and ``ok`` / ``absent`` (no series for this node: a
  fact, not an error) / ``partial`` / ``failed`` with the reason;
- ``prometheus/target.json`` (derived): URL, node, the node labels tried, window, step and how the
  step was chosen.

Window: ``--since`` (else ``--lookback`` before the capture) to ``--until`` (else the capture's
start). Step: ``prometheus.step`` or the smallest of 15 s, 30 s, 1 m, ... that keeps the window
under about 2,000 points per series (never past Prometheus' 11,000).

Status: an unreachable Prometheus, a 401/403, a redirect (a login page) or no series at all for the
node -> ``unavailable`` with the reason (for no series, the node names Prometheus does know); a
server that does not answer -> the call's deadline, then ``failed`` "timed out"; a reply over
``prometheus.max_response_bytes`` is asked again once at four times the step and, if still too
large, recorded as cut (not kept) -> ``partial``.
"""

from __future__ import annotations

import json
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from forensics.collect.context import CollectContext
from forensics.collectors.prometheus.catalogue import (
    METRICS,
    NODE_LABELS,
    MetricSpec,
    choose_step,
    discovery_matches,
    node_matchers,
    query_for,
)
from forensics.collectors.prometheus.client import CallFailed, PromClient, Reply
from forensics.errors import SourceTimeout, SourceUnavailable
from forensics.parsing.timestamps import format_iso
from forensics.specs.prometheus import BUILDINFO, QUERIES, SERIES, SPEC, TARGET, query_member

__all__ = ["COLLECTOR", "PrometheusCollector", "PromTarget", "target_from_context"]

_WORKERS = 4
_RETRY_STEP_FACTOR = 4


@dataclass(frozen=True)
class PromTarget:
    """What to ask and of whom: built from the capture options by :func:`target_from_context`."""

    url: str
    node: str
    node_source: str
    start: float
    end: float
    step_s: float
    step_source: str
    token_file: str | None
    ca_file: str | None
    call_timeout_s: float
    max_response_bytes: int


def target_from_context(ctx: CollectContext) -> PromTarget:
    """The URL, node, window and step for this capture; :class:`SourceUnavailable` without a URL
    (the registry does not run an unconfigured source; a caller that builds the collector itself may)."""
    opts = ctx.options
    settings = SPEC.read_settings(opts.extra)
    if not settings.url:
        raise SourceUnavailable(SPEC.unconfigured(opts.extra) or "not configured")
    if opts.node_name:
        node, node_source = opts.node_name, "--node"
    elif os.environ.get("NODE_NAME"):
        node, node_source = os.environ["NODE_NAME"], "NODE_NAME"
    else:
        node, node_source = socket.gethostname(), "hostname"
    end = (opts.until or opts.capture_start).timestamp()
    since = opts.since or (opts.capture_start - timedelta(seconds=opts.lookback_s))
    start = since.timestamp()
    if end <= start:
        raise SourceUnavailable(f"empty window: until ({format_iso(end, precision='seconds')}) is not after "
                                f"since ({format_iso(start, precision='seconds')})")
    step_s, step_source = choose_step(end - start, settings.step)
    return PromTarget(
        url=settings.url, node=node, node_source=node_source, start=round(start, 3), end=round(end, 3),
        step_s=step_s, step_source=step_source, token_file=settings.token_file, ca_file=settings.ca_file,
        call_timeout_s=settings.call_timeout_s, max_response_bytes=settings.max_response_bytes,
    )


def _counts(doc: dict[str, Any]) -> tuple[int, int, int]:
    """(series, points, NaN/Inf points) of a query_range ``matrix`` answer."""
    data = doc.get("data")
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        raise ValueError("no data.result list")
    series = points = odd = 0
    for s in result:
        values = s.get("values") if isinstance(s, dict) else None
        if not isinstance(values, list):
            raise ValueError("a series without a values list")
        series += 1
        points += len(values)
        odd += sum(1 for v in values if isinstance(v, list) and len(v) == 2 and v[1] in ("NaN", "+Inf", "-Inf"))
    return series, points, odd


def _raise_if_fatal(exc: CallFailed, what: str) -> None:
    """An unreachable or refusing Prometheus -> unavailable; one that does not answer -> timed out."""
    if exc.kind in ("unreachable", "unauthorized", "forbidden", "redirected"):
        raise SourceUnavailable(f"Prometheus {exc.reason}") from None
    if exc.kind == "timed-out":
        raise SourceTimeout(f"{what}: {exc.reason}") from None


class PrometheusCollector:
    """``prometheus``: this node's exporter series from Prometheus' HTTP API (see the module docstring)."""

    name = SPEC.name
    order = SPEC.order
    timeout_s = 60.0

    def snapshot(self, ctx: CollectContext) -> None:
        target = target_from_context(ctx)
        try:
            client = PromClient(target.url, deadline=ctx.deadline - 1.0, call_timeout_s=target.call_timeout_s,
                                max_response_bytes=target.max_response_bytes, token_file=target.token_file,
                                ca_file=target.ca_file)
        except CallFailed as exc:
            raise SourceUnavailable(f"Prometheus {exc.reason}") from None
        ctx.note(f"Prometheus {client.base_url}, node {target.node} ({target.node_source}), "
                 f"{format_iso(target.start, precision='seconds')} to {format_iso(target.end, precision='seconds')}, "
                 f"step {target.step_s:g} s ({target.step_source})")
        ctx.sink.write_json(TARGET, {
            "url": client.base_url, "node": target.node, "node_source": target.node_source,
            "node_labels": list(NODE_LABELS), "node_matchers": node_matchers(target.node),
            "start": format_iso(target.start), "end": format_iso(target.end),
            "start_unix": target.start, "end_unix": target.end,
            "step_s": target.step_s, "step_source": target.step_source,
        })
        self._probe(ctx, client)
        present = self._discover(ctx, client, target)
        entries = self._query_all(ctx, client, target, present)
        ctx.sink.write_json(QUERIES, {"queries": entries})
        got = [e for e in entries if e["status"] in ("ok", "partial")]
        failed = [e for e in entries if e["status"] == "failed"]
        absent = [e["metric"] for e in entries if e["status"] == "absent"]
        ctx.note(f"{len(got)} metrics with series, {len(absent)} absent"
                 + (f" ({', '.join(absent[:6])}{', ...' if len(absent) > 6 else ''})" if absent else ""))
        if failed and not got and all(e.get("kind") == "timed-out" for e in failed):
            raise SourceTimeout(f"Prometheus {client.base_url}: {failed[0]['reason']}")
        for e in entries:
            if e["status"] in ("failed", "partial"):
                ctx.partial(f"{e['metric']}: {e['reason']}")

    # ------------------------------------------------------------------------------------------
    def _probe(self, ctx: CollectContext, client: PromClient) -> None:
        """``/api/v1/status/buildinfo``: reachable, credentials accepted; kept verbatim when served."""
        try:
            reply = client.get("/api/v1/status/buildinfo")
        except CallFailed as exc:
            _raise_if_fatal(exc, f"Prometheus {client.base_url} did not answer")
            ctx.note(f"buildinfo not served ({exc.reason})")
            return
        if not reply.truncated:
            ctx.sink.write_bytes(BUILDINFO, reply.body)
            try:
                info = reply.json().get("data") or {}
                ctx.note(f"Prometheus version {info.get('version', '?')}")
            except CallFailed as exc:
                ctx.note(f"buildinfo not understood ({exc.reason})")

    def _discover(self, ctx: CollectContext, client: PromClient, target: PromTarget) -> dict[str, tuple[str, ...]]:
        """metric name -> the node labels its series for this node carry, from ``/api/v1/series``."""
        params = [("match[]", m) for m in discovery_matches(target.node)]
        params += [("start", f"{target.start:.3f}"), ("end", f"{target.end:.3f}")]
        try:
            reply = client.get("/api/v1/series", params)
        except CallFailed as exc:
            _raise_if_fatal(exc, "series discovery")
            ctx.partial(f"series discovery failed ({exc.reason}); every metric asked under every node label")
            return {s.name: NODE_LABELS for s in METRICS if s.match == "node"}
        if reply.truncated:
            ctx.partial(f"series discovery answer over {client.max_response_bytes} bytes; every metric asked "
                        "under every node label")
            return {s.name: NODE_LABELS for s in METRICS if s.match == "node"}
        ctx.sink.write_bytes(SERIES, reply.body)
        try:
            doc = reply.json()
        except CallFailed as exc:
            raise SourceUnavailable(f"Prometheus {exc.reason}") from None
        if doc.get("status") != "success" or not isinstance(doc.get("data"), list):
            raise SourceUnavailable(f"Prometheus series discovery refused: {doc.get('error', doc.get('status'))}")
        found: dict[str, set[str]] = {}
        for labels in doc["data"]:
            if not isinstance(labels, dict):
                continue
            name = labels.get("__name__")
            for label in NODE_LABELS:
                value = labels.get(label)
                if isinstance(value, str) and isinstance(name, str) and (
                        value == target.node or (label == "instance" and value.rsplit(":", 1)[0] == target.node)):
                    found.setdefault(name, set()).add(label)
        if not found:
            known = self._known_nodes(client)
            raise SourceUnavailable(
                f"Prometheus {client.base_url} has no series for node {target.node!r} "
                f"({', '.join(NODE_LABELS)}) between {format_iso(target.start, precision='seconds')} and "
                f"{format_iso(target.end, precision='seconds')}"
                + (f"; nodes it knows: {', '.join(known)}" if known else "") + "; pass --node")
        return {name: tuple(label for label in NODE_LABELS if label in labels) for name, labels in found.items()}

    def _known_nodes(self, client: PromClient) -> list[str]:
        names: list[str] = []
        for label in ("node", "Hostname"):
            try:
                doc = client.get(f"/api/v1/label/{label}/values").json()
            except CallFailed:
                continue
            for v in doc.get("data") or []:
                if isinstance(v, str) and v not in names:
                    names.append(v)
        return names[:12]

    def _query_all(self, ctx: CollectContext, client: PromClient, target: PromTarget,
                   present: dict[str, tuple[str, ...]]) -> list[dict[str, Any]]:
        jobs: list[tuple[MetricSpec, str]] = []
        entries: dict[str, dict[str, Any]] = {}
        pod_labels = present.get("kube_pod_info", ())
        for spec in METRICS:
            labels = pod_labels if spec.match == "pods" else present.get(spec.name, ())
            base = {"metric": spec.name, "exporter": spec.exporter}
            if not labels:
                why = ("kube_pod_info has no series for this node" if spec.match == "pods"
                       else "no series for this node under " + ", ".join(NODE_LABELS))
                entries[spec.name] = {**base, "status": "absent", "reason": why, "member": None, "query": None}
                continue
            jobs.append((spec, query_for(spec, target.node, labels)))
        with ThreadPoolExecutor(max_workers=_WORKERS) as pool:
            for spec, entry in zip([j[0] for j in jobs],
                                   pool.map(lambda j: self._query(ctx, client, target, *j), jobs), strict=True):
                entries[spec.name] = {"metric": spec.name, "exporter": spec.exporter, **entry}
        return [entries[s.name] for s in METRICS]

    def _query(self, ctx: CollectContext, client: PromClient, target: PromTarget, spec: MetricSpec,
               query: str) -> dict[str, Any]:
        member = query_member(spec.name)
        step = target.step_s
        entry: dict[str, Any] = {"query": query, "member": None}
        reasons: list[str] = []
        reply: Reply | None = None
        for attempt in range(2):
            params = [("query", query), ("start", f"{target.start:.3f}"), ("end", f"{target.end:.3f}"),
                      ("step", f"{step:g}")]
            try:
                reply = client.get("/api/v1/query_range", params)
            except CallFailed as exc:
                return {**entry, "status": "failed", "kind": exc.kind, "reason": exc.reason, "step_s": step,
                        "http_status": exc.status}
            if not reply.truncated:
                break
            reasons.append(f"answer at step {step:g} s over {client.max_response_bytes} bytes")
            if attempt == 0 and (target.end - target.start) / (step * _RETRY_STEP_FACTOR) >= 2:
                step *= _RETRY_STEP_FACTOR
                continue
        assert reply is not None
        entry.update({"url": reply.url, "asked_at": format_iso(reply.asked_at), "elapsed_s": round(reply.elapsed_s, 3),
                      "http_status": reply.status, "step_s": step})
        if reply.truncated:
            return {**entry, "status": "partial", "kind": "too-large", "bytes": None,
                    "reason": "; ".join(reasons) + ": cut, not kept (narrow the window, raise prometheus.step "
                              "or prometheus.max_response_bytes)"}
        ctx.sink.write_bytes(member, reply.body)
        entry.update({"member": member, "bytes": len(reply.body)})
        try:
            doc = json.loads(reply.body)
            series, points, odd = _counts(doc)
        except (ValueError, UnicodeDecodeError, AttributeError) as exc:
            return {**entry, "status": "failed", "kind": "bad-response", "reason": f"not a query_range matrix: {exc}"}
        entry.update({"series": series, "points": points, "nan_points": odd})
        if series == 0:
            return {**entry, "status": "absent", "reason": "the query returned no series in the window"}
        if reasons:
            return {**entry, "status": "partial", "kind": "coarser-step",
                    "reason": f"{reasons[0]}; kept at step {step:g} s"}
        return {**entry, "status": "ok"}


COLLECTOR = PrometheusCollector()
