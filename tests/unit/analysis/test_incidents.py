"""Incidents: findings grouped by shared party or causal link, ranked by relevance to the window."""

from __future__ import annotations

import pytest

from forensics.analysis.document import iso
from forensics.analysis.incidents import parse_window
from forensics.errors import UsageError
from tests.support.analysis_bundles import T0, BundleSpec
from tests.unit.analysis.conftest import Analyze, of_kind

XID_79 = "NVRM: Xid (PCI:0000:86:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
# a device fault the catalog says needs a GPU reset (critical, xid_class device)
XID_95 = "NVRM: Xid (PCI:0000:86:00): 95, pid=4242, name=python, Uncontained memory error"


def _busy_node(*, xid_before_s: float | None = None, xid: str = XID_79) -> BundleSpec:
    """An old OOM kill of an unrelated container 10 min before the capture (its lead-up), and a
    throttled and an OOM-killed container inside the capture window."""
    b = BundleSpec(since=T0 - 1800, lookback_s=1800)
    b.gpu(0)
    b.gpu(1)
    old = b.container("nightly-batch", image_env=["PATH=/bin"], memory=64 << 20)
    b.kernel_oom(T0 - 600, 700, "sort", f"/system.slice/docker-{old}.scope", 65_000, 65_536)
    loader = b.container("loader", image_env=["PATH=/bin"], nano_cpus=200_000_000)
    for s in range(30):
        b.cgroup_tick(T0 + s, f"/system.slice/docker-{loader}.scope", nr_periods=10 * s, nr_throttled=9 * s,
                      throttled_usec=80_000 * s)
    etl = b.container("etl", image_env=["PATH=/bin"], memory=32 << 20)
    b.kernel_oom(T0 + 20, 777, "python", f"/system.slice/docker-{etl}.scope", 32_600, 32_768)
    if xid_before_s is not None:
        b.kmsg(T0 - xid_before_s, xid)
    return b


def _incident_of(doc: dict[str, object], name: str) -> dict[str, object]:
    incidents = doc["incidents"]
    assert isinstance(incidents, list)
    return next(i for i in incidents if any(s["name"] == name for s in i["parties"]))


def test_independent_problems_are_separate_incidents_in_window_first(analyze: Analyze) -> None:
    doc = analyze(_busy_node())
    incidents = doc["incidents"]
    assert len(incidents) >= 3
    old, loader, etl = (_incident_of(doc, n) for n in ("nightly-batch", "loader", "etl"))
    assert len({old["id"], loader["id"], etl["id"]}) == 3  # no shared party: three causes
    assert (old["relevance"], loader["relevance"], etl["relevance"]) == ("lead-up", "window", "window")
    order = [i["id"] for i in incidents]
    assert order.index(etl["id"]) < order.index(old["id"]) and order.index(loader["id"]) < order.index(old["id"])
    # every finding is in exactly one incident
    listed = [f for i in incidents for f in i["findings"]]
    assert sorted(listed) == sorted(f["id"] for f in doc["findings"])
    # the verdict is the top incident's and says how many more there are
    top = incidents[0]
    assert doc["verdict"]["incident"] == top["id"] and doc["verdict"]["headline"].startswith(top["headline"])
    assert doc["verdict"]["headline"].endswith("more incidents)")
    for i in incidents:
        assert i["headline"] and i["start"] and i["next_step"] and i["severity"]


def test_a_finding_that_began_before_the_capture_says_so(analyze: Analyze) -> None:
    doc = analyze(_busy_node())
    (old,) = [f for f in of_kind(doc, "oom-kill") if f["before_capture_s"]]
    assert old["before_capture_s"] == 600
    assert old["summary"].startswith("before capture (10 min earlier): ")
    incident = _incident_of(doc, "nightly-batch")
    assert incident["before_capture_s"] == 600 and "before capture (10 min earlier)" in incident["headline"].lower()
    # the victim list shows the PID of each killed process
    assert any(s["type"] == "process" and s["id"] == "700" for s in old["subjects"])


def test_a_shared_container_joins_findings_into_one_incident(analyze: Analyze) -> None:
    b = BundleSpec()
    c = b.container("etl", image_env=["PATH=/bin"], memory=32 << 20, nano_cpus=200_000_000)
    for s in range(30):
        b.cgroup_tick(T0 + s, f"/system.slice/docker-{c}.scope", nr_periods=10 * s, nr_throttled=9 * s)
    b.kernel_oom(T0 + 20, 777, "python", f"/system.slice/docker-{c}.scope", 32_600, 32_768)
    doc = analyze(b)
    (incident,) = [i for i in doc["incidents"] if "oom-kill" in i["kinds"]]
    assert {"oom-kill", "cpu-throttling"} <= set(incident["kinds"])


@pytest.mark.parametrize(("line", "kind"), [(XID_79, "gpu-lost"), (XID_95, "gpu-xid-fault")])
def test_a_critical_hardware_fault_in_the_lead_up_stays_on_top_unless_a_window_is_named(
        analyze: Analyze, line: str, kind: str) -> None:
    doc = analyze(_busy_node(xid_before_s=420, xid=line))
    top = doc["incidents"][0]
    assert kind in top["kinds"] and top["relevance"] == "lead-up"
    # the analyst names the capture window: the fault ended before it, it is history
    named = analyze(_busy_node(xid_before_s=420, xid=line), window=f"{iso(T0)}..{iso(T0 + 60)}")
    assert named["window"]["named"] is True
    xid = next(i for i in named["incidents"] if kind in i["kinds"])
    assert xid["relevance"] == "history"
    assert named["incidents"][0]["relevance"] == "window"
    assert [i["relevance"] for i in named["incidents"]].index("history") > 0


def test_a_relative_window_counts_back_from_the_capture_end(analyze: Analyze) -> None:
    doc = analyze(_busy_node(), window="15m..")
    assert doc["window"]["start"] == iso(T0 + 60 - 900) and doc["window"]["end"] is None
    assert _incident_of(doc, "nightly-batch")["relevance"] == "window"  # 10 min before the start


@pytest.mark.parametrize("text", ["yesterday", "..", "2h", "2026-01-02T00:00:00Z..2026-01-01T00:00:00Z",
                                  "soon..later"])
def test_a_bad_window_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="--window"):
        parse_window(text)
