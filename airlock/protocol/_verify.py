"""``verify_bundle``: steps 1–12 of docs/protocol.md#executor-checks, in that order, as a pure
function, for a cloud action (a :class:`Binding`) or a tool call (a :class:`ToolBinding`,
docs/protocol.md#tool-call-checks).

The trust decision is a function of bytes, keys, the executor's binding, ``now`` and the
set of revoked approval ids — no network, no database, no clock read. Consuming the
approval (13) and re-reading live state (14) are the executor's job, after this returns.

The action travels as the exact bytes that were hashed: we hash what we received and
parse it only after the hash matched, so nothing is parsed before it is authenticated
and nothing is re-canonicalized.
"""

from __future__ import annotations

import hmac
from collections.abc import Container
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, overload

from ._action import ACTION_MAX_BYTES, ProposedAction, action_hash, parse_plain_action
from ._action import parse_action_value as _parse_action_value
from ._approval import APPROVAL_PAYLOAD_TYPE, ApprovalStatement
from ._b64 import b64decode_strict, b64encode
from ._common import DEFAULT_MAX_TTL, DEFAULT_SKEW
from ._dsse import ENVELOPE_MAX_SIGNATURES, Envelope, Signature, verify_envelope
from ._json import canonical_bytes, loads_strict
from ._keys import KeySet
from ._tool_call import (
    TOOL_CALL_MAX_BYTES,
    TOOL_CALL_TYPE,
    ToolApprovalStatement,
    ToolBinding,
    VerifiedToolCall,
    parse_tool_call_value,
)
from .errors import RefusalCode, Refused

__all__ = [
    "BUNDLE_MAX_BYTES",
    "Binding",
    "ToolBinding",
    "VerifiedApproval",
    "VerifiedToolCall",
    "make_bundle",
    "verify_bundle",
]

#: docs/protocol.md#strict-json: a bundle is at most 64 KiB.
BUNDLE_MAX_BYTES: Final = 64 * 1024


@dataclass(frozen=True, slots=True)
class Binding:
    """Who this executor is: an approval must name exactly this audience and target."""

    audience: str
    provider: str
    account: str
    region: str
    max_ttl: int = DEFAULT_MAX_TTL
    skew: int = DEFAULT_SKEW

    def __post_init__(self) -> None:
        if self.max_ttl <= 0 or self.skew < 0:
            raise ValueError("max_ttl must be positive and skew not negative")


class VerifiedApproval(NamedTuple):
    """An approval that passed steps 1–12. Only :func:`verify_bundle` should build one.

    Immutable; a NamedTuple rather than a frozen dataclass because it is built once per
    verify, on the hot path, and costs a third as much to build.
    """

    statement: ApprovalStatement
    action: ProposedAction
    action_bytes: bytes
    action_hash: str
    keyid: str
    payload: bytes


def _check_audience(
    statement: ApprovalStatement | ToolApprovalStatement, binding: Binding | ToolBinding
) -> None:
    """Step (6): the authenticated statement is addressed to this executor or gate."""
    if statement.audience != binding.audience:
        raise Refused(
            RefusalCode.E_AUDIENCE,
            f"approval is for {statement.audience!r}, this executor is {binding.audience!r}",
            approval_id=statement.approval_id,
            issued_at=statement.issued_at,
        )


def _check_statement(statement: ApprovalStatement, binding: Binding, now: int) -> None:
    """Steps (6)-(8): the authenticated statement is for this executor, here, now."""
    apv = statement.approval_id
    # (6) addressed to this executor
    _check_audience(statement, binding)
    # (7) for this executor's provider, account and region
    if (statement.provider, statement.account, statement.region) != (
        binding.provider,
        binding.account,
        binding.region,
    ):
        raise Refused(
            RefusalCode.E_ACCOUNT,
            f"approval targets {statement.provider}/{statement.account}/{statement.region}",
            approval_id=apv,
            issued_at=statement.issued_at,
        )
    # (8) validity window and lifetime
    _check_window(statement, binding, now)


