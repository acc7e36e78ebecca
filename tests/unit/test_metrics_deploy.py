"""deploy/metrics/: the PrometheusRule's rule group passes ``promtool check rules`` and its 90 % /
5 min alert fires (and only then) under ``promtool test rules``; the Grafana dashboard and the
rules ask only for series the recorder serves; the kube-rbac-proxy Component builds with kubectl's
kustomize and puts the proxy in front of the recorder's loopback endpoint."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from forensics.record.live.metrics import MetricsOptions, parse_metrics_addr
from forensics.record.recorder import Recorder, RecordOptions
from forensics.record.triggers import TriggerOptions, parse_rules
from tests.support.env import need
from tests.support.prometheus_server import PROMTOOL, PrometheusUnavailable, ensure_prometheus
from tests.unit.record.test_live import SAMPLES, replay

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
METRICS = DEPLOY / "metrics"


def _promtool() -> str:
    try:
        ensure_prometheus()
    except PrometheusUnavailable as exc:
        need(False, str(exc))
    return PROMTOOL


def _rule_group_file(tmp_path: Path) -> Path:
    doc = yaml.safe_load((METRICS / "prometheusrule.yaml").read_text())
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "PrometheusRule"
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": doc["spec"]["groups"]}))
    return path


def test_promtool_check_rules(tmp_path: Path) -> None:
    proc = subprocess.run([_promtool(), "check", "rules", str(_rule_group_file(tmp_path))],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 4 rules found" in proc.stdout, proc.stdout


GPU = 'gpuforensics_gpu_utilization_percent{instance="gpu-07",job="gpuforensics",gpu="0",gpu_uuid="GPU-a",name="H100"}'
GPU1 = 'gpuforensics_gpu_utilization_percent{instance="gpu-07",job="gpuforensics",gpu="1",gpu_uuid="GPU-b",name="H100"}'
UNALLOCATED = ('gpuforensics_process_gpu_memory_bytes{instance="gpu-07",job="gpuforensics",gpu="0",gpu_uuid="GPU-a",'
               'mig_uuid="",pid="4242",owner="container",container="notebook",container_id="5a21",namespace="ml",'
               'pod="nb-0",allocated="false",grant="blanket"}')


def test_the_90_percent_5_minute_alert_fires_after_5_minutes_only(tmp_path: Path) -> None:
    """GPU 0 at 95 % for 10 minutes fires at 5 min (pending before); GPU 1 at 95 % with a dip to
    50 % at minute 3 has not fired by minute 7; a container using a GPU without a grant fires."""
    rules = _rule_group_file(tmp_path)
    gpu0_fires = [{
        "exp_labels": {"severity": "warning", "instance": "gpu-07", "job": "gpuforensics", "gpu": "0",
                       "gpu_uuid": "GPU-a", "name": "H100"},
        "exp_annotations": {
            "summary": "GPU 0 (GPU-a) on gpu-07 above 90 % for 5 minutes (95 %)",
            "description": 'Who is on it: gpuforensics_process_sm_utilization_percent{instance="gpu-07",'
                           'gpu_uuid="GPU-a"}. Capture the node while it lasts (gpuforensics record '
                           "--trigger 'gpu.util>90%:5m' does it by itself)."}}]
    tests = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": GPU, "values": "95x10"},
                {"series": GPU1, "values": "95 95 95 50 95 95 95 95 95 95"},
                {"series": UNALLOCATED, "values": "53687091200x10"},
            ],
            "alert_rule_test": [
                {"eval_time": "4m", "alertname": "GpuUtilizationHigh", "exp_alerts": []},
                {"eval_time": "5m", "alertname": "GpuUtilizationHigh", "exp_alerts": gpu0_fires},
                {"eval_time": "7m", "alertname": "GpuUtilizationHigh", "exp_alerts": gpu0_fires},
                {"eval_time": "6m", "alertname": "GpuUsedWithoutGrant", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "instance": "gpu-07", "gpu": "0", "gpu_uuid": "GPU-a",
                                   "namespace": "ml", "pod": "nb-0", "container": "notebook", "container_id": "5a21",
                                   "grant": "blanket"},
                    "exp_annotations": {"summary": "ml/nb-0 container notebook uses GPU 0 on gpu-07 without a grant (blanket)"}}]},
            ],
        }],
    }
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(tests))
    proc = subprocess.run([_promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_test_catches_a_wrong_expectation(tmp_path: Path) -> None:
    """The control: the same alert expected at 4 minutes fails."""
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump({"rule_files": [str(_rule_group_file(tmp_path))], "evaluation_interval": "1m",
                                    "tests": [{"interval": "1m", "input_series": [{"series": GPU, "values": "95x10"}],
                                               "alert_rule_test": [{"eval_time": "4m", "alertname": "GpuUtilizationHigh",
                                                                    "exp_alerts": [{"exp_labels": {}}]}]}]}))
    proc = subprocess.run([_promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Every series name a recorder with a trigger serves."""
    tmp = tmp_path_factory.mktemp("served")
    triggers = TriggerOptions(rules=parse_rules(["gpu.util>90%:5m"]), bundles=tmp / "bundles")
    rec = Recorder(RecordOptions(ring=tmp / "ring", triggers=triggers, metrics=MetricsOptions(port=0, stale_s=1e12)))
    assert rec.live is not None and rec.metrics is not None
    try:
        replay(SAMPLES / "unallocated-gpu-use.tgz", rec.live)
        rec.metrics.publish(rec, rec.live)
        text = rec.metrics.exposition().decode()
    finally:
        rec.metrics.close()
    return set(re.findall(r"^(gpuforensics_\w+)[{ ]", text, re.M))


