"""Ranks across nodes and the rank that stalled, from the logs' own signals."""

from __future__ import annotations

from forensics.analysis.events import CudaOom, LogSignal, LogTail
from forensics.analysis.ranks import NodeClock, collect_ranks, find_stalled, rank_ranges
from forensics.parsing.logsignals.line import last_timestamp
from forensics.parsing.logsignals.nccl import NcclTimeout
from forensics.parsing.logsignals.scan import scan_log

T = 1795960987.0  # 2026-11-29T14:03:07Z
WATCHDOG = ("[rank{r}]:[E1129 14:13:07.000000000 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, "
            "Timeout(ms)=600000) ran for 600042 milliseconds before timing out.")
PROGRESS = ("[rank{r}]:[E1129 14:13:07.000000000 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank {r}] Exception "
            "(either an error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL work: {seq}, "
            "last completed NCCL work: {done}.")
COMM = "gpu-{n}:{pid}:{pid} [{d}] NCCL INFO comm 0x55d{r} rank {r} nranks 8 cudaDev {d} nvmlDev {d} busId {b}000 - Init COMPLETE"


def iso(t: float) -> str:
    from forensics.parsing.timestamps import format_iso
    out = format_iso(t, precision="micro")
    assert out is not None
    return out


def job_logs(stalled: int = 5, *, stalled_times_out: bool = False) -> list[tuple[str, str, str]]:
    """8 ranks, 2 per node on 4 nodes; the stalled rank stops at T and never completes SeqNum 1234."""
    logs = []
    for r in range(8):
        node = f"gpu-{10 + r // 2}"
        lines = [f"{iso(T - 300)} " + COMM.format(n=10 + r // 2, pid=100 + r, d=r % 2, r=r, b=f"{0x1a + r % 2:x}")]
        last = T if r == stalled else T + 600
        lines += [f"{iso(T - 100 + s)} [rank{r}]: step {s}" for s in range(0, 100, 10)]
        if r != stalled or stalled_times_out:
            lines.append(f"{iso(T + 600)} " + WATCHDOG.format(r=r, seq=1234))
            lines.append(f"{iso(T + 600)} " + PROGRESS.format(r=r, seq=1234, done=1233 if r != stalled else 1230))
        lines.append(f"{iso(last)} [rank{r}]: last words")
        logs.append((node, f"train-{r}", "\n".join(lines) + "\n"))
    return logs


def ranks_of(logs: list[tuple[str, str, str]]):  # noqa: ANN201 - test helper
    feed = []
    for node, pod, text in logs:
        sigs = [(s, (pod, n)) for n, s in scan_log(text)]
        last = last_timestamp(text)
        feed.append((node, pod, sigs, last[1] if last else None, (pod, last[0] if last else None)))
    return collect_ranks(feed)


def test_ranks_map_to_pods_nodes_and_gpus() -> None:
    ranks = ranks_of(job_logs())
    assert sorted(ranks) == list(range(8))
    assert (ranks[5].node, ranks[5].subject, ranks[5].bus_id, ranks[5].world_size) == (
        "gpu-12", "train-5", "0000:1b:00.0", 8)


def test_the_rank_that_did_not_time_out() -> None:
    stall = find_stalled(ranks_of(job_logs()))
    assert stall is not None
    assert (stall.ranks, stall.method, stall.peers, stall.op, stall.seq) == (
        (5,), "no-timeout", (0, 1, 2, 3, 4, 6, 7), "ALLREDUCE", 1234)
    assert stall.stopped_at == T and stall.peer_timeout_at == T + 600
    assert "stopped-logging-first" in stall.corroborated_by and not stall.uncertain
    assert rank_ranges(stall.peers) == "0-4, 6 and 7"
    assert rank_ranges([3, 0, 1, 9, 8, 7]) == "0, 1, 3 and 7-9" and rank_ranges([5]) == "5" and rank_ranges([]) == ""


def test_lowest_completed_seq_when_every_rank_timed_out() -> None:
    logs = job_logs(stalled=2, stalled_times_out=True)
    stall = find_stalled(ranks_of(logs))
    assert stall is not None and (stall.ranks, stall.method) == ((2,), "lowest-completed-seq")


def test_stopped_logging_first_alone_and_clock_offsets() -> None:
    logs = [(n, p, "\n".join(x for x in text.splitlines() if "Watchdog" not in x and "watchdog" not in x) + "\n")
            for n, p, text in job_logs(stalled=6)]
    ranks = ranks_of(logs)
    stall = find_stalled(ranks)
    assert stall is not None and (stall.ranks, stall.method) == ((6,), "stopped-logging-first")
    # node gpu-13's clock runs 590 s behind with 5 s uncertainty: the gap is gone
    clocks = {"gpu-13": NodeClock(offset_s=590.0, uncertainty_s=5.0)}
    assert find_stalled(ranks, clocks) is None


def test_ordering_within_the_uncertainty_is_said() -> None:
    ranks = ranks_of(job_logs())
    clocks = {f"gpu-{n}": NodeClock(0.0, 400.0) for n in range(10, 14)}
    stall = find_stalled(ranks, clocks)
    assert stall is not None and stall.method == "no-timeout" and stall.uncertain and stall.uncertainty_s == 800


def test_missing_ranks_and_nothing_to_decide() -> None:
    logs = [x for x in job_logs() if x[1] not in ("train-3",)]
    stall = find_stalled(ranks_of(logs))
    assert stall is not None and stall.missing == (3,)
    same = [(n, p, "\n".join(x for x in t.splitlines() if "last words" not in x) + "\n")
            for n, p, t in job_logs(stalled=-1)]
    assert find_stalled(ranks_of(same)) is None
    assert find_stalled({}) is None


def test_container_logs_in_a_bundle_become_log_signals(tmp_path) -> None:  # noqa: ANN001
    from forensics.analysis import build_model
    from tests.support import log_lines as L
    from tests.support.analysis_bundles import T0, BundleSpec

    b = BundleSpec(host="gpu-12")
    cid = b.container("train-5")
    text = "\n".join([f"{iso(T0 + 1)} [rank5]: step 1", f"{iso(T0 + 2)} " + L.ILLEGAL_ADDRESS.text.split("\n")[0],
                      f"{iso(T0 + 3)} " + L.TORCH_OOM_OLD.text, f"{iso(T0 + 4)} [rank5]: still writi"])
    b.members[f"docker/containers/{cid}/logs.txt"] = text.encode()
    model = build_model([b.write(tmp_path)])
    kinds = [(s.signal.kind, s.evidence.locator) for s in model.series(LogSignal)]
    assert kinds == [("cuda-fault", "line 2"), ("cuda-oom", "line 3")]
    assert [(o.t, o.container_id) for o in model.series(CudaOom)] == [(T0 + 3, cid)]
    (tail,) = model.series(LogTail)
    assert tail.t == T0 + 4 and tail.evidence is not None and tail.evidence.locator == "line 4"


def test_pod_logs_in_a_bundle_become_log_signals_of_that_container(tmp_path) -> None:  # noqa: ANN001
    from forensics.analysis import build_model
    from forensics.specs.kubernetes import pod_log_member
    from tests.support import log_lines as L
    from tests.support.analysis_bundles import T0, BundleSpec, cid_of

    b = BundleSpec(host="gpu-12")
    b.pod("ml", "train-5", "uid-5", [("trainer", cid_of("train-5"), 1)], oom_killed=["trainer"])
    b.members[pod_log_member("ml", "train-5", "trainer", previous=True)] = (
        f"{iso(T0 + 2)} " + L.TORCH_OOM_NEW.text + "\n").encode()
    b.members[pod_log_member("ml", "train-5", "trainer")] = f"{iso(T0 + 9)} [rank5]: restarted\n".encode()
    model = build_model([b.write(tmp_path)])
    assert [(s.signal.kind, s.pod_key, s.container_id) for s in model.series(LogSignal)] == [
        ("cuda-oom", "uid-5", cid_of("train-5"))]
    assert sorted((t.member.rsplit("/", 1)[-1], t.t) for t in model.series(LogTail)) == [
        ("trainer.log", T0 + 9), ("trainer.previous.log", T0 + 2)]


def test_a_log_naming_no_rank_takes_its_writers_environment() -> None:
    logs = [("n1", "a", [], T, "end-a"), ("n2", "b", [(NcclTimeout(seq=7, t=T + 600.0, rank=1), "t1")], T + 601, "e")]
    ranks = collect_ranks(logs, {("n1", "a"): (0, 2)})
    assert sorted(ranks) == [0, 1] and ranks[0].world_size == 2 and ranks[0].node == "n1"
    stall = find_stalled(ranks)
    assert stall is not None and stall.ranks == (0,) and stall.method == "no-timeout"
    # a log that names its own rank keeps it, whatever the environment says
    assert sorted(collect_ranks([("n1", "a", [(NcclTimeout(seq=7, rank=3), "x")], T, "e")],
                                {("n1", "a"): (0, 2)})) == [3]
