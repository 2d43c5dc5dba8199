"""Quiescence and the sweep's invariants, judged from what the stack records.

The judges, each independent of the executor's own opinion where it can be:

* **writes per approval ≤ 1** — the cloud's own record (devcloud's write log of every
  effect it applied; moto's recorder of every write request that reached it), per
  resource; each target of a seed has its own instance and one approval. The ledger
  must also agree with the cloud: ``succeeded`` ⇒ exactly one write; ``refused`` /
  ``failed`` / never consumed ⇒ none; ``in_doubt`` ⇒ at most one.
* **never silently lost** — every approval the checkpoint issued ends terminal in the
  executor's ledger (or refused before consumption in its refusals table) and the
  checkpoint shows the matching state (the outbox delivered it), or ends lapsed/revoked
  at the checkpoint with no ledger row.
* **audit chains verify** — the checkpoint's and the executor's, re-derived from genesis.
* **receipts verify** — every receipt in the ledger and the refusals table for these
  approvals, and the one the checkpoint holds, against the executor's receipt public
  key; each names its approval, hash and outcome, and its audit head is a row of the
  executor's chain.
* **chains reconcile** — ``airlock audit reconcile`` over both chains: every consumed
  approval was issued by the checkpoint as such, none consumed or written twice, every
  receipt head the checkpoint recorded is the executor's row with that outcome, and
  every checkpoint head the executor recorded from the feed is the checkpoint's row
  (the executor consumes only what the feed delivered, so a run that consumed anything
  recorded at least one).

Nothing here writes anywhere.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from airlock.protocol import KeySet, canonical_bytes
from airlock.reconcile import reconcile
from airlock.store import (
    AUDIT_TABLE,
    ChainError,
    export,
    make_engine,
    read_transaction,
    verify_chain,
)
from services.executor import InvalidReceipt, verify_receipt
from services.executor.models import ledger, refusals

from ._rig import Rig
from ._schedule import Target

__all__ = ["Issued", "Judge", "NotQuiescent", "Verdict"]

_TERMINAL: Final = frozenset({"succeeded", "failed", "in_doubt", "refused"})
#: ledger state -> the checkpoint state the outcome must land as
_AT_CHECKPOINT: Final = {
    "succeeded": "executed",
    "refused": "refused",
    "failed": "failed",
    "in_doubt": "in_doubt",
}
_ENDED_UNUSED: Final = frozenset({"lapsed", "revoked"})
_WRITES_ALLOWED: Final = {
    "succeeded": (1,),
    "in_doubt": (0, 1),
    "failed": (0,),
    "refused": (0,),
    "refused_unconsumed": (0,),
    "lapsed": (0,),
    "revoked": (0,),
}


class NotQuiescent(Exception):
    """An approval did not reach an end in time: lost, or stuck."""


@dataclass(frozen=True, slots=True)
class Issued:
    target: Target
    proposal_id: str
    action_hash: str
    approval_id: str
    approved_at: float  # time.time() when the approve call answered


@dataclass
class Verdict:
    ends: dict[str, str] = field(default_factory=dict)  # approval id -> end state
    checks: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    def check(self, name: str, ok: bool, why: str) -> None:
        self.checks[name] += 1
        if not ok:
            self.violations.append(f"{name}: {why}")


class Judge:
    """Reads the stack's records for one seed at a time."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        stack = rig.stack
        self.receipt_keys = KeySet.from_json_bytes(stack.receipt_keys_path.read_bytes())
        self._ledger_url = stack.ledger_url
        #: every resource judged on this stack -> how its approval ended (for final()).
        self.judged: dict[str, str] = {}
        self._checkpoint_url = f"sqlite:///{Path(stack.workdir) / 'checkpoint.db'}"

    def _engines(self) -> tuple[Engine, Engine]:
        # Fresh per seed and disposed after: a pg_terminate_backend of the next seed
        # must hit the executor, not a connection this judge keeps pooled.
        return make_engine(self._ledger_url, create=False), make_engine(
            self._checkpoint_url, create=False
        )

    # -- quiescence -----------------------------------------------------------------------

    def _ledger_view(
        self, engine: Engine, ids: list[str]
    ) -> tuple[dict[str, sa.Row[Any]], dict[str, list[sa.Row[Any]]]]:
        with read_transaction(engine) as conn:
            rows = {
                r.approval_id: r
                for r in conn.execute(sa.select(ledger).where(ledger.c.approval_id.in_(ids)))
            }
            refused: dict[str, list[sa.Row[Any]]] = {}
            for r in conn.execute(
                sa.select(refusals).where(refusals.c.approval_id.in_(ids)).order_by(refusals.c.id)
            ):
                refused.setdefault(r.approval_id, []).append(r)
        return rows, refused

    def settle(self, issued: list[Issued], timeout: float) -> dict[str, str]:
        """Poll until every approval has ended (see the module docstring); its end state.

        Supervises the executor meanwhile (a crash at an armed point is restarted).
        """
        ids = [i.approval_id for i in issued]
        deadline = time.monotonic() + timeout
        engine = make_engine(self._ledger_url, create=False)
        try:
            while True:
                self.rig.supervise()
                rows, refused = self._ledger_view(engine, ids)
                ends: dict[str, str] = {}
                waiting: list[str] = []
                for item in issued:
                    cp = self.rig.view(item.proposal_id)["state"]
                    row = rows.get(item.approval_id)
                    unconsumed = [
                        r for r in refused.get(item.approval_id, []) if r.code != "E_REPLAY"
                    ]
                    if row is not None and row.state in _TERMINAL:
                        if cp == _AT_CHECKPOINT[row.state]:
                            ends[item.approval_id] = row.state
                            continue
                        waiting.append(f"{item.approval_id}: ledger {row.state}, checkpoint {cp}")
                    elif row is None and cp in _ENDED_UNUSED:
                        ends[item.approval_id] = cp
                    elif row is None and unconsumed:
                        ends[item.approval_id] = "refused_unconsumed"
                    else:
                        state = "no ledger row" if row is None else f"ledger {row.state}"
                        waiting.append(f"{item.approval_id}: {state}, checkpoint {cp}")
                if not waiting:
                    return ends
                if time.monotonic() > deadline:
                    raise NotQuiescent(f"not ended after {timeout:.0f}s: " + "; ".join(waiting))
                time.sleep(0.05)  # polling recorded state under a deadline
        finally:
            engine.dispose()

    # -- the invariants -------------------------------------------------------------------

    def judge(self, issued: list[Issued], ends: dict[str, str]) -> Verdict:
        verdict = Verdict(ends=dict(ends))
        cloud = self.rig.cloud
        ledger_engine, checkpoint_engine = self._engines()
        try:
            rows, refused = self._ledger_view(ledger_engine, [i.approval_id for i in issued])
            with read_transaction(ledger_engine) as conn:
                audit = sa.table(AUDIT_TABLE, sa.column("seq"), sa.column("row_hash"))
                heads = {
                    (int(s), str(h))
                    for s, h in conn.execute(sa.select(audit.c.seq, audit.c.row_hash))
                }
            for item in issued:
                end = ends[item.approval_id]
                rid = self.rig.resource_id(item.target)
                self.judged[rid] = end
                writes = cloud.writes(rid)
                verdict.check(
                    "writes<=1", len(writes) <= 1, f"{rid}: {len(writes)} writes: {writes}"
                )
                verdict.check(
                    "ledger-agrees-with-cloud",
                    len(writes) in _WRITES_ALLOWED[end],
                    f"{rid} ended {end} with {len(writes)} writes",
                )
                verb = cloud.verb(item.target, rid)
                verdict.check(
                    "write-is-the-approved-one",
                    all(verb in w.action and w.resource_id == rid for w in writes),
                    f"{rid}: {writes}",
                )
                if end == "succeeded":  # counted by kind of write, for the summary
                    verdict.check(f"one-write:{verb}", len(writes) == 1, f"{rid}: {writes}")
                self._receipts(
                    verdict=verdict,
                    item=item,
                    end=end,
                    row=rows.get(item.approval_id),
                    refused=refused.get(item.approval_id, []),
                    heads=heads,
                )
            for name, engine in (("executor", ledger_engine), ("checkpoint", checkpoint_engine)):
                report = verify_chain(engine)
                verdict.check(f"audit-chain-{name}", report.ok, f"{name} chain: {report}")
            self._reconcile(verdict, checkpoint_engine, ledger_engine)
        finally:
            ledger_engine.dispose()
            checkpoint_engine.dispose()
        return verdict

    @staticmethod
    def _reconcile(verdict: Verdict, checkpoint_engine: Engine, ledger_engine: Engine) -> None:
        # The checkpoint's chain first: every receipt head it holds then names a row that
        # the later read of the executor's chain must contain.
        try:
            with read_transaction(checkpoint_engine) as conn:
                checkpoint_lines = list(export(conn))
            with read_transaction(ledger_engine) as conn:
                executor_lines = list(export(conn))
        except ChainError as exc:
            verdict.check("audit-chains-reconcile", False, f"export failed: {exc}")
            return
        report = reconcile(checkpoint_lines, executor_lines)
        unanchored = report.consumed > 0 and report.checkpoint_heads == 0
        verdict.check(
            "audit-chains-reconcile",
            report.ok and report.anchored == report.reported and not unanchored,
            "; ".join(str(f) for f in report.findings[:5])
            or (
                f"{report.consumed} approvals consumed, no checkpoint head recorded"
                if unanchored
                else f"{report.reported - report.anchored} reports without an executor head"
            ),
        )

    def _verify(
        self,
        *,
        verdict: Verdict,
        where: str,
        data: bytes,
        item: Issued,
        outcome: str,
        heads: set[tuple[int, str]],
    ) -> None:
        try:
            receipt = verify_receipt(data, self.receipt_keys, int(time.time()))
        except InvalidReceipt as exc:
            verdict.check("receipt-verifies", False, f"{where} of {item.approval_id}: {exc}")
            return
        verdict.check(
            "receipt-verifies",
            receipt.approval_id == item.approval_id
            and receipt.action_hash == item.action_hash
            and receipt.outcome == outcome,
            f"{where} of {item.approval_id} names {receipt.approval_id} {receipt.action_hash}"
            f" {receipt.outcome}, want {outcome}",
        )
        head = (receipt.audit_head.seq, receipt.audit_head.hash)
        verdict.check(
            "receipt-head-in-chain",
            head in heads,
            f"{where} of {item.approval_id}: audit head {head} is not a row of the chain",
        )

    def _receipts(
        self,
        *,
        verdict: Verdict,
        item: Issued,
        end: str,
        row: sa.Row[Any] | None,
        refused: list[sa.Row[Any]],
        heads: set[tuple[int, str]],
    ) -> None:
        if row is not None:
            verdict.check(
                "receipt-present", row.receipt is not None, f"ledger row of {item.approval_id}"
            )
            if row.receipt is not None:
                self._verify(
                    verdict=verdict,
                    where="ledger receipt",
                    data=row.receipt.encode(),
                    item=item,
                    outcome=row.state,
                    heads=heads,
                )
        for r in refused:  # replays on redelivery, or a refusal before consumption
            self._verify(
                verdict=verdict,
                where=f"refusal receipt ({r.code})",
                data=r.receipt.encode(),
                item=item,
                outcome="refused",
                heads=heads,
            )
        if end in _AT_CHECKPOINT:
            outcome = self.rig.view(item.proposal_id).get("outcome") or {}
            verdict.check(
                "checkpoint-verified-receipt",
                outcome.get("receipt_verified") is True,
                f"checkpoint outcome of {item.approval_id}: {outcome.get('receipt_verified')}",
            )
            if outcome.get("receipt"):
                self._verify(
                    verdict=verdict,
                    where="checkpoint's receipt",
                    data=canonical_bytes(outcome["receipt"]),
                    item=item,
                    outcome=end,
                    heads=heads,
                )

    def final(self) -> Verdict:
        """Once per stack, after its last seed: the whole write log again, so a write that
        landed after its seed was judged (a slow request outliving the verdict) or on a
        resource no approval named is caught too."""
        verdict = Verdict()
        per_resource = Counter(w.resource_id for w in self.rig.cloud.writes())
        for rid, count in sorted(per_resource.items()):
            end = self.judged.get(rid)
            verdict.check("final-write-was-approved", end is not None, f"{count} writes on {rid}")
            verdict.check("final-writes<=1", count <= 1, f"{rid}: {count} writes")
            if end is not None:
                verdict.check(
                    "final-ledger-agrees-with-cloud",
                    count in _WRITES_ALLOWED[end],
                    f"{rid} ended {end} but has {count} writes now",
                )
        return verdict
