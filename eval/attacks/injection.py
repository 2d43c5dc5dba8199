"""SQL-injection strings in every free-text field: nothing breaks, everything is verbatim.

These are not refusals: a careful system stores hostile text as data. Each attack puts
the same payload in one field, checks the answer is not a 5xx, reads the stored value
back byte for byte (record and audit event), and checks the audit chain still verifies.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from .common import api_code, checkpoint_refusal, delete_action, stop_action
from .registry import Observation, Target, attack
from .rig import Rig

__all__ = ["SQLI"]

#: Quotes, comment starts, a stacked statement and a UNION, in one string.
SQLI = "x'); DROP TABLE proposals; -- \" OR 1=1 /* ') UNION SELECT token_hash FROM sessions --"


def _verbatim(rig: Rig, response: httpx.Response, ok: bool, what: str) -> Observation:
    status = response.status_code
    chain = rig.cp.http.get("/v1/audit", headers=rig.cp.bearer("admin")).json()
    code = f"STORED_VERBATIM ({status})" if ok and status < 500 else api_code(response)
    audit_ok = ok and bool(chain.get("ok"))
    audit = (
        f"{what} verbatim; checkpoint chain verifies"
        if audit_ok
        else f"{what} ALTERED or chain broken"
    )
    return Observation(code, audit, audit_ok)


@attack(
    "sqli_in_submit_text_fields",
    surface="checkpoint API",
    expect="STORED_VERBATIM (201)",
    does="A proposal with the payload as its reason, an evidence note, and an evidence tag "
    "key and value.",
)
def _submit(rig: Rig, t: Target) -> Observation:
    rig.instance(t.instance(0))
    action = stop_action(t, reason=SQLI)
    action["evidence"]["note"] = SQLI
    action["evidence"]["tags"] = {"owner": SQLI, SQLI: "team"}
    r = rig.cp.submit_raw(json.dumps(action).encode())
    stored: dict[str, Any] = rig.cp.view(t.proposal(0))["action"] if r.status_code == 201 else {}
    ok = (
        stored.get("reason") == SQLI
        and stored.get("evidence", {}).get("note") == SQLI
        and stored.get("evidence", {}).get("tags") == {"owner": SQLI, SQLI: "team"}
    )
    obs = _verbatim(rig, r, ok, "reason, evidence note and tags")
    return Observation(obs.code, obs.audit, obs.audit_ok, (t.instance(0),))


@attack(
    "sqli_in_approve_note",
    surface="checkpoint API",
    expect="STORED_VERBATIM (200)",
    does="The first vote on a two-person delete carries the payload as its note.",
)
def _approve_note(rig: Rig, t: Target) -> Observation:
    rig.instance(t.instance(0), status="Stopped")
    record = rig.cp.submit(delete_action(t))
    r = rig.cp.approve_raw(
        record["id"], "alice", record["action_hash"], confirm=t.instance(0), note=SQLI
    )
    votes = rig.cp.view(record["id"])["votes"]
    events = rig.cp.audit("checkpoint.vote.approve", proposal_id=record["id"], note=SQLI)
    ok = r.status_code == 200 and [v["note"] for v in votes] == [SQLI] and bool(events)
    obs = _verbatim(rig, r, ok, "vote note (record and audit)")
    return Observation(obs.code, obs.audit, obs.audit_ok, (t.instance(0),))


@attack(
    "sqli_in_reject_note",
    surface="checkpoint API",
    expect="STORED_VERBATIM (200)",
    does="A rejection (reason code other) carries the payload as its note.",
)
def _reject_note(rig: Rig, t: Target) -> Observation:
    rig.instance(t.instance(0))
    record = rig.cp.submit(stop_action(t))
    r = rig.cp.http.post(
        f"/v1/proposals/{record['id']}/reject",
        json={"reason_code": "other", "note": SQLI},
        headers=rig.cp.bearer("alice"),
    )
    rejection = rig.cp.view(record["id"])["rejection"] or {}
    events = rig.cp.audit("checkpoint.proposal.rejected", proposal_id=record["id"], note=SQLI)
    ok = r.status_code == 200 and rejection.get("note") == SQLI and bool(events)
    obs = _verbatim(rig, r, ok, "rejection note (record and audit)")
    return Observation(obs.code, obs.audit, obs.audit_ok, (t.instance(0),))


@attack(
    "sqli_in_login_username",
    surface="checkpoint API",
    expect="E_UNAUTHENTICATED (401)",
    does="POST /v1/sessions with username admin' OR '1'='1' -- and an injection password.",
)
def _login(rig: Rig, t: Target) -> Observation:
    before = rig.cp.refusal_count("E_UNAUTHENTICATED")
    r = rig.cp.http.post(
        "/v1/sessions", json={"username": "admin' OR '1'='1' --", "password": SQLI}
    )
    obs = checkpoint_refusal(
        rig.cp, r, before, absent=("checkpoint.session.created", {"user": "admin' OR '1'='1' --"})
    )
    return obs
