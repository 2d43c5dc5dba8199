"""A test double of the checkpoint's side of the gate contract, and a gate's files.

:class:`FakeCheckpoint` implements ``POST /v1/proposals``, ``GET /v1/proposals/{id}``,
``POST /v1/outcomes`` and ``POST /v1/refusals`` for tool calls as /work/gate-contract.md
fixes them, with a real Ed25519 approval signer from a fixed seed, so the gate's tests do
not wait for the real checkpoint. Served in-process (:meth:`FakeCheckpoint.client`, an
``httpx.MockTransport``) or on 127.0.0.1 (:meth:`FakeCheckpoint.serve`) for tests whose
gates run in other processes. A test approves, rejects or tampers with a proposal.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from airlock.gate import GateConfig, generate_receipt_key
from airlock.protocol import (
    APPROVAL_PAYLOAD_TYPE,
    Envelope,
    KeySet,
    Signature,
    ToolApprovalStatement,
    ToolCall,
    TrustedKey,
    canonical_bytes,
    key_id,
    loads_strict,
    pae,
    verify_receipt,
)

__all__ = ["AUDIENCE", "TOKEN", "FakeCheckpoint", "gate_files"]

#: RFC 8032 §7.1 TEST 1's secret key: a public test vector, never a real key.
SEED: Final = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
#: Another: an approval signed with it is signed by a key the gate does not trust.
OTHER_SEED: Final = bytes.fromhex(
    "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb"
)
AUDIENCE: Final = "airlock-gate/payments-test"
TOKEN: Final = "agent-token-for-tests"
_PROPOSAL: Final = re.compile(r"^/v1/proposals/(prop_[A-Za-z0-9_-]{8,80})$")


def _signer(seed: bytes) -> tuple[Ed25519PrivateKey, str, bytes]:
    key = Ed25519PrivateKey.from_private_bytes(seed)
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return key, key_id(raw), raw


def approval_keys() -> KeySet:
    """The key set a gate pins: the fake checkpoint's approval key."""
    return KeySet([TrustedKey.from_raw(_signer(SEED)[2])])


@dataclass
class _Record:
    call: ToolCall
    jcs: str
    state: str = "pending"
    created_at: int = 0
    approval: dict[str, Any] | None = None
    rejection: dict[str, Any] | None = None
    superseded_by: str | None = None


