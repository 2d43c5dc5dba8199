"""FakeCheckpoint: an in-memory stand-in for the checkpoint API, as an httpx transport.

Only for the fast web app tests. It answers the routes and shapes the web app reads
(``services/checkpoint/routes.py`` and ``schemas.py``) and applies the approve-time rules
the pages explain (stale view, typed confirmation, self-approval, one vote each,
quorum), so a test can check the page a person sees for each refusal. It signs nothing;
the browser tests run the real checkpoint.
"""

from __future__ import annotations

import copy
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

import httpx

from airlock.protocol import action_hash, b64encode, canonical_bytes

RECEIPT_PAYLOAD_TYPE = "application/vnd.airlock.receipt.v1+json"


def receipt_envelope(approval_id: str, outcome: str, **fields: Any) -> dict[str, Any]:
    """An executor receipt as the checkpoint relays it: a DSSE envelope (signed by no one
    here: the fake says ``receipt_verified`` for it, as the checkpoint would)."""
    payload = {
        "type": "airlock.receipt/v1",
        "executor": "airlock-executor/test",
        "approval_id": approval_id,
        "action_hash": "sha256:" + "cd" * 32,
        "outcome": outcome,
        "verified": False,
        "refusal_code": None,
        "cloud_request_id": None,
        "resolution": None,
        "at": NOW,
        "audit_head": {"seq": 3, "hash": "ef" * 32},
        "detail": "",
        **fields,
    }
    return {
        "payloadType": RECEIPT_PAYLOAD_TYPE,
        "payload": b64encode(canonical_bytes(payload)),
        "signatures": [{"keyid": "ed25519:" + "aa" * 16, "sig": b64encode(b"\x00" * 64)}],
    }


NOW = 1_764_400_000
PASSWORD = "correct horse battery staple"
ROLES = {"alice": "approver", "bob": "approver", "admin": "admin", "viewer": "viewer"}


def action_value(
    *,
    proposal_id: str = "prop_fake000001",
    operation: str = "stop",
    resource_id: str = "i-t4n0example",
    name: str | None = None,
    tags: dict[str, str] | None = None,
    cpu: list[int] | None = None,
    net: list[int] | None = None,
    reason: str = "Idle 14 days: CPU p95 3.40% < 10.00%, network 2.1 MB/day",
) -> dict[str, Any]:
    evidence: dict[str, Any] = {
        "policy": "idle/v1",
        "window_days": 14,
        "samples": 336,
        "cpu_avg_bp": 120,
        "cpu_p95_bp": 340,
        "net_bytes_per_day": 2_100_000,
        "daily_cpu_p95_bp": cpu
        if cpu is not None
        else [310, 322, 340, 298, 301, 333, 340, 329, 317, 305, 300, 311, 338, 326],
        "daily_net_bytes": net if net is not None else [2_100_000] * 14,
        "tags": tags if tags is not None else {"team": "data"},
    }
    if name is not None:
        evidence["name"] = name
    return {
        "type": "airlock.action/v1",
        "proposal_id": proposal_id,
        "provider": "alibaba",
        "account": "5123456789012345",
        "region": "ap-southeast-1",
        "resource": {"type": "ecs.instance", "id": resource_id},
        "operation": operation,
        "params": {"stopped_mode": "StopCharging"} if operation == "stop" else {},
        "precondition": {
            "status": "Running" if operation == "stop" else "Stopped",
            "absent_tags": ["airlock:protect"],
            "observed_at": "2025-11-29T06:00:00Z",
        },
        "evidence": evidence,
        "reason": reason,
        "proposed_by": "agent:scanner-1",
        "created_at": "2025-11-29T06:00:05Z",
    }


