"""The analysis uses what today's lines carry: a CUDA OOM's own figures beside NVML's reading of the
GPU at that moment (who held the rest), a vLLM worker's death linked to its GPU's Xid and to the OOM
its rank logged before, and an NCCL async error reported as its own error, not a timeout."""

from __future__ import annotations

from tests.support import recent_lines as R
from tests.support.analysis_bundles import GIB, T0, BundleSpec
from tests.unit.analysis.conftest import Analyze, names, of_kind
from tests.unit.analysis.test_workload import log

CADS = next(ln for ln in R.LOG if ln.source == "murong-xu/CADS#4").text  # PyTorch 2.x, allocated 9.08 GiB
ASYNC = next(ln for ln in R.LOG if ln.source == "vllm-project/vllm#4108").text
VLLM_DIED = next(ln for ln in R.LOG if ln.source == "OpenPipe/ART#201").text  # Worker proc VllmWorker-1 died
VLLM_OOM = next(ln for ln in R.LOG if ln.source == "vllm-project/vllm#19186").text  # (VllmWorker rank=3 ...)


def _shared_gpu() -> tuple[BundleSpec, str, str]:
    """GPU 0 shared: trainer (PID 4101, 10 GiB) and hog (PID 4202, 60 GiB), NVML sampling each second."""
    b = BundleSpec()
    b.gpu(0)
    trainer = b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=0"])
    hog = b.container("hog", env=["NVIDIA_VISIBLE_DEVICES=0"])
    b.process(4101, "python", container=trainer)
    b.process(4202, "python", container=hog)
    b.gpu_series(0, range(40), lambda s: (90, 71 * GIB, {4101: (10 * GIB, 40.0), 4202: (60 * GIB, 50.0)}))
    return b, trainer, hog


def test_a_cuda_oom_beside_the_gpus_memory_then(analyze: Analyze) -> None:
    b, trainer, _ = _shared_gpu()
    log(b, trainer, [(T0 + 20.2, CADS)])
    (f,) = [x for x in of_kind(analyze(b), "workload-cuda-error") if x["metrics"]["error"] == "out-of-memory"]
    m = f["metrics"]
    assert (m["allocated_bytes"], m["reserved_bytes"]) == (int(round(9.08 * GIB)), int(round(9.08 * GIB)) + int(round(9.35 * GIB)))
    assert m["gpu_used_bytes"] == 71 * GIB and m["others_bytes"] == 60 * GIB
    assert "its framework held 9.1 GiB allocated, 18.4 GiB reserved, 18.7 GiB in use by the process in all" in f["summary"]
    assert "NVML read the GPU at 14:00:20Z: 71.0 GiB of 80.0 GiB in use; the rest held by hog 60.0 GiB" in f["summary"]
    assert names(f, "witness", "container") == ["hog"] and names(f, "victim", "container") == ["trainer"]
    assert "nvml/samples.jsonl" in {e["member"] for e in f["evidence"]}


def test_no_reading_near_the_oom_says_only_its_own_figures(analyze: Analyze) -> None:
    b, trainer, _ = _shared_gpu()
    log(b, trainer, [(T0 + 300, CADS)])  # NVML sampled the first 40 s only
    (f,) = of_kind(analyze(b), "workload-cuda-error")
    assert f["metrics"]["gpu_used_bytes"] is None and "NVML read" not in f["summary"]
    assert "its framework held 9.1 GiB allocated" in f["summary"] and not names(f, "witness", "container")


def test_a_vllm_worker_death_after_its_oom_and_its_gpus_xid(analyze: Analyze) -> None:
    b = BundleSpec()
    for i in range(4):
        b.gpu(i)
    engine = b.container("vllm", env=["NVIDIA_VISIBLE_DEVICES=0,1,2,3"])
    b.process(5000, "python", container=engine)
    b.kmsg(T0 + 9, "NVRM: Xid (PCI:0000:d8:00): 31, pid=5003, name=python, Ch 00000008, intr 00000000. MMU Fault")
    log(b, engine, [(T0 + 10, VLLM_OOM), (T0 + 12, VLLM_DIED.replace("VllmWorker-1", "VllmWorker-3"))])
    doc = analyze(b)
    (death,) = [x for x in of_kind(doc, "workload-cuda-error") if x["metrics"]["error"] == "worker-died"]
    assert "after its CUDA out-of-memory error at 14:00:10Z" in death["summary"], death["summary"]
    assert death["metrics"]["gpu"] == "GPU 3" and "the GPU is vLLM's local rank" in death["summary"]
    (xid,) = of_kind(doc, "gpu-xid-fault")
    assert death["id"] in xid["causes"], [(x["id"], x["kind"], x["causes"]) for x in doc["findings"]]


