"""Thresholds from --config files, and the shape of the analysis document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forensics.analysis import AnalysisConfig, load_config
from forensics.errors import UsageError
from tests.unit.analysis.conftest import Analyze, kinds, secretly_taken


def test_toml_and_json_configs(tmp_path: Path) -> None:
    t = tmp_path / "a.toml"
    t.write_text("[thresholds]\ngpu_memory_pressure_ratio = 0.99\ngpu_hog_min_samples = 5\n")
    cfg = load_config(t)
    assert cfg.gpu_memory_pressure_ratio == 0.99 and cfg.gpu_hog_min_samples == 5
    j = tmp_path / "a.json"
    j.write_text(json.dumps({"cpu_throttled_ratio": 0.5}))
    assert load_config(j).cpu_throttled_ratio == 0.5


@pytest.mark.parametrize("text", ['{"no_such_threshold": 1}', '{"cpu_throttled_ratio": "high"}',
                                  '{"cpu_throttled_ratio": -1}', "not json", '[1, 2]'])
def test_bad_config_is_a_usage_error(tmp_path: Path, text: str) -> None:
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(UsageError):
        load_config(p)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        load_config(tmp_path / "absent.toml")


def test_threshold_changes_the_outcome(analyze: Analyze) -> None:
    assert "gpu-memory-pressure" in kinds(analyze(secretly_taken()))
    strict = AnalysisConfig(gpu_memory_pressure_ratio=0.999)
    doc = analyze(secretly_taken(), config=strict)
    assert "gpu-memory-pressure" not in kinds(doc)
    assert doc["thresholds"]["gpu_memory_pressure_ratio"] == 0.999


def test_document_shape_and_evidence_points_into_the_bundle(analyze: Analyze) -> None:
    doc = analyze(secretly_taken())
    json.dumps(doc)  # JSON-able
    assert doc["format"] == "gpuforensics-analysis" and doc["format_version"] == 1
    for key in ("tool_version", "generated_at", "bundle", "bundles", "verdict", "findings", "chain",
                "ruled_out", "limitations", "collectors", "gpus", "containers", "pods", "nodes",
                "unattributed"):
        assert key in doc, key
    members = doc["bundles"][0]["members"]
    assert len(doc["bundles"][0]["file_sha256"]) == 64
    ids = [f["id"] for f in doc["findings"]]
    assert ids == [f"F{i}" for i in range(1, len(ids) + 1)]
    for f in doc["findings"]:
        assert f["evidence"], f["kind"]
        for e in f["evidence"]:
            assert e["member"] in members and e["excerpt"] and len(e["excerpt"]) <= 240
            assert e["locator"] == "" or e["locator"].startswith(("/", "line "))
        for c in f["causes"]:
            assert c in ids
    gpu0 = doc["gpus"][0]
    assert gpu0["index"] == 0 and [a["name"] for a in gpu0["allocated_to"]] == ["trainer"]
    assert {u["name"] for u in gpu0["used_by"]} == {"trainer", "notebook"}
    n = len(gpu0["series"]["t"])
    assert n == 60 and all(len(v) == n for k, v in gpu0["series"].items() if isinstance(v, list))
    assert all(len(v) == n for v in gpu0["series"]["process_sm_util_pct"].values())
    trainer = next(c for c in doc["containers"] if c["name"] == "trainer")
    assert trainer["gpu_allocation"]["explicit"] is True and trainer["cpu_quota_cores"] == 4.0
    assert len(trainer["series"]["t"]) == len(trainer["series"]["cpu_throttled_ratio"])
    assert doc["nodes"] == [{"host": "gpu-07", "bundles": [doc["bundles"][0]["path"].rsplit("/", 1)[1]],
                             "clock_offset_s": 0.0, "clock_uncertainty_s": 0.0, "clock_reference": None,
                             "captured_start": "2025-11-29T14:00:00Z",
                             "captured_end": "2025-11-29T14:01:00Z",
                             "driver_version": None, "cuda_version": None, "nvml_version": None,
                             "kernel": None, "os": None}]


def test_cli_analyze_json_config_and_fail_on(tmp_path: Path) -> None:
    """The CLI wiring: -f json prints this document, --config applies, --fail-on sets the exit code."""
    from click.testing import CliRunner

    from forensics.cli import cli

    out = tmp_path / "b"
    out.mkdir()
    bundle = secretly_taken().write(out)
    runner = CliRunner()
    res = runner.invoke(cli, ["analyze", str(bundle), "-f", "json", "--fail-on", "high"])
    assert res.exit_code == 1, res.output
    doc = json.loads(res.output)
    assert doc["format"] == "gpuforensics-analysis" and doc["verdict"]["culprits"][0]["name"] == "notebook"
    cfg = tmp_path / "t.toml"
    cfg.write_text("[thresholds]\ngpu_memory_pressure_ratio = 0.999\n")
    res = runner.invoke(cli, ["analyze", str(bundle), "-f", "json", "--config", str(cfg), "--fail-on", "critical"])
    assert res.exit_code == 0, res.output
    assert "gpu-memory-pressure" not in {f["kind"] for f in json.loads(res.output)["findings"]}
    bad = tmp_path / "bad.json"
    bad.write_text('{"nope": 1}')
    from forensics.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["analyze", str(bundle), "--config", str(bad)])
    assert exited.value.code == 2