def _check_window(
    statement: ApprovalStatement | ToolApprovalStatement, binding: Binding | ToolBinding, now: int
) -> None:
    """Step (8): ``not_before - skew <= now < expires_at``, and the lifetime is bounded."""
    apv = statement.approval_id
    if now < statement.not_before - binding.skew:
        raise Refused(
            RefusalCode.E_NOT_YET_VALID,
            f"not valid before {statement.not_before}",
            approval_id=apv,
            issued_at=statement.issued_at,
        )
    if now >= statement.expires_at:
        raise Refused(
            RefusalCode.E_EXPIRED,
            f"expired at {statement.expires_at}",
            approval_id=apv,
            issued_at=statement.issued_at,
        )
    lifetime = statement.expires_at - statement.issued_at
    if not 0 < lifetime <= binding.max_ttl or statement.not_before < statement.issued_at:
        raise Refused(
            RefusalCode.E_TTL,
            f"lifetime {lifetime}s is not within (0, {binding.max_ttl}]",
            approval_id=apv,
            issued_at=statement.issued_at,
        )


# The exact text make_bundle writes for an approval envelope (RFC 8785: keys sorted, no
# whitespace), cut where its strings go. A bundle in this form is split with str.find
# instead of the general parser; any other form takes the general path.
_CANON_HEAD: Final = '{"action":"'
_CANON_ENVELOPE: Final = '","envelope":{"payload":"'
_CANON_TYPE: Final = f'","payloadType":"{APPROVAL_PAYLOAD_TYPE}","signatures":[{{"keyid":"'
_CANON_SIG: Final = '","sig":"'
_CANON_NEXT: Final = '"},{"keyid":"'
_CANON_END: Final = '"}]}}'


def _split_canonical(raw: bytes) -> tuple[Envelope, bytes] | None:
    """Steps (2)-(3) for a bundle exactly as :func:`make_bundle` writes it, else None.

    Returns what the general path would return for the same bytes, or None whenever the
    text is in any other form or anything in it would be refused: the caller then runs
    the general path, which gives the refusal. This is sound because of what the text
    holds when every check below passes: pure ASCII with no backslash, so no escapes and
    no multi-byte text; the fixed key layout of a canonical bundle, so no duplicate,
    missing or extra keys and nesting depth 4; strings that contain no quote, and base64
    or printable key ids, so no control characters; no numbers. The strict parser
    accepts exactly such a text, and to the same strings.
    """
    if type(raw) is not bytes:  # bytearray, memoryview: the general path, as before
        return None
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    if "\\" in text or not text.startswith(_CANON_HEAD):
        return None
    start = len(_CANON_HEAD)
    end = text.find('"', start)
    action_text = text[start:end]
    if end < 0 or not text.startswith(_CANON_ENVELOPE, end):
        return None
    start = end + len(_CANON_ENVELOPE)
    end = text.find('"', start)
    payload_text = text[start:end]
    if end < 0 or not text.startswith(_CANON_TYPE, end):
        return None
    start = end + len(_CANON_TYPE)
    pairs: list[tuple[str, str]] = []
    while True:
        end = text.find('"', start)
        keyid = text[start:end]
        if end < 0 or not text.startswith(_CANON_SIG, end):
            return None
        start = end + len(_CANON_SIG)
        end = text.find('"', start)
        if end < 0:
            return None
        pairs.append((keyid, text[start:end]))
        if end + len(_CANON_END) == len(text) and text.endswith(_CANON_END):
            break
        if len(pairs) == ENVELOPE_MAX_SIGNATURES or not text.startswith(_CANON_NEXT, end):
            return None
        start = end + len(_CANON_NEXT)
    signatures: list[Signature] = []
    try:
        for keyid, sig in pairs:
            if len(keyid) > 128 or not keyid.isprintable():
                return None
            signatures.append(Signature(keyid, b64decode_strict(sig)))
        payload = b64decode_strict(payload_text)
        action_bytes = b64decode_strict(action_text)
    except ValueError:
        return None
    return Envelope(APPROVAL_PAYLOAD_TYPE, payload, tuple(signatures)), action_bytes


