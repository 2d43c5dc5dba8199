"""Attacks on the checkpoint's batch of receipts (``POST /v1/receipts``).

Each receipt in a batch must be answered, recorded or refused exactly as its own
endpoint (``POST /v1/outcomes``) would: a refused one with that endpoint's code, its
``checkpoint.refused`` record (request ``POST /v1/receipts``) and no write; the receipts
beside it as if it were not there. The batches carry the executor's own receipts of a
stop it ran from the feed (read from its ledger, as an attacker with the ledger or the
wire would): the checkpoint holds each already, so each is answered 200 and, as alone,
writes nothing — one ``outcome.reported`` per approval stays the record. After each
attack the two audit chains still reconcile (``airlock audit reconcile``'s check) with no
finding about its approval. The batches posted with another caller's credentials go to
the ``hold`` checkpoint, where no executor runs the approval: its receipt that the stop
succeeded, signed by the receipt key ``hold`` trusts, is refused, and then recorded when
the executor's token posts it (the control: only the caller was wrong).

Every batch is posted by the attack's setup, before the first attack runs, and judged
by its run: a refusal after the first of its kind from the same caller is written to the
audit chain at the checkpoint's next flush of counted refusals (up to a minute later,
``refusal_interval``), which the judge waits for; it overlaps the other attacks only as
far as they take that long.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from airlock.api import BODY_MAX_BYTES, RECEIPTS_MAX
from airlock.protocol import Receipt, canonical_bytes
from airlock.reconcile import reconcile
from airlock.store import AuditLog, export, make_engine, read_transaction
from devstack import factory
from services.executor import ReceiptSigner

from .common import api_code, approved, stop_action
from .registry import Observation, Target, attack
from .rig import Checkpoint, Rig, deadline_poll

__all__: list[str] = []

_REQUEST: Final = "POST /v1/receipts"
#: How long a refusal's record may take to reach the chain: the checkpoint's flush of
#: counted refusals (``refusal_interval``, 60 s) and some slack.
_AUDITED_WITHIN: Final = 90.0
#: The receipt key the aux checkpoints trust and no executor holds (rig.py makes it).
_AUX_RECEIPT_KEY: Final = "aux-receipt-key.pem"


@dataclass(frozen=True, slots=True)
class _Posted:
    """A batch the setup posted and what the checkpoint said and counted."""

    cp: Checkpoint
    record: dict[str, Any]  # the proposal the receipts are about, before the batch
    status: int
    answer: Any
    counted: dict[str, float]  # the refusal counter's growth, per code watched
    audited_before: dict[str, int]  # checkpoint.refused records naming the batch, per code
    alone: list[str]  # the single endpoint's answer to each receipt the batch took, after it
    receipt: dict[str, Any]  # the batch's first receipt


def _executed(rig: Rig, t: Target) -> tuple[dict[str, Any], dict[str, Any]]:
    """A stop approved at the main checkpoint, run by the stack's executor from the feed
    and reported: the proposal and the executor's receipt (from its ledger)."""
    record = approved(rig, rig.cp, stop_action(t))
    row = rig.wait_executed_by_e1(record["approval"]["approval_id"], {"succeeded"})
    record = rig.cp.wait_state(record["id"], {"executed"})
    receipt: dict[str, Any] = json.loads(row["receipt"])
    return record, receipt


def _payload(receipt: Mapping[str, Any]) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(base64.b64decode(receipt["payload"]))
    return value


def _signed(signer: ReceiptSigner, payload: Mapping[str, Any]) -> dict[str, Any]:
    value: dict[str, Any] = signer.sign(Receipt.model_validate(dict(payload))).to_value()
    return value


def _failed(receipt: Mapping[str, Any]) -> dict[str, Any]:
    """The receipt's statement rewritten: the stop failed (a retry would follow)."""
    return {**_payload(receipt), "outcome": "failed", "verified": False, "detail": "failed"}


def _untrusted() -> ReceiptSigner:
    seed = bytes.fromhex(factory.RFC8032_SEEDS["rfc8032-test3"])
    return ReceiptSigner(Ed25519PrivateKey.from_private_bytes(seed))


def _executor_key(rig: Rig) -> ReceiptSigner:
    """The stack executor's own receipt key: what a second executor sharing it signs."""
    return ReceiptSigner.from_file(rig.stack.workdir / "receipt-key.pem")


def _outcome(receipt: Mapping[str, Any]) -> dict[str, Any]:
    return {"kind": "outcome", "receipt": dict(receipt)}


