"""Human formatting of analysis values (forensics/report/formatting.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from forensics.report import formatting as f


class TestFormatting:
    def test_bytes_binary_units(self) -> None:
        assert f.fmt_bytes(66571993088) == "62.0 GiB"
        assert f.fmt_bytes(512) == "512 B"
        assert f.fmt_bytes(1536) == "1.5 KiB"

    def test_unknown_is_a_dash_never_zero(self) -> None:
        for fn in (f.fmt_bytes, f.fmt_pct, f.fmt_ratio, f.fmt_duration, f.fmt_time):
            assert fn(None) == f.UNKNOWN
        assert f.fmt_bytes(True) == f.UNKNOWN
        assert f.fmt_pct(float("nan")) == f.UNKNOWN

    def test_ratio_and_pct(self) -> None:
        assert f.fmt_ratio(0.12) == "12%"
        assert f.fmt_pct(88.04) == "88%"
        assert f.fmt_pct(88.04, 1) == "88.0%"

    def test_duration(self) -> None:
        assert f.fmt_duration(1.24) == "1.2 s"
        assert f.fmt_duration(91) == "1 min 31 s"
        assert f.fmt_duration(3720) == "1 h 02 min"

    def test_time_iso_z_and_offsets(self) -> None:
        assert f.fmt_time("2026-11-29T14:02:10Z") == "2026-11-29 14:02:10 UTC"
        assert f.fmt_time("2026-11-29T15:02:10+01:00") == "2026-11-29 14:02:10 UTC"
        assert f.fmt_time("2026-11-29T14:02:10.250Z") == "2026-11-29 14:02:10.250 UTC"
        assert f.fmt_time_short("2026-11-29T14:02:10Z") == "14:02:10"
        assert f.fmt_time("not a time") == "not a time"

    def test_short_id(self) -> None:
        assert f.short_id("a" * 64) == "a" * 12
        assert f.short_id("") == f.UNKNOWN

    @given(
        st.one_of(
            st.none(), st.booleans(), st.integers(), st.floats(), st.text(), st.lists(st.integers())
        )
    )
    def test_never_raises_on_any_json_value(self, value: object) -> None:
        for fn in (
            f.fmt_bytes,
            f.fmt_pct,
            f.fmt_ratio,
            f.fmt_duration,
            f.fmt_time,
            f.fmt_time_short,
            f.short_id,
        ):
            assert isinstance(fn(value), str)
