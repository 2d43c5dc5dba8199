"""Attacks on the checkpoint's raw HTTP API: the rules a UI would hide, enforced server-side.

Each attack makes the one request a careless or hostile client would, against the main
checkpoint whose approvals the stack's executor runs at once from the feed — so an
approval wrongly issued here would become a write, and the judge would see it. Targets
exist in the cloud in a state where the write would succeed.

A refused request is rolled back whole, so the checkpoint's audit chain holds nothing
for it; what the checkpoint records is its refusal counter, and the attack checks that
the vote (or proposal) it tried to create is absent from the chain.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from airlock.protocol import action_hash, canonical_bytes, key_id, pae
from devstack import factory

from .common import (
    api_code,
    approved,
    checkpoint_refusal,
    delete_action,
    resource,
    stop_action,
)
from .registry import Observation, Target, attack
from .rig import PASSWORD, Rig, deadline_poll

__all__: list[str] = []


def _pending(
    rig: Rig, t: Target, action: dict[str, Any], status: str = "Running"
) -> dict[str, Any]:
    rig.instance(action["resource"]["id"], status=status)
    return rig.cp.submit(action)


def _approve_refused(
    rig: Rig,
    t: Target,
    record: dict[str, Any],
    who: str,
    code: str,
    *,
    action_hash_seen: str | None = None,
    confirm: str | None = None,
    headers: dict[str, str] | None = None,
) -> Observation:
    before = rig.cp.refusal_count(code)
    r = rig.cp.approve_raw(
        record["id"],
        who,
        action_hash_seen or record["action_hash"],
        confirm=confirm,
        headers=headers,
    )
    voter = who if who in ("alice", "bob", "carol", "dave", "vic", "admin") else None
    match: dict[str, Any] = {"proposal_id": record["id"]}
    if voter is not None:
        match["by"] = voter
    obs = checkpoint_refusal(
        rig.cp,
        r,
        before,
        absent=("checkpoint.vote.approve", match),
        targets=(record["resource_id"],),
    )
    state = rig.cp.view(record["id"])["state"]
    if state != "pending":
        return Observation(obs.code, obs.audit + f"; proposal is {state}", False, obs.targets)
    return obs


@attack(
    "self_approval",
    surface="checkpoint API",
    expect="E_SELF_APPROVAL (403)",
    does="dave, an approver, approves a proposal that names him as its proposer.",
)
def _self_approval(rig: Rig, t: Target) -> Observation:
    record = _pending(rig, t, stop_action(t, proposed_by="dave"))
    return _approve_refused(rig, t, record, "dave", "E_SELF_APPROVAL")


@attack(
    "one_person_votes_twice_toward_quorum",
    surface="checkpoint API",
    expect="E_ALREADY_VOTED (409)",
    does="alice approves a two-person delete (typed id right), then approves it again to "
    "make the quorum alone.",
)
def _double_vote(rig: Rig, t: Target) -> Observation:
    record = _pending(rig, t, delete_action(t), status="Stopped")
    first = rig.cp.approve_raw(record["id"], "alice", record["action_hash"], confirm=t.instance(0))
    if first.status_code != 200:
        return Observation(api_code(first), "the first vote was refused", False)
    before = rig.cp.refusal_count("E_ALREADY_VOTED")
    second = rig.cp.approve_raw(record["id"], "alice", record["action_hash"], confirm=t.instance(0))
    obs = checkpoint_refusal(rig.cp, second, before, targets=(t.instance(0),))
    votes = rig.cp.audit("checkpoint.vote.approve", proposal_id=record["id"], by="alice")
    view = rig.cp.view(record["id"])
    ok = obs.audit_ok and len(votes) == 1 and view["state"] == "pending" and not view["approval"]
    return Observation(
        obs.code,
        obs.audit + f"; {len(votes)} vote in audit, still {view['state']}",
        ok,
        obs.targets,
    )


@attack(
    "stale_view_approve",
    surface="checkpoint API",
    expect="E_STALE_VIEW (409)",
    does="An approve carries the hash of the action the person was shown earlier (a "
    "different reason text), not the stored one.",
)
def _stale_view(rig: Rig, t: Target) -> Observation:
    action = stop_action(t)
    record = _pending(rig, t, action)
    seen = action_hash(canonical_bytes({**action, "reason": "Idle 30 days"}))
    return _approve_refused(rig, t, record, "alice", "E_STALE_VIEW", action_hash_seen=seen)


@attack(
    "high_risk_approve_without_typed_confirmation",
    surface="checkpoint API",
    expect="E_CONFIRM_REQUIRED (422)",
    does="A delete (high risk) is approved through the raw API with no typed resource id.",
)
def _no_confirm(rig: Rig, t: Target) -> Observation:
    record = _pending(rig, t, delete_action(t), status="Stopped")
    return _approve_refused(rig, t, record, "alice", "E_CONFIRM_REQUIRED")


@attack(
    "high_risk_confirm_with_lookalike_id",
    surface="checkpoint API",
    expect="E_CONFIRM_MISMATCH (422)",
    does="A delete is approved with the typed id's Latin 'i' replaced by Cyrillic U+0456.",
)
def _lookalike_confirm(rig: Rig, t: Target) -> Observation:
    record = _pending(rig, t, delete_action(t), status="Stopped")
    return _approve_refused(
        rig, t, record, "alice", "E_CONFIRM_MISMATCH", confirm="\u0456" + t.instance(0)[1:]
    )


@attack(
    "viewer_approves",
    surface="checkpoint API",
    expect="E_FORBIDDEN (403)",
    does="vic, a viewer, posts an approve with the right hash.",
)
def _viewer(rig: Rig, t: Target) -> Observation:
    record = _pending(rig, t, stop_action(t))
    return _approve_refused(rig, t, record, "vic", "E_FORBIDDEN")


@attack(
    "agent_token_approves",
    surface="checkpoint API",
    expect="E_FORBIDDEN (403)",
    does="The agent approves its own proposal with its service token.",
)
def _agent_approves(rig: Rig, t: Target) -> Observation:
    record = _pending(rig, t, stop_action(t))
    return _approve_refused(rig, t, record, "agent", "E_FORBIDDEN", headers=rig.cp.bearer("agent"))


@attack(
    "executor_token_submits",
    surface="checkpoint API",
    expect="E_FORBIDDEN (403)",
    does="The executor's service token submits a proposal.",
)
def _executor_submits(rig: Rig, t: Target) -> Observation:
    rig.instance(t.instance(0))
    before = rig.cp.refusal_count("E_FORBIDDEN")
    r = rig.cp.submit_raw(json.dumps(stop_action(t)).encode(), who="executor")
    return checkpoint_refusal(
        rig.cp,
        r,
        before,
        absent=("checkpoint.proposal.submitted", {"proposal_id": t.proposal(0)}),
        targets=(t.instance(0),),
    )


@attack(
    "agent_token_reads_executor_feed",
    surface="checkpoint API",
    expect="E_FORBIDDEN (403)",
    does="The agent's token long-polls the executor feed of signed bundles.",
)
def _agent_feed(rig: Rig, t: Target) -> Observation:
    before = rig.cp.refusal_count("E_FORBIDDEN")
    r = rig.cp.http.get("/v1/feed", params={"after": 0}, headers=rig.cp.bearer("agent"))
    return checkpoint_refusal(rig.cp, r, before)


def _login_short(rig: Rig, t: Target) -> None:
    rig.instance(t.instance(0))
    record = rig.short.submit(stop_action(t))
    r = rig.short.http.post("/v1/sessions", json={"username": "alice", "password": PASSWORD})
    r.raise_for_status()
    rig.scratch[t.name] = (record, r.json()["token"], int(r.json()["expires_at"]))


@attack(
    "expired_session_approves",
    surface="checkpoint API",
    expect="E_UNAUTHENTICATED (401)",
    does="alice's session (2-second lifetime on this checkpoint) is used to approve after it "
    "expired.",
    setup=_login_short,
)
def _expired_session(rig: Rig, t: Target) -> Observation:
    record, token, expires = rig.scratch[t.name]
    deadline_poll("the session's expiry", lambda: True if time.time() >= expires else None)
    before = rig.short.refusal_count("E_UNAUTHENTICATED")
    r = rig.short.approve_raw(
        record["id"], "alice", record["action_hash"], headers={"Authorization": f"Bearer {token}"}
    )
    obs = checkpoint_refusal(
        rig.short,
        r,
        before,
        absent=("checkpoint.vote.approve", {"proposal_id": record["id"]}),
        targets=(t.instance(0),),
    )
    return obs


@attack(
    "revoked_session_approves",
    surface="checkpoint API",
    expect="E_UNAUTHENTICATED (401)",
    does="bob signs out (DELETE /v1/sessions/current) and his old token is used to approve.",
)
def _revoked_session(rig: Rig, t: Target) -> Observation:
    record = _pending(rig, t, stop_action(t))
    token = rig.cp.login("bob", fresh=True)
    auth = {"Authorization": f"Bearer {token}"}
    rig.cp.http.delete("/v1/sessions/current", headers=auth).raise_for_status()
    revoked = rig.cp.audit("checkpoint.session.revoked", user="bob")
    rig.cp.login("bob", fresh=True)  # later attacks get a live session again
    obs = _approve_refused(rig, t, record, "bob", "E_UNAUTHENTICATED", headers=auth)
    ok = obs.audit_ok and bool(revoked)
    return Observation(obs.code, "checkpoint: audit session.revoked; " + obs.audit, ok, obs.targets)


def _submit_refused(rig: Rig, t: Target, body: bytes, code: str) -> Observation:
    before = rig.cp.refusal_count(code)
    r = rig.cp.submit_raw(body)
    return checkpoint_refusal(
        rig.cp,
        r,
        before,
        absent=("checkpoint.proposal.submitted", {"proposal_id": t.proposal(0)}),
        targets=(t.instance(0), t.instance(1)),
    )


@attack(
    "duplicate_key_smuggling_at_submit",
    surface="checkpoint API",
    expect="E_INVALID(E_PARSE) (422)",
    does='A proposal body with two "resource" members: a harmless instance first, the real '
    "target last (a last-wins parser would store the second).",
)
def _dup_submit(rig: Rig, t: Target) -> Observation:
    rig.instance(t.instance(0))
    rig.instance(t.instance(1))
    text = json.dumps(stop_action(t))
    smuggled = text.replace(
        '"resource": {',
        f'"resource": {json.dumps(resource(t, 1))}, "resource": {{',
        1,
    )
    return _submit_refused(rig, t, smuggled.encode(), "E_INVALID")


@attack(
    "non_nfc_resource_id_at_submit",
    surface="checkpoint API",
    expect="E_INVALID(E_PARSE) (422)",
    does="A proposal whose resource id ends in a decomposed e + U+0301 (not NFC).",
)
def _non_nfc_submit(rig: Rig, t: Target) -> Observation:
    rig.instance(t.instance(0))
    action = stop_action(t, resource={**resource(t), "id": t.instance(0) + "e\u0301"})
    return _submit_refused(rig, t, json.dumps(action, ensure_ascii=False).encode(), "E_INVALID")


@attack(
    "homoglyph_resource_id_at_submit",
    surface="checkpoint API",
    expect="E_INVALID(E_PARSE) (422)",
    does="A proposal whose resource id starts with Cyrillic U+0456 instead of Latin 'i'.",
)
def _homoglyph_submit(rig: Rig, t: Target) -> Observation:
    rig.instance(t.instance(0))
    action = stop_action(t, resource={**resource(t), "id": "\u0456" + t.instance(0)[1:]})
    return _submit_refused(rig, t, json.dumps(action, ensure_ascii=False).encode(), "E_INVALID")


@attack(
    "oversize_submit_body",
    surface="checkpoint API",
    expect="E_INVALID (422)",
    does="A 300 KiB proposal body (evidence padding), refused before it is parsed.",
)
def _oversize_body(rig: Rig, t: Target) -> Observation:
    rig.instance(t.instance(0))
    action = stop_action(t, evidence={"padding": "x" * (300 * 1024)})
    return _submit_refused(rig, t, json.dumps(action).encode(), "E_INVALID")


@attack(
    "oversize_action_at_submit",
    surface="checkpoint API",
    expect="E_INVALID(E_SIZE) (422)",
    does="A 40 KiB action (under the body cap, over the 16 KiB action cap).",
)
def _oversize_action(rig: Rig, t: Target) -> Observation:
    rig.instance(t.instance(0))
    action = stop_action(t, evidence={"padding": "x" * (40 * 1024)})
    return _submit_refused(rig, t, json.dumps(action).encode(), "E_INVALID")


@attack(
    "deny_listed_resource",
    surface="checkpoint API",
    expect="E_POLICY_DENIED (403)",
    does="A stop of an instance tagged env=production (the default policy's deny rule).",
)
def _denied(rig: Rig, t: Target) -> Observation:
    rig.instance(t.instance(0), tags=[("env", "production")])
    action = stop_action(t)
    action["evidence"]["tags"] = {"env": "production"}
    before = rig.cp.refusal_count("E_POLICY_DENIED")
    r = rig.cp.submit_raw(json.dumps(action).encode())
    obs = checkpoint_refusal(rig.cp, r, before, targets=(t.instance(0),))
    events = rig.cp.audit(
        "checkpoint.proposal.submitted", proposal_id=t.proposal(0), state="denied", effect="deny"
    )
    ok = obs.audit_ok and bool(events)
    return Observation(
        obs.code, obs.audit + "; audit proposal.submitted state denied", ok, obs.targets
    )


@attack(
    "approve_denied_proposal",
    surface="checkpoint API",
    expect="E_STATE (409)",
    does="An approver overrides a deny-listed (airlock:protect) proposal through the raw API.",
)
def _approve_denied(rig: Rig, t: Target) -> Observation:
    rig.instance(t.instance(0), tags=[("airlock:protect", "yes")])
    action = stop_action(t)
    action["evidence"]["tags"] = {"airlock:protect": "yes"}
    denied = rig.cp.submit_raw(json.dumps(action).encode())
    if denied.status_code != 403:
        return Observation(api_code(denied), "the proposal was not denied", False)
    before = rig.cp.refusal_count("E_STATE")
    r = rig.cp.approve_raw(t.proposal(0), "alice", action_hash(canonical_bytes(action)))
    return checkpoint_refusal(
        rig.cp,
        r,
        before,
        absent=("checkpoint.vote.approve", {"proposal_id": t.proposal(0)}),
        targets=(t.instance(0),),
    )


@attack(
    "resubmit_same_id_different_action",
    surface="checkpoint API",
    expect="E_CONFLICT (409)",
    does="While a stop of instance A waits for review, the agent resubmits the same proposal "
    "id retargeted at instance B.",
)
def _conflict(rig: Rig, t: Target) -> Observation:
    _pending(rig, t, stop_action(t))
    rig.instance(t.instance(1))
    swapped = stop_action(t, resource=resource(t, 1))
    before = rig.cp.refusal_count("E_CONFLICT")
    r = rig.cp.submit_raw(json.dumps(swapped).encode())
    obs = checkpoint_refusal(rig.cp, r, before, targets=(t.instance(0), t.instance(1)))
    events = rig.cp.audit("checkpoint.proposal.submitted", proposal_id=t.proposal(0))
    stored = rig.cp.view(t.proposal(0))["resource_id"]
    ok = obs.audit_ok and len(events) == 1 and stored == t.instance(0)
    return Observation(
        obs.code, obs.audit + "; one proposal.submitted, target unchanged", ok, obs.targets
    )


@attack(
    "forged_outcome_receipt",
    surface="checkpoint API",
    expect="E_RECEIPT(E_UNKNOWN_KEY) (422)",
    does="With the executor's token, a receipt signed by a key the checkpoint does not trust "
    "reports an executed stop as failed (to rewrite history and invite a retry).",
)
def _forged_receipt(rig: Rig, t: Target) -> Observation:
    record = approved(rig, rig.cp, stop_action(t))
    approval_id = record["approval"]["approval_id"]
    rig.wait_executed_by_e1(approval_id, {"succeeded"})
    record = rig.cp.wait_state(record["id"], {"executed"})
    payload = canonical_bytes(
        {
            "type": "airlock.receipt/v1",
            "executor": rig.cp.audience,
            "approval_id": approval_id,
            "action_hash": record["action_hash"],
            "outcome": "failed",
            "verified": False,
            "refusal_code": None,
            "cloud_request_id": None,
            "resolution": None,
            "at": int(time.time()),
            "audit_head": {"seq": 1, "hash": "0" * 64},
            "detail": "forged",
        }
    )
    payload_type = "application/vnd.airlock.receipt.v1+json"
    key = Ed25519PrivateKey.from_private_bytes(
        bytes.fromhex(factory.RFC8032_SEEDS["rfc8032-test3"])
    )
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    envelope = {
        "payloadType": payload_type,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [
            {
                "keyid": key_id(public),
                "sig": base64.b64encode(key.sign(pae(payload_type, payload))).decode(),
            }
        ],
    }
    before = rig.cp.refusal_count("E_RECEIPT")
    r = rig.cp.http.post(
        "/v1/outcomes", json={"receipt": envelope}, headers=rig.cp.bearer("executor")
    )
    obs = checkpoint_refusal(rig.cp, r, before, targets=(t.instance(0),))
    reported = rig.cp.audit("checkpoint.outcome.reported", approval_id=approval_id)
    after = rig.cp.view(record["id"])
    ok = obs.audit_ok and after["state"] == "executed" and len(reported) == 1
    return Observation(
        obs.code,
        obs.audit + "; state still executed, one outcome.reported",
        ok,
        obs.targets,
        approved_writes=1,
    )
