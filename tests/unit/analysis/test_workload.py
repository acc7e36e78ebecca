"""The workload's own words as findings: ``workload-cuda-error`` joining the chain as victim-side
evidence, and ``stalled-rank`` across the nodes of one distributed job."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.analysis import build_model
from forensics.analysis.joins import resolve_joins
from forensics.analysis.rules.workload import stalled_rank, workload_cuda_error
from forensics.thresholds import AnalysisConfig
from tests.support import log_lines as L
from tests.support.analysis_bundles import GIB, T0, BundleSpec
from tests.unit.analysis.conftest import Analyze, kinds, names, of_kind, secretly_taken
from tests.unit.analysis.test_ranks import iso

GPU0_REQUEST = [{"Driver": "", "Count": 0, "DeviceIDs": ["0"], "Capabilities": [["gpu"]], "Options": {}}]


def log(b: BundleSpec, cid: str, lines: list[tuple[float, str]]) -> None:
    b.members[f"docker/containers/{cid}/logs.txt"] = "".join(f"{iso(t)} {x}\n" for t, x in lines).encode()


def by_id(doc: dict[str, Any], fid: str) -> dict[str, Any]:
    return next(f for f in doc["findings"] if f["id"] == fid)


class TestWorkloadCudaError:
    def _xid_then_crash(self, code: int = 79) -> BundleSpec:
        b = BundleSpec()
        b.gpu(0)
        b.gpu(1)
        c = b.container("trainer", device_requests=GPU0_REQUEST)
        b.process(10, "python", container=c)
        b.gpu_series(0, range(20), lambda s: (95, 20 * GIB, {10: (20 * GIB, 90.0)}))
        b.nvml_xid_event(0, T0 + 10, code)
        log(b, c, [(T0 + 1, "[rank0]: step 1"), (T0 + 12, L.ILLEGAL_ADDRESS.text.splitlines()[0])])
        return b

    def test_crash_right_after_an_xid_on_its_gpu_is_one_incident(self, analyze: Analyze) -> None:
        doc = analyze(self._xid_then_crash())
        (f,) = of_kind(doc, "workload-cuda-error")
        assert names(f, "victim") == ["trainer"] and names(f, "witness", "gpu") == ["GPU 0"]
        assert f["severity"] == "high" and f["metrics"]["error"] == "illegal-memory-access"
        assert "trainer logged a CUDA illegal memory access on GPU 0 at 14:00:12Z" in f["summary"]
        (ev,) = f["evidence"]
        assert ev["member"].endswith("/logs.txt") and ev["locator"] == "line 2"
        (xid,) = of_kind(doc, "gpu-lost")
        assert xid["causes"] == [f["id"]]  # the chain links the Xid on that GPU to the fault
        assert "CUDA illegal memory access" in doc["verdict"]["headline"]
        (entry,) = [e for e in doc["timeline"] if e["kind"] == "log-signal"]
        assert entry["time"] == "2025-11-29T14:00:12Z" and entry["subject"]["name"] == "trainer"
        assert entry["text"].startswith("cuda-fault: RuntimeError: CUDA error: an illegal memory access")

    def test_cuda_oom_after_unallocated_use_is_its_effect(self, analyze: Analyze) -> None:
        b = secretly_taken()
        log(b, b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=0"], nano_cpus=4_000_000_000),
            [(T0 + 41, L.TORCH_OOM_NEW.text)])
        doc = analyze(b)
        (f,) = of_kind(doc, "workload-cuda-error")
        assert f["severity"] == "medium" and f["metrics"]["error"] == "out-of-memory"
        assert names(f, "victim") == ["trainer"] and names(f, "witness", "gpu") == ["GPU 0"]
        assert "tried to allocate" in f["summary"]
        (unalloc,) = of_kind(doc, "unallocated-gpu-use")
        assert f["id"] in unalloc["causes"]

    def test_benign_lines_and_an_unrelated_gpu(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        c = b.container("web", device_requests=GPU0_REQUEST)
        log(b, c, [(T0 + 1, "INFO memory allocator: out of band"), (T0 + 2, "GPU is fine, CUDA ok"),
                   (T0 + 3, "Epoch 1 loss=0.3 (no error)")])
        doc = analyze(b)
        assert "workload-cuda-error" not in kinds(doc) and doc["verdict"]["clean"] is True

    def test_fault_on_another_gpu_is_not_linked_to_the_xid(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        b.gpu(1)
        c = b.container("trainer", device_requests=[{**GPU0_REQUEST[0], "DeviceIDs": ["1"]}])
        b.nvml_xid_event(0, T0 + 10, 79)
        log(b, c, [(T0 + 12, L.ECC_VLLM.text)])
        doc = analyze(b)
        (f,) = of_kind(doc, "workload-cuda-error")
        assert names(f, "witness", "gpu") == ["GPU 1"]
        (xid,) = of_kind(doc, "gpu-lost")
        assert f["id"] not in xid["causes"]

    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(st.text(max_size=300), max_size=8), st.binary(max_size=200))
    def test_garbage_logs_never_break_the_rules(self, tmp_path_factory: Any, lines: list[str], raw: bytes) -> None:
        b = BundleSpec()
        b.gpu(0)
        c = b.container("x", device_requests=GPU0_REQUEST)
        text = "".join(f"{iso(T0 + i)} {x}\n" for i, x in enumerate(lines)).encode("utf-8", "surrogatepass") + raw
        b.members[f"docker/containers/{c}/logs.txt"] = text
        model = build_model([b.write(tmp_path_factory.mktemp("g"))])
        resolve_joins(model)
        for f in workload_cuda_error(model, AnalysisConfig()) + stalled_rank(model, AnalysisConfig()):
            assert f.summary and f.node == "gpu-07"


# ---------------------------------------------------------------------------------------------
WATCHDOG = ("[rank{r}]:[E1129 14:10:07.000000000 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, "
            "Timeout(ms)=600000) ran for 600042 milliseconds before timing out.")
COMM = ("{host}:{pid}:{pid} [0] NCCL INFO comm 0x55d{r} rank {r} nranks 4 cudaDev 0 nvmlDev 0 busId 3b000 "
        "- Init COMPLETE")


def job(stalled: int | None = 2, xid: bool = True, env_only: bool = False, xid_at: float = 5,
        throttled: bool = False, pressure: bool = False) -> list[BundleSpec]:
    """4 nodes, one rank each on GPU 0; ``stalled`` stops logging at T0+7 (after an Xid 79 on its
    GPU) and never times out; the others time out in ALLREDUCE SeqNum 1234 600 s later.
    ``env_only``: the stalled rank's log never names its rank; only its environment (RANK) does."""
    specs = []
    for r in range(4):
        b = BundleSpec(host=f"gpu-{10 + r}", duration_s=700)
        b.gpu(0)
        c = b.container(f"train-{r}", device_requests=GPU0_REQUEST)
        b.process(100 + r, "python", container=c,
                  environ=[f"RANK={r}", "LOCAL_RANK=0", "WORLD_SIZE=4", "MASTER_ADDR=gpu-10", f"NODE_RANK={r}"])
        quiet = env_only and r == stalled
        lines = [] if quiet else [(T0 - 60, COMM.format(host=b.host, pid=100 + r, r=r))]
        lines += [(T0 + s, f"step {s}" if quiet else f"[rank{r}]: step {s}") for s in range(0, 8)]
        if r == stalled:
            if xid:
                b.nvml_xid_event(0, T0 + xid_at, 79)
            b.gpu_series(0, range(8, 40), lambda s: (0, 20 * GIB, {}))
            for s in range(10):  # its container's cgroup, sampled before and after it stopped
                b.cgroup_tick(T0 + s, f"/system.slice/docker-{c}.scope", nr_periods=100 * s,
                              nr_throttled=(85 if throttled else 1) * s,
                              psi={"memory": (40.0 if pressure else 0.5, 25.0 if pressure else 0.0)})
        else:
            b.gpu_series(0, range(8, 40), lambda s, p=100 + r: (100, 20 * GIB, {p: (20 * GIB, 99.0)}))
            lines.append((T0 + 607, WATCHDOG.format(r=r)))
            lines.append((T0 + 608, f"[rank{r}]: exiting"))
        log(b, c, lines)
        specs.append(b)
    return specs


