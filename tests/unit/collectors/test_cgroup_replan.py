"""A re-plan (the recorder's, every ``replan_s`` when containers came or went) keeps the kept-open
descriptors of the cgroups planned again and closes the others, and the lines it writes are the
bytes a collector that never re-planned writes for the same cgroup states. (Real cgroups, removal
and the recorder's driver: tests/integration/test_cgroup_replan.py.)"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from forensics.collect.context import Tick
from forensics.collectors.cgroups import CgroupsCollector
from tests.support.host_evidence import DOCKER_SCOPE, POD_SCOPE, fake_v2_host, make_context


def _lines(stage: Path, path: str) -> list[bytes]:
    return [line for line in (stage / "cgroup/samples.jsonl").read_bytes().splitlines()
            if line.startswith(b'{"cgroup": "' + path.encode() + b'"')]


@pytest.mark.parametrize("gated", [False, True])
def test_a_replan_keeps_what_is_planned_again_and_writes_the_same_bytes(tmp_path: Path, gated: bool,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    mountinfo, pressure = fake_v2_host(tmp_path)
    scope = tmp_path / "sys-fs-cgroup" / DOCKER_SCOPE[1:]
    both = [DOCKER_SCOPE, POD_SCOPE]
    collectors = {name: CgroupsCollector(str(mountinfo), str(pressure), str(tmp_path / "noproc"))
                  for name in ("replanned", "never")}
    contexts = {name: make_context(tmp_path / name, {"cgroup_paths": list(both)}, interval_s=0.1,
                                   extra={"cgroups.idle_full_s": "30"}) for name in collectors}
    for collector in collectors.values():
        collector.activity_gating = gated
    replanned, never = collectors["replanned"], collectors["never"]

    def tick(index: int) -> None:
        t = Tick(index, time.time())
        for name, collector in collectors.items():
            collector.sample(contexts[name], t)

    for index in range(3):
        tick(index)
    docker_files = [f[3] for t in replanned._plan or () if t.path == DOCKER_SCOPE for f in t.files]
    pod_files = [f[3] for t in replanned._plan or () if t.path == POD_SCOPE for f in t.files]
    kept = {path: replanned._files.descriptor(path) for path in docker_files}
    assert docker_files and pod_files and None not in kept.values()

    replanned.replan(contexts["replanned"])  # the pod is gone from the plan, the container stays
    contexts["replanned"].hints["cgroup_paths"] = [DOCKER_SCOPE]
    (tmp_path / "noproc").mkdir()
    opened: list[str] = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: opened.append(str(path)) or real_open(path, *a, **k))
    third = Tick(3, time.time())
    replanned.sample(contexts["replanned"], third)
    monkeypatch.undo()
    never.sample(contexts["never"], third)
    assert not set(opened) & set(docker_files)  # not opened again
    assert {path: replanned._files.descriptor(path) for path in docker_files} == kept
    assert all(replanned._files.descriptor(path) is None for path in pod_files)  # closed
    assert POD_SCOPE not in replanned._previous and POD_SCOPE not in replanned._quiet
    for index in range(4, 6):
        tick(index)
    # the container ran and its memory grew after the re-plan: the new bytes, parsed anew
    for name, old, new in (("cpu.stat", "usage_usec ", "usage_usec 1"), ("memory.current", "\n", "0\n")):
        text = (scope / name).read_text()
        (scope / name).write_text(text.replace(old, new, 1))
    for index in range(6, 8):
        tick(index)
    for name in collectors:
        collectors[name].end_sampling(contexts[name])
    after, before = _lines(tmp_path / "replanned", DOCKER_SCOPE), _lines(tmp_path / "never", DOCKER_SCOPE)
    assert after == before  # byte for byte
    assert len(after) == (8 if not gated else 2)  # gated: tick 0, then tick 6 (the CPU moved)
    assert b'"current_bytes"' in after[-1] and after[-1] != after[0]
    assert len(_lines(tmp_path / "replanned", POD_SCOPE)) == (3 if not gated else 1)
