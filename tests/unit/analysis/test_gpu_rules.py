"""GPU rules: unallocated-gpu-use, overlapping-gpu-allocation, unattributed-gpu-process,
gpu-compute-hog, gpu-memory-pressure; each with a case that must fire and one that must not."""

from __future__ import annotations

from tests.support.analysis_bundles import GIB, T0, BundleSpec
from tests.unit.analysis.conftest import Analyze, cid_of, kinds, names, of_kind, secretly_taken


class TestUnallocatedGpuUse:
    def test_blanket_grant_on_a_gpu_allocated_to_another_container(self, analyze: Analyze) -> None:
        doc = analyze(secretly_taken())
        (f,) = of_kind(doc, "unallocated-gpu-use")
        assert names(f, "culprit") == ["notebook"]
        assert names(f, "victim") == ["trainer"]
        assert f["severity"] == "high"
        assert "NVIDIA_VISIBLE_DEVICES=all" in f["summary"] and "the image" in f["summary"]
        members = {e["member"] for e in f["evidence"]}
        assert "nvml/samples.jsonl" in members and "proc/4202/cgroup" in members
        assert any(e["locator"].startswith("/Config/Env/") and "NVIDIA_VISIBLE_DEVICES=all" in e["excerpt"]
                   for e in f["evidence"])
        assert any(s["type"] == "container" and len(s["id"]) == 64 for s in f["subjects"])

    def test_unallocated_free_gpu_is_medium(self, analyze: Analyze) -> None:
        doc = analyze(secretly_taken(notebook_gpu=1))
        (f,) = of_kind(doc, "unallocated-gpu-use")
        assert f["severity"] == "medium" and names(f, "victim") == []

    def test_explicit_allocation_does_not_fire(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        c = b.container("trainer", device_requests=[{"Driver": "", "Count": 0, "DeviceIDs": ["0"],
                                                     "Capabilities": [["gpu"]], "Options": {}}])
        b.process(10, "python", container=c)
        b.gpu_series(0, range(10), lambda s: (90, 20 * GIB, {10: (20 * GIB, 90.0)}))
        doc = analyze(b)
        assert "unallocated-gpu-use" not in kinds(doc)
        assert doc["verdict"]["clean"] is True

    def test_privileged_container_is_a_blanket_grant(self, analyze: Analyze) -> None:
        b = BundleSpec(default_runtime="runc")
        b.gpu(0)
        c = b.container("miner", image_env=["PATH=/bin"], privileged=True, runtime="runc")
        b.process(10, "xmrig", container=c)
        b.gpu_series(0, range(10), lambda s: (90, 2 * GIB, {10: (2 * GIB, 90.0)}))
        (f,) = of_kind(analyze(b), "unallocated-gpu-use")
        assert names(f, "culprit") == ["miner"] and "privileged" in f["summary"]


class TestOverlappingAllocation:
    def _two(self, active_second: bool, sequential: bool = False) -> BundleSpec:
        """job-a and job-b both asked for ``--gpus 2`` (so both got GPUs 0 and 1); job-b runs on
        GPU 0 alongside job-a, or not at all, or (``sequential``) only after job-a has finished."""
        b = BundleSpec()
        b.gpu(0)
        b.gpu(1)
        req = [{"Driver": "", "Count": 2, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}]
        a = b.container("job-a", device_requests=req, started=T0 - 600)
        c = b.container("job-b", device_requests=req, started=T0 - 60)
        b.process(11, "python", container=a)
        b.process(12, "python", container=c)
        if sequential:
            b.gpu_series(0, range(12), lambda s: (95, 10 * GIB, {11: (10 * GIB, 50.0)} if s < 4 else
                                                   ({} if s < 8 else {12: (10 * GIB, 45.0)})))
            return b
        procs = {11: (10 * GIB, 50.0)}
        if active_second:
            procs[12] = (10 * GIB, 45.0)
        b.gpu_series(0, range(10), lambda s: (95, 20 * GIB, dict(procs)))
        return b

    def test_two_count_requests_share_gpus(self, analyze: Analyze) -> None:
        (f,) = of_kind(analyze(self._two(True)), "overlapping-gpu-allocation")
        assert names(f, "culprit") == ["job-b"] and names(f, "victim") == ["job-a"]
        assert "--gpus 2" in f["summary"]

    def test_holders_started_together_are_both_culprits_in_finding_and_verdict(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        req = [{"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}]
        a = b.container("job-a", device_requests=req, started=T0 - 60)
        c = b.container("job-b", device_requests=req, started=T0 - 60)
        b.process(11, "python", container=a)
        b.process(12, "python", container=c)
        b.gpu_series(0, range(10), lambda s: (95, 20 * GIB, {11: (10 * GIB, 50.0), 12: (10 * GIB, 45.0)}))
        doc = analyze(b)
        (f,) = of_kind(doc, "overlapping-gpu-allocation")
        assert sorted(names(f, "culprit")) == ["job-a", "job-b"] and not names(f, "victim")
        assert sorted(s["name"] for s in doc["verdict"]["culprits"]) == ["job-a", "job-b"]
        assert not doc["verdict"]["clean"]

    def test_only_one_active_does_not_fire(self, analyze: Analyze) -> None:
        assert "overlapping-gpu-allocation" not in kinds(analyze(self._two(False)))

    def test_active_one_after_the_other_does_not_fire(self, analyze: Analyze) -> None:
        """A job that ended before the next one started shared nothing (e.g. a recreated container)."""
        assert "overlapping-gpu-allocation" not in kinds(analyze(self._two(True, sequential=True)))


class TestUnallocatedManyProcesses:
    def test_many_processes_of_one_container_on_one_gpu_are_one_finding(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        nb = b.container("notebook", image_env=["NVIDIA_VISIBLE_DEVICES=all"])
        for pid in range(200, 212):
            b.process(pid, "python", container=nb)
        b.gpu_series(0, range(5), lambda s: (60, 6 * GIB, {p: (GIB // 2, 5.0) for p in range(200, 212)}))
        (f,) = of_kind(analyze(b), "unallocated-gpu-use")
        assert names(f, "culprit") == ["notebook"]
        assert "pid 200, python; pid 201, python; pid 202, python and 9 more" in f["summary"]


class TestUnattributedProcess:
    def test_host_process_on_allocated_gpu(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        c = b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=0"])
        b.process(10, "python", container=c)
        b.process(77, "stress", cgroup="/user.slice/user-1000.slice/session-3.scope")
        b.gpu_series(0, range(10), lambda s: (95, 20 * GIB, {10: (10 * GIB, 50.0), 77: (10 * GIB, 45.0)}))
        (f,) = of_kind(analyze(b), "unattributed-gpu-process")
        assert names(f, "culprit") == ["stress"] and names(f, "victim") == ["trainer"]

    def test_unresolvable_pid_is_a_witness(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        b.gpu_series(0, range(5), lambda s: (50, 5 * GIB, {9999: (5 * GIB, 50.0)}))
        doc = analyze(b)
        (f,) = of_kind(doc, "unattributed-gpu-process")
        assert f["severity"] == "low" and not names(f, "culprit")
        assert doc["unattributed"][0]["id"] == "9999"

    def test_container_processes_do_not_fire(self, analyze: Analyze) -> None:
        assert "unattributed-gpu-process" not in kinds(analyze(secretly_taken()))

    def test_host_processes_of_one_cgroup_are_one_finding_per_gpu(self, analyze: Analyze) -> None:
        """20 workers of one job step on GPU 0 and 3 on GPU 1: one finding per GPU, every PID kept."""
        b = BundleSpec()
        b.gpu(0)
        b.gpu(1)
        step = "/process_api/da2c8e55aaeeecc5aff294ee337230e0"
        for pid in range(100, 123):
            b.process(pid, "sleep", cgroup=step)
        b.gpu_series(0, range(5), lambda s: (50, 5 * GIB, {p: (GIB // 4, 2.0) for p in range(100, 120)}))
        b.gpu_series(1, range(5), lambda s: (50, 1 * GIB, {p: (GIB // 4, 3.0) for p in range(120, 123)}))
        found = sorted(of_kind(analyze(b), "unattributed-gpu-process"), key=lambda f: f["metrics"]["gpu"])
        assert [f["metrics"]["gpu"] for f in found] == ["GPU 0", "GPU 1"]
        f0, f1 = found
        assert f0["metrics"]["processes"] == 20 and f0["metrics"]["cgroup"] == step
        assert f0["metrics"]["pids"] == ", ".join(str(p) for p in range(100, 120))
        assert "pid" not in f0["metrics"]  # only a single process's finding has one
        assert f0["metrics"]["peak_gpu_memory_bytes"] == 5 * GIB  # 20 x 256 MiB held together
        assert f0["metrics"]["sm_util_avg_pct"] == 40.0
        assert {s["id"] for s in f0["subjects"] if s["type"] == "process"} == {str(p) for p in range(100, 120)}
        assert "20 host processes (sleep; PIDs 100, 101, 102, 103, 104, 105, 106, 107 and 12 more)" in f0["summary"]
        assert step in f0["summary"] and f0["severity"] == "low" and not names(f0, "culprit")
        cited = {e["member"] for e in f0["evidence"]}
        assert {"proc/100/cgroup", "proc/101/cgroup", "proc/102/cgroup"} <= cited
        assert "proc/103/cgroup" not in cited  # the first few processes cited, not 20 excerpts
        assert f1["metrics"]["processes"] == 3 and f1["metrics"]["pids"] == "120, 121, 122"

    def test_two_cgroups_are_never_merged(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        c = b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=0"])
        b.process(10, "python", container=c)
        for pid in (20, 21):
            b.process(pid, "stress", cgroup="/user.slice/user-1000.slice/session-3.scope")
        for pid in (30, 31):
            b.process(pid, "burn", cgroup="/system.slice/gpu-burn.service")
        b.gpu_series(0, range(5), lambda s: (95, 20 * GIB, {10: (10 * GIB, 50.0), 20: (GIB, 10.0), 21: (GIB, 10.0),
                                                          30: (GIB, 10.0), 31: (GIB, 10.0)}))
        found = of_kind(analyze(b), "unattributed-gpu-process")
        by_cgroup = {f["metrics"]["cgroup"]: f for f in found}
        assert set(by_cgroup) == {"/user.slice/user-1000.slice/session-3.scope", "/system.slice/gpu-burn.service"}
        burn = by_cgroup["/system.slice/gpu-burn.service"]
        # the GPU is allocated to trainer: each of the group's processes is a culprit, as alone
        assert burn["severity"] == "medium" and names(burn, "victim") == ["trainer"]
        assert sorted(s["id"] for s in burn["subjects"] if s["role"] == "culprit") == ["30", "31"]
        assert burn["metrics"]["pids"] == "30, 31" and "stress" not in burn["summary"]

    def test_namespace_relative_cgroups_stay_apart(self, analyze: Analyze) -> None:
        """Two processes reading the same path relative to their own cgroup namespaces may be in
        two different cgroups: nothing says they share an owner."""
        b = BundleSpec()
        b.gpu(0)
        for pid in (40, 41):
            b.process(pid, "python", cgroup="/../job")
        b.gpu_series(0, range(5), lambda s: (50, 2 * GIB, {40: (GIB, 10.0), 41: (GIB, 10.0)}))
        found = of_kind(analyze(b), "unattributed-gpu-process")
        assert sorted(f["metrics"]["pids"] for f in found) == ["40", "41"]
        assert all(f["metrics"]["pid"] == int(f["metrics"]["pids"]) for f in found)

    def test_unresolvable_pids_of_a_gpu_are_one_witness_finding(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        b.gpu_series(0, range(5), lambda s: (50, 5 * GIB, {p: (GIB, 10.0) for p in (9001, 9002, 9003)}))
        doc = analyze(b)
        (f,) = of_kind(doc, "unattributed-gpu-process")
        assert f["severity"] == "low" and not names(f, "culprit")
        assert f["metrics"]["processes"] == 3 and f["metrics"]["pids"] == "9001, 9002, 9003"
        assert "3 GPU processes on GPU 0 (PIDs 9001, 9002, 9003) cannot be resolved" in f["summary"]
        assert {u["id"] for u in doc["unattributed"]} == {"9001", "9002", "9003"}


class TestComputeHog:
    def test_newcomer_starves_the_owner(self, analyze: Analyze) -> None:
        (f,) = of_kind(analyze(secretly_taken()), "gpu-compute-hog")
        assert names(f, "culprit") == ["notebook"] and names(f, "victim") == ["trainer"]
        assert f["metrics"]["hog_sm_share_pct"] > 90
        assert "95%" in f["summary"]  # the victim's share before

    def test_fair_sharing_does_not_fire(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        a, c = b.container("a", env=["NVIDIA_VISIBLE_DEVICES=0"]), b.container("b", env=["NVIDIA_VISIBLE_DEVICES=0"])
        b.process(1, "python", container=a)
        b.process(2, "python", container=c)
        b.gpu_series(0, range(20), lambda s: (95, 20 * GIB, {1: (10 * GIB, 48.0), 2: (10 * GIB, 47.0)}))
        assert "gpu-compute-hog" not in kinds(analyze(b))


class TestMemoryPressure:
    def test_near_full_names_the_holder(self, analyze: Analyze) -> None:
        (f,) = of_kind(analyze(secretly_taken()), "gpu-memory-pressure")
        assert names(f, "culprit") == ["notebook"]
        assert f["metrics"]["peak_ratio"] >= 0.9

    def test_victim_that_died(self, analyze: Analyze) -> None:
        b = secretly_taken(BundleSpec())
        b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=0"], state="exited", exit_code=1,
                    finished=T0 + 45)
        (f,) = of_kind(analyze(b), "gpu-memory-pressure")
        assert names(f, "victim") == ["trainer"] and f["severity"] == "high"

    def test_below_threshold_does_not_fire(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        b.gpu_series(0, range(10), lambda s: (50, 60 * GIB, {}))
        assert "gpu-memory-pressure" not in kinds(analyze(b))


class TestNeverAccuseTheWrongContainer:
    def test_mig_slice_grant_is_honoured(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        mig = "MIG-5c1e2d3f-0a1b-4c2d-8e3f-9a0b1c2d3e4f"
        c = b.container("infer", env=[f"NVIDIA_VISIBLE_DEVICES={mig}"])
        b.process(10, "python", container=c)
        b.gpu_series(0, range(10), lambda s: (60, 10 * GIB, {10: (10 * GIB, None)}), mig={10: mig})
        assert "unallocated-gpu-use" not in kinds(analyze(b))

    def test_time_sliced_replicas_are_not_an_overlap(self, analyze: Analyze) -> None:
        b = BundleSpec()
        uuid = b.gpu(0)
        for i, name in enumerate(("a", "b")):
            cid = cid_of(name)
            uid = f"00000000-0000-4000-8000-00000000000{i}"
            b.pod("ml", name, uid, [(name, cid, 1)])
            b.pod_devices("ml", name, name, [f"{uuid}::{i}"])
            b.process(20 + i, "python", container=cid, pod_uid=uid)
        b.gpu_series(0, range(10), lambda s: (90, 20 * GIB, {20: (10 * GIB, 45.0), 21: (10 * GIB, 44.0)}))
        b.status["docker"] = "unavailable"
        doc = analyze(b)
        assert "overlapping-gpu-allocation" not in kinds(doc) and "unallocated-gpu-use" not in kinds(doc)

    def test_reused_pid_is_not_joined_to_the_container_now_holding_it(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        c = b.container("bystander", image_env=["PATH=/bin"])  # no GPU grant at all
        b.process(10, "nginx", container=c)  # /proc/10 now: nginx, started at tick 100
        b.nvml_processes({10: (0, "python", 5)})  # NVML saw PID 10 as python started at tick 5
        b.gpu_series(0, range(10), lambda s: (90, 20 * GIB, {10: (20 * GIB, 90.0)}))
        doc = analyze(b)
        assert "unallocated-gpu-use" not in kinds(doc)
        (f,) = of_kind(doc, "unattributed-gpu-process")
        assert "bystander" not in str(f["subjects"])
        assert "reused" in doc["unattributed"][0]["reason"]

    def test_owner_outpacing_an_intruder_is_not_a_hog(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        owner = b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=0"])
        intruder = b.container("notebook")
        b.process(1, "python", container=owner)
        b.process(2, "python", container=intruder)
        b.gpu_series(0, range(20), lambda s: (99, 77 * GIB, {1: (70 * GIB, 95.0), 2: (7 * GIB, 4.0)}))
        doc = analyze(b)
        assert "gpu-compute-hog" not in kinds(doc)
        (mem,) = of_kind(doc, "gpu-memory-pressure")
        assert names(mem, "culprit") == []  # trainer fills its own GPU: not to blame
        (f,) = of_kind(doc, "unallocated-gpu-use")
        assert names(f, "culprit") == ["notebook"]
        assert [c["name"] for c in doc["verdict"]["culprits"]] == ["notebook"]


def test_kubernetes_pod_without_gpu_limit_on_containerd(analyze: Analyze) -> None:
    """No Docker on the node: the pod spec and the process environment tell the story."""
    b = BundleSpec()
    uuid = b.gpu(0)
    trainer, notebook = cid_of("trainer"), cid_of("jupyter")
    t_uid, n_uid = "11111111-2222-4333-8444-555555555555", "66666666-7777-4888-8999-aaaaaaaaaaaa"
    b.pod("ml", "trainer-0", t_uid, [("trainer", trainer, 1)])
    b.pod_devices("ml", "trainer-0", "trainer", [uuid])
    b.pod("research", "notebook-alice", n_uid, [("jupyter", notebook, 0)], env=[("NVIDIA_VISIBLE_DEVICES", "all")])
    b.process(31, "torchrun", container=trainer, pod_uid=t_uid)
    b.process(32, "python", container=notebook, pod_uid=n_uid,
              environ=["PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=all", "HOME=/root"])
    b.gpu_series(0, range(20), lambda s: (99, 70 * GIB, {31: (30 * GIB, 9.0), 32: (40 * GIB, 88.0)}))
    b.status["docker"] = "unavailable"
    doc = analyze(b)
    (f,) = of_kind(doc, "unallocated-gpu-use")
    assert "research/notebook-alice" in names(f, "culprit", "pod")
    assert "ml/trainer-0" in names(f, "victim", "pod")
    assert "no nvidia.com/gpu limit" in f["summary"] and "NVIDIA_VISIBLE_DEVICES=all" in f["summary"]
    assert any(e["member"] == "proc/32/environ" and e["locator"] == "entry 2" for e in f["evidence"])
    assert any(e["member"] == "kubernetes/podresources/list.json" for e in f["evidence"])
    assert not any("Docker" in lim for lim in doc["limitations"])  # a containerd node lacks nothing


def test_timeline_orders_events_and_findings(analyze: Analyze) -> None:
    b = secretly_taken()
    b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=0"], state="exited", exit_code=1, finished=T0 + 59)
    doc = analyze(b)
    tl = doc["timeline"]
    assert [e["time"] for e in tl] == sorted(e["time"] for e in tl)
    kinds_seen = {e["kind"] for e in tl}
    assert {"container-start", "container-exit", "finding"} <= kinds_seen
    assert any(e["kind"] == "container-exit" and "exit code 1" in e["text"] for e in tl)
    assert {e["finding"] for e in tl if e["kind"] == "finding"} == {f["id"] for f in doc["findings"]}


def test_pid_namespace_mismatch_attributes_nothing(analyze: Analyze) -> None:
    """Capture outside the host PID namespace: /proc/<pid> is some other process; never join."""
    b = secretly_taken()
    b.add_json("nvml/processes.json", {"t": T0, "processes": [], "devices": [], "pid_namespace": {
        "status": "mismatch", "reason": "...", "invalid_pids": [], "missing_pids": [4101, 4202],
        "attributable_pids": []}})
    doc = analyze(b)
    assert not of_kind(doc, "unallocated-gpu-use")
    assert not [s for f in doc["findings"] for s in f["subjects"] if s["type"] == "container"]
    assert any("PID namespace" in lim for lim in doc["limitations"])
    assert {u["id"] for u in doc["unattributed"]} == {"4101", "4202"}


def test_mig_slice_used_without_grant_names_the_slice(analyze: Analyze) -> None:
    b = BundleSpec()
    b.gpu(0)
    mig_a, mig_b = "MIG-aaaaaaaa-0a1b-4c2d-8e3f-9a0b1c2d3e4f", "MIG-bbbbbbbb-0a1b-4c2d-8e3f-9a0b1c2d3e4f"
    c = b.container("infer", env=[f"NVIDIA_VISIBLE_DEVICES={mig_a}"])
    b.process(10, "python", container=c)
    b.gpu_series(0, range(10), lambda s: (60, 10 * GIB, {10: (10 * GIB, None)}), mig={10: mig_b})
    (f,) = of_kind(analyze(b), "unallocated-gpu-use")
    assert names(f, "culprit") == ["infer"]
    assert [s["id"] for s in f["subjects"] if s["type"] == "mig"] == [mig_b]
