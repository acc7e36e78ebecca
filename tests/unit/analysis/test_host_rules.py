"""Host and GPU-health rules: cpu-throttling, oom-kill, gpu-xid-fault, gpu-clock-throttle,
pressure-stall; each with a case that must fire and one that must not."""

from __future__ import annotations

from forensics.analysis.document import iso
from forensics.analysis.naming import fmt_time
from tests.support.analysis_bundles import GIB, T0, BundleSpec
from tests.unit.analysis.conftest import Analyze, kinds, names, of_kind


def _loader(throttled_per_tick: int, gpu_util: float) -> BundleSpec:
    b = BundleSpec()
    b.gpu(0)
    c = b.container("loader", env=["NVIDIA_VISIBLE_DEVICES=0"], nano_cpus=200_000_000)
    b.process(50, "python", container=c)
    b.gpu_series(0, range(30), lambda s: (gpu_util, 20 * GIB, {50: (20 * GIB, gpu_util)}))
    for s in range(30):
        b.cgroup_tick(T0 + s, f"/system.slice/docker-{c}.scope", nr_periods=10 * s,
                      nr_throttled=throttled_per_tick * s, throttled_usec=80_000 * s)
    return b


class TestCpuThrottling:
    def test_throttled_feeder_with_idle_gpu_is_high(self, analyze: Analyze) -> None:
        (f,) = of_kind(analyze(_loader(9, 4)), "cpu-throttling")
        assert names(f, "victim") == ["loader"] and f["severity"] == "high"
        assert f["metrics"]["gpu_idle"] is True and "GPU 0" in f["summary"]
        assert f["evidence"][0]["member"] == "cgroup/samples.jsonl"

    def test_throttled_with_busy_gpu_is_not_gpu_starvation(self, analyze: Analyze) -> None:
        (f,) = of_kind(analyze(_loader(3, 90)), "cpu-throttling")
        assert f["metrics"]["gpu_idle"] is False and f["severity"] == "medium"

    def test_unthrottled_does_not_fire(self, analyze: Analyze) -> None:
        doc = analyze(_loader(0, 90))
        assert "cpu-throttling" not in kinds(doc)
        assert any(r["kind"] == "cpu-throttling" for r in doc["ruled_out"])


