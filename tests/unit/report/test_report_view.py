"""The report's view model (forensics/report/view.py): validation, references, ordering, caps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.errors import ReportError
from forensics.report import records
from forensics.report import view as v

Doc = dict[str, Any]


class TestHeader:
    @pytest.mark.parametrize(
        "doc, message",
        [
            ([], "JSON object"),
            ({"format": "gpuforensics-bundle", "format_version": 1}, "not an analysis document"),
            ({"format": "gpuforensics-analysis", "format_version": 2}, "format_version 2"),
            ({"format": "gpuforensics-analysis"}, "format_version None"),
        ],
    )
    def test_bad_header_is_a_report_error(self, doc: object, message: str) -> None:
        with pytest.raises(ReportError, match=message):
            v.build_view(doc)

    def test_minimal_document_renders_as_unknown(self) -> None:
        view = v.build_view({"format": "gpuforensics-analysis", "format_version": 1})
        assert view.verdict.clean is True
        assert view.chain == () and view.gpus.total == 0 and view.bundles == ()


class TestIncident:
    def test_verdict(self, make_doc: Callable[[str], Doc]) -> None:
        view = v.build_view(make_doc("incident"))
        assert view.verdict.severity == "critical"
        assert [s.name for s in view.verdict.culprits] == ["notebook"]
        assert [s.name for s in view.verdict.victims] == ["trainer"]
        assert view.verdict.duration == "1 min 31 s"
        assert dict(view.severity_counts) == {"critical": 1, "high": 2, "low": 1}

    def test_evidence_carries_the_member_sha256_from_the_manifest(
        self, make_doc: Callable[[str], Doc]
    ) -> None:
        doc = make_doc("incident")
        members = doc["bundles"][0]["members"]
        view = v.build_view(doc)
        evidence = view.chain[0].finding.evidence  # type: ignore[union-attr]
        assert evidence[0].member == "nvml/samples.jsonl"
        assert evidence[0].member_sha256 == members["nvml/samples.jsonl"]
        assert all(e.member_sha256 == members[e.member] for e in evidence)

    def test_evidence_member_missing_from_manifest_is_flagged(
        self, make_doc: Callable[[str], Doc]
    ) -> None:
        doc = make_doc("incident")
        del doc["bundles"][0]["members"]["nvml/samples.jsonl"]
        doc["bundle"] = doc["bundles"][0]
        view = v.build_view(doc)
        assert view.chain[0].finding.evidence[0].member_sha256 is None  # type: ignore[union-attr]

    def test_chain_in_time_order_and_other_findings_apart(
        self, make_doc: Callable[[str], Doc]
    ) -> None:
        doc = make_doc("incident")
        doc["chain"].reverse()
        view = v.build_view(doc)
        assert [s.finding_id for s in view.chain] == ["F1", "F2", "F3"]
        assert [f.id for f in view.other_findings.body] == ["F4"]

    def test_gpu_allocation_against_use(self, make_doc: Callable[[str], Doc]) -> None:
        view = v.build_view(make_doc("incident"))
        gpu0 = next(g for g in view.gpus.body if g.index == "0")
        assert [s.name for s in gpu0.allocated_to] == ["trainer"]
        assert [s.name for s in gpu0.unallocated_users] == ["notebook"]
        by_pid = {p.pid: p for p in gpu0.processes.body}
        assert by_pid["48213"].allocated is False and by_pid["48213"].container == "notebook"
        assert by_pid["47001"].allocated is True
        assert gpu0.chart is not None and [m.label for m in gpu0.chart.markers] == [
            "F1",
            "F2",
            "F4",
            "F3",
        ]
        assert gpu0.chart.window is not None

    def test_containers_most_relevant_first(self, make_doc: Callable[[str], Doc]) -> None:
        view = v.build_view(make_doc("incident"))
        assert [c.name for c in view.containers.body] == [
            "trainer",
            "notebook",
        ]  # critical F3 names trainer
        notebook = view.containers.body[1]
        assert notebook.allocation_explicit is False
        assert notebook.allocation_gpus == ("GPU 0", "GPU 1")
        assert (
            notebook.throttled_max_ratio is not None and 0.15 < notebook.throttled_max_ratio < 0.18
        )

    def test_collector_problems_first(self, make_doc: Callable[[str], Doc]) -> None:
        view = v.build_view(make_doc("incident"))
        assert view.collectors.body[0].name == "kubernetes"
        assert [c.name for c in view.collector_problems] == ["kubernetes"]


class TestSnapshotAndClean:
    def test_snapshot_has_no_charts_and_unknowns_stay_unknown(
        self, make_doc: Callable[[str], Doc]
    ) -> None:
        view = v.build_view(make_doc("snapshot"))
        assert view.charts == ()
        notebook = next(c for c in view.containers.all_shown if c.name == "notebook")
        assert notebook.memory_limit_bytes is None and notebook.memory_peak_of_limit_ratio is None
        assert notebook.throttled_max_ratio is None

    def test_clean(self, make_doc: Callable[[str], Doc]) -> None:
        view = v.build_view(make_doc("clean"))
        assert view.verdict.clean and view.chain == () and view.other_findings.total == 0
        assert all(g.chart is None or g.chart.window is None for g in view.gpus.body)


class TestLongTables:
    def test_split_caps(self) -> None:
        part = records.split(list(range(30)), "x", body_rows=5, cap=10)
        assert part.body == tuple(range(5)) and part.appendix == tuple(range(5, 15))
        assert part.omitted == 15 and part.total == 30

    def test_large_document_is_summarised(self, make_doc: Callable[[str], Doc]) -> None:
        view = v.build_view(make_doc("large"))
        assert len(view.containers.body) == records.BODY_ROWS
        assert view.containers.total == 122
        assert len(view.containers.appendix) == 122 - records.BODY_ROWS
        cited = view.bundles[0].cited
        assert view.bundles[0].member_count == 3013
        doc = make_doc("large")
        expected = {e["member"] for f in doc["findings"] + doc["ruled_out"] for e in f["evidence"]}
        assert {m for m, _ in cited.all_shown} == expected  # the members cited, not all 3013
        assert (
            dict(cited.appendix)["nvml/samples.jsonl"]
            == make_doc("large")["bundles"][0]["members"]["nvml/samples.jsonl"]
        )
        assert len(view.charts) <= records.GPU_CHART_CAP + records.CONTAINER_CHART_CAP
        assert all(len(c.markers) <= records.MARKER_CAP for c in view.charts)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
_KEYS = [
    "bundles",
    "bundle",
    "verdict",
    "findings",
    "chain",
    "ruled_out",
    "limitations",
    "collectors",
    "gpus",
    "containers",
    "unattributed",
    "thresholds",
    "generated_at",
    "tool_version",
]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_field_of_any_type_never_crashes(
    make_doc: Callable[[str], Doc], data: st.DataObject
) -> None:
    """A field of the wrong type is treated as unknown: the view always builds."""
    doc = make_doc("snapshot")
    key = data.draw(st.sampled_from(_KEYS))
    doc[key] = data.draw(_json)
    for section in ("findings", "gpus", "containers", "chain"):
        items = doc.get(section)
        if isinstance(items, list) and items and isinstance(items[0], dict) and items[0]:
            field = data.draw(st.sampled_from(sorted(items[0])))
            items[0][field] = data.draw(_json)
    view = v.build_view(doc)
    assert isinstance(view.title, str)
    # and both text renderers take whatever the view holds
    from forensics.report.html import render_html_view
    from forensics.report.markdown import render_markdown_view

    assert "</html>" in render_html_view(view)
    assert "## Verdict" in render_markdown_view(view)


def test_container_oom_events_and_pressure(make_doc: Callable[[str], Doc]) -> None:
    doc = make_doc("incident")
    doc["findings"].append(
        {
            "id": "F5",
            "kind": "pressure-stall",
            "severity": "medium",
            "confidence": 0.8,
            "summary": "trainer memory pressure some avg10=42%",
            "start": "2026-11-29T14:03:30Z",
            "end": "2026-11-29T14:03:40Z",
            "subjects": [
                {
                    "role": "victim",
                    "type": "container",
                    "id": doc["containers"][1]["id"],
                    "name": "trainer",
                }
            ],
            "evidence": [],
            "causes": [],
        }
    )
    view = v.build_view(doc)
    trainer = next(c for c in view.containers.all_shown if c.name == "trainer")
    assert [f.id for f in trainer.oom_events] == ["F3"]
    assert [f.id for f in trainer.pressure] == ["F5"]
    assert trainer.findings[0].id == "F3"  # most severe first