def _audited(cp: Checkpoint, code: str) -> int:
    """``checkpoint.refused`` records with ``code`` that count a refused batch item:
    written at once (``request``) or counted in a window (``requests``)."""
    return sum(
        1
        for e in cp.audit("checkpoint.refused", code=code)
        if e.get("request") == _REQUEST or _REQUEST in e.get("requests", ())
    )


def _post(
    rig: Rig,
    t: Target,
    record: dict[str, Any],
    items: Sequence[Mapping[str, Any]],
    *,
    who: str = "executor",
    cp: Checkpoint | None = None,
    watch: Sequence[str] = (),
) -> None:
    """Post ``items`` as one batch with ``who``'s token; keep what the judge needs."""
    cp = cp or rig.cp
    body = canonical_bytes({"receipts": [dict(i) for i in items]})
    if len(body) > BODY_MAX_BYTES:
        raise RuntimeError(f"the batch is {len(body)} bytes, over the body cap")
    counters = {code: cp.refusal_count(code) for code in watch}
    audited = {code: _audited(cp, code) for code in watch}
    r = cp.http.post(
        "/v1/receipts",
        content=body,
        headers={**cp.bearer(who), "Content-Type": "application/json"},
    )
    try:
        answer = r.json()
    except ValueError:
        answer = None
    counted = {code: cp.refusal_count(code) - n for code, n in counters.items()}
    # What the single endpoint answers each receipt the batch took, posted alone after it.
    alone = [
        api_code(a) if a.status_code != 200 else "200"
        for a in (
            cp.http.post("/v1/outcomes", json={"receipt": i["receipt"]}, headers=cp.bearer(who))
            for i, (status, _) in zip(items, _answers(r.status_code, answer), strict=False)
            if status == 200
        )
    ]
    first = dict(items[0]["receipt"])
    rig.scratch[t.name] = _Posted(cp, record, r.status_code, answer, counted, audited, alone, first)


def _answers(status: int, answer: Any) -> list[tuple[int, str]]:
    """Each item's answer: its status and code (as :func:`api_code` shows a response)."""
    if status != 200 or not isinstance(answer, dict):
        return []
    return [
        (
            int(r["status"]),
            api_code(httpx.Response(r["status"], json={"error": r["error"]}))
            if r.get("error")
            else f"{r['status']}",
        )
        for r in answer.get("results", [])
    ]


def _provable(rig: Rig, approval_id: str) -> bool:
    """Do the checkpoint's and the executor's chains verify and reconcile with no finding
    about ``approval_id`` (nor one about a whole chain)? As ``airlock audit reconcile``
    reads them: the checkpoint's head, the executor's chain, the checkpoint's chain."""
    cp = make_engine(f"sqlite:///{rig.cp.db_path}", create=False)
    ex = make_engine(f"sqlite:///{rig.ledger_path}", create=False)
    try:
        with read_transaction(cp) as conn:
            head = AuditLog.head(conn)
        with read_transaction(ex) as conn:
            executor_lines = list(export(conn))
        with read_transaction(cp) as conn:
            checkpoint_lines = list(export(conn))
    finally:
        cp.dispose()
        ex.dispose()
    report = reconcile(checkpoint_lines, executor_lines, reports_until=(head.seq, head.row_hash))
    return not [f for f in report.findings if f.approval_id in (None, approval_id)]


