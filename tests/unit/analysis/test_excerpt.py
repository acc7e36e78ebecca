"""Excerpts are the member's own text: a JSON value's exact span, a JSON line's values, a line."""

from __future__ import annotations

import json

import pytest

from forensics.analysis.excerpt import OMISSION, JsonText, quote
from forensics.analysis.findings import Evidence, LineRef
from forensics.analysis.source import Source

MEMBER = ('{"HostConfig": {"DeviceRequests": null, "Env": ["A=1", "NVIDIA_VISIBLE_DEVICES=all"]},\n'
          ' "Name": "/a\\"b", "State": {"OOMKilled": true,  "Pid": 42}}\n')


class _Bundle:
    def __init__(self, members: dict[str, bytes]) -> None:
        self.members = members
        self.manifest: dict[str, object] = {}

    def read_bytes(self, member: str) -> bytes:
        return self.members[member]


def _source(members: dict[str, bytes]) -> Source:
    return Source(_Bundle(members), "b.tgz", members)


@pytest.mark.parametrize(("pointer", "excerpt"), [
    ("/HostConfig/DeviceRequests", "null"),
    ("/HostConfig/Env/1", "NVIDIA_VISIBLE_DEVICES=all"),
    ("/Name", '/a\\"b'),                      # escapes as written, not decoded
    ("/State", '{"OOMKilled": true,  "Pid": 42}'),  # the member's own spacing
])
def test_a_pointer_quotes_the_exact_text_of_its_value(pointer: str, excerpt: str) -> None:
    ev = _source({"m.json": MEMBER.encode()}).ev_pointer("m.json", pointer)
    assert (ev.excerpt, ev.normalised) == (excerpt, False)
    assert ev.excerpt in MEMBER


def test_a_missing_pointer_is_re_serialised_and_says_so() -> None:
    src = _source({"m.json": b"\xff{}"})  # not UTF-8: no text to locate a span in
    ev = src.ev_pointer("m.json", "/x", doc={"x": {"b": 1}})
    assert ev.normalised and ev.to_json()["excerpt_normalised"] is True


def test_json_line_values_are_quoted_with_their_keys_as_written() -> None:
    line = b'{"cgroup": "/docker/x", "values": {"cpu": {"nr_periods": 10, "nr_throttled": 9, ' \
           b'"stat_version": 1, "padding": "' + b"p" * 100 + b'", "throttled_ns": 744}}}'
    src = _source({"s.jsonl": line + b"\n"})
    list(src.jsonl("s.jsonl"))
    ref = src.ref("s.jsonl", 1, line, ("values", "cpu", "nr_periods"), ("values", "cpu", "nr_throttled"),
                  ("values", "cpu", "throttled_ns"))
    ev = ref.evidence
    assert ev.excerpt == f'"nr_periods": 10, "nr_throttled": 9{OMISSION}"throttled_ns": 744'
    assert not ev.normalised
    assert all(part in line.decode() for part in ev.excerpt.split(OMISSION))


def test_a_pointer_reference_quotes_values_of_the_member() -> None:
    doc = '{"devices": [{"nvml": {"a": 1}}, {"nvml": {"a": 2, "b":   [1,2]}}]}'
    src = _source({"d.json": doc.encode()})
    value = json.loads(doc)["devices"][1]
    ev = src.ref("d.json", 0, value, ("nvml", "b"), pointer="/devices/1").evidence
    assert (ev.locator, ev.excerpt, ev.normalised) == ("/devices/1", '"b":   [1,2]', False)


def test_a_text_line_keeps_its_own_whitespace() -> None:
    src = _source({"k.txt": b"a\n6,1,2,-;NVRM:  Xid (PCI:0000:86:00):\t79\n"})
    ev = src.ev_line("k.txt", 2)
    assert ev.excerpt == "6,1,2,-;NVRM:  Xid (PCI:0000:86:00):\t79" and not ev.normalised
    long = Evidence("b", "m", "line 1", "x" * 500).to_json()["excerpt"]
    assert long == "x" * 237 + "..."


def test_spans_are_remembered_so_a_big_member_is_walked_once() -> None:
    doc = JsonText(json.dumps({"items": [{"k": i, "s": {"v": [i] * 3}} for i in range(200)]}))
    for i in range(200):
        span = doc.span(["items", i, "s", "v"])
        assert span is not None and doc.text[span[0]:span[1]] == json.dumps([i] * 3)
    assert doc.span(["items", 200]) is None and doc.span(["nope"]) is None


def test_close_spans_are_one_run_and_a_lone_string_loses_its_quotes() -> None:
    text = '{"a": "x", "b": 2}'
    doc = JsonText(text)
    a, b = doc.span(["a"], with_key=True), doc.span(["b"], with_key=True)
    assert a and b and quote(text, [b, a]) == '"a": "x", "b": 2'
    s = doc.span(["a"])
    assert s and quote(text, [s]) == "x"


def test_a_lazy_line_reference_is_read_again_verbatim() -> None:
    raw = b'{"t": 1.0,   "x": "\xc3\xa9"}'
    src = _source({"s.jsonl": raw + b"\n"})
    refs = [src.ref("s.jsonl", no, line) for no, _, line in src.jsonl("s.jsonl")]
    assert isinstance(refs[0], LineRef) and refs[0].payload is None
    assert refs[0].evidence.excerpt == raw.decode()


def test_many_values_of_one_long_array_in_any_order() -> None:
    """Looking values up in any order gives each its own span (the scan goes on where it stopped,
    and a child passed before is found again), and a missing one stays missing."""
    doc = {"data": {"result": [{"metric": {"pod": f"p{i}", "n": i}, "values": [[i, str(i)]]} for i in range(300)]}}
    text = JsonText(json.dumps(doc, indent=1))
    order = [299, 3, 150, 0, 298, 150, 7]
    for i in order:
        span = text.pointer_span(f"/data/result/{i}/metric")
        assert span is not None and json.loads(text.text[span[0]:span[1]]) == {"pod": f"p{i}", "n": i}
    assert text.pointer_span("/data/result/300") is None and text.pointer_span("/data/nothing") is None
    span = text.pointer_span("/data/result/42/values/0/1")
    assert span is not None and text.text[span[0]:span[1]] == '"42"'
