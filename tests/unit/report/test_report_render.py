"""render() (forensics/report/outputs.py): formats, output paths, atomic writes, errors."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forensics.errors import ReportError
from forensics.report import FORMATS, output_paths, render
from forensics.report.outputs import normalise_formats, report_stem

Doc = dict[str, Any]
STEM = "gpuforensics-gpu-07-20261129T140500Z"


class TestPaths:
    def test_directory_gets_files_named_after_the_bundle(
        self, make_doc: Callable[[str], Doc], tmp_path: Path
    ) -> None:
        paths = output_paths(make_doc("snapshot"), ["html", "pdf", "md", "json"], tmp_path)
        assert paths == {
            name: tmp_path / (STEM + FORMATS[name]) for name in ("html", "pdf", "md", "json")
        }

    def test_single_format_to_a_file(self, make_doc: Callable[[str], Doc], tmp_path: Path) -> None:
        assert output_paths(make_doc("snapshot"), ["pdf"], tmp_path / "x.pdf") == {
            "pdf": tmp_path / "x.pdf"
        }

    def test_single_format_to_an_existing_directory(
        self, make_doc: Callable[[str], Doc], tmp_path: Path
    ) -> None:
        assert output_paths(make_doc("snapshot"), ["md"], tmp_path) == {
            "md": tmp_path / f"{STEM}.report.md"
        }

    def test_several_formats_into_a_file_is_an_error(
        self, make_doc: Callable[[str], Doc], tmp_path: Path
    ) -> None:
        (tmp_path / "f").write_text("")
        with pytest.raises(ReportError, match="directory"):
            output_paths(make_doc("snapshot"), ["html", "md"], tmp_path / "f")

    def test_formats_are_normalised(self) -> None:
        assert normalise_formats(["html,PDF", "markdown", "html"]) == ["html", "pdf", "md"]
        with pytest.raises(ReportError, match="docx"):
            normalise_formats(["docx"])
        with pytest.raises(ReportError):
            normalise_formats([""])

    def test_stem_from_bundle_paths_first_and_sanitised(
        self, make_doc: Callable[[str], Doc]
    ) -> None:
        doc = make_doc("snapshot")
        assert report_stem(doc) == STEM
        assert report_stem(doc, ["/x/other host;rm.tgz"]) == "other_host_rm"
        assert report_stem({"bundles": []}) == "report"
        assert report_stem({"bundles": [{"path": "../../.."}]}) == "report"


class TestRender:
    def test_writes_every_format_mode_0600(
        self, make_doc: Callable[[str], Doc], tmp_path: Path
    ) -> None:
        doc = make_doc("incident")
        out = tmp_path / "reports"
        paths = render(doc, ["html", "pdf", "md", "json"], out)
        assert [p.name for p in paths] == [STEM + FORMATS[n] for n in ("html", "pdf", "md", "json")]
        for path in paths:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert paths[0].read_text().startswith("<!DOCTYPE html>")
        assert paths[1].read_bytes().startswith(b"%PDF")
        assert paths[2].read_text().startswith("# GPU incident report: gpu-07")
        assert json.loads(paths[3].read_text()) == doc
        assert sorted(p.name for p in out.iterdir()) == sorted(
            p.name for p in paths
        )  # no temp files left

    def test_a_failing_format_writes_nothing(
        self, make_doc: Callable[[str], Doc], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import forensics.report.pdf as pdf

        def boom(html: str) -> bytes:
            raise ReportError("layout failed")

        monkeypatch.setattr(pdf, "render_pdf", boom)
        with pytest.raises(ReportError, match="layout failed"):
            render(make_doc("snapshot"), ["html", "pdf"], tmp_path)
        assert list(tmp_path.iterdir()) == []

    def test_bad_document_and_bad_paper(
        self, make_doc: Callable[[str], Doc], tmp_path: Path
    ) -> None:
        with pytest.raises(ReportError, match="format_version"):
            render({"format": "gpuforensics-analysis", "format_version": 9}, ["md"], tmp_path)
        with pytest.raises(ReportError, match="paper"):
            render(make_doc("snapshot"), ["html"], tmp_path, paper="a5")
        assert list(tmp_path.iterdir()) == []

    def test_non_json_values_are_a_report_error(
        self, make_doc: Callable[[str], Doc], tmp_path: Path
    ) -> None:
        doc = make_doc("snapshot")
        doc["thresholds"] = {"x": float("nan")}
        with pytest.raises(ReportError, match="JSON"):
            render(doc, ["json"], tmp_path)

    def test_unwritable_output_is_a_report_error(
        self, make_doc: Callable[[str], Doc], tmp_path: Path
    ) -> None:
        blocker = tmp_path / "file"
        blocker.write_text("")
        with pytest.raises(ReportError, match="cannot write"):
            render(make_doc("snapshot"), ["md"], blocker / "sub" / "r.md")
