"""docker top JSON parsing (forensics.parsing.docker_top)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.errors import ParseError
from forensics.parsing.docker_top import TOP_PS_ARGS, parse_top

# as Docker 20.10 returned it for `-o pid,ppid,user,%cpu,rss,etimes,args`
TOP = {"Processes": [["20550", "20530", "root", "0.4", "1380", "2", "sleep 1000"],
                     ["20563", "20550", "root", "20.2", "1580", "2", "sh -c while :; do :; done"]],
       "Titles": ["PID", "PPID", "USER", "%CPU", "RSS", "ELAPSED", "COMMAND"]}


def test_rows_typed() -> None:
    rows = parse_top(TOP)
    assert [r.pid for r in rows] == [20550, 20563]
    assert rows[1].ppid == 20550 and rows[1].cpu_percent == 20.2
    assert rows[0].rss_bytes == 1380 * 1024 and rows[0].elapsed_s == 2
    assert rows[1].args == "sh -c while :; do :; done"


def test_ps_args_have_one_token_columns_before_args() -> None:
    cols = TOP_PS_ARGS.split()[1].split(",")
    assert cols[-1] == "args" and "lstart" not in cols and "pid" in cols


def test_default_docker_top_titles() -> None:
    doc = {"Titles": ["UID", "PID", "PPID", "C", "STIME", "TTY", "TIME", "CMD"],
           "Processes": [["root", "7", "1", "0", "05:31", "?", "00:00:00", "sleep 5"]]}
    (row,) = parse_top(doc)
    assert row.pid == 7 and row.user == "root" and row.args == "sleep 5" and row.rss_bytes is None


def test_no_processes() -> None:
    assert parse_top({"Titles": ["PID"], "Processes": None}) == ()


@pytest.mark.parametrize("doc", [
    [], {"Titles": "PID"}, {"Titles": ["USER"], "Processes": []},
    {"Titles": ["PID"], "Processes": [["x"]]}, {"Titles": ["PID", "RSS"], "Processes": [["1"]]},
    {"Titles": ["PID", "%CPU"], "Processes": [["1", "lots"]]}, {"Titles": ["PID"], "Processes": [[1]]},
    {"Titles": ["PID"], "Processes": {"1": 1}},
])
def test_bad_shapes(doc: Any) -> None:
    with pytest.raises(ParseError):
        parse_top(doc)


cell = st.text(alphabet="0123456789.-abc %", max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["PID", "PPID", "USER", "%CPU", "RSS", "ELAPSED", "COMMAND", "X"]),
                max_size=7),
       st.lists(st.lists(cell, max_size=8), max_size=4))
def test_anything_parses_or_raises_parse_error(titles: list[str], rows: list[list[str]]) -> None:
    try:
        parsed = parse_top({"Titles": titles, "Processes": rows})
    except ParseError:
        return
    assert len(parsed) == len(rows)
