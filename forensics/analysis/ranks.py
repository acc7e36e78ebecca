"""Ranks of one distributed job across nodes, and the rank that stalled.

Pure: fed with what each container's or pod's log said (:mod:`forensics.parsing.logsignals`
records), it maps ranks to the node, the subject (container or pod) and the GPU (NCCL's
``busId``), then finds the rank the others waited for, by the first of these that decides:

1. ``no-timeout``: some ranks' watchdogs timed a collective out and this rank's did not;
2. ``lowest-completed-seq``: its last completed ``SeqNum`` (the watchdog's ``last completed NCCL
   work``) is the lowest;
3. ``stopped-logging-first``: its log ends first, earlier than every other rank's by more than
   ``min_gap_s`` plus the two nodes' clock uncertainty.

Clocks: each node's ``offset_s`` (added to its times to put them on a common clock) and
``uncertainty_s``; an ordering within the uncertainty is reported as such, never as a fact.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field

from forensics.parsing.logsignals.line import Signal
from forensics.parsing.logsignals.nccl import NcclAbort, NcclCommInit, NcclProgress, NcclTimeout
from forensics.parsing.logsignals.process import LauncherRendezvous

__all__ = ["NodeClock", "RankState", "Stall", "collect_ranks", "find_stalled", "rank_ranges"]


@dataclass(frozen=True)
class NodeClock:
    """How one node's clock relates to the common one: ``t_common = t_node + offset_s``."""

    offset_s: float = 0.0
    uncertainty_s: float = 0.0


@dataclass
class RankState:
    """Everything known of one rank. ``ref`` values are the caller's evidence handles."""

    rank: int
    node: str
    subject: Hashable
    world_size: int | None = None
    bus_id: str | None = None
    cuda_device: int | None = None
    timeouts: list[tuple[NcclTimeout, object]] = field(default_factory=list)
    last_completed_seq: int | None = None
    progress_ref: object = None
    last_seen: float | None = None
    last_seen_ref: object = None
    aborted: bool = False


def collect_ranks(logs: Iterable[tuple[str, Hashable, Iterable[tuple[Signal, object]], float | None, object]],
                  env_ranks: Mapping[tuple[str, Hashable], tuple[int, int | None]] | None = None,
                  ) -> dict[int, RankState]:
    """``logs``: (node, subject, [(signal, ref)], last timestamp of the log, its ref) per log.

    A log's rank is what its signals say (``[rankN]:`` prefixes, ``[Rank N]``, NCCL's comm line,
    a one-rank torchrun rendezvous); a log whose lines name several ranks feeds each of them. A log
    whose lines name no rank takes its writer's from ``env_ranks`` ((node, subject) -> (``RANK``,
    ``WORLD_SIZE``) of the one rank its processes' environment names, recorded by procfs)."""
    env_ranks = env_ranks or {}
    ranks: dict[int, RankState] = {}
    for node, subject, signals, last_t, last_ref in logs:
        sigs = list(signals)
        single: int | None = None
        for s, _ in sigs:
            if isinstance(s, LauncherRendezvous) and len(s.global_ranks) == 1:
                single = s.global_ranks[0]
        named = {s.rank for s, _ in sigs if s.rank is not None}
        if single is None and len(named) == 1:
            single = next(iter(named))
        env = env_ranks.get((node, subject))
        if single is None and not named and env is not None:
            single = env[0]
            if env[1]:
                ranks.setdefault(single, RankState(single, node, subject)).world_size = env[1]

        def state(rank: int, node: str = node, subject: Hashable = subject) -> RankState:
            st = ranks.get(rank)
            if st is None:
                st = ranks[rank] = RankState(rank, node, subject)
            return st

        for s, ref in sigs:
            rank = s.rank if s.rank is not None else single
            if rank is None:
                continue
            st = state(rank)
            if isinstance(s, NcclCommInit):
                st.world_size, st.bus_id, st.cuda_device = s.nranks, s.bus_id or st.bus_id, s.cuda_device
            elif isinstance(s, LauncherRendezvous) and s.world_size:
                st.world_size = st.world_size or s.world_size
            elif isinstance(s, NcclTimeout):
                if all(t.seq != s.seq for t, _ in st.timeouts):
                    st.timeouts.append((s, ref))
            elif isinstance(s, NcclProgress) and s.last_completed_seq is not None:
                if st.last_completed_seq is None or s.last_completed_seq > st.last_completed_seq:
                    st.last_completed_seq, st.progress_ref = s.last_completed_seq, ref
            elif isinstance(s, NcclAbort):
                st.aborted = True
        for rank in ([single] if single is not None else sorted(named)):
            st = state(rank)
            if last_t is not None and (st.last_seen is None or last_t > st.last_seen):
                st.last_seen, st.last_seen_ref = last_t, last_ref
    return ranks