def test_an_nccl_async_error_is_its_own_error_not_a_timeout(analyze: Analyze) -> None:
    b = BundleSpec()
    b.gpu(0)
    rank = b.container("rank0", env=["NVIDIA_VISIBLE_DEVICES=0"])
    log(b, rank, [(T0 + 5, ASYNC)])
    doc = analyze(b)
    errors = sorted(x["metrics"]["error"] for x in of_kind(doc, "workload-cuda-error"))
    assert errors == ["illegal-memory-access", "nccl-async-error"]
    (f,) = [x for x in of_kind(doc, "workload-cuda-error") if x["metrics"]["error"] == "nccl-async-error"]
    assert "NCCL asynchronous error on GPU 0 (an illegal memory access was encountered)" in f["summary"]
    assert not of_kind(doc, "stalled-rank")


def test_an_unranked_death_is_not_linked_to_another_pods_error_in_a_log_of_the_same_name(analyze: Analyze) -> None:
    """Two captures of one node: ml/trainer-0 logged a CUDA OOM, was deleted, and the StatefulSet's
    new ml/trainer-0 (another pod: its own uid and container) lost its engine. Neither line has a
    rank and both logs are kubernetes/logs/ml/trainer-0/trainer.log: the death is not the old pod's
    OOM's effect (it was linked to it: one workload's error given as another's cause)."""
    from forensics.specs import kubernetes as kspec
    from tests.support.analysis_bundles import cid_of, iso_from_unix

    member = kspec.pod_log_member("ml", "trainer-0", "trainer")
    specs = []
    for i, (uid, line) in enumerate((("0c1d2e3f-4a5b-4c6d-8e7f-0000000000a1", CADS),
                                     ("0c1d2e3f-4a5b-4c6d-8e7f-0000000000a2",
                                      VLLM_DIED.replace("VllmWorker-1", "EngineCore")))):
        b = BundleSpec(start=T0 + 200 * i)
        b.gpu(0)
        b.pod("ml", "trainer-0", uid, [("trainer", cid_of(f"trainer-{i}"), 1)])
        b.members[member] = f"{iso_from_unix(b.start + 10)} {line}\n".encode()
        specs.append(b)
    doc = analyze(*specs)
    (death,) = [x for x in of_kind(doc, "workload-cuda-error") if x["metrics"]["error"] == "worker-died"]
    assert "after its" not in death["summary"], death["summary"]
    (oom,) = [x for x in of_kind(doc, "workload-cuda-error") if x["metrics"]["error"] == "out-of-memory"]
    assert oom["subjects"] != death["subjects"]


def test_an_unranked_death_after_its_own_pods_error_is_linked(analyze: Analyze) -> None:
    from forensics.specs import kubernetes as kspec
    from tests.support.analysis_bundles import cid_of, iso_from_unix

    b = BundleSpec()
    b.gpu(0)
    b.pod("ml", "trainer-0", "0c1d2e3f-4a5b-4c6d-8e7f-0000000000a1", [("trainer", cid_of("trainer"), 1)])
    b.members[kspec.pod_log_member("ml", "trainer-0", "trainer")] = (
        f"{iso_from_unix(T0 + 10)} {CADS}\n"
        f"{iso_from_unix(T0 + 12)} {VLLM_DIED.replace('VllmWorker-1', 'EngineCore')}\n").encode()
    (death,) = [x for x in of_kind(analyze(b), "workload-cuda-error") if x["metrics"]["error"] == "worker-died"]
    assert "after its CUDA out-of-memory error at 14:00:10Z" in death["summary"], death["summary"]
