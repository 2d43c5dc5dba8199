"""The reader's times: its fast reading of the two API forms equals strptime's.

``_norm_time`` reads ``YYYY-MM-DDTHH:MMZ`` (ECS) and ``YYYY-MM-DDTHH:MM:SSZ`` (RDS)
without strptime when the fields are zero-padded; every other text, and every invalid
date or time, goes to strptime. These tests hold it to the strptime-only reading on
generated texts near both forms, so the fast path can neither accept a time strptime
refuses nor write one differently.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from airlock.cloud.alibaba._reader import _norm_time


def _strptime_only(value: str | None) -> str:
    """What the reader returned before it had a fast path: the reference."""
    if not value:
        return ""
    for fmt in ("%Y-%m-%dT%H:%MZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            parsed = datetime.strptime(value, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
        return parsed.strftime("%Y-%m-%dT%H:%M:%SZ")
    return ""


def _field(digits: int) -> st.SearchStrategy[str]:
    """A field of about ``digits`` digits: padded, short, long, out of range, not ASCII."""
    return st.one_of(
        st.integers(0, 10**digits - 1).map(lambda n: f"{n:0{digits}d}"),
        st.integers(0, 99).map(str),
        st.text(alphabet="0123456789٣ -+", min_size=0, max_size=digits + 1),
    )


_TIMES = st.builds(
    lambda y, mo, d, h, mi, s, sep, z: f"{y}-{mo}-{d}{sep}{h}:{mi}{s}{z}",
    _field(4),
    _field(2),
    _field(2),
    _field(2),
    _field(2),
    st.one_of(st.just(""), _field(2).map(lambda s: ":" + s)),
    st.sampled_from(["T", "t", " "]),
    st.sampled_from(["Z", "z", "", "Z\n", "+00:00"]),
)


#: Valid times of every year, in both forms, as the API writes them (zero-padded).
_VALID = st.builds(
    lambda t, seconds: f"{t.year:04d}-{t:%m-%dT%H:%M}{f':{t:%S}' if seconds else ''}Z",
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)),
    st.booleans(),
)


@settings(max_examples=3000, deadline=None)
@given(st.one_of(_VALID, _TIMES))
def test_a_time_near_the_api_forms_reads_as_strptime_reads_it(value: str) -> None:
    assert _norm_time(value) == _strptime_only(value)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=30))
def test_any_text_reads_as_strptime_reads_it(value: str) -> None:
    assert _norm_time(value) == _strptime_only(value)


def test_the_api_forms_read_as_one_form() -> None:
    assert _norm_time("2026-11-01T06:00Z") == "2026-11-01T06:00:00Z"
    assert _norm_time("2026-11-01T06:00:07Z") == "2026-11-01T06:00:07Z"
    assert _norm_time(None) == _norm_time("") == ""


def test_an_impossible_date_is_no_time() -> None:
    for value in ("2026-02-29T06:00Z", "2026-11-01T24:00Z", "2026-11-01T06:00:60Z"):
        assert _norm_time(value) == "" == _strptime_only(value)
    assert _norm_time("2028-02-29T06:00Z") == "2028-02-29T06:00:00Z"  # a leap year