def _judge(
    rig: Rig,
    t: Target,
    *,
    refused: Sequence[int],
    code: str,
    answers: Callable[[list[tuple[int, str]]], bool] | None = None,
    state: str = "executed",
    reported: int = 1,
) -> Observation:
    """The observation of a batch posted by the setup.

    ``refused``: the items refused with ``code`` (empty: the batch refused whole with
    it, when ``answers`` is None). The refusal counter must have grown by one a refusal,
    a ``checkpoint.refused`` record naming the batch must be written, the proposal must
    be in ``state`` with ``reported`` outcome records, and (at the main checkpoint) the
    chains must reconcile with no finding about the approval.
    """
    posted: _Posted = rig.scratch[t.name]
    record = posted.record
    approval_id = record["approval"]["approval_id"]
    items = _answers(posted.status, posted.answer)
    if refused:
        codes = {items[i][1] for i in refused} if len(items) > max(refused) else {"NO ANSWER"}
        observed = codes.pop() if len(codes) == 1 else "MIXED " + "/".join(sorted(codes))
        others = [a for i, a in enumerate(items) if i not in refused]
        beside_ok = [a for _, a in others] == posted.alone == ["200"] * len(others)
        valid = "the valid receipt" if len(others) == 1 else f"the {len(others)} valid ones"
        beside = [f"{valid} answered 200, as alone"] if others else []
    elif answers is not None:
        observed = "SAME_ANSWER (200)" if answers(items) else f"{[a for _, a in items]}"
        beside_ok = posted.alone == ["200"] * len(items)
        beside = [f"each of {len(items)} answered 200, as alone"]
    else:
        observed = api_code(httpx.Response(posted.status, json=posted.answer))
        beside_ok, beside = True, ["no receipt judged"]
    bare = code.split("(", 1)[0]
    n = len(refused) if refused else (0 if answers is not None else 1)
    counted = posted.counted.get(bare, 0.0)
    where = "checkpoint" if posted.cp is rig.cp else f"checkpoint {posted.cp.name}"
    counter = f"refusal counter {bare} +{counted:g}" if n else "no refusal counted"
    parts = [f"{where}: {counter}"]
    ok = counted == n and beside_ok
    if n:  # the record, or a TimeoutError (the runner's miss)
        deadline_poll(
            f"a checkpoint.refused {bare} record for {_REQUEST}",
            lambda: True if _audited(posted.cp, bare) > posted.audited_before[bare] else None,
            timeout=_AUDITED_WITHIN,
        )
        parts.append(f"audit checkpoint.refused {bare} ({_REQUEST})")
    others_counted = {c: v for c, v in posted.counted.items() if c != bare and v}
    if others_counted:
        parts.append(f"UNEXPECTED refusals {others_counted}")
        ok = False
    after = posted.cp.view(record["id"])
    events = posted.cp.audit("checkpoint.outcome.reported", approval_id=approval_id)
    parts += [*beside, f"state still {after['state']}, {len(events)} outcome.reported"]
    ok = ok and after["state"] == state and len(events) == reported
    if posted.cp is rig.cp:
        provable = _provable(rig, approval_id)
        parts.append("chains reconcile" if provable else "chains DO NOT reconcile")
        ok = ok and provable
    return Observation(
        observed, "; ".join(parts), ok, (t.instance(0),), approved_writes=int(state == "executed")
    )


# -- a receipt no trusted key signed, or changed after signing ---------------------------


def _setup_forged(rig: Rig, t: Target) -> None:
    record, receipt = _executed(rig, t)
    forged = _signed(_untrusted(), _failed(receipt))
    _post(rig, t, record, [_outcome(receipt), _outcome(forged)], watch=("E_RECEIPT",))


@attack(
    "forged_receipt_in_receipt_batch",
    surface="checkpoint API",
    expect="E_RECEIPT(E_UNKNOWN_KEY) (422)",
    does="With the executor's token, a batch holds the executor's own receipt of a stop "
    "and a receipt signed by a key the checkpoint does not trust reporting the stop failed.",
    setup=_setup_forged,
)
def _forged(rig: Rig, t: Target) -> Observation:
    return _judge(rig, t, refused=[1], code="E_RECEIPT")


def _setup_tampered(rig: Rig, t: Target) -> None:
    record, receipt = _executed(rig, t)
    payload = canonical_bytes(_failed(receipt))
    tampered = {**receipt, "payload": base64.b64encode(payload).decode("ascii")}
    _post(rig, t, record, [_outcome(tampered), _outcome(receipt)], watch=("E_RECEIPT",))


@attack(
    "tampered_receipt_in_receipt_batch",
    surface="checkpoint API",
    expect="E_RECEIPT(E_SIGNATURE) (422)",
    does="The executor's own receipt of a stop, its statement changed to failed after "
    "signing (signature kept), is batched before the untouched receipt.",
    setup=_setup_tampered,
)
def _tampered(rig: Rig, t: Target) -> Observation:
    return _judge(rig, t, refused=[0], code="E_RECEIPT")


# -- replays ----------------------------------------------------------------------------


def _setup_replayed(rig: Rig, t: Target) -> None:
    record, receipt = _executed(rig, t)
    _post(rig, t, record, [_outcome(receipt)] * 3, watch=("E_STATE", "E_RECEIPT"))


@attack(
    "receipt_replayed_in_receipt_batch",
    surface="checkpoint API",
    expect="SAME_ANSWER (200)",
    does="The executor's receipt of a stop it reported already is posted again, three "
    "times in one batch: each must get the answer it got (200) and record nothing more.",
    setup=_setup_replayed,
)
def _replayed(rig: Rig, t: Target) -> Observation:
    return _judge(
        rig,
        t,
        refused=[],
        code="E_STATE",
        answers=lambda items: len(items) == 3 and all(s == 200 for s, _ in items),
    )


def _setup_resigned(rig: Rig, t: Target) -> None:
    record, receipt = _executed(rig, t)
    signer = _executor_key(rig)
    again = _signed(signer, {**_payload(receipt), "at": _payload(receipt)["at"] + 1})
    failed = _signed(signer, _failed(receipt))
    items = [_outcome(receipt), _outcome(again), _outcome(failed)]
    _post(rig, t, record, items, watch=("E_STATE", "E_RECEIPT"))


