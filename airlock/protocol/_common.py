"""Field types shared by the action and the approval statement. Not public."""

from __future__ import annotations

import datetime as _dt
import hashlib
import unicodedata
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo

from ._json import MAX_SAFE_INTEGER, PARSED_STRICTLY, check_no_floats

__all__ = [
    "DEFAULT_MAX_TTL",
    "DEFAULT_SKEW",
    "ID",
    "AccountId",
    "Hash",
    "RegionId",
    "Rfc3339Utc",
    "Text",
    "UnixTime",
    "WireModel",
    "sha256_tag",
]


#: Default longest approval lifetime an executor or gate accepts (the default execution
#: window), seconds.
DEFAULT_MAX_TTL: Final = 15 * 60
#: Default tolerated clock skew between the checkpoint and an executor or gate, seconds.
DEFAULT_SKEW: Final = 30


def _prechecked(info: ValidationInfo) -> bool:
    return info.context is PARSED_STRICTLY


def _nfc(text: str, info: ValidationInfo) -> str:
    # docs/protocol.md#strict-json: a non-NFC string is refused, never silently rewritten.
    if not _prechecked(info) and not unicodedata.is_normalized("NFC", text):
        raise ValueError("string is not NFC-normalised")
    return text


def _rfc3339_utc(text: str) -> str:
    # The field pattern fixed the shape (YYYY-MM-DDTHH:MM:SSZ, ASCII digits); this checks
    # the calendar date (leap years included) and hour < 24, minute and second < 60 (no
    # leap second). Two-digit fields compare as text. Not datetime.fromisoformat: from
    # Python 3.14 it reads T24:00:00 as the next midnight.
    try:
        _dt.date.fromisoformat(text[:10])
    except ValueError:
        raise ValueError("not an RFC 3339 UTC time of the form YYYY-MM-DDTHH:MM:SSZ") from None
    if text[11:13] > "23" or text[14:16] > "59" or text[17:19] > "59":
        raise ValueError("not an RFC 3339 UTC time of the form YYYY-MM-DDTHH:MM:SSZ")
    return text


def _json_value(value: Any, info: ValidationInfo) -> Any:
    if not _prechecked(info):
        check_no_floats(value)
    return value


#: Free text: NFC only.
Text = Annotated[str, AfterValidator(_nfc)]
#: Identifiers are printable ASCII only, so a homoglyph can never pass for a real id.
ID = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$")]
AccountId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")]
RegionId = Annotated[str, Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+){0,5}$", max_length=40)]
Hash = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
Rfc3339Utc = Annotated[
    str,
    Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$"),
    AfterValidator(_rfc3339_utc),
]
UnixTime = Annotated[int, Field(ge=0, le=MAX_SAFE_INTEGER)]
#: Any float-free JSON value (evidence is open-ended but still signed).
JsonValue = Annotated[Any, AfterValidator(_json_value)]


class WireModel(BaseModel):
    """Base of every signed wire record: frozen, strict, unknown fields refused."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        revalidate_instances="always",
        validate_default=True,
    )


def sha256_tag(data: bytes) -> str:
    """``"sha256:" + hex(SHA-256(data))``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()
