"""devcloud reads a request's headers, path, date and request id as the slower reading did.

The RPC route reads the headers once (``header_lists``) instead of through Starlette's
``Headers`` per name, the path without building the URL, ``x-acs-date`` without strptime
when its fields are zero-padded, and makes its RequestId without a ``uuid.UUID``. These
tests hold each to the reading it replaces, so the fast one can neither accept a request
the old one refused nor read it differently.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.datastructures import URL, Headers

from devstack.devcloud import DevcloudHandle
from services.devcloud.actions import _signed_at, _url_path, first_header, header_lists
from services.devcloud.app import _request_id
from services.devcloud.errors import AcsError


def _strptime_only(date: str) -> float | None:
    """What devcloud read before it had a fast path: the reference (None: refused)."""
    try:
        return datetime.strptime(date, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def _fast(date: str) -> float | None:
    try:
        return _signed_at(date)
    except AcsError as exc:
        assert exc.code == "InvalidTimeStamp.Format"
        return None


def _field(digits: int) -> st.SearchStrategy[str]:
    """A field of about ``digits`` digits: padded, short, long, out of range, not ASCII."""
    return st.one_of(
        st.integers(0, 10**digits - 1).map(lambda n: f"{n:0{digits}d}"),
        st.integers(0, 99).map(str),
        st.text(alphabet="0123456789٣ -+", min_size=0, max_size=digits + 1),
    )


_DATES = st.builds(
    lambda y, mo, d, h, mi, s, sep, z: f"{y}-{mo}-{d}{sep}{h}:{mi}:{s}{z}",
    _field(4),
    _field(2),
    _field(2),
    _field(2),
    _field(2),
    _field(2),
    st.sampled_from(["T", "t", " "]),
    st.sampled_from(["Z", "z", "", "Z\n", "+00:00"]),
)
#: Valid dates of every year, as the SDK writes them (zero-padded).
_VALID = st.datetimes(
    min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)
).map(lambda t: f"{t.year:04d}-{t:%m-%dT%H:%M:%S}Z")


@settings(max_examples=3000, deadline=None)
@given(st.one_of(_VALID, _DATES))
def test_a_date_near_the_sdk_form_reads_as_strptime_reads_it(date: str) -> None:
    assert _fast(date) == _strptime_only(date)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=30))
def test_any_text_reads_as_strptime_reads_it(date: str) -> None:
    assert _fast(date) == _strptime_only(date)


def test_an_impossible_date_is_refused() -> None:
    for date in ("2026-02-29T06:00:00Z", "2026-11-01T24:00:00Z", "2026-11-01T06:00:60Z"):
        assert _fast(date) is None is _strptime_only(date)
    assert _fast("2028-02-29T06:00:00Z") == _strptime_only("2028-02-29T06:00:00Z")


_RAW_HEADERS = st.lists(
    st.tuples(
        st.sampled_from([b"host", b"x-acs-date", b"authorization", b"content-type", b"x-b"]),
        st.binary(max_size=8),
    ),
    max_size=8,
)


@given(_RAW_HEADERS)
def test_headers_read_as_starlette_reads_them(raw: list[tuple[bytes, bytes]]) -> None:
    ours = header_lists(raw)
    theirs = Headers(raw=raw)
    for name in ("host", "x-acs-date", "authorization", "content-type", "x-b", "absent"):
        assert first_header(ours, name) == theirs.get(name, "")
        assert ours.get(name, []) == theirs.getlist(name)


@pytest.mark.parametrize("path", ["/", "/a?b", "/#x", "/a\\b", "//x", "/%3F", "/é"])
def test_the_path_reads_as_the_url_reads_it(path: str) -> None:
    scope = {"type": "http", "path": path, "query_string": b"q=1", "headers": [(b"host", b"h")]}
    assert _url_path(path) == URL(scope=scope).path


def test_a_request_id_is_an_upper_case_version_4_uuid() -> None:
    ids = {_request_id() for _ in range(2000)}
    assert len(ids) == 2000
    for rid in ids:
        parsed = uuid.UUID(rid)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert rid == str(parsed).upper()
        assert re.fullmatch(r"[0-9A-F]{8}(-[0-9A-F]{4}){3}-[0-9A-F]{12}", rid)


@pytest.mark.parametrize("method", ["HEAD", "PUT", "DELETE", "PATCH"])
def test_the_rpc_route_serves_get_and_post_only(devcloud: DevcloudHandle, method: str) -> None:
    answer = httpx.request(method, f"{devcloud.base_url}/?Action=DescribeInstances")
    assert answer.status_code == 405
    assert sorted(answer.headers["allow"].split(", ")) == ["GET", "POST"]
    if method != "HEAD":
        assert answer.json() == {"detail": "Method Not Allowed"}
