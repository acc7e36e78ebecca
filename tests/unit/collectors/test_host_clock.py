"""host/clock.json: adjtimex read with modes = 0 on this machine's real kernel (a read: nothing
changes), and the timesyncd/chrony files where present."""

from __future__ import annotations

import time

from forensics.collectors.host import adjtimex_state, clock_state


def test_adjtimex_reads_the_kernel_state_without_changing_it() -> None:
    first = adjtimex_state()
    assert "error" not in first, first
    assert first["state"] in {"TIME_OK", "TIME_INS", "TIME_DEL", "TIME_OOP", "TIME_WAIT", "TIME_ERROR"}
    assert first["synchronised"] is ("UNSYNC" not in first["status_flags"] and first["state"] != "TIME_ERROR")
    assert first["maxerror_us"] >= first["esterror_us"] >= 0 or not first["synchronised"]
    assert abs(first["read_unix"] - time.time()) < 5
    second = adjtimex_state()
    assert (second["status"], second["freq_ppm"], second["tai_offset_s"]) == (
        first["status"], first["freq_ppm"], first["tai_offset_s"])


def test_clock_state_members() -> None:
    state = clock_state()
    assert set(state) == {"adjtimex", "timesyncd", "chrony"}
    assert isinstance(state["timesyncd"]["synchronized_flag"], bool) and isinstance(state["chrony"]["present"], bool)
