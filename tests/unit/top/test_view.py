"""The view of ``gpuforensics top``: a snapshot rendered for 80x24 and 160x48 terminals, and the
filters, sort and details a key press sets."""

from __future__ import annotations

from dataclasses import replace

import pytest

from forensics.top.snapshot import Snapshot, Tracker, build_snapshot
from forensics.top.state import TopState
from forensics.top.view import ViewOptions, filtered, render, render_text
from tests.unit.record.test_live import SAMPLES, replay


@pytest.fixture(scope="module")
def snap() -> Snapshot:
    state = TopState()
    replay(SAMPLES / "unallocated-gpu-use.tgz", state)
    return build_snapshot(state, Tracker(), "replay")


def _text(lines: list[list[tuple[str, str]]]) -> list[str]:
    return ["".join(t for t, _ in line) for line in lines]


def test_80x24_fills_the_screen_and_keeps_what_matters(snap: Snapshot) -> None:
    lines = render(snap, ViewOptions(), 80, 24)
    text = _text(lines)
    assert len(lines) == 24 and all(len(t) <= 80 for t in text)
    header = next(t for t in text if t.lstrip().startswith("PID"))
    for col in ("PID", "GPU", "POD / CONTAINER", "GRANT", "GPU-MEM", "SM%", "CPU%"):
        assert col in header
    assert "MEM/LIMIT" not in header and "COMMAND" not in header  # dropped by priority
    nb = next(t for t in text if "notebook" in t)
    assert "! none" in nb and "62.0 GiB" in nb
    # the mark is the one thing in colour
    nb_line = lines[text.index(nb)]
    assert [s for t, s in nb_line if "! none" in t] == ["alert+selected"]  # the first row is selected
    trainer = lines[next(i for i, t in enumerate(text) if "trainer" in t)]
    assert not any("alert" in s for _, s in trainer)
    assert text[-1].startswith("m/s/u sort")


def test_160x48_uses_the_width(snap: Snapshot) -> None:
    lines = render(snap, ViewOptions(), 160, 48)
    text = _text(lines)
    assert len(lines) == 48 and max(len(t) for t in text) == 160
    header = next(t for t in text if t.lstrip().startswith("PID"))
    for col in ("USER", "THR%", "MEM/LIMIT", "COMMAND"):
        assert col in header
    gpu0 = next(t for t in text if t.lstrip().startswith("0 H100"))
    assert "99%" in gpu0 and "61C" in gpu0 and "512W" in gpu0 and "█" in gpu0


def test_sort_filter_and_selection(snap: Snapshot) -> None:
    assert [p.owner for p in filtered(snap, ViewOptions(sort="memory"))] == ["notebook", "trainer"]
    assert [p.owner for p in filtered(snap, ViewOptions(sort="sm"))] == ["notebook", "trainer"]
    assert [p.owner for p in filtered(snap, ViewOptions(text="train"))] == ["trainer"]
    assert filtered(snap, ViewOptions(gpu=1)) == []
    assert filtered(snap, ViewOptions(namespace="ml")) == []
    lines = render(snap, ViewOptions(selected=1), 80, 24)
    selected = [_text([ln])[0] for ln in lines if any("selected" in s for _, s in ln)]
    assert len(selected) == 1 and "trainer" in selected[0]


def test_details_show_the_attribution_and_evidence(snap: Snapshot) -> None:
    text = _text(render(snap, ViewOptions(details=True, selected=0), 160, 48))
    body = "\n".join(text)
    nb = filtered(snap, ViewOptions())[0]
    assert f"PROCESS {nb.pid} on GPU 0" in body and nb.container_id in body
    assert "no grant covers this GPU" in body and "blanket" in body
    assert f"docker/containers/{nb.container_id}/inspect.json" in body


def test_narrow_and_ascii(snap: Snapshot) -> None:
    text = _text(render(snap, ViewOptions(unicode=False), 60, 12))
    assert len(text) == 12 and all(len(t) <= 60 for t in text)
    assert not any(c in "".join(text) for c in "▁▂▃▄▅▆▇█")
    assert any("notebook" in t for t in text)


def test_once_text_lists_every_row_and_the_legend(snap: Snapshot) -> None:
    out = render_text(replace(snap, processes=snap.processes * 30), 120)
    assert out.count("notebook") == 30 and "! none: no grant covers this GPU" in out
    assert "RECENTLY EXITED (0)" in out


@pytest.mark.parametrize(("width", "height"), [(20, 5), (10, 3), (40, 10), (300, 100), (80, 2), (80, 1)])
def test_any_terminal_size_gets_at_most_its_lines(snap: Snapshot, width: int, height: int) -> None:
    for o in (ViewOptions(), ViewOptions(details=True), ViewOptions(status="bundle written: /" + "x" * 300),
              ViewOptions(prompt="filter: ab")):
        lines = _text(render(snap, o, width, height))
        assert len(lines) <= height and all(len(t) <= max(20, width) for t in lines)


def test_a_long_bundle_path_is_wrapped_whole_above_the_keys(snap: Snapshot) -> None:
    path = "/var/tmp/" + "d" * 100 + "/gpuforensics-node-20261206T081122Z.tgz"
    text = _text(render(snap, ViewOptions(status=f"bundle written: {path}"), 80, 24))
    at = next(i for i, t in enumerate(text) if t.startswith("bundle written: "))
    assert "".join(t.rstrip() for t in text[at:-1]) == f"bundle written: {path}"
    assert text[-1].startswith("m/s/u sort") and len(text) == 24


def test_once_text_wraps_a_long_note_whole(snap: Snapshot) -> None:
    """``top --once`` with no NVML: the note saying how to fix it is read whole at any width (it was
    cut at the width with ``~``, losing the option to pass)."""
    note = ("GPU columns: NVML cannot be read (unavailable: NVML library not found (libnvidia-ml.so.1 is "
            "not on the loader's path: no NVIDIA driver here, or pass --nvml-library PATH))")
    out = render_text(replace(snap, notes=(note,)), 80)
    lines = out.splitlines()
    assert all(len(ln) <= 80 for ln in lines)
    start = next(i for i, ln in enumerate(lines) if ln.startswith("note: "))
    text = " ".join(ln.strip() for ln in lines[start:])
    assert "note: " + note in text and "~" not in text
