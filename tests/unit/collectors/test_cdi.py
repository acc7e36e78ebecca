"""The ``cdi`` collector: CDI spec files of the node's spec directories, kept verbatim (env values
redacted in place), through a real capture pointed at temporary directories (``--set cdi.*``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from forensics.analysis import analyze_bundles
from forensics.bundle.reader import open_bundle
from forensics.capture.runner import run_capture
from forensics.capture.settings import validate_settings
from forensics.collect.context import CaptureOptions
from forensics.collectors.cdi import COLLECTOR
from forensics.errors import UsageError
from forensics.specs.cdi import spec_member
from tests.support.cdi_specs import nvidia_ctk_spec, nvidia_ctk_spec_json


def _capture(tmp_path: Path, static: Path, dynamic: Path, **extra: str):  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    settings = {"cdi.static_dir": str(static), "cdi.dynamic_dir": str(dynamic), **extra}
    validate_settings(settings)
    result = run_capture(CaptureOptions(timeout_s=30, extra=settings), out, collectors=[COLLECTOR])
    return result.path, open_bundle(result.path)


def test_spec_files_kept_verbatim_with_env_values_redacted(tmp_path: Path) -> None:
    static, dynamic = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    static.mkdir()
    dynamic.mkdir()
    yaml_text = nvidia_ctk_spec(extra_env=("REGISTRY_TOKEN=hunter2-secret",))
    (static / "nvidia.yaml").write_text(yaml_text)
    (dynamic / "claim.json").write_text(nvidia_ctk_spec_json("claim-1-gpu-0", 1, kind="k8s.gpu.nvidia.com/claim"))
    (static / "README").write_text("not a spec\n")
    os.symlink(static / "nvidia.yaml", dynamic / "link.yaml")
    path, bundle = _capture(tmp_path, static, dynamic)
    status = next(c for c in bundle.collectors() if c["name"] == "cdi")
    assert status["status"] == "ok", status
    kept = bundle.read_text(spec_member(str(static), "nvidia.yaml"))
    assert "hunter2-secret" not in kept and "REGISTRY_TOKEN=<redacted:" in kept
    assert kept.replace(kept.split("REGISTRY_TOKEN=")[1].split("\n")[0], "hunter2-secret") == yaml_text
    assert bundle.read_bytes(spec_member(str(dynamic), "claim.json")) == (dynamic / "claim.json").read_bytes()
    index = bundle.read_json("cdi/index.json")
    assert [(d["path"], d["priority"], d["exists"]) for d in index["directories"]] == [
        (str(static), 0, True), (str(dynamic), 1, True)]
    files = {f["name"]: f for d in index["directories"] for f in d["files"]}
    assert "not .json or .yaml" in files["README"]["skipped"]
    assert "link is not followed" in files["link.yaml"]["skipped"]
    assert not bundle.has(spec_member(str(dynamic), "link.yaml"))
    # the analysis reads them: no limitation about them
    doc = analyze_bundles([path])
    assert not [lim for lim in doc["limitations"] if "CDI" in lim], doc["limitations"]


def test_no_cdi_directory_is_a_fact_not_a_failure(tmp_path: Path) -> None:
    _, bundle = _capture(tmp_path, tmp_path / "none-a", tmp_path / "none-b")
    status = next(c for c in bundle.collectors() if c["name"] == "cdi")
    assert status["status"] == "ok" and any("CDI is not set up where the capture looks" in n for n in status["notes"]), status


def test_oversized_file_is_listed_not_kept(tmp_path: Path) -> None:
    static = tmp_path / "etc-cdi"
    static.mkdir()
    (static / "big.yaml").write_text(nvidia_ctk_spec())
    _, bundle = _capture(tmp_path, static, tmp_path / "none", **{"cdi.max_bytes": "100"})
    (entry,) = bundle.read_json("cdi/index.json")["directories"][0]["files"]
    assert "larger than cdi.max_bytes" in entry["skipped"] and not bundle.has(spec_member(str(static), "big.yaml"))


def test_bad_setting_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        validate_settings({"cdi.max_bytes": "-1"})