class TestOomKill:
    def test_kernel_memcg_oom_names_the_container(self, analyze: Analyze) -> None:
        b = BundleSpec()
        c = b.container("etl", image_env=["PATH=/bin"], memory=32 << 20, state="exited", exit_code=137,
                        oom_killed=True, finished=T0 + 12)
        b.kernel_oom(T0 + 12, 777, "python", f"/system.slice/docker-{c}.scope", 32_600, 32_768)
        doc = analyze(b)
        (f,) = of_kind(doc, "oom-kill")  # kernel and Docker records of one kill merged
        assert names(f, "victim", "container") == ["etl"]
        assert "32.0 MiB" in f["summary"] and "kernel" in f["metrics"]["sources"]
        assert any("Killed process 777" in e["excerpt"] for e in f["evidence"])

    def test_repeated_kills_of_one_container_are_one_counted_finding(self, analyze: Analyze) -> None:
        b = BundleSpec()
        c = b.container("worker", image_env=["PATH=/bin"], memory=32 << 20)
        other = b.container("etl", image_env=["PATH=/bin"], memory=32 << 20)
        for i, t in enumerate((5, 300, 600)):  # far apart: not one kill seen by several sources
            b.kernel_oom(T0 + t, 900 + i, "python", f"/system.slice/docker-{c}.scope", 32_600, 32_768)
        b.kernel_oom(T0 + 50, 990, "sort", f"/system.slice/docker-{other}.scope", 32_600, 32_768)
        found = of_kind(analyze(b), "oom-kill")
        assert len(found) == 2
        (rep,) = [f for f in found if names(f, "victim", "container") == ["worker"]]
        assert rep["summary"].startswith("3 OOM kills of container worker")
        # each PID with its own kill's time, in the summary and on its subject
        t = [fmt_time(T0 + s) for s in (5, 300, 600)]
        assert f"900 at {t[0]}, 901 at {t[1]}, 902 at {t[2]}" in rep["summary"] and rep["metrics"]["kills"] == 3
        procs = {s["id"]: s["time"] for s in rep["subjects"] if s["type"] == "process"}
        assert procs == {str(900 + i): iso(T0 + s) for i, s in enumerate((5, 300, 600))}
        excerpts = " ".join(e["excerpt"] for e in rep["evidence"])
        assert "Killed process 900" in excerpts and "Killed process 902" in excerpts  # first and last cited
        (single,) = [f for f in found if names(f, "victim", "container") == ["etl"]]
        assert "kills" not in single["metrics"]

    def test_kill_hours_before_the_capture_is_history_not_the_verdict(self, analyze: Analyze) -> None:
        b = BundleSpec(lookback_s=3600)
        old = b.container("batch", image_env=["PATH=/bin"], memory=32 << 20)
        new = b.container("etl", image_env=["PATH=/bin"], memory=32 << 20)
        b.kernel_oom(T0 - 20 * 3600, 700, "sort", f"/system.slice/docker-{old}.scope", 32_600, 32_768)
        b.kernel_oom(T0 + 12, 777, "python", f"/system.slice/docker-{new}.scope", 32_600, 32_768)
        doc = analyze(b)
        by_victim = {names(f, "victim", "container")[0]: f for f in of_kind(doc, "oom-kill")}
        assert by_victim["batch"]["severity"] == "low"
        assert by_victim["batch"]["summary"].startswith("earlier history (20.0 h before the capture")
        assert by_victim["etl"]["severity"] == "high"
        assert "etl" in doc["verdict"]["headline"] and "batch" not in doc["verdict"]["headline"]

    def test_many_containers_killed_are_as_many_incidents(self, analyze: Analyze) -> None:
        """Three containers each over their own limit are three causes: the headline names the
        top one and says how many more there are; the document lists them all."""
        b = BundleSpec()
        for i, name in enumerate(("a", "b", "c")):
            cid = b.container(name, image_env=["PATH=/bin"], memory=32 << 20)
            b.kernel_oom(T0 + 10 * (i + 1), 800 + i, "python", f"/system.slice/docker-{cid}.scope", 32_600, 32_768)
        doc = analyze(b)
        assert doc["verdict"]["headline"].endswith(" (+2 more incidents)")
        assert len(doc["incidents"]) == 3 and doc["verdict"]["incident"] == "I1"
        victims = [[s["name"] for s in i["victims"]] for i in doc["incidents"]]
        assert sorted(victims) == [["a"], ["b"], ["c"]]

    def test_many_kills_in_one_incident_are_counted(self, analyze: Analyze) -> None:
        """Host-wide OOM kills share their victim (the host): one incident, counted."""
        b = BundleSpec()
        for i in range(3):
            b.kmsg(T0 + 10 * (i + 1), f"Out of memory: Killed process {800 + i} (python) total-vm:900000kB, "
                                      "anon-rss:800000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:2000kB", 3)
        doc = analyze(b)
        assert len([i for i in doc["incidents"] if "oom-kill" in i["kinds"]]) == 1
        assert doc["verdict"]["headline"].startswith("3 OOM kills in ")

    def test_kubernetes_oomkilled_status(self, analyze: Analyze) -> None:
        b = BundleSpec()
        uid = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
        cid = "a" * 64
        b.pod("ml", "trainer-0", uid, [("trainer", cid, 1)], oom_killed=["trainer"])
        (f,) = of_kind(analyze(b), "oom-kill")
        assert "ml/trainer-0" in names(f, "victim", "pod")
        assert any("OOMKilled" in e["excerpt"] for e in f["evidence"])

    def test_no_oom_does_not_fire(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.kmsg(T0 + 5, "eth0: link up")
        doc = analyze(b)
        assert "oom-kill" not in kinds(doc)
        assert any(r["kind"] == "oom-kill" for r in doc["ruled_out"])


class TestXid:
    def test_kernel_xid_79_is_a_lost_gpu(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        b.gpu(1)
        b.kmsg(T0 + 7, "NVRM: Xid (PCI:0000:86:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
        b.nvml_xid_event(1, T0 + 7.2, 79)
        doc = analyze(b)
        assert "gpu-xid-fault" not in kinds(doc)
        (f,) = of_kind(doc, "gpu-lost")  # kernel + NVML records: one finding, both witnesses
        assert f["severity"] == "critical" and f["metrics"]["action"] == "RESTART_BM"
        assert "GPU 1" in names(f, "witness", "gpu")
        assert {e["member"] for e in f["evidence"]} == {"kernel/kmsg.txt", "nvml/events.jsonl"}

    def test_application_xid_31(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        b.kmsg(T0 + 7, "NVRM: Xid (PCI:0000:3b:00): 31, pid=4242, name=python, Ch 0000000a, MMU Fault")
        (f,) = of_kind(analyze(b), "gpu-xid-fault")
        assert f["metrics"]["xid_class"] == "application" and f["severity"] == "medium"
        assert f["metrics"]["action"] == "RESTART_APP" and "RESTART_APP" in f["summary"]

    def test_no_xid_is_ruled_out(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.kmsg(T0 + 7, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15")
        doc = analyze(b)
        assert "gpu-xid-fault" not in kinds(doc)
        assert any(r["kind"] == "gpu-xid-fault" for r in doc["ruled_out"])


class TestClockThrottle:
    def test_thermal_slowdown(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        for s in range(20):
            b.gpu_tick(0, T0 + s, 90, 10 * GIB, reasons=0x40 if s >= 10 else 0, temp=91 if s >= 10 else 70)
        (f,) = of_kind(analyze(b), "gpu-clock-throttle")
        assert "HW thermal slowdown" in f["summary"] and f["severity"] == "medium"

    def test_how_long_each_reason_was_active(self, analyze: Analyze) -> None:
        """Power cap for 8 s early on, then HW thermal slowdown for the last 14 s (4 s more power cap inside it):
        the finding says how long and why, longest first, and the overlap is not counted twice."""
        b = BundleSpec()
        b.gpu(0)
        for s in range(30):
            reasons = (0x4 if 4 <= s < 12 else 0) | (0x40 if s >= 16 else 0) | (0x4 if 18 <= s < 22 else 0)
            b.gpu_tick(0, T0 + s, 90, 10 * GIB, reasons=reasons | 0x1)
        (f,) = of_kind(analyze(b), "gpu-clock-throttle")
        m = f["metrics"]
        assert m["reason_seconds"] == "HW thermal slowdown=14.0; SW power cap=12.0"
        assert m["throttled_s"] == 22.0 and m["window_s"] == 29.0
        assert "HW thermal slowdown for 14 s (longest stretch 14 s), SW power cap for 12 s (longest stretch 8 s)" \
            in f["summary"], f["summary"]
        assert f["summary"].startswith("GPU 0 clocks were slowed for 22 s of the 29 s sampled")

    def test_a_pause_in_sampling_is_not_throttled_time(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        for s in (0, 1, 2, 3, 200, 201, 202, 203):
            b.gpu_tick(0, T0 + s, 90, 10 * GIB, reasons=0x8)
        (f,) = of_kind(analyze(b), "gpu-clock-throttle")
        assert f["metrics"]["throttled_s"] == 37.0  # 3 x 1 s + 30 s (the gap, capped) + 3 x 1 s + 1 s

    def test_idle_reason_is_not_throttling(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        for s in range(20):
            b.gpu_tick(0, T0 + s, 0, 0, reasons=0x1)
        doc = analyze(b)
        assert "gpu-clock-throttle" not in kinds(doc)
        assert any(r["kind"] == "gpu-clock-throttle" for r in doc["ruled_out"])


class TestPressureStall:
    def test_container_memory_pressure(self, analyze: Analyze) -> None:
        b = BundleSpec()
        c = b.container("etl", image_env=["PATH=/bin"])
        for s in range(10):
            b.cgroup_tick(T0 + s, f"/system.slice/docker-{c}.scope", psi={"memory": (45.0, 30.0)})
        (f,) = of_kind(analyze(b), "pressure-stall")
        assert names(f, "victim") == ["etl"] and f["severity"] == "medium"
        # samples carry the kernel's cumulative counters (the collector's form): shares per interval
        assert "stall share per sampling interval peaked at 45.0%, full 30.0%" in f["summary"], f["summary"]
        assert '"some_total_usec":' in f["evidence"][0]["excerpt"]

    def test_host_pressure_low(self, analyze: Analyze) -> None:
        b = BundleSpec()
        for s in range(10):
            b.cgroup_tick(T0 + s, "/", psi={"cpu": (1.0, None), "io": (0.5, 0.1)}, host_psi=True)
        doc = analyze(b)
        assert "pressure-stall" not in kinds(doc)
        assert any(r["kind"] == "pressure-stall" for r in doc["ruled_out"])


def test_kubernetes_system_oom_event(analyze: Analyze) -> None:
    b = BundleSpec()
    b.add_json("kubernetes/events.json", {"kind": "EventList", "items": [{
        "reason": "SystemOOM", "type": "Warning", "lastTimestamp": "2025-11-29T14:00:30Z",
        "message": "System OOM encountered, victim process: python, pid: 4242",
        "involvedObject": {"kind": "Node", "name": "gpu-07"}}]})
    (f,) = of_kind(analyze(b), "oom-kill")
    assert f["severity"] == "critical" and "4242" in f["summary"]
    assert names(f, "victim", "host") == ["gpu-07"]


def test_containers_only_in_cgroups_are_kept_as_unattributed(analyze: Analyze) -> None:
    b = BundleSpec()
    ghost = "d" * 64
    for s in range(5):
        b.cgroup_tick(T0 + s, f"/system.slice/docker-{ghost}.scope", nr_periods=10 * s, nr_throttled=9 * s)
    doc = analyze(b)
    assert [u["id"] for u in doc["unattributed"] if u["type"] == "container"] == [ghost]
    (f,) = of_kind(doc, "cpu-throttling")
    assert names(f, "victim") == [ghost[:12]]
    assert f["summary"].startswith(f"container {ghost[:12]} (not described by Docker or Kubernetes in the bundle)")


def test_a_container_known_only_from_docker_events_is_named_by_them(analyze: Analyze) -> None:
    """Created, OOM-killed and removed between two snapshots: no inspect record, but its events name it."""
    b = BundleSpec()
    b.container("trainer", image_env=["PATH=/bin"])
    gone = "7910eccb62d8" + "e" * 52
    for action, t in (("create", T0 + 1), ("start", T0 + 1), ("oom", T0 + 4), ("die", T0 + 4), ("destroy", T0 + 5)):
        b.add_jsonl("docker/events.jsonl", {
            "Type": "container", "Action": action, "id": gone, "time": int(t), "timeNano": int(t * 1e9),
            "Actor": {"ID": gone, "Attributes": {"name": "oom-burst", "image": "busybox"}}})
    b.kernel_oom(T0 + 4, 4242, "sh", f"/system.slice/docker-{gone}.scope", 16_384, 16_384)
    doc = analyze(b)
    (f,) = of_kind(doc, "oom-kill")
    assert names(f, "victim", "container") == ["oom-burst"]
    assert "container oom-burst (7910eccb62d8, known only from Docker events)" in f["summary"]
    assert "not described by Docker" not in f["summary"]
    (u,) = [u for u in doc["unattributed"] if u["id"] == gone]
    assert u["name"] == "oom-burst"


def test_kubernetes_event_series_time(analyze: Analyze) -> None:
    """events.k8s.io-style events carry their time in series.lastObservedTime (kubernetes.md)."""
    b = BundleSpec()
    b.add_json("kubernetes/events.json", {"kind": "EventList", "items": [{
        "reason": "SystemOOM", "type": "Warning", "lastTimestamp": None, "eventTime": None,
        "series": {"count": 2, "lastObservedTime": "2025-11-29T14:00:40.000000Z"},
        "message": "System OOM encountered, victim process: python, pid: 4242",
        "involvedObject": {"kind": "Node", "name": "gpu-07"}}]})
    (f,) = of_kind(analyze(b), "oom-kill")
    assert f["start"] == "2025-11-29T14:00:40Z"