@attack(
    "second_outcome_for_reported_approval_in_receipt_batch",
    surface="checkpoint API",
    expect="E_STATE (409)",
    does="Signed with the executor's own receipt key (a second executor sharing it), a "
    "new receipt of the same outcome and one of a different outcome (failed) for a stop "
    "already reported succeeded, batched after the original receipt.",
    setup=_setup_resigned,
)
def _resigned(rig: Rig, t: Target) -> Observation:
    return _judge(rig, t, refused=[1, 2], code="E_STATE")


# -- refused whole ------------------------------------------------------------------------


def _setup_over_cap(rig: Rig, t: Target) -> None:
    record, receipt = _executed(rig, t)
    failed = _outcome(_signed(_executor_key(rig), _failed(receipt)))
    items = [failed] * (RECEIPTS_MAX + 1)
    _post(rig, t, record, items, watch=("E_INVALID", "E_STATE"))


@attack(
    "receipt_batch_over_item_cap",
    surface="checkpoint API",
    expect="E_INVALID (422)",
    does=f"A batch of {RECEIPTS_MAX + 1} receipts (under the body cap), each one a "
    "validly signed failed outcome for a reported stop: refused whole, none judged.",
    setup=_setup_over_cap,
)
def _over_cap(rig: Rig, t: Target) -> Observation:
    return _judge(rig, t, refused=[], code="E_INVALID")


def _setup_held(rig: Rig, t: Target, who: str, watch: str) -> None:
    """An approval at the ``hold`` checkpoint (no executor runs it) and its receipt of a
    succeeded stop, signed by the receipt key ``hold`` trusts, posted with ``who``."""
    record = approved(rig, rig.hold, stop_action(t))
    signer = ReceiptSigner.from_file(rig.workdir / _AUX_RECEIPT_KEY)
    payload = {
        "type": "airlock.receipt/v1",
        "executor": rig.hold.audience,
        "approval_id": record["approval"]["approval_id"],
        "action_hash": record["action_hash"],
        "outcome": "succeeded",
        "verified": True,
        "refusal_code": None,
        "cloud_request_id": None,
        "resolution": None,
        "at": int(time.time()),
        "audit_head": {"seq": 1, "hash": "sha256:" + "0" * 64},
        "detail": "",
    }
    _post(
        rig, t, record, [_outcome(_signed(signer, payload))], who=who, cp=rig.hold, watch=(watch,)
    )


@attack(
    "agent_token_posts_executor_receipt_batch",
    surface="checkpoint API",
    expect="E_RECEIPT (422)",
    does="The agent's token posts a batch with an executor's validly signed receipt that "
    "a stop approved at a checkpoint succeeded (it never ran); the executor's token then "
    "gets the same receipt recorded (the control).",
    setup=lambda rig, t: _setup_held(rig, t, "agent", "E_RECEIPT"),
)
def _agent_batch(rig: Rig, t: Target) -> Observation:
    return _controlled(
        rig, t, _judge(rig, t, refused=[0], code="E_RECEIPT", state="approved", reported=0)
    )


@attack(
    "approver_session_posts_receipt_batch",
    surface="checkpoint API",
    expect="E_FORBIDDEN (403)",
    does="alice, an approver, posts with her session a batch with an executor's validly "
    "signed receipt that a stop approved at a checkpoint succeeded (it never ran); the "
    "executor's token then gets the same receipt recorded (the control).",
    setup=lambda rig, t: _setup_held(rig, t, "alice", "E_FORBIDDEN"),
)
def _approver_batch(rig: Rig, t: Target) -> Observation:
    return _controlled(
        rig, t, _judge(rig, t, refused=[], code="E_FORBIDDEN", state="approved", reported=0)
    )


def _controlled(rig: Rig, t: Target, obs: Observation) -> Observation:
    """``obs``, once the same receipt, posted alone with the executor's token after it was
    judged, is recorded: only the token was wrong (the control; no executor runs it)."""
    posted: _Posted = rig.scratch[t.name]
    r = rig.hold.http.post(
        "/v1/outcomes", json={"receipt": posted.receipt}, headers=rig.hold.bearer("executor")
    )
    taken = r.status_code == 200 and rig.hold.view(posted.record["id"])["state"] == "executed"
    audit = obs.audit + ("; the executor's token gets it recorded" if taken else "; CONTROL failed")
    return Observation(obs.code, audit, obs.audit_ok and taken, obs.targets)