def _parse_action_bytes(action_bytes: bytes, statement: ApprovalStatement) -> ProposedAction:
    """Steps (10)-(11) on the strict parse, for any action parse_plain_action declines."""
    action_value = loads_strict(action_bytes, max_bytes=ACTION_MAX_BYTES)
    # (10) the statement and the action agree on what is done, to what, where. Compared on
    # the parsed value (exact str/dict equality) so that (11) below is the one place the
    # action model, and with it the operation allowlist, is checked.
    if not isinstance(action_value, dict) or (
        action_value.get("proposal_id") != statement.proposal_id
        or action_value.get("provider") != statement.provider
        or action_value.get("account") != statement.account
        or action_value.get("region") != statement.region
        or action_value.get("resource")
        != {"type": statement.resource.type, "id": statement.resource.id}
        or action_value.get("operation") != statement.operation
    ):
        raise Refused(RefusalCode.E_MISMATCH, "statement and action name different targets")
    # (11) a valid action whose operation is allowlisted with valid params: E_OPERATION for
    # the operation or params, E_PARSE for any other invalid field
    return _parse_action_value(action_value)


def make_bundle(action_bytes: bytes, envelope: Envelope) -> bytes:
    """The bytes the executor receives: ``{"action": b64(JCS(action)), "envelope": {...}}``."""
    return canonical_bytes({"action": b64encode(action_bytes), "envelope": envelope.to_value()})


def _open(raw: bytes, keys: KeySet, now: int) -> tuple[Envelope, bytes, str]:
    """Steps (1)-(4): the envelope, the action bytes as received, and the signing key id."""
    # (1) size, before anything reads the bytes
    if len(raw) > BUNDLE_MAX_BYTES:
        raise Refused(RefusalCode.E_SIZE, f"bundle is {len(raw)} bytes, cap {BUNDLE_MAX_BYTES}")
    # (2)-(3), for a bundle in the form make_bundle writes: see _split_canonical.
    split = _split_canonical(raw)
    if split is not None:
        envelope, action_bytes = split
    else:
        # (2) strict parse: duplicate keys, NaN, BOM, bad UTF-8, trailing data...
        value: Any = loads_strict(raw, max_bytes=BUNDLE_MAX_BYTES)
        # (3) bundle and envelope shape, exact payload type
        if not isinstance(value, dict) or set(value) != {"action", "envelope"}:
            raise Refused(RefusalCode.E_ENVELOPE, "bundle must have exactly action and envelope")
        envelope = Envelope.from_value(value["envelope"], payload_type=APPROVAL_PAYLOAD_TYPE)
        try:
            action_bytes = b64decode_strict(value["action"])
        except ValueError as exc:
            raise Refused(RefusalCode.E_ENVELOPE, f"action: {exc}") from None
    if len(action_bytes) > ACTION_MAX_BYTES:
        raise Refused(RefusalCode.E_SIZE, f"action is {len(action_bytes)} bytes")
    # (4) a trusted, unrevoked key whose id matches verifies PAE(type, payload as received)
    return envelope, action_bytes, verify_envelope(envelope, keys, now)


def _check_not_after(
    keys: KeySet, keyid: str, statement: ApprovalStatement | ToolApprovalStatement
) -> None:
    """Step (4, again), once the statement is parsed. A retired key's not_after is its
    rotation plus the execution window (and skew): everything it signed while active
    expires by then. An approval that outlives it was signed after the rotation, with a
    key that no longer signs: forged."""
    not_after = keys[keyid].not_after
    if not_after is not None and statement.expires_at > not_after:
        raise Refused(
            RefusalCode.E_KEY_REVOKED,
            f"expires at {statement.expires_at}, after its key's not_after {not_after}",
        )


def _check_revoked(
    statement: ApprovalStatement | ToolApprovalStatement, revoked: Container[str]
) -> None:
    """Step (12): the approval was not revoked."""
    if statement.approval_id in revoked:
        raise Refused(
            RefusalCode.E_REVOKED,
            f"approval {statement.approval_id} was revoked",
            approval_id=statement.approval_id,
            issued_at=statement.issued_at,
        )


@overload
def verify_bundle(
    raw: bytes,
    keys: KeySet,
    binding: Binding,
    now: int,
    revoked: Container[str] = ...,
) -> VerifiedApproval: ...


@overload
def verify_bundle(
    raw: bytes,
    keys: KeySet,
    binding: ToolBinding,
    now: int,
    revoked: Container[str] = ...,
) -> VerifiedToolCall: ...