@dataclass
class FakeCheckpoint:
    """The checkpoint as a gate sees it (module docstring). Thread-safe.

    ``auto_approve``: every new proposal is approved at once (policy effect "auto").
    ``receipt_keys``: receipts are verified against these; one that does not verify is
    refused 422 E_RECEIPT, as the checkpoint would.
    """

    auto_approve: bool = False
    receipt_keys: KeySet | None = None
    ttl: int = 900
    proposals: dict[str, _Record] = field(default_factory=dict)
    receipts: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- what a test does --------------------------------------------------------------

    def approve(
        self,
        proposal_id: str,
        *,
        seed: bytes = SEED,
        action_jcs: str | None = None,
        now: int | None = None,
        **statement: Any,
    ) -> dict[str, Any]:
        """Sign an approval of the proposal (``statement`` overrides any field of it),
        and serve ``action_jcs`` as its text if given (a tampering checkpoint)."""
        with self._lock:
            record = self.proposals[proposal_id]
            now = int(time.time()) if now is None else now
            call = record.call
            value: dict[str, Any] = {
                "type": "airlock.tool-call-approval/v1",
                "approval_id": "apv_" + secrets.token_hex(8),
                "proposal_id": call.proposal_id,
                "action_hash": call.action_hash(),
                "tool": call.tool,
                "target": call.target,
                "effect_key": call.effect_key,
                "audience": call.audience,
                "nonce": secrets.token_hex(16),
                "issued_at": now,
                "not_before": now,
                "expires_at": now + self.ttl,
                "approvers": [{"id": "alice", "at": now}],
                "quorum": 1,
                "policy": {"rule": "refunds", "hash": "sha256:" + "7a" * 32},
                "risk": call.risk,
            }
            value.update(statement)
            payload = ToolApprovalStatement.model_validate(value).canonical_bytes()
            key, kid, _ = _signer(seed)
            envelope = Envelope(
                APPROVAL_PAYLOAD_TYPE,
                payload,
                (Signature(kid, key.sign(pae(APPROVAL_PAYLOAD_TYPE, payload))),),
            )
            record.approval = {
                "approval_id": value["approval_id"],
                "keyid": kid,
                "issued_at": value["issued_at"],
                "expires_at": value["expires_at"],
                "revoked_at": None,
                "revoked_by": None,
                "envelope": envelope.to_value(),
            }
            record.state = "approved"
            if action_jcs is not None:
                record.jcs = action_jcs
            return record.approval

    def edit(self, proposal_id: str, **changes: Any) -> str:
        """A person's edit (/work/edit-contract.md): a new pending proposal with
        ``changes`` applied to the arguments supersedes ``proposal_id``, which is
        withdrawn. Returns the new proposal's id."""
        with self._lock:
            old = self.proposals[proposal_id]
            value = old.call.model_dump(mode="json")
            value["arguments"] = {**value["arguments"], **changes}
            value["created_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            digest = hashlib.sha256(
                f"airlock.edit/v1\n{proposal_id}\n".encode() + canonical_bytes(value["arguments"])
            ).hexdigest()
            value["proposal_id"] = "prop_" + digest[:40]
            call = ToolCall.model_validate(value)
            self.proposals[call.proposal_id] = _Record(
                call, call.canonical_bytes().decode(), created_at=int(time.time())
            )
            old.state, old.superseded_by = "withdrawn", call.proposal_id
            return call.proposal_id

    def reject(self, proposal_id: str, reason_code: str, note: str, by: str) -> None:
        with self._lock:
            record = self.proposals[proposal_id]
            record.state = "rejected"
            record.rejection = {"reason_code": reason_code, "note": note, "by": by, "at": 0}

    def set_state(self, proposal_id: str, state: str) -> None:
        with self._lock:
            self.proposals[proposal_id].state = state

    def only(self) -> str:
        """The id of the one proposal made."""
        (proposal_id,) = self.proposals
        return proposal_id

    # -- the wire ----------------------------------------------------------------------

    def handle(self, method: str, path: str, authorization: str, body: bytes) -> tuple[int, Any]:
        """One request: (status, JSON answer)."""
        with self._lock:
            self.requests.append((method, path))
        if authorization != f"Bearer {TOKEN}":
            return 401, _error("E_UNAUTHENTICATED", "no valid token")
        if method == "POST" and path == "/v1/proposals":
            return self._propose(body)
        match = _PROPOSAL.match(path)
        if method == "GET" and match:
            with self._lock:
                record = self.proposals.get(match.group(1))
                if record is None:
                    return 404, _error("E_NOT_FOUND", "no such proposal")
                return 200, _proposal(match.group(1), record)
        if method == "POST" and path in ("/v1/outcomes", "/v1/refusals"):
            return self._report(path, body)
        return 404, _error("E_NOT_FOUND", f"{method} {path}")

    def _propose(self, body: bytes) -> tuple[int, Any]:
        try:
            call = ToolCall.from_json_bytes(body)
        except Exception as exc:
            return 422, _error("E_INVALID", str(exc))
        with self._lock:
            found = self.proposals.get(call.proposal_id)
            if found is not None:
                if found.call.action_hash() == call.action_hash():
                    return 200, _proposal(call.proposal_id, found)
                return 409, _error("E_CONFLICT", "same id, another hash")
            self.proposals[call.proposal_id] = _Record(
                call, call.canonical_bytes().decode(), created_at=int(time.time())
            )
        if self.auto_approve:
            self.approve(call.proposal_id)
        with self._lock:
            return 201, _proposal(call.proposal_id, self.proposals[call.proposal_id])

    def _report(self, path: str, body: bytes) -> tuple[int, Any]:
        value = loads_strict(body, max_bytes=1 << 20)
        if self.receipt_keys is not None:
            try:
                verify_receipt(value["receipt"], self.receipt_keys, int(time.time()))
            except Exception as exc:
                return 422, _error("E_RECEIPT", str(exc))
        with self._lock:
            self.receipts.append((path, value["receipt"]))
        return 200, {"ok": True}

    def client(self) -> httpx.Client:
        """An ``httpx.Client`` answering in-process."""

        def respond(request: httpx.Request) -> httpx.Response:
            status, answer = self.handle(
                request.method,
                request.url.path,
                request.headers.get("authorization", ""),
                request.read(),
            )
            return httpx.Response(status, content=json.dumps(answer).encode())

        return httpx.Client(
            base_url="http://checkpoint.test", transport=httpx.MockTransport(respond)
        )

    @contextmanager
    def serve(self) -> Iterator[str]:
        """Serve on 127.0.0.1 (threads) while in the block; yield the base URL."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                status, answer = fake.handle(
                    self.command,
                    self.path,
                    self.headers.get("Authorization", ""),
                    self.rfile.read(length),
                )
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
            thread.join()


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def _proposal(proposal_id: str, record: _Record) -> dict[str, Any]:
    call = record.call
    return {
        "id": proposal_id,
        "state": record.state,
        "action_hash": call.action_hash(),
        "action_jcs": record.jcs,
        "action": json.loads(record.jcs),
        "action_type": "airlock.tool-call/v1",
        "tool": call.tool,
        "target": call.target,
        "effect_key": call.effect_key,
        "audience": call.audience,
        "provider": "",
        "account": call.audience,
        "region": "",
        "resource_type": "tool-call",
        "resource_id": call.target,
        "operation": call.tool,
        "risk": call.risk,
        "proposed_by": call.proposed_by,
        "submitted_by": "agent",
        "policy": {
            "rule": "refunds",
            "effect": "require",
            "quorum": 1,
            "confirm": False,
            "hash": "sha256:" + "7a" * 32,
        },
        "deny_reason": None,
        "votes": [],
        "votes_needed": 1,
        "approval_deadline": record.created_at + 3600,
        "created_at": record.created_at,
        "updated_at": record.created_at,
        "approval": record.approval,
        "rejection": record.rejection,
        "outcome": None,
        "superseded_by": record.superseded_by,
    }


def gate_files(
    directory: Path, *, checkpoint_url: str, ledger_url: str, **config: Any
) -> GateConfig:
    """A gate's pinned key set and receipt key in ``directory``, and its config."""
    keys = directory / "checkpoint-keys.json"
    if not keys.exists():
        keys.write_bytes(canonical_bytes(approval_keys().to_value()))
    receipt_key = directory / "gate-receipt.pem"
    if not receipt_key.exists():
        generate_receipt_key(receipt_key)
    return GateConfig(
        checkpoint_url=checkpoint_url,
        token=TOKEN,
        keys=keys,
        audience=AUDIENCE,
        ledger_url=ledger_url,
        receipt_key=receipt_key,
        **config,
    )


def other_seed() -> bytes:
    return OTHER_SEED
