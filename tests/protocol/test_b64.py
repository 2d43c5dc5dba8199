"""Strict base64: one envelope has exactly one encoding."""

from __future__ import annotations

import pytest

from airlock.protocol import b64decode_strict, b64encode


@pytest.mark.parametrize(
    "text",
    ["QR==", "QUJ=", "QUJD\n", "=QUJ", "QQ==QQ==", "QQ", "Q Q==", "QQ===", "Zm9v_mFy", "Zm9v-mFy"],
)
def test_non_canonical_or_malformed_base64_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="base64"):
        b64decode_strict(text)


@pytest.mark.parametrize("data", [b"", b"A", b"AB", b"ABC", bytes(range(256))])
def test_canonical_base64_round_trips(data: bytes) -> None:
    assert b64decode_strict(b64encode(data)) == data


def test_non_text_is_refused() -> None:
    with pytest.raises(ValueError, match="base64"):
        b64decode_strict(b"QQ==")
    with pytest.raises(ValueError, match="base64"):
        b64decode_strict("QQ==\u00e9")