def _names(expr: str) -> set[str]:
    return set(re.findall(r"gpuforensics_\w+", expr))


def test_rules_ask_for_served_series(served: set[str]) -> None:
    doc = yaml.safe_load((METRICS / "prometheusrule.yaml").read_text())
    exprs = [r["expr"] for g in doc["spec"]["groups"] for r in g["rules"]]
    assert exprs and all(_names(e) and _names(e) <= served for e in exprs), (exprs, sorted(served))


def _dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((METRICS / "grafana-dashboard.json").read_text())
    return doc


def test_dashboard_asks_for_served_series(served: set[str]) -> None:
    doc = _dashboard()
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in doc["templating"]["list"] if isinstance(v.get("query"), dict)]
    missing = {n for e in exprs for n in _names(e)} - served
    assert exprs and not missing, missing
    assert len({p["id"] for p in doc["panels"]}) == len(doc["panels"])


def test_dashboard_compares_containers_side_by_side_on_one_y_range() -> None:
    doc = _dashboard()
    [var] = [v for v in doc["templating"]["list"] if v["name"] == "container"]
    assert var["multi"] and var["includeAll"] and "container)" in var["query"]["query"]
    repeated = [p for p in doc["panels"] if p.get("repeat") == "container"]
    assert len(repeated) == 2
    for p in repeated:
        assert p["repeatDirection"] == "h" and p["gridPos"]["w"] * p["maxPerRow"] <= 24
        assert (p["fieldConfig"]["defaults"]["min"], p["fieldConfig"]["defaults"]["max"]) == (0, 100)
        assert all('container="$container"' in t["expr"] for t in p["targets"])
    rows = sorted((p["gridPos"]["y"], p["title"]) for p in doc["panels"] if p["type"] == "row")
    for p in repeated:  # each alone in its row: the repeats fill the row side by side
        row_y = max(y for y, _ in rows if y < p["gridPos"]["y"])
        same_row = [q for q in doc["panels"] if q["type"] != "row" and q is not p
                    and row_y < q["gridPos"]["y"] <= p["gridPos"]["y"] + p["gridPos"]["h"] - 1]
        assert not same_row, same_row


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_patch_adds_the_loopback_endpoint_and_the_proxy_in_front_of_it() -> None:
    [base] = [d for d in _docs(DEPLOY / "daemonset.yaml") if d["kind"] == "DaemonSet"]
    [patch] = _docs(METRICS / "daemonset-patch.yaml")
    containers = {c["name"]: c for c in patch["spec"]["template"]["spec"]["containers"]}
    [base_capture] = base["spec"]["template"]["spec"]["containers"]
    command = containers["capture"]["command"]
    assert command[:len(base_capture["command"])] == base_capture["command"]  # the base's command, extended
    addr = command[command.index("--metrics-addr") + 1]
    host, port = parse_metrics_addr(addr)
    assert host == "127.0.0.1"  # loopback: reachable through the proxy only
    proxy = containers["kube-rbac-proxy"]
    assert f"--upstream=http://127.0.0.1:{port}/" in proxy["args"]
    listen = next(a for a in proxy["args"] if a.startswith("--secure-listen-address="))
    [svc] = _docs(METRICS / "service.yaml")
    [svc_port] = svc["spec"]["ports"]
    [proxy_port] = proxy["ports"]
    assert svc_port["targetPort"] == proxy_port["name"] and listen.endswith(f":{proxy_port['containerPort']}")
    assert svc["spec"]["selector"] == base["spec"]["selector"]["matchLabels"]
    [sm] = _docs(METRICS / "servicemonitor.yaml")
    [ep] = sm["spec"]["endpoints"]
    assert ep["port"] == svc_port["name"] and ep["scheme"] == "https" and ep["honorLabels"] is True
    assert sm["spec"]["selector"]["matchLabels"] == svc["metadata"]["labels"]
    rbac = {d["metadata"]["name"]: d for d in _docs(METRICS / "rbac.yaml") if d["kind"] == "ClusterRole"}
    resources = {r for rule in rbac["gpuforensics-metrics-auth"]["rules"] for r in rule["resources"]}
    assert resources == {"tokenreviews", "subjectaccessreviews"}
    assert rbac["gpuforensics-metrics-reader"]["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


def test_component_builds_with_kubectl_kustomize(tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    need(kubectl is not None, "kubectl (its kustomize) not installed")
    assert kubectl is not None
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    rel = os.path.relpath(DEPLOY, overlay)
    (overlay / "kustomization.yaml").write_text(f"resources:\n  - {rel}\ncomponents:\n  - {rel}/metrics\n")
    proc = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    containers = {c["name"]: c for c in ds["spec"]["template"]["spec"]["containers"]}
    assert set(containers) == {"capture", "kube-rbac-proxy"}
    assert "--metrics-addr" in containers["capture"]["command"]
    assert containers["capture"]["volumeMounts"]  # the base's container, merged, not replaced
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {("Service", "gpuforensics-metrics"), ("ClusterRole", "gpuforensics-metrics-auth")} <= kinds
