"""ACS3-HMAC-SHA256 request signature verification, as the Alibaba Cloud SDK computes it.

The canonical request mirrors ``alibabacloud_tea_openapi.utils.Utils.get_authorization``
(tea-openapi 0.4.x, the "V3" signature)::

    METHOD \\n URI \\n canonical-query \\n canonical-headers \\n signed-headers \\n
    hex(sha256(body))

canonical-query: keys sorted, each ``key=quote(value, safe="~")`` joined with ``&``;
canonical-headers: each signed header lower-cased, ``name:value.strip()\\n`` in sorted
order; string-to-sign ``ACS3-HMAC-SHA256\\n`` + hex(sha256(canonical request)); the
signature is hex(HMAC-SHA256(secret, string-to-sign)).

This module is pure (bytes in, verdict out). It must never accept a request whose
action, version, host, date, nonce or body hash is left out of the signature, or whose
body does not hash to the signed ``x-acs-content-sha256``.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from .errors import AcsError

__all__ = ["ALGORITHM", "REQUIRED_SIGNED_HEADERS", "SignedRequest", "parse_authorization", "verify"]

ALGORITHM = "ACS3-HMAC-SHA256"
#: Headers that must be covered, or a signature would not bind what the request does.
REQUIRED_SIGNED_HEADERS = frozenset(
    {
        "host",
        "x-acs-action",
        "x-acs-version",
        "x-acs-date",
        "x-acs-signature-nonce",
        "x-acs-content-sha256",
    }
)


@dataclass(frozen=True, slots=True)
class SignedRequest:
    access_key_id: str
    signed_headers: tuple[str, ...]
    signature: str


def parse_authorization(value: str | None) -> SignedRequest:
    if not value:
        raise AcsError("IncompleteSignature", "The request signature is missing.", 400)
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise AcsError(
            "IncompleteSignature", f"Unsupported signature algorithm {algorithm!r}.", 400
        )
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, sep, val = part.strip().partition("=")
        if not sep or key in fields:
            raise AcsError("IncompleteSignature", "The Authorization header is malformed.", 400)
        fields[key] = val
    try:
        credential = fields["Credential"]
        signed = fields["SignedHeaders"]
        signature = fields["Signature"]
    except KeyError:
        raise AcsError(
            "IncompleteSignature", "The Authorization header is malformed.", 400
        ) from None
    names = tuple(signed.split(";")) if signed else ()
    if list(names) != sorted(set(names)) or any(n != n.lower() for n in names):
        raise AcsError("IncompleteSignature", "SignedHeaders must be sorted lower case.", 400)
    return SignedRequest(credential, names, signature)


def _canonical_query(query: Sequence[tuple[str, str]]) -> str:
    return "&".join(f"{k}={quote(v, safe='~', encoding='utf-8')}" for k, v in sorted(query))


def verify(
    *,
    method: str,
    path: str,
    query: Sequence[tuple[str, str]],
    headers: Mapping[str, Sequence[str]],
    body: bytes,
    auth: SignedRequest,
    secret: str,
) -> None:
    """Raise :class:`AcsError` unless ``auth`` is a valid signature of this request.

    ``headers`` maps lower-case names to every value received under that name.
    """
    missing = REQUIRED_SIGNED_HEADERS - set(auth.signed_headers)
    if missing:
        raise AcsError(
            "IncompleteSignature", f"Headers must be signed: {', '.join(sorted(missing))}.", 400
        )
    keys = [k for k, _ in query]
    if len(keys) != len(set(keys)):
        raise AcsError("InvalidParameter", "A query parameter appears more than once.", 400)
    body_hash = hashlib.sha256(body).hexdigest()
    claimed = headers.get("x-acs-content-sha256", ())
    if len(claimed) != 1 or not hmac.compare_digest(claimed[0].strip(), body_hash):
        raise AcsError(
            "SignatureDoesNotMatch", "The body does not match x-acs-content-sha256.", 400
        )
    lines = []
    for name in auth.signed_headers:
        values = headers.get(name)
        if not values:
            raise AcsError("IncompleteSignature", f"Signed header {name} is absent.", 400)
        lines.append(f"{name}:{','.join(sorted(v.strip() for v in values))}\n")
    canonical_request = "\n".join(
        [
            method.upper(),
            path or "/",
            _canonical_query(query),
            "".join(lines),
            ";".join(auth.signed_headers),
            body_hash,
        ]
    )
    string_to_sign = f"{ALGORITHM}\n{hashlib.sha256(canonical_request.encode('utf-8')).hexdigest()}"
    expected = hmac.new(
        secret.encode("utf-8"), string_to_sign.encode("utf-8"), hashlib.sha256
    ).hexdigest()
    if not hmac.compare_digest(expected, auth.signature):
        raise AcsError(
            "SignatureDoesNotMatch",
            "The request signature does not conform to Aliyun standards.",
            400,
        )
