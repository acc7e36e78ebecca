"""cluster capture's own rules: node choice, the capture command, Job names, the table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from forensics.cluster import ClusterCaptureOptions, ClusterResult, NodeResult, format_table
from forensics.cluster.jobspec import job_manifest, job_name
from forensics.cluster.run import _prepare_dir
from forensics.cluster.selection import check_options, pick_pod
from forensics.errors import UsageError


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"nodes": ("a",), "selector": "x=y"}, "one way"),
    ({"nodes": ("../etc",)}, "not a node name"),
    ({"nodes": ("Gpu_1",)}, "not a node name"),
    ({"pods_of": "ml"}, "NAMESPACE/LABEL-SELECTOR"),
    ({"pods_of": "/app=x"}, "NAMESPACE/LABEL-SELECTOR"),
    ({"parallel": 0}, "--parallel"),
])
def test_bad_choices_are_usage_errors(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        check_options(ClusterCaptureOptions(out_dir=tmp_path, **kwargs))


def test_capture_command_and_deadline(tmp_path: Path) -> None:
    opts = ClusterCaptureOptions(out_dir=tmp_path, duration_s=60, interval_s=2, since="30m", capture_timeout_s=90,
                                 capture_args=("--skip", "docker"))
    assert opts.capture_command("gpu-07") == ["gpuforensics", "capture", "--output", "-", "--node", "gpu-07",
                                              "--duration", "60", "--interval", "2", "--timeout", "90",
                                              "--since", "30m", "--skip", "docker"]
    assert opts.node_deadline_s() == 60 + 90 + 60
    assert ClusterCaptureOptions(out_dir=tmp_path, node_timeout_s=5).node_deadline_s() == 5


def test_an_output_directory_is_used_once(tmp_path: Path) -> None:
    _prepare_dir(tmp_path / "new" / "dir")
    (tmp_path / "new" / "dir" / "cluster.json").write_text("{}")
    with pytest.raises(UsageError, match="already holds a cluster capture"):
        _prepare_dir(tmp_path / "new" / "dir")


def test_job_names_are_dns_labels_and_jobs_end_themselves() -> None:
    name = job_name("ip-10-0-7-21.ec2.internal.with.a.very.long.suffix.example.com")
    assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    assert job_name("n") != job_name("n")
    job = job_manifest("gpu-07", "gpuforensics", "j", wait_s=300)
    assert job["spec"]["template"]["spec"]["nodeName"] == "gpu-07"
    assert job["spec"]["activeDeadlineSeconds"] == 360 and job["spec"]["backoffLimit"] == 0
    assert "300" in job["spec"]["template"]["spec"]["containers"][0]["command"][-1]


def test_pick_pod_prefers_the_newest_running_and_says_why_not() -> None:
    def pod(name: str, phase: str, created: str, deleting: bool = False) -> dict:
        meta = {"name": name, "creationTimestamp": created, **({"deletionTimestamp": created} if deleting else {})}
        return {"metadata": meta, "status": {"phase": phase}}

    assert pick_pod([pod("a", "Running", "2026-01-01T00:00:00Z"), pod("b", "Running", "2026-01-02T00:00:00Z"),
                      pod("c", "Running", "2026-01-03T00:00:00Z", deleting=True)]) == ("b", None)
    assert pick_pod([pod("a", "Pending", "x")]) == (None, "no Running capture pod (a is Pending)")
    assert pick_pod([]) == (None, None)


def test_table_lists_every_node(tmp_path: Path) -> None:
    res = ClusterResult(tmp_path, "s", "f", [
        NodeResult("gpu-01", "ok", pod="p1", bundle="gpu-01.tgz", sha256="ab" * 32, duration_s=3.25),
        NodeResult("gpu-02", "forbidden", pod="p2", error='cannot create resource "pods/exec"'),
    ])
    lines = format_table(res).splitlines()
    assert lines[0].split() == ["NODE", "POD", "STATUS", "BUNDLE", "SHA-256", "DURATION", "ERROR"]
    assert lines[1].split()[:6] == ["gpu-01", "p1", "ok", "gpu-01.tgz", "ab" * 6, "3.2"]
    assert lines[2].endswith('cannot create resource "pods/exec"')
    assert lines[-1] == "2 node(s): 1 ok, 1 forbidden"
    assert not res.all_ok