@dataclass(frozen=True)
class Stall:
    """The verdict: ``ranks`` stalled (usually one), found by ``method``; ``stopped_at`` the
    stalled rank's last log line (common clock); ``peers`` the ranks that timed out, ``op`` and
    ``seq`` the collective they waited in, ``peer_timeout_at`` the first of their timeouts, and
    ``missing`` the ranks of the world no log was seen for. ``uncertain`` says the ordering of the
    stop against the peers' last lines is within the clocks' uncertainty."""

    ranks: tuple[int, ...]
    method: str
    stopped_at: float | None
    peers: tuple[int, ...]
    op: str | None
    seq: int | None
    peer_timeout_at: float | None
    missing: tuple[int, ...]
    uncertainty_s: float
    uncertain: bool
    corroborated_by: tuple[str, ...]


def _common(st: RankState, clocks: Mapping[str, NodeClock], t: float | None) -> float | None:
    return None if t is None else t + clocks.get(st.node, NodeClock()).offset_s


def find_stalled(ranks: Mapping[int, RankState], clocks: Mapping[str, NodeClock] | None = None, *,
                 min_gap_s: float = 30.0) -> Stall | None:
    """The rank the others waited for (see the module docstring), or None when nothing decides."""
    clocks = clocks or {}
    if len(ranks) < 2:
        return None
    world = max((st.world_size for st in ranks.values() if st.world_size), default=None)
    missing = tuple(r for r in range(world) if r not in ranks) if world else ()
    timed_out = {r for r, st in ranks.items() if st.timeouts}
    methods: dict[str, tuple[int, ...]] = {}
    if timed_out and len(timed_out) < len(ranks):
        methods["no-timeout"] = tuple(sorted(set(ranks) - timed_out))
    progress = {r: st.last_completed_seq for r, st in ranks.items() if st.last_completed_seq is not None}
    if len(progress) >= 2:
        low = min(progress.values())
        lows = tuple(sorted(r for r, v in progress.items() if v == low))
        if low < max(progress.values()) and len(lows) < len(progress):
            methods["lowest-completed-seq"] = lows
    seen = sorted((t, r) for r, st in ranks.items() if (t := _common(st, clocks, st.last_seen)) is not None)
    if len(seen) >= 2:
        (t0, r0), (t1, r1) = seen[0], seen[1]
        margin = min_gap_s + clocks.get(ranks[r0].node, NodeClock()).uncertainty_s + \
            clocks.get(ranks[r1].node, NodeClock()).uncertainty_s
        if t1 - t0 > margin:
            methods["stopped-logging-first"] = (r0,)
    order = ("no-timeout", "lowest-completed-seq", "stopped-logging-first")
    method = next((m for m in order if m in methods), None)
    if method is None:
        return None
    stalled = methods[method]
    corroborated = tuple(m for m in order if m != method and set(methods.get(m, ())) & set(stalled))
    peers = tuple(sorted(r for r in timed_out if r not in stalled))
    timeouts = [(t, st) for r in peers for st in (ranks[r],) for t, _ in st.timeouts]
    seqs = sorted({t.seq for t, _ in timeouts})
    seq = seqs[0] if seqs else None
    op = next((t.op_type for t, _ in timeouts if t.seq == seq), None)
    times = [c for t, st in timeouts if (c := _common(st, clocks, t.t)) is not None]
    peer_timeout_at = min(times) if times else None
    first = ranks[stalled[0]]
    stopped_at = _common(first, clocks, first.last_seen)
    unc = clocks.get(first.node, NodeClock()).uncertainty_s
    uncertain = False
    if stopped_at is not None:
        others = [(c, st) for r, st in ranks.items() if r not in stalled
                  and (c := _common(st, clocks, st.last_seen)) is not None]
        if others:
            c_next, st_next = min(others, key=lambda x: x[0])
            unc = max(unc, clocks.get(st_next.node, NodeClock()).uncertainty_s + clocks.get(first.node, NodeClock()).uncertainty_s)
            uncertain = abs(c_next - stopped_at) <= unc
    return Stall(stalled, method, stopped_at, peers, op, seq, peer_timeout_at, missing, unc, uncertain, corroborated)


def rank_ranges(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 4, 6, 7, 9]`` -> ``"0-4, 6, 7 and 9"`` (a run of three or more is a range)."""
    rs = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        parts.extend([f"{rs[i]}-{rs[j]}"] if j - i >= 2 else [str(r) for r in rs[i:j + 1]])
        i = j + 1
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else (parts[0] if parts else "")
