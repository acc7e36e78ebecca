"""Pure parts of the kubernetes collector: quantities, the pods index, the event window, redaction."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.bundle.redact import Redactor
from forensics.collectors.kubernetes.events import event_time, parse_time, select_events
from forensics.collectors.kubernetes.redaction import LAST_APPLIED, redact_pod
from forensics.errors import ParseError
from forensics.parsing.podindex import build_pods_index, index_pod, split_container_id
from forensics.parsing.quantity import (
    parse_quantity,
    quantity_bytes,
    quantity_count,
    quantity_millicores,
)
from tests.support.kube_objects import ContainerSpec, gpu_node_scenario, make_event, make_pod

NOW = datetime(2026, 11, 29, 14, 5, tzinfo=UTC)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


class TestQuantity:
    @pytest.mark.parametrize(("text", "value"), [
        ("100m", Decimal("0.1")), ("16Gi", Decimal(16 * 2**30)), ("4", Decimal(4)),
        ("1e3", Decimal(1000)), ("1.5", Decimal("1.5")), ("500Mi", Decimal(500 * 2**20)),
        ("15873264012n", Decimal("15.873264012")), ("2k", Decimal(2000)), ("1E2", Decimal(100)),
    ])
    def test_known(self, text, value):
        assert parse_quantity(text) == value

    def test_units(self):
        assert quantity_bytes("128Gi") == 137438953472
        assert quantity_millicores("250m") == 250 and quantity_millicores("2") == 2000
        assert quantity_count("4") == 4
        with pytest.raises(ParseError):
            quantity_count("500m")

    @pytest.mark.parametrize("bad", ["", "Gi", "1.2.3", "5 Gi", "1Xi", True, None, [], "--1"])
    def test_bad(self, bad):
        with pytest.raises(ParseError):
            parse_quantity(bad)

    @given(st.integers(min_value=0, max_value=2**40),
           st.sampled_from(["", "k", "M", "G", "Ki", "Mi", "Gi", "m"]))
    def test_round_trip(self, n, suffix):
        scale = {"": 1, "k": 1000, "M": 10**6, "G": 10**9, "Ki": 1024, "Mi": 2**20, "Gi": 2**30}
        value = parse_quantity(f"{n}{suffix}")
        assert value == (Decimal(n) / 1000 if suffix == "m" else Decimal(n) * scale[suffix])

    @given(json_values)
    def test_only_parse_error(self, value):
        try:
            parse_quantity(value)
        except ParseError:
            pass


class TestPodIndex:
    def test_container_ids(self):
        assert split_container_id("containerd://" + "a" * 64) == ("containerd", "a" * 64)
        assert split_container_id("cri-o://" + "b" * 64) == ("cri-o", "b" * 64)
        assert split_container_id("docker://" + "c" * 64) == ("docker", "c" * 64)
        assert split_container_id("") == (None, None)
        with pytest.raises(ParseError):
            split_container_id("a" * 64)

    def test_limits_only_gpu_counts_as_request(self):
        pod = make_pod("p", "ns", "n", NOW, [ContainerSpec("c", limits={"nvidia.com/gpu": "2"})])
        pod["spec"]["containers"][0]["resources"].pop("requests")
        entry = index_pod(pod)
        assert entry.gpu_request_count == 2 and entry.gpu_limit_count == 2

    def test_init_container_gpu_is_max_not_sum(self):
        pod = make_pod("p", "ns", "n", NOW, [ContainerSpec("app", limits={"nvidia.com/gpu": "1"})])
        pod["spec"]["initContainers"] = [{"name": "warmup", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
        entry = index_pod(pod)
        assert entry.gpu_limit_count == 2
        assert [c.kind for c in entry.containers] == ["init", "container"]

    def test_current_oom(self):
        pod = make_pod("p", "ns", "n", NOW, [ContainerSpec("c", state="terminated", state_reason="OOMKilled", exit_code=137)],
                       phase="Failed")
        index = build_pods_index({"items": [pod]})
        assert index["oom_killed"][0]["exit_code"] == 137 and index["oom_killed"][0]["finished_at"] is None

    def test_exit_137_without_oomkilled_is_not_oom(self):
        pod = make_pod("p", "ns", "n", NOW, [ContainerSpec("c", last_terminated=("Error", 137), restart_count=1)])
        assert build_pods_index({"items": [pod]})["oom_killed"] == []

    def test_scenario_round_trips_through_json(self):
        pods = gpu_node_scenario(NOW).pods
        index = build_pods_index(json.loads(json.dumps({"items": pods})), "gpu-node-07")
        assert len(index["pods"]) == len(pods)
        assert json.loads(json.dumps(index)) == index

    @settings(max_examples=200)
    @given(json_values)
    def test_arbitrary_json_raises_only_parse_error(self, value):
        try:
            build_pods_index(value)
        except ParseError:
            pass

    @settings(max_examples=200)
    @given(st.data())
    def test_mutated_pod_raises_only_parse_error(self, data):
        pod = copy.deepcopy(gpu_node_scenario(NOW).pods[1])
        # replace one nested value with arbitrary JSON
        node = pod
        path = []
        while isinstance(node, (dict, list)) and node:
            keys = list(node.keys()) if isinstance(node, dict) else list(range(len(node)))
            key = data.draw(st.sampled_from(keys))
            path.append(key)
            if data.draw(st.booleans()):
                node[key] = data.draw(json_values)
                break
            node = node[key]
        try:
            index_pod(pod)
        except ParseError:
            pass


class TestEvents:
    def test_times(self):
        assert parse_time("2026-11-29T14:02:10Z") == datetime(2026, 11, 29, 14, 2, 10, tzinfo=UTC)
        assert parse_time("2026-11-29T14:02:10.123456Z").microsecond == 123456
        with pytest.raises(ParseError):
            parse_time("2026-11-29T14:02:10")
        ev = {"lastTimestamp": None, "eventTime": "2026-11-29T14:00:00.000001Z",
              "metadata": {"creationTimestamp": "2026-11-29T13:00:00Z"}}
        assert event_time(ev) == datetime(2026, 11, 29, 14, 0, 0, 1, tzinfo=UTC)
        assert event_time({}) is None

    def test_selection(self):
        state = gpu_node_scenario(NOW)
        uids = {p["metadata"]["uid"] for p in state.pods if p["spec"]["nodeName"] == "gpu-node-07"}
        kept = select_events(state.events, "gpu-node-07", uids, NOW - timedelta(hours=1))
        assert len(kept) == 8
        # an event from this node's kubelet about a pod deleted since is kept
        gone = make_pod("gone", "ml", "gpu-node-07", NOW, [ContainerSpec("c")])
        ev = make_event(gone, "Killing", "Stopping container c", NOW, host="gpu-node-07")
        assert select_events([ev], "gpu-node-07", set(), None) == [ev]

    @settings(max_examples=200)
    @given(json_values)
    def test_only_parse_error(self, value):
        try:
            select_events(value, "n", {"u"}, NOW)
        except ParseError:
            pass
        try:
            select_events([value], "n", {"u"}, NOW)
        except ParseError:
            pass


class TestRedaction:
    def test_env_and_last_applied(self):
        pod = make_pod("p", "ns", "n", NOW, [ContainerSpec("c", env=[("API_TOKEN", "abc123"), ("CUDA_VISIBLE_DEVICES", "0")],
                                                          secret_env=[("PW", "s", "k")])], last_applied=True)
        pod["spec"]["initContainers"] = [{"name": "i", "image": "x", "env": [{"name": "X", "value": "v1"}]}]
        redact_pod(pod, Redactor(key=b"k" * 32))
        env = pod["spec"]["containers"][0]["env"]
        assert env[0]["value"].startswith("<redacted:") and env[1]["value"] == "0"
        assert env[2] == {"name": "PW", "valueFrom": {"secretKeyRef": {"key": "k", "name": "s"}}}
        assert pod["spec"]["initContainers"][0]["env"][0]["value"].startswith("<redacted:")
        applied = pod["metadata"]["annotations"][LAST_APPLIED]
        assert "abc123" not in applied and applied.endswith("\n")
        assert json.loads(applied)["spec"]["containers"][0]["env"][0]["value"] == env[0]["value"]

    def test_last_applied_of_a_deployment_template(self):
        pod = make_pod("p", "ns", "n", NOW, [ContainerSpec("c")])
        pod["metadata"]["annotations"] = {LAST_APPLIED: json.dumps(
            {"kind": "Deployment", "spec": {"template": {"spec": {"containers": [{"name": "c", "env": [{"name": "KEY", "value": "zzz"}]}]}}}})}
        redact_pod(pod, Redactor())
        assert "zzz" not in pod["metadata"]["annotations"][LAST_APPLIED]

    def test_unparseable_last_applied_replaced_whole(self):
        pod = make_pod("p", "ns", "n", NOW, [ContainerSpec("c")])
        pod["metadata"]["annotations"] = {LAST_APPLIED: "{not json PASSWORD=x"}
        redact_pod(pod, Redactor())
        assert pod["metadata"]["annotations"][LAST_APPLIED].startswith("<redacted:")

    @given(json_values)
    def test_never_raises_on_odd_shapes(self, value):
        redact_pod({"spec": value, "metadata": {"annotations": {LAST_APPLIED: json.dumps(value)}}}, Redactor())