class TestStalledRank:
    def test_the_rank_that_stalled_after_an_xid(self, analyze: Analyze) -> None:
        doc = analyze(*job())
        (f,) = of_kind(doc, "stalled-rank")
        assert f["node"] == "gpu-12" and f["metrics"]["rank"] == 2 and f["metrics"]["method"] == "no-timeout"
        sentence = ("rank 2 (train-2 on gpu-12, GPU 0) stopped at 14:00:07Z, 2 s after Xid 79 on its GPU "
                    "(GPU has fallen off the bus); its GPU was then at 0% while the peers' GPUs were at 100%; "
                    "ranks 0, 1 and 3 timed out in ALLREDUCE SeqNum 1234, 600 s after it stopped")
        assert f["summary"].startswith(sentence)
        # in the verdict it follows the GPU loss as it reads on its own: it says when, so no "2 s later"
        assert doc["verdict"]["headline"].endswith("fell off the bus; " + sentence)
        assert names(f, "victim") == ["train-2"]
        assert sorted(names(f, "witness", "container")) == ["train-0", "train-1", "train-3"]
        assert "clocks could not be aligned" in f["summary"]  # the bundles carry no clock evidence
        (xid,) = [x for x in of_kind(doc, "gpu-lost") if x["node"] == "gpu-12"]
        assert f["id"] in xid["causes"]

    def test_an_xid_just_after_the_last_line_is_said_to_follow_it(self, analyze: Analyze) -> None:
        (f,) = of_kind(analyze(*job(xid_at=10)), "stalled-rank")
        assert f["summary"].startswith("rank 2 (train-2 on gpu-12, GPU 0) stopped at 14:00:07Z, Xid 79 on its GPU "
                                       "3 s later (GPU has fallen off the bus)")

    def test_its_cpu_throttling_and_memory_pressure_then_explain_it(self, analyze: Analyze) -> None:
        (f,) = of_kind(analyze(*job(xid=False, throttled=True, pressure=True)), "stalled-rank")
        assert ("; its container was then CPU-throttled in 85% of its CFS periods; its container was then under "
                "memory pressure (PSI some 40%)") in f["summary"]
        assert any(e["member"] == "cgroup/samples.jsonl" for e in f["evidence"])
        (quiet,) = of_kind(analyze(*job(xid=False)), "stalled-rank")
        assert "throttled" not in quiet["summary"] and "pressure" not in quiet["summary"]

    def test_no_stall_when_every_rank_times_out_alike(self, analyze: Analyze) -> None:
        doc = analyze(*job(stalled=None))
        assert "stalled-rank" not in kinds(doc)

    def test_one_node_alone_says_nothing(self, analyze: Analyze) -> None:
        assert "stalled-rank" not in kinds(analyze(job()[0]))

    def test_without_the_xid_the_stall_still_found(self, analyze: Analyze) -> None:
        (f,) = of_kind(analyze(*job(xid=False)), "stalled-rank")
        assert "Xid" not in f["summary"] and f["metrics"]["rank"] == 2
        assert by_id(analyze(*job(xid=False)), f["id"])["kind"] == "stalled-rank"

    def test_the_stalled_rank_known_only_from_its_environment(self, analyze: Analyze) -> None:
        (f,) = of_kind(analyze(*job(env_only=True)), "stalled-rank")
        assert f["metrics"]["rank"] == 2 and f["metrics"]["method"] == "no-timeout"
        # no NCCL comm line: the GPU comes from the one GPU its container was granted
        assert f["summary"].startswith("rank 2 (train-2 on gpu-12")