def verify_bundle(
    raw: bytes,
    keys: KeySet,
    binding: Binding | ToolBinding,
    now: int,
    revoked: Container[str] = frozenset(),
) -> VerifiedApproval | VerifiedToolCall:
    """Verify a bundle, or raise :class:`Refused`: docs/protocol.md#executor-checks, 1–12.

    With a :class:`Binding` (an executor) only a cloud action's approval verifies; with a
    :class:`ToolBinding` (a gate) only a tool call's (docs/protocol.md#tool-call-checks).
    An approval of the other kind is refused at step (5), ``E_STATEMENT``.
    """
    if isinstance(binding, ToolBinding):
        return _verify_tool_call(raw, keys, binding, now, revoked)
    if not isinstance(binding, Binding):
        raise TypeError(f"verify_bundle takes a Binding or a ToolBinding, not {type(binding)}")
    envelope, action_bytes, keyid = _open(raw, keys, now)
    # (5) only now parse the authenticated statement
    statement = ApprovalStatement.from_json_bytes(envelope.payload)
    _check_not_after(keys, keyid, statement)
    # (6)-(8) are properties of the authenticated approval itself: refusals name it.
    _check_statement(statement, binding, now)
    # (9) hash the presented bytes, compare in constant time, only then parse
    presented = action_hash(action_bytes)
    if not hmac.compare_digest(presented, statement.action_hash):  # both ASCII by pattern
        raise Refused(RefusalCode.E_ACTION_HASH, "the action is not the one approved")
    # (10)-(11) in one pass for an action in plain text (see parse_plain_action), else strictly
    action = parse_plain_action(action_bytes)
    if action is not None:
        # (11) held already: only a valid action comes back. (10) on its fields, which are
        # exactly the parsed value's (unknown fields are refused).
        if (
            action.proposal_id != statement.proposal_id
            or action.provider != statement.provider
            or action.account != statement.account
            or action.region != statement.region
            or action.resource.type != statement.resource.type
            or action.resource.id != statement.resource.id
            or action.operation != statement.operation
        ):
            raise Refused(RefusalCode.E_MISMATCH, "statement and action name different targets")
    else:
        action = _parse_action_bytes(action_bytes, statement)
    # (12) not revoked
    _check_revoked(statement, revoked)
    return VerifiedApproval(
        statement=statement,
        action=action,
        action_bytes=action_bytes,
        action_hash=presented,
        keyid=keyid,
        payload=envelope.payload,
    )


def _verify_tool_call(
    raw: bytes,
    keys: KeySet,
    binding: ToolBinding,
    now: int,
    revoked: Container[str],
) -> VerifiedToolCall:
    """Steps 1–12 for a tool call: docs/protocol.md#tool-call-checks."""
    envelope, action_bytes, keyid = _open(raw, keys, now)
    # (5) only now parse the authenticated statement: a tool call's, or E_STATEMENT
    statement = ToolApprovalStatement.from_json_bytes(envelope.payload)
    _check_not_after(keys, keyid, statement)
    # (6) addressed to this gate; (7) a tool call has no provider, account or region: the
    # audience is the whole binding; (8) validity window and lifetime
    _check_audience(statement, binding)
    _check_window(statement, binding, now)
    # (9) hash the presented bytes, compare in constant time, only then parse
    presented = action_hash(action_bytes)
    if not hmac.compare_digest(presented, statement.action_hash):  # both ASCII by pattern
        raise Refused(RefusalCode.E_ACTION_HASH, "the action is not the one approved")
    action_value = loads_strict(action_bytes, max_bytes=TOOL_CALL_MAX_BYTES)
    # (10) the statement and the tool call agree on the kind, the proposal, the tool, its
    # target, its effect and the audience, compared on the parsed value so that (11) is
    # the one place the model is checked
    if not isinstance(action_value, dict) or (
        action_value.get("type") != TOOL_CALL_TYPE
        or action_value.get("proposal_id") != statement.proposal_id
        or action_value.get("tool") != statement.tool
        or action_value.get("target") != statement.target
        or action_value.get("effect_key") != statement.effect_key
        or action_value.get("audience") != statement.audience
    ):
        raise Refused(RefusalCode.E_MISMATCH, "statement and tool call name different targets")
    # (11) a valid tool call: E_OPERATION for the tool or its arguments, E_PARSE otherwise
    action = parse_tool_call_value(action_value)
    # (12) not revoked
    _check_revoked(statement, revoked)
    return VerifiedToolCall(
        statement=statement,
        action=action,
        action_bytes=action_bytes,
        action_hash=presented,
        keyid=keyid,
        payload=envelope.payload,
    )
