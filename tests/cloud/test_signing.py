"""devcloud's ACS3 verifier agrees with the SDK's own signer, and nothing else passes."""

from __future__ import annotations

import hashlib
from urllib.parse import parse_qsl, urlencode

import pytest
from alibabacloud_tea_openapi.utils import Utils
from darabonba.request import DaraRequest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.devcloud.errors import AcsError
from services.devcloud.signing import parse_authorization, verify

SECRET = "test-secret-Ω"


def _sdk_signed(query: dict[str, str], body: bytes = b"") -> tuple[dict[str, str], str]:
    """Headers and wire query string exactly as the SDK would send them."""
    request = DaraRequest()
    request.method = "POST"
    request.pathname = "/"
    request.query = dict(query)
    request.headers = {
        "host": "127.0.0.1:8788",
        "x-acs-version": "2014-05-26",
        "x-acs-action": "DescribeInstances",
        "user-agent": "AlibabaCloud (Linux) Python/3.11 TeaDSL/2",
        "x-acs-date": "2026-11-29T06:00:00Z",
        "x-acs-signature-nonce": "nonce-1",
        "accept": "application/json",
        "x-acs-content-sha256": hashlib.sha256(body).hexdigest(),
    }
    payload = hashlib.sha256(body).hexdigest()
    request.headers["Authorization"] = Utils.get_authorization(
        request, "ACS3-HMAC-SHA256", payload, "LTAIkey", SECRET
    )
    return request.headers, urlencode(query)  # darabonba's compose_url uses urlencode


def _verify(
    headers: dict[str, str], wire_query: str, body: bytes = b"", secret: str = SECRET
) -> None:
    lower: dict[str, list[str]] = {}
    for k, v in headers.items():
        lower.setdefault(k.lower(), []).append(v)
    verify(
        method="POST",
        path="/",
        query=parse_qsl(wire_query, keep_blank_values=True),
        headers=lower,
        body=body,
        auth=parse_authorization(headers["Authorization"]),
        secret=secret,
    )


_values = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40
)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[A-Za-z][A-Za-z0-9.]{0,15}", fullmatch=True), _values, max_size=6
    )
)
def test_sdk_signatures_verify(query: dict[str, str]) -> None:
    headers, wire = _sdk_signed(query)
    _verify(headers, wire)


def test_markup_quotes_and_non_ascii_values_verify() -> None:
    headers, wire = _sdk_signed(
        {"InstanceName": '<script>"x"</script> 数据库 café +~*%20', "Tag.1.Key": "a b&c=d"}
    )
    _verify(headers, wire)


def test_wrong_secret_is_signature_mismatch() -> None:
    headers, wire = _sdk_signed({"RegionId": "ap-southeast-1"})
    with pytest.raises(AcsError) as refused:
        _verify(headers, wire, secret=SECRET + "!")
    assert refused.value.code == "SignatureDoesNotMatch"


def test_changed_query_value_is_signature_mismatch() -> None:
    headers, wire = _sdk_signed({"InstanceId": "i-aaaa1111"})
    with pytest.raises(AcsError, match="SignatureDoesNotMatch"):
        _verify(headers, wire.replace("aaaa1111", "bbbb2222"))


def test_added_query_parameter_is_signature_mismatch() -> None:
    headers, wire = _sdk_signed({"InstanceId": "i-aaaa1111"})
    with pytest.raises(AcsError, match="SignatureDoesNotMatch"):
        _verify(headers, wire + "&Force=true")


def test_duplicated_query_parameter_is_refused() -> None:
    headers, wire = _sdk_signed({"InstanceId": "i-aaaa1111"})
    with pytest.raises(AcsError, match="InvalidParameter"):
        _verify(headers, wire + "&InstanceId=i-bbbb2222")


def test_body_not_matching_its_signed_hash_is_refused() -> None:
    headers, wire = _sdk_signed({}, body=b"a=1")
    with pytest.raises(AcsError, match="SignatureDoesNotMatch"):
        _verify(headers, wire, body=b"a=2")


def test_unsigned_action_header_is_refused() -> None:
    headers, wire = _sdk_signed({})
    auth = headers["Authorization"].replace("x-acs-action;", "")
    with pytest.raises(AcsError) as refused:
        _verify({**headers, "Authorization": auth}, wire)
    assert refused.value.code == "IncompleteSignature"


@pytest.mark.parametrize(
    "value",
    [
        "",
        "HMAC-SHA1 Credential=a,SignedHeaders=host,Signature=00",
        "ACS3-HMAC-SHA256 Credential=a,Signature=00",
        "ACS3-HMAC-SHA256 Credential=a,Credential=b,SignedHeaders=host,Signature=00",
        "ACS3-HMAC-SHA256 Credential=a,SignedHeaders=x-acs-date;host,Signature=00",
    ],
)
def test_malformed_authorization_is_refused(value: str) -> None:
    with pytest.raises(AcsError) as refused:
        parse_authorization(value)
    assert refused.value.code == "IncompleteSignature"
