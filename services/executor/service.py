"""The execute path: verify (1–12), consume (13), re-read (14), write (15), record (16).

:class:`Executor` is the only code that calls a :class:`~airlock.cloud.ports.CloudWriter`.
It takes every dependency as an argument — engine, trusted keys, binding, cloud ports,
receipt signer, clock — so tests run it against in-memory or devcloud clouds with a fake
clock, and the CLI (the composition root) wires the real ones.

The rules it keeps (docs/protocol.md#executor-checks and #ledger):

* every refusal is recorded (refusals table or ledger row, audit event, receipt) and
  causes zero writes;
* the approval is consumed by one INSERT before anything else happens to the cloud;
* ``executing`` is committed before the write, and the write's arguments are rebuilt
  only from the signed action;
* a write whose outcome is unknown is probed, never blindly retried; only a delete is
  re-issued (ECS ``DeleteInstances`` with the same ``ClientToken``, EC2
  ``TerminateInstances``, which is idempotent), while the precondition still holds;
* the outcome, its audit event and its receipt commit in one transaction, conditional
  on still holding the lease.

The checks on live state are pure functions (:mod:`services.executor.checks`); each
outcome, refusal and receipt is written by its :class:`~services.executor.record.Recorder`;
recovery (:mod:`services.executor.recover`) builds on this module, never the reverse.

It must never sign an approval, hold the approval key, or import another service.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable, Container, Mapping
from pathlib import Path
from typing import Final, Literal

from pydantic import ValidationError
from sqlalchemy.engine import Connection, Engine

from airlock import ledger
from airlock.cloud.ports import (
    CloudError,
    CloudReader,
    CloudWriter,
    DefiniteRefusal,
    Ec2Writer,
    EcsWriter,
    WriteResult,
)
from airlock.cloud.tags import ProductionTags
from airlock.events import ExecutorEvent
from airlock.protocol import (
    Binding,
    KeySet,
    RefusalCode,
    Refused,
    verify_bundle,
)
from airlock.store import AuditLog

from .checks import (
    client_token,
    effect_visible,
    no_longer_valid,
    precondition_problem,
    reissue_blocked,
)
from .consume import Consume, RecordAlso, bundle_sha, consumed_event, ledger_row
from .errors import Fenced, OperatorRefusal, ResolutionError, recordable
from .failpoints import Failpoints
from .keys import KeySetVersion, TrustedKeysFile
from .models import LedgerRow, Outcome, State, Work
from .receipts import ReceiptSigner, Resolution
from .record import DETAIL_MAX, Recorder, clip, envelope_text
from .sources import OutcomeSink, beyond_ledger
from .transactions import Transactions

__all__ = ["DEFAULT_LEASE_SECONDS", "Executor", "client_token"]

_log = logging.getLogger("airlock.executor")

#: How long a worker owns a ledger row before another may take it over. Must exceed the
#: longest cloud call (the adapter's timeout), or a slow write ends up in_doubt.
DEFAULT_LEASE_SECONDS: Final = 120
#: The longest name of who resolved an in_doubt row: ``Resolution.by`` in the receipt.
_RESOLVER_MAX: Final = 128


def _as_text(value: object) -> str:
    return value if isinstance(value, str) else repr(value)


def _problems(exc: ValidationError) -> str:
    # Where and what, never the input (the refusal's record holds that, escaped).
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'value'}: {error['msg']}"
        for error in exc.errors()
    )


def _record_nothing(conn: Connection) -> Mapping[str, object]:
    del conn
    return {}


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Executor:
    """Executes verified bundles exactly once against one provider/account/region."""

    def __init__(
        self,
        *,
        engine: Engine,
        keys: KeySet | TrustedKeysFile,
        binding: Binding,
        reader: CloudReader,
        writer: CloudWriter,
        signer: ReceiptSigner,
        clock: Callable[[], int],
        worker_id: str | None = None,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
        failpoints: Failpoints | None = None,
        sink: OutcomeSink | None = None,
        production_tags: ProductionTags | None = ProductionTags(),  # noqa: B008 - frozen
    ) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        self._engine = engine
        self._keys = keys
        self._trusted_sha: str | None = None
        self._trusting = threading.Lock()
        self._binding = binding
        self._reader = reader
        self._writer = writer
        # Asked once: isinstance against a runtime-checkable Protocol walks its members
        # (tens of microseconds), and _plan runs for every execution.
        self._ecs = writer if isinstance(writer, EcsWriter) else None
        self._ec2 = writer if isinstance(writer, Ec2Writer) else None
        self.clock = clock
        self.worker_id = worker_id or default_worker_id()
        self.lease_seconds = lease_seconds
        self._fp = failpoints or Failpoints.inert()
        self._tx = Transactions(engine)
        self._rec = Recorder(
            transactions=self._tx,
            signer=signer,
            binding=binding,
            clock=clock,
            failpoints=self._fp,
            sink=sink,
        )
        self._production = production_tags

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def recorder(self) -> Recorder:
        """Where this executor's outcomes, refusals and receipts are written."""
        return self._rec

    def trusted_keys(self) -> KeySet:
        """The approval keys to verify against now.

        With a :class:`TrustedKeysFile`, the file as it is now (re-read when it changed;
        :class:`TrustedKeysUnavailable` while it is missing or malformed, before
        anything is recorded). Each key set this worker starts trusting is appended to
        the audit chain, so the record shows which keys were trusted when.
        """
        if isinstance(self._keys, KeySet):
            return self._keys
        version = self._keys.current()
        if version.sha256 == self._trusted_sha:
            return version.keys
        with self._trusting:  # one record per key set, whichever thread sees it first
            self._record_trusted(self._keys.path, version)
        return version.keys

    def _record_trusted(self, path: Path, version: KeySetVersion) -> None:
        """Append ``executor.trusted_keys`` for ``version`` of the file at ``path``, unless
        it is the set recorded last (another thread may have recorded it meanwhile)."""
        if version.sha256 != self._trusted_sha:
            now = self.clock()
            with self._tx.begin() as conn:
                self._rec.audit(
                    conn,
                    now,
                    {
                        "type": ExecutorEvent.TRUSTED_KEYS,
                        "worker": self.worker_id,
                        "path": str(path),
                        "sha256": version.sha256,
                        "keys": [
                            {
                                "kid": k.kid,
                                "status": k.status.value,
                                "not_after": k.not_after,
                            }
                            for k in (version.keys[kid] for kid in version.keys)
                        ],
                    },
                )
            _log.info(
                "trusting %d approval key(s) from %s (%s)",
                len(version.keys),
                path,
                version.sha256,
            )
            self._trusted_sha = version.sha256

    # -- the execute path ----------------------------------------------------------------

    def execute(
        self,
        raw: bytes,
        *,
        revoked: Container[str] = frozenset(),
        record_also: RecordAlso | None = None,
    ) -> Outcome:
        """Take one bundle as far as it goes; the ledger records every step.

        Verify (1)–(12), re-read live state and check the precondition (14), then one
        commit before the write: the consume straight into ``executing`` (13, 15), or
        into ``refused`` when the precondition fails. ``record_also`` is called with the
        connection of the one transaction that records what became of the bundle (a
        refusal, a replay, the consume), before it commits: the feed moves its cursor
        there. Raises :class:`LedgerHeld` (nothing recorded) while a ledger hold is in
        force.
        """
        with self._tx.held():  # SQLite: one pooled connection for both commits
            return self._execute(raw, revoked, record_also)

    def _execute(
        self, raw: bytes, revoked: Container[str], record_also: RecordAlso | None
    ) -> Outcome:
        keys = self.trusted_keys()  # before anything is recorded: fails closed
        also = record_also or _record_nothing
        now = self.clock()
        try:
            # (12) here against revocations from outside the ledger only: the ledger's own
            # are checked by the consume, in its transaction (its INSERT, or under the
            # whole chain's lock for a row born refused or claimed), so an execution reads
            # them once. A revoked approval is then refused after its live re-read.
            verified = verify_bundle(raw, keys, self._binding, now, beyond_ledger(revoked))
        except Refused as exc:
            # exc.approval_id is set only for refusals that are properties of an
            # authenticated approval (expired, revoked, another audience...).
            with self._tx.begin() as conn:
                receipt = self._rec.refusal(
                    conn,
                    now,
                    exc.code,
                    exc.detail,
                    bundle_sha(raw),
                    approval_id=exc.approval_id,
                    issued_at=exc.issued_at,
                    also=also,
                )
            return self._rec.report(
                Outcome(exc.approval_id, None, exc.code, detail=clip(exc.detail), receipt=receipt)
            )
        st = verified.statement
        work = Work(
            approval_id=st.approval_id,
            action_hash=verified.action_hash,
            action=verified.action,
            expires_at=st.expires_at,
            owner=self.worker_id,
            epoch=1,
        )
        consume = Consume(verified, raw, work, also)
        try:
            plan = self._plan(work)
        except ValueError as exc:  # unreachable after verify_bundle's allowlist; fail closed
            return self._consume_refused(consume, RefusalCode.E_OPERATION, str(exc))
        action = work.action
        try:  # (14) the live re-read, before anything is committed
            live = self._reader.get_state(action.region, action.resource.type, action.resource.id)
        except CloudError as exc:
            _log.warning("live state of %s unreadable: %s", action.resource.id, exc)
            return self._consume_unread(consume, clip(f"re-read failed: {exc}"))
        problem = precondition_problem(action, live, self._production)
        if problem is not None:
            return self._consume_refused(consume, RefusalCode.E_PRECONDITION, problem)
        # The re-read may have taken seconds: the approval must still allow the write at
        # the moment we commit to it. Checked here (revocations from outside the ledger),
        # and again by the INSERT itself (expiry, revocations recorded in the ledger).
        now = self.clock()
        late = no_longer_valid(work, now, beyond_ledger(revoked))
        if late is not None:
            with self._tx.begin() as conn:
                outcome = self._rec.not_consumed(conn, consume, now, late[0], late[1])
            return self._rec.report(outcome)
        self._fp.hit("before_consume")
        # (13) + (15) one INSERT, straight into executing: the UNIQUE keys (nonce,
        # approval_id, action_hash) decide single use, and the lease covers the call.
        refused = self._consume_executing(consume, plan[0], now)
        if refused is not None:
            return self._rec.report(refused)
        self._fp.hit("after_executing_commit")
        return self._fenced_safe(work, lambda: self._call(work, plan, revoked))

    def _consume_executing(self, consume: Consume, call: str, now: int) -> Outcome | None:
        """The one commit before the write; None once committed, else the refusal
        recorded instead (replay, revoked, expired), or :class:`LedgerHeld`."""
        work = consume.work
        row = ledger_row(consume, State.EXECUTING, now=now, lease_expires=now + self.lease_seconds)
        with self._tx.begin() as conn:
            # A lane of the chain before any row lock (no lock cycles): it excludes the
            # whole chain's lock, which a hold and a revocation are recorded under, so
            # none slips in beside the INSERT; other consumes append in other lanes and
            # commit alongside (docs/protocol.md#audit-chain).
            AuditLog.lock_lane(conn)
            if ledger.consume(conn, row, now=now):
                # One event for the transaction: consumed, straight into executing.
                event = consumed_event(consume.verified, work, consume.also(conn), call=call)
                self._rec.audit(conn, now, event)
                return None
        # Nothing inserted, nothing written: why is asked under the whole chain, which a
        # refusal's report decision needs (a lane cannot be widened to it in place).
        with self._tx.begin() as conn:
            AuditLog.lock(conn)
            return self._rec.not_consumed(conn, consume, now)

    def _consume_refused(self, consume: Consume, code: RefusalCode, detail: str) -> Outcome:
        """Consume into ``refused`` (one INSERT, with its outcome and receipt)."""
        outcome = self._rec.consume_refused(consume, code, detail)
        self._fp.hit("after_outcome_commit")
        return self._rec.report(outcome)

    def _consume_unread(self, consume: Consume, detail: str) -> Outcome:
        """The live state could not be read: consume into ``claimed`` with the lease ended,
        so that the next recovery pass re-checks and continues it (no write attempted).

        Not left unrecorded for the feed to redeliver at once: a provider that keeps
        refusing (throttling, a RAM policy) is then asked once a recovery pass, not once
        a loop turn, each time with two events.
        """
        work = consume.work
        now = self.clock()
        row = ledger_row(consume, State.CLAIMED, now=now, lease_expires=now)
        with self._tx.begin() as conn:
            AuditLog.lock(conn)
            if ledger.revoked(conn, work.approval_id) or not ledger.consume(conn, row, now=now):
                outcome = self._rec.not_consumed(conn, consume, now)
            else:
                event = consumed_event(consume.verified, work, consume.also(conn))
                self._rec.audit(conn, now, event)
                self._rec.audit(
                    conn,
                    now,
                    {
                        "type": ExecutorEvent.LEASE_RELEASED,
                        "approval_id": work.approval_id,
                        "owner": work.owner,
                        "epoch": work.epoch,
                        "detail": detail,
                    },
                )
                return Outcome(work.approval_id, State.CLAIMED, detail=detail)
        return self._rec.report(outcome)

    def continue_claimed(self, work: Work, *, revoked: Container[str] = frozenset()) -> Outcome:
        """From ``claimed``: re-check expiry and revocation, (14) re-read, (15) write."""
        late = no_longer_valid(work, self.clock(), revoked)
        if late is not None:
            return self._rec.finish(
                work, State.CLAIMED, State.REFUSED, code=late[0], detail=late[1]
            )
        action = work.action
        try:
            plan = self._plan(work)
        except ValueError as exc:  # unreachable after verify_bundle's allowlist; fail closed
            return self._rec.finish(
                work, State.CLAIMED, State.REFUSED, code=RefusalCode.E_OPERATION, detail=str(exc)
            )
        try:
            live = self._reader.get_state(action.region, action.resource.type, action.resource.id)
        except CloudError as exc:
            # No write attempted: the row stays claimed. The first time (the consuming
            # worker's, epoch 1) its lease ends now, so the next recovery pass
            # (AIRLOCK_EXECUTOR_RECOVER_EVERY) re-checks and continues it — not the lease's
            # end, minutes away, for what is most often a passing 503. A read that fails
            # again in recovery keeps its lease: a provider that keeps refusing (throttling,
            # a RAM policy) is asked once a lease, not once a pass, each with two events.
            _log.warning("live state of %s unreadable: %s", action.resource.id, exc)
            detail = clip(f"re-read failed: {exc}")
            if work.epoch != 1:
                return Outcome(work.approval_id, State.CLAIMED, detail=detail)
            now = self.clock()
            with self._tx.begin() as conn:
                AuditLog.lock(conn)  # the chain lock before the row lock, as everywhere
                if ledger.release(
                    conn, approval_id=work.approval_id, owner=work.owner, epoch=work.epoch, now=now
                ):
                    self._rec.audit(
                        conn,
                        now,
                        {
                            "type": ExecutorEvent.LEASE_RELEASED,
                            "approval_id": work.approval_id,
                            "owner": work.owner,
                            "epoch": work.epoch,
                            "detail": detail,
                        },
                    )
            return Outcome(work.approval_id, State.CLAIMED, detail=detail)
        problem = precondition_problem(action, live, self._production)
        if problem is not None:
            return self._rec.finish(
                work,
                State.CLAIMED,
                State.REFUSED,
                code=RefusalCode.E_PRECONDITION,
                detail=problem,
            )
        # The re-read may have taken seconds: the approval must still allow the write at
        # the moment we commit to it. Checked here (revocations from every source), and
        # again by the UPDATE itself (expiry, revocations recorded in the ledger).
        now = self.clock()
        late = no_longer_valid(work, now, revoked)
        if late is not None:
            return self._rec.finish(
                work, State.CLAIMED, State.REFUSED, code=late[0], detail=late[1]
            )
        # (15) commit executing before the call, renewing the lease for the call's length.
        with self._tx.begin() as conn:
            AuditLog.lock(conn)  # the chain lock before the row lock, as everywhere
            refused = ledger.begin_executing(
                conn,
                approval_id=work.approval_id,
                owner=work.owner,
                epoch=work.epoch,
                now=now,
                lease_expires=now + self.lease_seconds,
            )
            if refused is None:
                self._rec.audit(
                    conn,
                    now,
                    {
                        "type": ExecutorEvent.EXECUTING,
                        "approval_id": work.approval_id,
                        "owner": work.owner,
                        "epoch": work.epoch,
                        "call": plan[0],
                    },
                )
        if refused is not None:
            why = "expired" if refused is RefusalCode.E_EXPIRED else "revoked"
            return self._rec.finish(
                work,
                State.CLAIMED,
                State.REFUSED,
                code=refused,
                detail=f"{why} before the write (seen at the executing commit)",
            )
        self._fp.hit("after_executing_commit")
        return self._call(work, plan, revoked)

    def reverify(self, row: LedgerRow, revoked: Container[str] = frozenset()) -> Refused | None:
        """Steps 1–12 again on a ledger row's stored bundle, with the trusted keys, clock
        and revocations of now: why it would be refused today, or None.

        Recovery asks this before it continues a row another worker left: a key revoked,
        an approval revoked or expired since the consume must stop the write then too.
        """
        try:
            verify_bundle(row.bundle, self.trusted_keys(), self._binding, self.clock(), revoked)
        except Refused as exc:
            return exc
        return None

    def refuse_claimed(self, work: Work, refusal: Refused) -> Outcome:
        """Record ``claimed`` → ``refused`` for a row that no longer verifies."""
        return self._rec.finish(
            work,
            State.CLAIMED,
            State.REFUSED,
            code=refusal.code,
            detail=f"re-verified before the write: {refusal.detail}",
        )

    def settle_executing(
        self,
        work: Work,
        reason: str,
        *,
        may_reissue: bool,
        revoked: Container[str] = frozenset(),
    ) -> Outcome:
        """From ``executing`` (a write may have happened): probe, never blind-retry.

        An ECS delete whose effect is not visible is re-issued with its ClientToken only
        while the approval would still allow the write now — unexpired, not revoked, the
        precondition (status, protect tags) still true — because when the first call
        never reached the provider, the re-issue is the one and only write.
        """
        action = work.action
        try:
            live = self._reader.get_state(action.region, action.resource.type, action.resource.id)
        except CloudError as exc:
            _log.warning("probe of %s failed: %s", action.resource.id, exc)
            return Outcome(work.approval_id, State.EXECUTING, detail=clip(f"probe failed: {exc}"))
        if effect_visible(action, live):
            return self._rec.finish(
                work,
                State.EXECUTING,
                State.SUCCEEDED,
                verified=True,
                detail=clip(f"effect verified in live state ({reason})"),
            )
        if may_reissue and action.operation == "delete":
            blocked = reissue_blocked(work, live, self.clock(), revoked, self._production)
            if blocked is not None:
                return self._rec.finish(
                    work,
                    State.EXECUTING,
                    State.IN_DOUBT,
                    detail=clip(
                        f"effect not visible; a write may have happened ({reason}); "
                        f"not re-issued: {blocked}"
                    ),
                )
            # ECS DeleteInstances is idempotent by ClientToken: the provider runs a token
            # once, so re-issuing the same token cannot delete twice. EC2
            # TerminateInstances has no token and needs none: terminating a terminated
            # instance changes nothing.
            name, call = self._plan(work)
            try:
                result = call()
            except CloudError as exc:
                return self.settle_executing(
                    work, f"{reason}; re-issue of {name} failed: {exc}", may_reissue=False
                )
            return self._rec.finish(
                work,
                State.EXECUTING,
                State.SUCCEEDED,
                request_id=result.request_id,
                detail=f"re-issued {name} ({reason})",
            )
        return self._rec.finish(
            work,
            State.EXECUTING,
            State.IN_DOUBT,
            detail=clip(f"effect not visible; a write may have happened ({reason})"),
        )

    def _plan(self, work: Work) -> tuple[str, Callable[[], WriteResult]]:
        """The write, with arguments taken only from the signed action (15)."""
        a = work.action
        region, rid = a.region, a.resource.id
        writer, ecs, ec2 = self._writer, self._ecs, self._ec2
        match (a.resource.type, a.operation):
            case ("ecs.instance", "stop") if ecs is not None:
                mode = a.params["stopped_mode"]
                if not isinstance(mode, str):
                    raise ValueError("stopped_mode must be a string")
                return "ecs.StopInstance", lambda: ecs.stop_ecs(region, rid, stopped_mode=mode)
            case ("ecs.instance", "delete") if ecs is not None:
                token = client_token(work.approval_id)
                return "ecs.DeleteInstances", lambda: ecs.delete_ecs(
                    region, rid, client_token=token
                )
            case ("ec2.instance", "stop") if ec2 is not None:
                return "ec2.StopInstances", lambda: ec2.stop_ec2(region, rid)
            case ("ec2.instance", "delete") if ec2 is not None:
                return "ec2.TerminateInstances", lambda: ec2.terminate_ec2(region, rid)
            case ("rds.instance", "stop"):
                return "rds.StopDBInstance", lambda: writer.stop_rds(region, rid)
        # The binding admits one provider, and the composition root gives its writer: a
        # type this writer cannot write is refused, never sent to another API.
        raise ValueError(f"no write for {a.resource.type} {a.operation} with this writer")

    def _call(
        self,
        work: Work,
        plan: tuple[str, Callable[[], WriteResult]],
        revoked: Container[str] = frozenset(),
    ) -> Outcome:
        name, call = plan
        result: WriteResult | None = None
        refused: DefiniteRefusal | None = None
        unknown: Exception | None = None
        try:
            result = call()
        except DefiniteRefusal as exc:
            refused = exc
        except Exception as exc:  # any other failure may have reached the provider: probe
            unknown = exc
        self._fp.hit("after_cloud_call")
        if result is not None:
            return self._rec.finish(
                work,
                State.EXECUTING,
                State.SUCCEEDED,
                request_id=result.request_id,
                detail=f"{name} accepted",
            )
        if refused is not None:
            return self._rec.finish(
                work,
                State.EXECUTING,
                State.FAILED,
                request_id=refused.request_id or None,
                detail=clip(f"{name} refused: {refused.code or type(refused).__name__}: {refused}"),
            )
        return self.settle_executing(
            work,
            clip(f"{name} outcome unknown: {type(unknown).__name__}: {unknown}"),
            may_reissue=True,
            revoked=revoked,
        )

    def _fenced_safe(self, work: Work, step: Callable[[], Outcome]) -> Outcome:
        try:
            return step()
        except Fenced as exc:
            _log.warning("%s", exc)
            with self._tx.begin() as conn:
                row = ledger.get(conn, work.approval_id)
            state = None if row is None else row.state
            return Outcome(work.approval_id, state, detail=f"lease lost: {exc}")

    # -- recovery's take-over and human resolution --------------------------------------

    def take_over(self, row: LedgerRow) -> Work | None:
        """Bump the epoch of an expired row and own it, or None if someone else did."""
        now = self.clock()
        with self._tx.begin() as conn:
            AuditLog.lock(conn)  # before the row lock: a finishing owner takes them so too
            if not ledger.take_over(
                conn, row, owner=self.worker_id, now=now, lease_expires=now + self.lease_seconds
            ):
                return None
            self._rec.audit(
                conn,
                now,
                {
                    "type": ExecutorEvent.LEASE_TAKEN_OVER,
                    "approval_id": row.approval_id,
                    "state": row.state.value,
                    "from_owner": row.lease_owner,
                    "from_epoch": row.lease_epoch,
                    "owner": self.worker_id,
                    "epoch": row.lease_epoch + 1,
                },
            )
        return Work.from_row(row, owner=self.worker_id, epoch=row.lease_epoch + 1)

    def resolve(self, approval_id: str, *, happened: bool, by: str, note: str) -> Outcome:
        """Record a human's audited decision on an ``in_doubt`` row (with a receipt).

        ``approval_id`` is the row's approval id, or the id of the proposal it approved
        (``prop_…``): that proposal's one in_doubt row.

        A refused decision (:class:`ResolutionError`) changes nothing but is recorded in
        the audit chain too (``executor.resolution_refused``, with its code): an attempt
        to settle what happened to a write is part of what happened.
        """
        try:
            return self._resolve(approval_id, happened=happened, by=by, note=note)
        except ResolutionError as exc:
            with self._tx.begin() as conn:
                self._rec.audit(
                    conn,
                    self.clock(),
                    {
                        "type": ExecutorEvent.RESOLUTION_REFUSED,
                        "code": exc.code.value,
                        # Whatever was passed, as text: the record of a refusal must not
                        # fail on the input it refuses.
                        "approval_id": recordable(_as_text(approval_id)),
                        "decision": "happened" if happened is True else "did_not_happen",
                        "by": recordable(_as_text(by).strip()),
                        "detail": clip(str(exc)),
                    },
                )
            raise

    def _resolve(self, approval_id: str, *, happened: bool, by: str, note: str) -> Outcome:
        # Every check on the input comes before anything is read or written, and each
        # refusal is a ResolutionError, which resolve() records: never a ValidationError
        # from building the receipt, which would leave no record and no stable code.
        if not all(isinstance(v, str) for v in (approval_id, by, note)) or not isinstance(
            happened, bool
        ):
            raise ResolutionError(
                OperatorRefusal.E_INVALID, "an approval id, who decided and a note are text"
            )
        by = by.strip()
        if not by:
            raise ResolutionError(OperatorRefusal.E_INVALID, "a resolution names who decided")
        if len(by) > _RESOLVER_MAX:
            raise ResolutionError(
                OperatorRefusal.E_INVALID,
                f"who decided is named in at most {_RESOLVER_MAX} characters",
            )
        if len(note) > DETAIL_MAX:
            raise ResolutionError(OperatorRefusal.E_INVALID, "the note is too long")
        now = self.clock()
        decision: Literal["happened", "did_not_happen"] = (
            "happened" if happened else "did_not_happen"
        )
        try:
            resolution = Resolution(decision=decision, by=by, at=now, note=note)
        except ValidationError as exc:
            # The receipt's model decides what a resolution may hold; whatever it refuses
            # that the checks above do not name is refused like them.
            raise ResolutionError(
                OperatorRefusal.E_INVALID, f"not a valid resolution: {_problems(exc)}"
            ) from None
        with self._tx.begin() as conn:
            AuditLog.lock(conn)
            row: LedgerRow | None
            if approval_id.startswith("prop_"):
                row = _in_doubt_of_proposal(conn, approval_id)
                approval_id = row.approval_id
            else:
                row = ledger.get(conn, approval_id)
            if row is None:
                raise ResolutionError(
                    OperatorRefusal.E_NOT_FOUND, f"no ledger row for {approval_id}"
                )
            if row.state is not State.IN_DOUBT:
                raise ResolutionError(
                    OperatorRefusal.E_NOT_IN_DOUBT, f"{approval_id} is {row.state}, not in_doubt"
                )
            head = self._rec.audit(
                conn,
                now,
                {
                    "type": ExecutorEvent.RESOLVED,
                    "approval_id": approval_id,
                    "action_hash": row.action_hash,
                    "decision": decision,
                    "by": by,
                    "note": note,
                },
            )
            receipt = self._rec.receipt(
                head,
                now,
                approval_id=approval_id,
                action_hash=row.action_hash,
                outcome="resolved",
                request_id=row.cloud_request_id,
                detail=f"in_doubt resolved by {by}: {decision}",
                resolution=resolution,
            )
            if not ledger.insert_resolution(
                conn,
                {
                    "approval_id": approval_id,
                    "decision": decision,
                    "decided_by": by,
                    "decided_at": now,
                    "note": note,
                    "receipt": envelope_text(receipt),
                },
            ):
                raise ResolutionError(
                    OperatorRefusal.E_ALREADY_RESOLVED, f"{approval_id} was already resolved"
                )
            ledger.queue_receipt(conn, kind="resolution", approval_id=approval_id, now=now)
        return self._rec.report(
            Outcome(approval_id, State.IN_DOUBT, detail=f"resolved: {decision}", receipt=receipt)
        )


def _in_doubt_of_proposal(conn: Connection, proposal_id: str) -> LedgerRow:
    """The one in_doubt row of ``proposal_id``; a ResolutionError names why there is none."""
    rows = ledger.of_proposal(conn, proposal_id)
    doubtful = [r for r in rows if r.state is State.IN_DOUBT]
    if len(doubtful) == 1:
        return doubtful[0]
    if not rows:
        raise ResolutionError(OperatorRefusal.E_NOT_FOUND, f"no ledger row for {proposal_id}")
    if not doubtful:
        states = ", ".join(f"{r.approval_id} is {r.state}" for r in rows)
        raise ResolutionError(OperatorRefusal.E_NOT_IN_DOUBT, f"{proposal_id}: {states}")
    raise ResolutionError(
        OperatorRefusal.E_INVALID,
        f"{proposal_id} has {len(doubtful)} in_doubt rows: name one by its approval id",
    )
