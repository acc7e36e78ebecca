"""Source specs (forensics/specs/): one declaration per source, and what is derived from it."""

from __future__ import annotations

import importlib
import subprocess
import sys

from forensics.analysis.loaders import loader_order
from forensics.analysis.loaders.manifest import note_missing_sources
from forensics.analysis.model import Model
from forensics.capture.registry import COLLECTOR_MODULES, collector_name
from forensics.capture.settings import SETTINGS
from forensics.specs import all_specs, playing, spec_named
from forensics.specs.docker import SPEC as DOCKER
from forensics.specs.docker import DockerSettings


def test_every_spec_names_a_collector_with_its_name_and_order() -> None:
    specs = all_specs()
    names = [s.name for s in specs]
    assert len(names) == len(set(names)) and names[0] == "nvml" and names[-1] == "host"
    assert {"docker", "procfs", "cgroups", "kernel", "kubernetes", "podresources"} <= set(names)
    assert [s.order for s in specs] == sorted(s.order for s in specs)
    assert COLLECTOR_MODULES == tuple(s.collector for s in specs)
    for spec in specs:
        collector = importlib.import_module(spec.collector).COLLECTOR
        assert (collector.name, collector.order) == (spec.name, spec.order)
        assert collector_name(spec.collector) == spec.name


def test_settings_table_and_typed_settings_come_from_the_spec() -> None:
    assert SETTINGS["docker.workers"].kind == "positive-int"
    assert SETTINGS["docker.workers"].help == "parallel Docker Engine API calls (default 8)"
    assert SETTINGS["docker.host"].help.endswith("(default: $DOCKER_HOST, then the local socket)")
    assert DOCKER.read_settings({}) == DockerSettings()
    typed = DOCKER.read_settings({"docker.workers": "3", "docker.stats": "off", "docker.call_timeout_s": "1.5"})
    assert (typed.workers, typed.stats, typed.call_timeout_s) == (3, False, 1.5)
    # a value that skipped validation keeps the default; a collector's own value beats the default
    assert DOCKER.read_settings({"docker.workers": "-1"}).workers == 8
    kube = spec_named("kubernetes")
    assert kube is not None
    assert kube.read_settings({}, call_timeout_s=2.0).call_timeout_s == 2.0
    assert kube.read_settings({"kubernetes.call_timeout_s": "3"}, call_timeout_s=2.0).call_timeout_s == 3.0


def test_loader_order_follows_declared_needs() -> None:
    order = [ld.source for ld in loader_order()]
    assert order[0] == "nvml"
    for ld in loader_order():
        for need in ld.needs:  # a source by name, or every source of a role
            for name in (need,) if isinstance(need, str) else sorted(playing(need) - {ld.source}):
                assert order.index(name) < order.index(ld.source), (ld.source, need)


def test_absence_costs_and_excuses_are_declared() -> None:
    def limits(statuses: dict[str, str]) -> list[str]:
        model = Model()
        model.node("n").collector_status.update(statuses)
        note_missing_sources(model)
        return model.limitations

    every_ok = {s.name: "ok" for s in all_specs() if s.name != "prometheus"}
    assert limits(every_ok) == []
    no_kube = {k: v for k, v in every_ok.items() if k != "kubernetes"}
    assert limits(no_kube) == []  # not a Kubernetes node: nothing lost
    assert limits({**every_ok, "docker": "unavailable"}) == []  # containerd node: pods say it
    # a containerd node without the API: the CRI runtime describes the containers
    assert limits({**no_kube, "docker": "unavailable"}) == []
    no_runtime = {**no_kube, "docker": "unavailable", "cri": "unavailable"}
    assert limits(no_runtime) == [
        "n: no Docker data: container GPU allocations unknown (collector docker unavailable)"]
    no_cri_record = {k: v for k, v in every_ok.items() if k != "cri"}
    assert limits(no_cri_record) == []  # a bundle from before the cri collector
    assert limits({**every_ok, "cri": "unavailable"}) == []  # no CRI socket: a Docker node
    assert limits({**every_ok, "cri": "failed"}) == [
        "n: no container runtime (CRI) data: a containerd/CRI-O node's containers, their OCI device grants "
        "and pods are known only from cgroup paths and the Kubernetes API (collector cri failed)"]
    assert limits({**every_ok, "kubernetes": "failed"}) == [
        "n: no Kubernetes data: pod allocations and OOMKilled statuses unknown (collector kubernetes failed)"]


def test_an_optional_source_costs_nothing_unless_asked_and_stands_in_where_it_answered() -> None:
    def limits(statuses: dict[str, str], step: float | None = None) -> list[str]:
        model = Model()
        info = model.node("n")
        info.collector_status.update(statuses)
        info.history_step_s = step
        note_missing_sources(model)
        return model.limitations

    every_ok = {s.name: "ok" for s in all_specs() if s.name != "prometheus"}
    assert limits(every_ok) == []  # never configured: no record of it
    assert limits({**every_ok, "prometheus": "skipped"}) == []  # not configured, or --skip
    assert limits({**every_ok, "prometheus": "unavailable"}) == [
        "n: no Prometheus history: the exporters' series of the window are missing (collector prometheus unavailable)"]
    assert limits({"host": "ok", "prometheus": "ok"}, step=15.0) == [
        "n: no NVML data: GPU attribution not possible (no nvml collector in the bundle; Prometheus history "
        "at a 15 s step stands in for GPU utilization, memory, clocks and Xid (no processes))",
        "n: no /proc data: GPU processes cannot be joined to containers (no procfs collector in the bundle)",
        "n: no Docker data: container GPU allocations unknown (no docker collector in the bundle; Prometheus history "
        "at a 15 s step stands in for container ids and images (cAdvisor, kube-state-metrics))",
        "n: no cgroup data: CPU throttling and pressure cannot be assessed (no cgroups collector in the bundle; "
        "Prometheus history at a 15 s step stands in for CFS throttling and host pressure)",
        "n: no kernel log: OOM kills and Xid errors cannot be ruled in or out (no kernel collector in the bundle; "
        "Prometheus history at a 15 s step stands in for OOM events (cAdvisor, kube-state-metrics) and the last "
        "Xid (dcgm-exporter))",
    ]


def test_specs_import_nothing_above_them() -> None:
    code = ("import sys, forensics.specs as s; s.all_specs(); "
            "bad = [m for m in sys.modules if m.startswith(('forensics.capture', 'forensics.analysis', "
            "'forensics.collectors', 'forensics.report', 'forensics.cli'))]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
