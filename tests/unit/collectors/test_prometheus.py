"""The prometheus collector against a real Prometheus (Debian's package) holding backfilled exporter
history, and against loopback servers that misbehave as a real one sometimes does."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from forensics.collectors.prometheus.catalogue import (
    METRICS,
    choose_step,
    query_for,
)
from forensics.collectors.prometheus.client import display_url
from forensics.collectors.prometheus.collector import PrometheusCollector
from forensics.errors import SourceTimeout, SourceUnavailable
from forensics.parsing.durations import parse_duration_s
from tests.support.kube_testing import Staged, make_ctx
from tests.support.prometheus_server import (
    _free_port,
    misbehaving_prometheus,
    prometheus_factory,
    scenario_nan_and_stale,
    scenario_oom_killed_pod,
    scenario_unlabelled_gpu_pod,
    scenario_xid_step,
)

__all__ = ["prometheus_factory"]  # fixture used by name


def run(tmp_path: Path, url: str, node: str = "gpu-07", since: float | None = None, until: float | None = None,
        timeout_s: float = 30.0, **settings: str) -> Staged:
    now = time.time()
    tmp_path.mkdir(parents=True, exist_ok=True)
    extra = {"prometheus.url": url, **{f"prometheus.{k}": v for k, v in settings.items()}}
    staged = make_ctx(tmp_path, timeout_s=timeout_s, node_name=node, extra=extra,
                      since=datetime.fromtimestamp(since if since is not None else now - 3600, UTC),
                      until=datetime.fromtimestamp(until, UTC) if until is not None else None)
    PrometheusCollector().snapshot(staged.ctx)
    return staged


def queries(staged: Staged) -> dict[str, dict[str, Any]]:
    return {q["metric"]: q for q in staged.json("prometheus/queries.json")["queries"]}


class TestScenarios:
    def test_every_exporter_metric_verbatim_for_this_node_only(self, tmp_path, prometheus_factory):
        sc = scenario_unlabelled_gpu_pod()
        server = prometheus_factory(sc)
        staged = run(tmp_path, server.url, since=sc.start, until=sc.end)
        qs = queries(staged)
        assert staged.ctx.partial_reasons == []
        # the one metric no exporter in the scenario serves is absent, not an error
        assert qs["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]["status"] == "absent"
        assert qs["kube_pod_container_status_last_terminated_reason"]["status"] == "absent"
        ok = {m for m, q in qs.items() if q["status"] == "ok"}
        assert {"DCGM_FI_DEV_GPU_UTIL", "container_cpu_cfs_throttled_periods_total", "node_pressure_cpu_waiting_seconds_total",
                "kube_pod_info", "kube_pod_container_resource_limits", "kube_pod_container_info"} <= ok
        util = qs["DCGM_FI_DEV_GPU_UTIL"]
        raw = (staged.root / util["member"]).read_bytes()
        # verbatim: the member is exactly what Prometheus answers to the recorded URL
        assert raw == server.query(util["url"][len(server.url):])
        doc = json.loads(raw)
        hosts = {s["metric"].get("Hostname") for s in doc["data"]["result"]}
        assert hosts == {"gpu-07"}, "gpu-08's series must not be asked for"
        assert util["series"] == 2 and util["points"] == 2 * 241
        assert {s["metric"]["UUID"] for s in doc["data"]["result"]} == {g.uuid for g in sc.gpus}
        # kube-state-metrics' container series are joined to the node's pods
        info = json.loads((staged.root / qs["kube_pod_container_info"]["member"]).read_bytes())
        assert {s["metric"]["pod"] for s in info["data"]["result"]} == {"trainer-0", "notebook-0"}
        target = staged.json("prometheus/target.json")
        assert target["node"] == "gpu-07" and target["step_s"] == 15 and target["step_source"] == "auto"
        assert staged.json("prometheus/buildinfo.json")["data"]["version"].startswith("2.")
        assert staged.json("prometheus/series.json")["status"] == "success"

    def test_oom_and_xid_series_are_kept(self, tmp_path, prometheus_factory):
        sc = scenario_oom_killed_pod()
        staged = run(tmp_path, prometheus_factory(sc).url, since=sc.start, until=sc.end)
        qs = queries(staged)
        reasons = json.loads((staged.root / qs["kube_pod_container_status_last_terminated_reason"]["member"]).read_bytes())
        assert [s["metric"]["reason"] for s in reasons["data"]["result"]] == ["OOMKilled"]
        oom = json.loads((staged.root / qs["container_oom_events_total"]["member"]).read_bytes())
        etl = [s for s in oom["data"]["result"] if s["metric"]["pod"] == "etl-0"]
        assert etl[0]["values"][0][1] == "0" and etl[0]["values"][-1][1] == "1"

        sc = scenario_xid_step()
        staged = run(tmp_path / "xid", prometheus_factory(sc).url, since=sc.start, until=sc.end)
        xid = json.loads((staged.root / queries(staged)["DCGM_FI_DEV_XID_ERRORS"]["member"]).read_bytes())
        by_uuid = {s["metric"]["UUID"]: {v[1] for v in s["values"]} for s in xid["data"]["result"]}
        assert by_uuid[sc.expect["xid_gpu"]] == {"0", "79"}

    def test_exported_labels_when_scraped_without_honor_labels(self, tmp_path, prometheus_factory):
        sc = scenario_unlabelled_gpu_pod(exported=True)
        staged = run(tmp_path, prometheus_factory(sc).url, since=sc.start, until=sc.end)
        doc = json.loads((staged.root / queries(staged)["DCGM_FI_DEV_GPU_UTIL"]["member"]).read_bytes())
        pods = {s["metric"].get("exported_pod") for s in doc["data"]["result"]}
        assert pods == {"trainer-0", None}

    def test_nan_points_counted_and_gaps_left_as_gaps(self, tmp_path, prometheus_factory):
        sc = scenario_nan_and_stale()
        staged = run(tmp_path, prometheus_factory(sc).url, since=sc.start, until=sc.end)
        util = queries(staged)["DCGM_FI_DEV_GPU_UTIL"]
        assert util["status"] == "ok" and util["nan_points"] == sc.expect["nan_samples"]
        values = json.loads((staged.root / util["member"]).read_bytes())["data"]["result"][0]["values"]
        gap_start, gap_end = sc.expect["gap"]
        inside = [t for t, _ in values if gap_start + 300 < t < gap_end]
        assert inside == [], "past the 5-minute look-back a stopped series has no points"

    def test_step_setting_and_unknown_node(self, tmp_path, prometheus_factory):
        sc = scenario_xid_step()
        server = prometheus_factory(sc)
        staged = run(tmp_path, server.url, since=sc.start, until=sc.end, step="1m")
        util = queries(staged)["DCGM_FI_DEV_GPU_UTIL"]
        assert util["step_s"] == 60 and "step=60" in util["url"] and util["points"] == 2 * 61
        with pytest.raises(SourceUnavailable, match=r"no series for node 'gpu-99'.*gpu-07.*pass --node"):
            run(tmp_path / "x", server.url, node="gpu-99", since=sc.start, until=sc.end)


class TestBadPrometheus:
    def test_wrong_url_is_unavailable(self, tmp_path):
        port = _free_port()
        with pytest.raises(SourceUnavailable, match=rf"127\.0\.0\.1:{port}: Connection refused"):
            run(tmp_path, f"http://127.0.0.1:{port}")
        with pytest.raises(SourceUnavailable, match="not an http"):
            run(tmp_path, "prometheus:9090")

    @pytest.mark.parametrize("mode,pattern", [("401", "HTTP 401 Unauthorized.*--prometheus-token-file"),
                                              ("403", "HTTP 403 Forbidden.*access denied"),
                                              ("redirect", "redirected \\(302\\) to https://sso.example/login")])
    def test_refused_is_unavailable_with_the_reason(self, tmp_path, mode, pattern):
        token = tmp_path / "token"
        token.write_text("s3cr3t-token\n")
        with misbehaving_prometheus(mode) as url, pytest.raises(SourceUnavailable, match=pattern) as err:
            run(tmp_path, url.replace("http://", "http://admin:pw@"), token_file=str(token))
        assert "s3cr3t" not in str(err.value) and "pw@" not in str(err.value)

    def test_hung_prometheus_costs_one_call_timeout(self, tmp_path):
        with misbehaving_prometheus("hang") as url:
            t0 = time.monotonic()
            with pytest.raises(SourceTimeout, match="no answer within 1.0 s"):
                run(tmp_path, url, call_timeout_s="1")
            assert time.monotonic() - t0 < 5

    def test_huge_answer_is_capped_and_partial(self, tmp_path):
        with misbehaving_prometheus("huge") as url:
            staged = run(tmp_path, url, max_response_bytes=str(8 << 20))
        util = queries(staged)["DCGM_FI_DEV_GPU_UTIL"]
        assert util["status"] == "partial" and util["kind"] == "too-large" and util["member"] is None
        assert "over 8388608 bytes" in util["reason"] and "step 60 s" in util["reason"]
        assert any("DCGM_FI_DEV_GPU_UTIL" in r for r in staged.ctx.partial_reasons)
        assert all(p.stat().st_size < 1 << 20 for p in staged.root.rglob("*") if p.is_file())

    def test_not_prometheus(self, tmp_path):
        with misbehaving_prometheus("not-json") as url, pytest.raises(SourceUnavailable, match="not JSON"):
            run(tmp_path, url)


class TestCatalogue:
    def test_auto_step_fits_the_window(self):
        assert choose_step(2 * 3600) == (15.0, "auto")
        assert choose_step(24 * 3600) == (60.0, "auto")
        assert choose_step(30 * 86400)[0] == 1800.0
        step, why = choose_step(30 * 86400, 15.0)
        assert step * 11_000 >= 30 * 86400 and "raised" in why
        assert parse_duration_s("1m") == 60 and parse_duration_s("15") == 15
        with pytest.raises(ValueError):
            parse_duration_s("fast")

    def test_queries_quote_the_node_and_join_pods(self):
        spec = {s.name: s for s in METRICS}
        q = query_for(spec["DCGM_FI_DEV_GPU_UTIL"], 'gpu"07.lab', ("Hostname", "instance"))
        assert q == ('DCGM_FI_DEV_GPU_UTIL{Hostname="gpu\\"07.lab"} or '
                     'DCGM_FI_DEV_GPU_UTIL{instance=~"gpu\\"07\\\\.lab(:[0-9]+)?"}')
        q = query_for(spec["kube_pod_container_status_restarts_total"], "gpu-07", ("node",))
        assert q == 'kube_pod_container_status_restarts_total and on(namespace, pod) kube_pod_info{node="gpu-07"}'

    def test_display_url_drops_credentials(self):
        assert display_url("https://u:p@prom.example:9443/prometheus") == "https://prom.example:9443/prometheus"
