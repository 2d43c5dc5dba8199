"""verify_bundle: named attacks and generated mutations.

Steps 1–12 of docs/protocol.md#executor-checks.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from airlock.protocol import (
    APPROVAL_PAYLOAD_TYPE,
    Binding,
    KeySet,
    KeyStatus,
    RefusalCode,
    Refused,
    TrustedKey,
    canonical_bytes,
    verify_bundle,
)
from devstack import factory
from devstack.factory import BINDING, NOW, bundle_for

OTHER = "rfc8032-test2"


def refusal(raw: bytes, keys: KeySet | None = None, **kw: Any) -> RefusalCode:
    with pytest.raises(Refused) as err:
        verify_bundle(
            raw,
            keys if keys is not None else factory.keyset(),
            kw.pop("binding", BINDING),
            kw.pop("now", NOW),
            **kw,
        )
    return err.value.code


def _swap_action_bytes(bundle: bytes, action: dict[str, Any]) -> bytes:
    value = json.loads(bundle)
    value["action"] = base64.b64encode(canonical_bytes(action)).decode()
    return canonical_bytes(value)


def _edit_envelope(bundle: bytes, edit: Any) -> bytes:
    value = json.loads(bundle)
    edit(value["envelope"])
    return canonical_bytes(value)


def test_honest_bundle_verifies(keys: KeySet) -> None:
    verified = verify_bundle(bundle_for(), keys, BINDING, NOW)
    assert verified.action.resource.id == "i-t4n0example"
    assert verified.statement.action_hash == verified.action_hash
    assert verified.keyid == factory.signer().keyid


# --- the target is changed after approval: the action bytes no longer hash to the signed hash


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("resource", {"type": "ecs.instance", "id": "i-t4n0victim00"}),
        ("region", "us-west-1"),
        ("account", "9999999999999999"),
        ("operation", "delete"),
        ("params", {"stopped_mode": "KeepCharging"}),
    ],
)
def test_swapped_target_after_approval_is_refused(field: str, value: Any) -> None:
    honest = factory.action_value()
    swapped = factory.action_value(**{field: value})
    if field == "operation":
        swapped["params"] = {}
    assert refusal(_swap_action_bytes(bundle_for(honest), swapped)) is RefusalCode.E_ACTION_HASH


def test_approval_for_action_a_presented_with_action_b_is_refused() -> None:
    a = factory.action_value()
    b = factory.action_value(proposal_id="prop_bbbbbbbbbbbbbbbb")
    assert refusal(_swap_action_bytes(bundle_for(a), b)) is RefusalCode.E_ACTION_HASH


# --- the signer signed a statement that disagrees with the action it hashes


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("resource", {"type": "ecs.instance", "id": "i-t4n0victim00"}),
        ("operation", "delete"),
        ("proposal_id", "prop_cccccccccccccccc"),
    ],
)
def test_statement_naming_another_target_than_its_action_is_refused(field: str, value: Any) -> None:
    action = factory.action_value()
    statement = factory.statement_value(action, **{field: value})
    assert refusal(bundle_for(action, statement)) is RefusalCode.E_MISMATCH


def test_swapped_region_is_refused() -> None:
    action = factory.action_value(region="us-west-1")
    assert refusal(bundle_for(action)) is RefusalCode.E_ACCOUNT


def test_swapped_account_is_refused() -> None:
    action = factory.action_value(account="9999999999999999")
    assert refusal(bundle_for(action)) is RefusalCode.E_ACCOUNT


def test_wrong_audience_is_refused() -> None:
    action = factory.action_value()
    staging = factory.statement_value(action, audience="airlock-executor/staging")
    assert refusal(bundle_for(action, staging)) is RefusalCode.E_AUDIENCE


def test_expired_approval_is_refused() -> None:
    assert refusal(bundle_for(), now=1764400900) is RefusalCode.E_EXPIRED
    verify_bundle(bundle_for(), factory.keyset(), BINDING, 1764400899)


def test_not_yet_valid_approval_is_refused() -> None:
    action = factory.action_value()
    future = factory.statement_value(action, not_before=NOW + 120, expires_at=1764400900)
    assert refusal(bundle_for(action, future)) is RefusalCode.E_NOT_YET_VALID
    # within the tolerated skew it is accepted
    near = factory.statement_value(action, not_before=NOW + BINDING.skew)
    verify_bundle(bundle_for(action, near), factory.keyset(), BINDING, NOW)


def test_ttl_over_the_maximum_is_refused() -> None:
    action = factory.action_value()
    long_lived = factory.statement_value(action, expires_at=1764400000 + BINDING.max_ttl + 1)
    assert refusal(bundle_for(action, long_lived)) is RefusalCode.E_TTL


def test_unknown_key_is_refused() -> None:
    assert refusal(bundle_for(key=OTHER)) is RefusalCode.E_UNKNOWN_KEY


def test_revoked_key_is_refused() -> None:
    revoked = KeySet([factory.signer().trusted_key(KeyStatus.REVOKED)])
    assert refusal(bundle_for(), revoked) is RefusalCode.E_KEY_REVOKED


def test_retired_key_still_verifies_approvals_in_flight() -> None:
    retired = KeySet([factory.signer().trusted_key(KeyStatus.RETIRED)])
    verify_bundle(bundle_for(), retired, BINDING, NOW)


def test_a_staged_key_verifies_so_the_rotation_that_activates_it_strands_nothing() -> None:
    # An executor given the key set after `keys stage` still holds the key as "next" when
    # `keys rotate` makes it active: the first approval it signs must verify there.
    staged = KeySet([factory.signer().trusted_key(KeyStatus.NEXT)])
    assert verify_bundle(bundle_for(), staged, BINDING, NOW).keyid == factory.signer().keyid


def test_key_past_not_after_is_refused() -> None:
    raw = factory.signer().public_raw
    expiring = KeySet([TrustedKey.from_raw(raw, KeyStatus.RETIRED, not_after=NOW - 1)])
    assert refusal(bundle_for(), expiring) is RefusalCode.E_KEY_REVOKED


def test_approval_outliving_its_retired_key_is_refused_as_forged_before_not_after() -> None:
    # A retired key's not_after bounds what it signed while active: an approval that
    # expires after it was signed after the rotation (with a stolen retired key).
    raw = factory.signer().public_raw
    statement = factory.statement_value(factory.action_value())
    retired = KeySet(
        [TrustedKey.from_raw(raw, KeyStatus.RETIRED, not_after=statement["expires_at"] - 1)]
    )
    assert refusal(bundle_for(), retired) is RefusalCode.E_KEY_REVOKED
    bounded = KeySet([TrustedKey.from_raw(raw, KeyStatus.RETIRED, statement["expires_at"])])
    verify_bundle(bundle_for(), bounded, BINDING, NOW)  # in flight at the rotation: verifies


def test_signed_by_another_key_under_a_trusted_keyid_is_refused() -> None:
    trusted_kid = factory.signer().keyid

    def relabel(envelope: dict[str, Any]) -> None:
        envelope["signatures"][0]["keyid"] = trusted_kid

    forged = _edit_envelope(bundle_for(key=OTHER), relabel)
    assert refusal(forged) is RefusalCode.E_SIGNATURE


def test_forged_signature_is_refused() -> None:
    def flip(envelope: dict[str, Any]) -> None:
        sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
        sig[0] ^= 1
        envelope["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()

    assert refusal(_edit_envelope(bundle_for(), flip)) is RefusalCode.E_SIGNATURE


def test_truncated_signature_is_refused() -> None:
    def truncate(envelope: dict[str, Any]) -> None:
        sig = base64.b64decode(envelope["signatures"][0]["sig"])
        envelope["signatures"][0]["sig"] = base64.b64encode(sig[:63]).decode()

    assert refusal(_edit_envelope(bundle_for(), truncate)) is RefusalCode.E_SIGNATURE


def test_payload_type_swap_is_refused() -> None:
    def swap(envelope: dict[str, Any]) -> None:
        envelope["payloadType"] = "application/vnd.airlock.receipt.v1+json"

    assert refusal(_edit_envelope(bundle_for(), swap)) is RefusalCode.E_ENVELOPE


def test_signature_over_another_payload_type_is_refused() -> None:
    # A key that signed something else (a receipt, say) under a different payload type
    # cannot have that signature replayed as an approval: PAE binds the type.
    action = factory.action_value()
    statement = factory.statement_value(action)
    from airlock.protocol import ApprovalStatement, make_bundle

    payload = ApprovalStatement.model_validate(statement).canonical_bytes()
    other = factory.signer().sign_payload("application/vnd.airlock.receipt.v1+json", payload)
    from airlock.protocol import Envelope

    relabelled = Envelope(APPROVAL_PAYLOAD_TYPE, other.payload, other.signatures)
    assert refusal(make_bundle(canonical_bytes(action), relabelled)) is RefusalCode.E_SIGNATURE


def test_duplicate_key_smuggling_in_the_bundle_is_refused() -> None:
    honest = bundle_for()
    value = json.loads(honest)
    smuggled = (
        b'{"action":"'
        + base64.b64encode(canonical_bytes(factory.action_value(region="us-west-1")))
        + b'","action":"'
        + value["action"].encode()
        + b'","envelope":'
        + canonical_bytes(value["envelope"])
        + b"}"
    )
    assert refusal(smuggled) is RefusalCode.E_PARSE


def test_duplicate_key_smuggling_in_the_action_is_refused() -> None:
    # {"resource": victim, "resource": approved}: a last-wins parser would see the approved
    # one while another reader sees the victim. The hash covers these exact bytes, so the
    # checkpoint would have had to sign them; even then, the strict parse refuses them.
    action = factory.action_value()
    raw = canonical_bytes(action)
    smuggled = raw.replace(
        b'"resource":', b'"resource":{"id":"i-t4n0victim00","type":"ecs.instance"},"resource":', 1
    )
    statement = factory.statement_value(action)
    from airlock.protocol import action_hash

    statement["action_hash"] = action_hash(smuggled)
    assert refusal(bundle_for(action, statement, action_bytes=smuggled)) is RefusalCode.E_PARSE


def test_duplicate_key_smuggling_in_the_statement_is_refused() -> None:
    action = factory.action_value()
    payload = canonical_bytes(factory.statement_value(action)).replace(
        b'"audience":', b'"audience":"airlock-executor/staging","audience":', 1
    )
    envelope = factory.signer().sign_payload(APPROVAL_PAYLOAD_TYPE, payload)
    from airlock.protocol import make_bundle

    assert refusal(make_bundle(canonical_bytes(action), envelope)) is RefusalCode.E_STATEMENT


def test_nan_is_refused() -> None:
    raw = bundle_for().replace(b'"envelope":{', b'"envelope":{"x":NaN,', 1)
    assert refusal(raw) is RefusalCode.E_PARSE


def test_non_nfc_text_is_refused() -> None:
    action = factory.action_value()
    raw = canonical_bytes(action).replace(b"Idle 14 days", "Idle\u0301 14 days".encode())
    statement = factory.statement_value(action)
    from airlock.protocol import action_hash

    statement["action_hash"] = action_hash(raw)
    assert refusal(bundle_for(action, statement, action_bytes=raw)) is RefusalCode.E_PARSE


def test_oversize_bundle_is_refused() -> None:
    assert refusal(bundle_for() + b" " * (64 * 1024)) is RefusalCode.E_SIZE


def test_oversize_action_is_refused() -> None:
    big = factory.action_value(evidence={"pad": "x" * 17000})
    raw = canonical_bytes(big)
    statement = factory.statement_value(factory.action_value())
    value = json.loads(bundle_for(factory.action_value(), statement))
    value["action"] = base64.b64encode(raw).decode()
    assert refusal(canonical_bytes(value)) is RefusalCode.E_SIZE


def test_trailing_data_is_refused() -> None:
    assert refusal(bundle_for() + b"{}") is RefusalCode.E_PARSE


def test_float_in_params_is_refused() -> None:
    action = factory.action_value()
    raw = canonical_bytes(action).replace(b'"StopCharging"', b"1.5")
    statement = factory.statement_value(action)
    from airlock.protocol import action_hash

    statement["action_hash"] = action_hash(raw)
    assert refusal(bundle_for(action, statement, action_bytes=raw)) is RefusalCode.E_PARSE


def test_revoked_approval_is_refused() -> None:
    assert refusal(bundle_for(), revoked={"apv_8c7e1f0a2b3c4d5e"}) is RefusalCode.E_REVOKED


def test_bundle_shape_is_checked() -> None:
    value = json.loads(bundle_for())
    for broken in (
        {"action": value["action"]},
        {**value, "extra": 1},
        {**value, "action": "not base64!"},
        {**value, "envelope": {**value["envelope"], "signatures": []}},
        {**value, "envelope": {**value["envelope"], "extra": 1}},
    ):
        assert refusal(canonical_bytes(broken)) is RefusalCode.E_ENVELOPE


def test_checks_run_in_the_documented_order() -> None:
    # Wrong audience AND expired AND a swapped action: the earliest step (6) answers.
    action = factory.action_value()
    statement = factory.statement_value(action, audience="airlock-executor/staging")
    raw = _swap_action_bytes(bundle_for(action, statement), factory.action_value(region="x"))
    assert refusal(raw, now=1764400900) is RefusalCode.E_AUDIENCE
    # Unknown key AND everything else wrong: (4) answers before the statement is read.
    assert refusal(raw, KeySet([factory.signer(OTHER).trusted_key()])) is (
        RefusalCode.E_UNKNOWN_KEY
    )


# --- generated mutations -----------------------------------------------------------------


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    else:
        yield path


def _set(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    out = copy.deepcopy(value)
    target = out
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = new
    return out


ACTION_LEAVES = sorted(_leaves(factory.action_value()), key=repr)
STATEMENT_LEAVES = sorted(_leaves(factory.statement_value(factory.action_value())), key=repr)
new_values = st.one_of(
    st.integers(-(2**53) + 1, 2**53 - 1),
    st.text(max_size=12).map(lambda s: __import__("unicodedata").normalize("NFC", s)),
    st.booleans(),
    st.none(),
)


@settings(max_examples=300, deadline=None)
@given(path=st.sampled_from(ACTION_LEAVES), new=new_values)
def test_any_single_field_mutation_of_the_action_is_refused(
    path: tuple[Any, ...], new: Any
) -> None:
    honest = factory.action_value()
    mutated = _set(honest, path, new)
    assume(canonical_bytes(mutated) != canonical_bytes(honest))
    assert refusal(_swap_action_bytes(bundle_for(honest), mutated)) is RefusalCode.E_ACTION_HASH


@settings(max_examples=300, deadline=None)
@given(path=st.sampled_from(STATEMENT_LEAVES), new=new_values)
def test_any_single_field_mutation_of_the_statement_is_refused(
    path: tuple[Any, ...], new: Any
) -> None:
    action = factory.action_value()
    honest = factory.statement_value(action)
    mutated = _set(honest, path, new)
    payload = canonical_bytes(mutated)
    assume(payload != canonical_bytes(honest))

    def replace_payload(envelope: dict[str, Any]) -> None:
        envelope["payload"] = base64.b64encode(payload).decode()

    forged = _edit_envelope(bundle_for(action, honest), replace_payload)
    assert refusal(forged) is RefusalCode.E_SIGNATURE


# Re-signed by the trusted key: each bound field is still caught by its own step.
BOUND_FIELDS: dict[str, tuple[st.SearchStrategy[Any], RefusalCode]] = {
    "audience": (
        st.from_regex(r"airlock-executor/[a-z]{1,12}", fullmatch=True),
        RefusalCode.E_AUDIENCE,
    ),
    "account": (st.from_regex(r"[0-9]{16}", fullmatch=True), RefusalCode.E_ACCOUNT),
    "region": (st.from_regex(r"[a-z]{2}-[a-z]{4,9}-[1-9]", fullmatch=True), RefusalCode.E_ACCOUNT),
    "proposal_id": (st.from_regex(r"prop_[a-z0-9]{16}", fullmatch=True), RefusalCode.E_MISMATCH),
    "resource": (
        st.from_regex(r"i-[a-z0-9]{8,20}", fullmatch=True).map(
            lambda i: {"type": "ecs.instance", "id": i}
        ),
        RefusalCode.E_MISMATCH,
    ),
    "operation": (st.sampled_from(["delete", "start", "reboot"]), RefusalCode.E_MISMATCH),
    "action_hash": (
        st.binary(min_size=32, max_size=32).map(lambda b: "sha256:" + b.hex()),
        RefusalCode.E_ACTION_HASH,
    ),
    "expires_at": (st.integers(1764400001, NOW), RefusalCode.E_EXPIRED),
    "not_before": (st.integers(NOW + BINDING.skew + 1, 1764400899), RefusalCode.E_NOT_YET_VALID),
    "issued_at": (st.integers(0, 1764400900 - BINDING.max_ttl - 1), RefusalCode.E_TTL),
}


@settings(max_examples=200, deadline=None)
@given(data=st.data(), field=st.sampled_from(sorted(BOUND_FIELDS)))
def test_any_resigned_change_to_a_bound_field_is_refused_by_its_step(
    data: st.DataObject, field: str
) -> None:
    strategy, code = BOUND_FIELDS[field]
    action = factory.action_value()
    honest = factory.statement_value(action)
    new = data.draw(strategy)
    assume(new != honest[field])
    statement = factory.statement_value(action, **{field: new})
    assert refusal(bundle_for(action, statement)) is code


def test_binding_refuses_nonsense_limits() -> None:
    with pytest.raises(ValueError, match="max_ttl"):
        Binding("a", "alibaba", "1", "r", max_ttl=0)


@pytest.mark.parametrize(
    ("overrides", "kw", "code"),
    [
        ({"audience": "airlock-executor/staging"}, {}, RefusalCode.E_AUDIENCE),
        ({"account": "9999999999999999"}, {}, RefusalCode.E_ACCOUNT),
        ({}, {"now": 1764400900}, RefusalCode.E_EXPIRED),
        ({"expires_at": 1764400000 + 901}, {}, RefusalCode.E_TTL),
        ({}, {"revoked": {"apv_8c7e1f0a2b3c4d5e"}}, RefusalCode.E_REVOKED),
    ],
)
def test_refusals_of_an_authenticated_approval_name_it(
    overrides: dict[str, Any], kw: dict[str, Any], code: RefusalCode
) -> None:
    action = factory.action_value(**{k: v for k, v in overrides.items() if k == "account"})
    statement = factory.statement_value(action, **overrides)
    with pytest.raises(Refused) as err:
        verify_bundle(
            bundle_for(action, statement),
            factory.keyset(),
            BINDING,
            kw.get("now", NOW),
            kw.get("revoked", frozenset()),
        )
    assert err.value.code is code
    assert err.value.approval_id == "apv_8c7e1f0a2b3c4d5e"


def test_refusals_that_depend_on_unauthenticated_bytes_name_no_approval() -> None:
    # A forged signature, or a swapped action under a genuine envelope: the approval id
    # must not be attributed (the presenter, not the approval, is at fault).
    honest = factory.action_value()
    swapped = _swap_action_bytes(bundle_for(honest), factory.action_value(region="us-west-1"))
    for raw in (swapped, bundle_for(key=OTHER)):
        with pytest.raises(Refused) as err:
            verify_bundle(raw, factory.keyset(), BINDING, NOW)
        assert err.value.approval_id is None