@dataclass
class FakeCheckpoint:
    """Proposals and sessions in memory; ``calls`` records every decision request."""

    proposals: dict[str, dict[str, Any]] = field(default_factory=dict)
    sessions: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    audit_ok: bool = True
    list_calls: int = 0
    #: The ``state`` values of each ``GET /v1/proposals``, as sent.
    list_states: list[list[str]] = field(default_factory=list)
    #: Answer lists as a checkpoint older than the repeatable ``state`` does: FastAPI
    #: keeps the last of a scalar query parameter given twice, and ``states`` is absent.
    older: bool = False

    def transport(self) -> httpx.MockTransport:
        # Looked up per request, so a test can swap ``handle`` for a broken one.
        return httpx.MockTransport(lambda request: self.handle(request))  # noqa: PLW0108

    def add(self, action: dict[str, Any], *, state: str = "pending") -> dict[str, Any]:
        jcs = canonical_bytes(action)
        high = action["operation"] == "delete"
        record: dict[str, Any] = {
            "id": action["proposal_id"],
            "state": state,
            "action_hash": action_hash(jcs),
            "action_jcs": jcs.decode(),
            "action": copy.deepcopy(action),
            "provider": action["provider"],
            "account": action["account"],
            "region": action["region"],
            "resource_type": action["resource"]["type"],
            "resource_id": action["resource"]["id"],
            "operation": action["operation"],
            "risk": "high" if high else "medium",
            "proposed_by": action["proposed_by"],
            "submitted_by": "scanner-1",
            "policy": {
                "rule": "delete-two-people" if high else "stop-one-person",
                "effect": "approve",
                "quorum": 2 if high else 1,
                "confirm": high,
                "hash": "sha256:" + "ab" * 32,
            },
            "deny_reason": None,
            "votes": [],
            "votes_needed": 2 if high else 1,
            "approval_deadline": NOW + 24 * 3600,
            "created_at": NOW - 600,
            "updated_at": NOW - 600,
            "approval": None,
            "rejection": None,
            "outcome": None,
        }
        self.proposals[record["id"]] = record
        return record

    def login(self, username: str) -> str:
        token = "als_" + secrets.token_urlsafe(16)
        self.sessions[token] = username
        return token

    # -- the transport ------------------------------------------------------------------

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        body = json.loads(request.content) if request.content else {}
        if request.method == "POST" and path == "/v1/sessions":
            if body.get("username") in ROLES and body.get("password") == PASSWORD:
                token = self.login(body["username"])
                user = body["username"]
                return _ok(
                    {
                        "token": token,
                        "expires_at": NOW + 3600,
                        "username": user,
                        "role": ROLES[user],
                    },
                    201,
                )
            return _refuse(
                "E_UNAUTHENTICATED",
                "wrong username or password, or too many failed sign-ins (the account is "
                "then locked for a while)",
                401,
            )
        if request.method == "GET" and path == "/v1/keys":
            return _ok(
                {
                    "keys": [
                        {"kid": "ed25519:" + "0f" * 16, "public_key": "AAAA", "status": "active"}
                    ]
                }
            )
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        user = self.sessions.get(bearer)
        if user is None:
            return _refuse("E_UNAUTHENTICATED", "missing, unknown or expired token", 401)
        if path == "/v1/me":
            return _ok({"name": user, "kind": "user", "role": ROLES[user]})
        if request.method == "DELETE" and path == "/v1/sessions/current":
            del self.sessions[bearer]  # the checkpoint ends the session presented, no other
            return httpx.Response(204)
        if path == "/v1/audit":
            return _ok(
                {
                    "ok": self.audit_ok,
                    "rows": 12,
                    "head_seq": 11,
                    "head_hash": "ab" * 32,
                    "fault": None if self.audit_ok else "row 7: hash mismatch",
                }
            )
        if path == "/v1/proposals":
            # As the checkpoint: newest first by (created_at, id), ``state`` repeatable (a
            # proposal in any of them) and echoed, one value for each other filter,
            # ``before`` any proposal's id, ``limit`` at most 200 (default 50).
            self.list_calls += 1
            params = request.url.params
            states = params.get_list("state")
            self.list_states.append(states)
            if self.older and states:
                states = states[-1:]
            items = sorted(
                self.proposals.values(), key=lambda p: (p["created_at"], p["id"]), reverse=True
            )
            if states:
                items = [p for p in items if p["state"] in states]
            for key in ("operation", "account", "region"):
                if key in params:
                    items = [p for p in items if p[key] == params[key]]
            if "before" in params:
                anchor = self.proposals.get(params["before"])
                if anchor is None:
                    return _refuse("E_NOT_FOUND", "no proposal", 404)
                cut = (anchor["created_at"], anchor["id"])
                items = [p for p in items if (p["created_at"], p["id"]) < cut]
            limit = int(params.get("limit", 50))
            if not 1 <= limit <= 200:
                return _refuse("E_INVALID", "limit out of range", 422)
            page = items[:limit]
            more = len(items) > limit
            answer: dict[str, Any] = {
                "items": page,
                "next_before": page[-1]["id"] if more else None,
            }
            if not self.older:
                answer["states"] = sorted(set(states)) if states else None
            return _ok(answer)
        parts = path.split("/")
        if len(parts) >= 4 and parts[2] == "proposals":
            record = self.proposals.get(parts[3])
            if record is None:
                return _refuse("E_NOT_FOUND", "no proposal", 404)
            if len(parts) == 4:
                return _ok(record)
            self.calls.append((parts[4], user, body))
            return self._decide(record, parts[4], user, body)
        return _refuse("E_NOT_FOUND", "no route", 404)

    def _decide(
        self, record: dict[str, Any], verb: str, user: str, body: dict[str, Any]
    ) -> httpx.Response:
        if verb == "approve":
            if record["state"] != "pending":
                return _refuse("E_STATE", f"the proposal is {record['state']}, not pending", 409)
            if body.get("action_hash") != record["action_hash"]:
                return _refuse("E_STALE_VIEW", "the action changed since you looked at it", 409)
            if record["policy"]["confirm"]:
                if not body.get("confirm"):
                    return _refuse("E_CONFIRM_REQUIRED", "type the resource id", 422)
                if body["confirm"] != record["resource_id"]:
                    return _refuse(
                        "E_CONFIRM_MISMATCH", "the typed resource id does not match", 422
                    )
            if any(v["voter"] == user for v in record["votes"]):
                return _refuse("E_ALREADY_VOTED", "you have already approved this", 409)
            record["votes"].append({"voter": user, "at": NOW, "note": body.get("note", "")})
            record["votes_needed"] = max(0, record["policy"]["quorum"] - len(record["votes"]))
            if not record["votes_needed"]:
                record["state"] = "approved"
            return _ok(record)
        if verb == "reject":
            record["state"] = "rejected"
            record["rejection"] = {
                "reason_code": body["reason_code"],
                "note": body.get("note", ""),
                "by": user,
                "at": NOW,
            }
            return _ok(record)
        if verb == "revoke":
            if record["state"] != "approved" or record["approval"] is None:
                return _refuse("E_STATE", "only an approved proposal can be revoked", 409)
            record["state"] = "revoked"
            record["approval"] = {**record["approval"], "revoked_at": NOW, "revoked_by": user}
            return _ok(record)
        if verb == "resolve":
            if ROLES[user] != "admin":
                return _refuse("E_FORBIDDEN", f"role {ROLES[user]} may not resolve", 403)
            if record["state"] != "in_doubt":
                return _refuse("E_STATE", "not in_doubt", 409)
            happened = body["decision"] == "happened"
            record["state"] = "executed" if happened else "failed"
            record["outcome"] = {
                **record["outcome"],
                "resolution": body["decision"],
                "resolved_by": user,
                "resolved_at": NOW,
                "resolution_note": body.get("note", ""),
            }
            return _ok(record)
        return _refuse("E_STATE", "not supported by the fake", 409)

    def approve_now(self, proposal_id: str, voter: str = "carol") -> dict[str, Any]:
        """Put a proposal in ``approved`` with an issued approval, as the checkpoint would."""
        record = self.proposals[proposal_id]
        record["votes"].append({"voter": voter, "at": NOW, "note": ""})
        record["state"] = "approved"
        record["votes_needed"] = 0
        record["approval"] = {
            "approval_id": "apv_" + "1" * 32,
            "keyid": "ed25519:" + "0f" * 16,
            "issued_at": NOW - 60,
            "expires_at": NOW + 840,
            "revoked_at": None,
            "revoked_by": None,
            "envelope": {},
        }
        return record

    def in_doubt(
        self,
        proposal_id: str,
        detail: str = "ecs.StopInstance outcome unknown: ReadTimeout: Read timed out",
    ) -> dict[str, Any]:
        record = self.approve_now(proposal_id)
        record["state"] = "in_doubt"
        self.executed(proposal_id, "in_doubt", detail=detail)
        return record

    def executed(
        self, proposal_id: str, outcome: str = "succeeded", **receipt: Any
    ) -> dict[str, Any]:
        """Record the executor's outcome with its receipt, as the checkpoint would."""
        record = self.proposals[proposal_id]
        if record["approval"] is None:
            self.approve_now(proposal_id)
        record["state"] = {"succeeded": "executed", "in_doubt": "in_doubt"}.get(outcome, outcome)
        approval_id = record["approval"]["approval_id"]
        record["outcome"] = {
            "approval_id": approval_id,
            "outcome": outcome,
            "refusal_code": None,
            "receipt_verified": True,
            "receipt_keyid": "ed25519:" + "aa" * 16,
            "receipt": receipt_envelope(approval_id, outcome, **receipt),
            "late": False,
            "reported_at": NOW,
            "resolution": None,
            "resolved_by": None,
            "resolved_at": None,
            "resolution_note": None,
        }
        return record

    def executor_resolved(
        self,
        proposal_id: str,
        decision: str,
        *,
        by: str = "ops-carol",
        at: int = NOW + 120,
        note: str = "checked the console",
    ) -> dict[str, Any]:
        """The executor's resolution receipt, come after a person resolved the in_doubt
        here, as the checkpoint shows it (``outcome.executor_resolution``)."""
        record = self.proposals[proposal_id]
        outcome = record["outcome"]
        assert outcome is not None and outcome["resolution"] is not None, "resolve it first"
        resolution = {"decision": decision, "by": by, "at": at, "note": note}
        outcome["executor_resolution"] = {
            "decision": decision,
            "by": by,
            "at": at,
            "note": note,
            "checkpoint_decision": outcome["resolution"],
            "checkpoint_resolved_by": outcome["resolved_by"],
            "conflict": decision != outcome["resolution"],
            "reported_at": NOW + 180,
            "receipt_keyid": "ed25519:" + "aa" * 16,
            "receipt": receipt_envelope(
                outcome["approval_id"], "resolved", resolution=resolution, at=at
            ),
        }
        return record


def _ok(value: Any, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json=value)


def _refuse(code: str, message: str, status: int) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message}})