def with_clock(specs: list[BundleSpec], offsets: dict[str, float], uncertainty_s: float) -> list[BundleSpec]:
    """Each node's ``kubernetes/clock.json``: its offset to the API server's clock."""
    for b in specs:
        b.add_json("kubernetes/clock.json", {"reference": "Kubernetes API server https://10.96.0.1:443",
                                             "offset_s": offsets.get(b.host, 0.0), "uncertainty_s": uncertainty_s,
                                             "samples": 9, "consistent": True, "best_round_trip_s": 0.002})
    return specs


class TestClocks:
    def test_nodes_aligned_through_the_api_server(self, analyze: Analyze) -> None:
        doc = analyze(*with_clock(job(), {"gpu-11": 2.5, "gpu-13": -1.0}, 0.3))
        nodes = {n["host"]: n for n in doc["nodes"]}
        assert nodes["gpu-10"]["clock_offset_s"] == 0.0
        assert nodes["gpu-11"]["clock_offset_s"] == 2.5 and nodes["gpu-11"]["clock_uncertainty_s"] == 0.6
        assert nodes["gpu-13"]["clock_reference"] == "Kubernetes API server https://10.96.0.1:443"
        assert any("clocks aligned to gpu-10's within ±0.6 s" in lim for lim in doc["limitations"])
        (f,) = of_kind(doc, "stalled-rank")
        assert "could not be aligned" not in f["summary"] and "uncertainty" not in f["summary"]
        # each node is ±0.6 s from gpu-10; two nodes, summed through gpu-10: ±1.2 s (conservative)
        assert f["metrics"]["clock_uncertainty_s"] == 1.2 and f["metrics"]["order_uncertain"] == "no"

    def test_an_ordering_within_the_uncertainty_is_said_to_be(self, analyze: Analyze) -> None:
        (f,) = of_kind(analyze(*with_clock(job(), {}, 400.0)), "stalled-rank")
        assert f["metrics"]["order_uncertain"] == "yes"
        assert "within the clocks' uncertainty (±800.0 s)" in f["summary"]

    def test_a_node_without_a_shared_reference_stays_unaligned(self, analyze: Analyze) -> None:
        specs = with_clock(job(), {}, 0.3)
        del specs[3].members["kubernetes/clock.json"]
        doc = analyze(*specs)
        nodes = {n["host"]: n for n in doc["nodes"]}
        assert nodes["gpu-13"]["clock_offset_s"] is None and nodes["gpu-12"]["clock_offset_s"] == 0.0
        assert any("not gpu-13 (no clock reference shared with gpu-10)" in lim for lim in doc["limitations"])

    def test_ntp_synchronised_clocks_share_utc(self, analyze: Analyze) -> None:
        specs = job()
        for b in specs:
            b.add_json("host/clock.json", {"adjtimex": {"synchronised": True, "maxerror_us": 250_000,
                                                        "state": "TIME_OK", "status_flags": ["PLL"]}})
        specs[1].add_json("host/clock.json", {"adjtimex": {"synchronised": False, "maxerror_us": 16_000_000}})
        nodes = {n["host"]: n for n in analyze(*specs)["nodes"]}
        assert nodes["gpu-12"]["clock_uncertainty_s"] == 0.5 and nodes["gpu-12"]["clock_reference"].startswith("UTC")
        assert nodes["gpu-11"]["clock_offset_s"] is None
