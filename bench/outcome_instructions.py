"""Instructions per outcome report in the checkpoint: CPU that no neighbour moves.

``python -m bench.outcome_instructions [--small 20] [--large 120]`` sends
``POST /v1/outcomes`` (an executor's signed ``succeeded`` receipt for a quorum-1 stop it
ran) straight to the checkpoint's ASGI app, every middleware, the token lookup, the
receipt's verification, the report's transaction and the answer included, on a SQLite
database in /dev/shm, under valgrind's cachegrind: once with ``--small`` reports and once
with ``--large``, and prints the difference per report. Every run submits and approves
``--large`` proposals and signs a receipt for each, so only the reports differ. No HTTP
client or server: the figure is the app's own. Needs ``valgrind`` on the PATH.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._harness import instructions_main
from bench.bench_checkpoint import _action, checkpoint_values
from bench.checkpoint_instructions import _call

#: A fixed receipt key: the checkpoint trusts its public half (``receipt_keys_path``).
_RECEIPT_SEED = bytes(range(32))


def receipts(
    approved: list[dict[str, Any]], audience: str, *, refused: bool = False
) -> list[dict[str, Any]]:
    """A ``succeeded`` receipt for each approved proposal, as the executor signs it, its
    audit head one further along the executor's chain each time; with ``refused``, one
    of a refusal before use instead (another audience's executor: ``E_AUDIENCE``)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from airlock.protocol import Receipt
    from services.executor import ReceiptSigner

    signer = ReceiptSigner(Ed25519PrivateKey.from_private_bytes(_RECEIPT_SEED))
    now = int(time.time())
    signed = []
    for n, proposal in enumerate(approved):
        receipt = Receipt.model_validate(
            {
                "type": "airlock.receipt/v1",
                "executor": audience + "-staging" if refused else audience,
                "approval_id": proposal["approval"]["approval_id"],
                "action_hash": proposal["action_hash"],
                "outcome": "refused" if refused else "succeeded",
                "verified": not refused,
                "refusal_code": "E_AUDIENCE" if refused else None,
                "cloud_request_id": f"bench-request-{n:08d}",
                "resolution": None,
                "at": now,
                "audit_head": {"seq": 2 * n + 2, "hash": f"sha256:{n:064x}"},
                "detail": "",
            }
        )
        signed.append(signer.sign(receipt).to_value())
    return signed


def _trusting(root: Path) -> dict[str, Any]:
    """Checkpoint settings in ``root`` that trust ``_RECEIPT_SEED``'s receipts."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from airlock.protocol import KeySet, canonical_bytes
    from services.executor import ReceiptSigner

    values = checkpoint_values(root, None)
    signer = ReceiptSigner(Ed25519PrivateKey.from_private_bytes(_RECEIPT_SEED))
    values["receipt_keys_path"].write_bytes(
        canonical_bytes(KeySet([signer.trusted_key()]).to_value())
    )
    return values


async def report_all(count: int, largest: int, *, refused: bool = False) -> None:
    """Approve ``10 + largest`` proposals, sign a receipt for each, report ``10 + count``
    of them (``POST /v1/outcomes``; with ``refused``, ``POST /v1/refusals``)."""
    from airlock.settings import CheckpointSettings
    from services.checkpoint.app import build

    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        values = _trusting(Path(tmp))
        app = build(CheckpointSettings.model_validate(values), sweep_interval=None)
        accounts = app.state.accounts
        accounts.add_user("alice", "bench password 1234", "approver")
        agent = accounts.create_service_token("bench-agent", "agent")
        executor = accounts.create_service_token("bench-executor", "executor")
        person = accounts.login("alice", "bench password 1234")[0]
        async with app.router.lifespan_context(app):
            # Every run approves as many proposals (10 warm-up ones, then ``largest``).
            approved = []
            for n in range(10 + largest):
                proposal = await _call(app, "/v1/proposals", _action(n, "00002"), agent)
                body = json.dumps({"action_hash": proposal["action_hash"]}).encode()
                answer = await _call(app, f"/v1/proposals/{proposal['id']}/approve", body, person)
                if answer.get("state") != "approved":
                    raise RuntimeError(f"approve failed: {str(answer)[:200]}")
                approved.append(answer)
            path, state = ("/v1/refusals", "approved") if refused else ("/v1/outcomes", "executed")
            signed = receipts(approved, values["audience"], refused=refused)
            for receipt in signed[: 10 + count]:
                body = json.dumps({"receipt": receipt}).encode()
                answer = await _call(app, path, body, executor)
                if answer.get("state") != state:
                    raise RuntimeError(f"outcome report failed: {str(answer)[:200]}")
        app.state.checkpoint.db.dispose()


def main(argv: list[str] | None = None) -> int:
    return instructions_main(
        argv,
        module="bench.outcome_instructions",
        doc=__doc__,
        child=lambda n, large: asyncio.run(report_all(n, large)),
        what="HTTP outcome report through the checkpoint's ASGI app, tmpfs SQLite, under valgrind",
        per="outcome report",
    )


if __name__ == "__main__":
    raise SystemExit(main())
