"""The gate: propose a call, await its approval, then verify, consume, re-read the
premises, call once and report (docs/gate.md).

A call of a guarded function goes, in order::

    propose      submit the call at the effect's proposal id (derived from audience and
                 effect key); when the id is taken, read it and adopt it only if it
                 names this very call, else EffectKeyConflict; follow a person's edit
                 (``superseded_by``) to the proposal that replaced it
    decide       wait up to the guard's ``wait`` for a decision, else Pending
    (1)–(12)     verify the bundle (airlock.protocol.verify_bundle, ToolBinding)
    (a)          the approved call is this call (tool, arguments, target, effect key),
                 or an edit of it the guard takes (``editable``; same tool, target and
                 effect key): then the edited arguments are what runs
    (13)         consume it in the ledger: one INSERT, UNIQUE on approval, nonce, action
                 hash and effect key; a lost race or a second use is E_REPLAY
    (14)         re-read the premises: any moved is E_PREMISES with its changes
    (15)         commit ``executing`` (refused if expired or revoked meanwhile)
    call         once, with the effect key as ``idempotency_key`` when accepted
    (16)         the outcome, its audit event and signed receipt in one transaction;
                 the receipt is delivered after the commit (the outbox keeps it)

Every refusal is recorded (a refusal or ledger row, an audit event, a receipt) before it
is raised, and the function is never called after one. Recovery (:meth:`Gate.recover`)
never calls a function: it asks the guard's ``lookup`` or leaves the row ``in_doubt``.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import os
import secrets
import socket
import ssl
import time
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

import httpx
from sqlalchemy.engine import Engine

from airlock import ledger, store
from airlock.api import Proposal
from airlock.apiclient import checkpoint_http
from airlock.events import ExecutorEvent
from airlock.ledger import Fenced, State
from airlock.protocol import (
    KeySet,
    ToolBinding,
    ToolCall,
    VerifiedToolCall,
    b64encode,
    canonical_bytes,
    verify_bundle,
)
from airlock.protocol import Refused as ProtocolRefused
from airlock.protocol import errors as protocol_errors
from airlock.store import AuditLog, make_engine

from ._call import BoundCall, Guard, Named, Risk, changed, proposal_id_of
from ._checkpoint import CheckpointClient, Submitted
from ._config import GateConfig
from ._failpoints import Failpoints
from ._operator import Operator, Settled, Status
from ._outbox import Outbox
from ._receipts import ReceiptSigner
from ._record import Recorder, Work, ask, clip
from .errors import (
    ConfigError,
    EffectKeyConflict,
    GateCode,
    InDoubt,
    Pending,
    Refused,
    Rejected,
    Unavailable,
)

__all__ = ["Gate", "Settled", "Status"]

_log = logging.getLogger("airlock.gate")
T = TypeVar("T")

#: Proposal states in which the checkpoint still decides.
_UNDECIDED: Final = frozenset({"pending"})
#: States of a proposal whose approval was used (or refused) already: never run again.
_SETTLED: Final = frozenset({"executed", "failed", "in_doubt", "refused"})
#: States without an approval to run, and the code the gate refuses them with.
_CLOSED: Final = {
    "expired": protocol_errors.RefusalCode.E_EXPIRED.value,
    "withdrawn": GateCode.E_WITHDRAWN.value,
    "denied": GateCode.E_DENIED.value,
    "revoked": protocol_errors.RefusalCode.E_REVOKED.value,
    "lapsed": protocol_errors.RefusalCode.E_EXPIRED.value,
}
#: The most edits of one call the gate follows (each a proposal superseding the last).
_EDITS_MAX: Final = 16
#: The longest wait between two reads of an undecided proposal.
_POLL_MAX_S: Final = 2.0


class Gate:
    """A gate in front of the functions it guards (see the module docstring).

    Args:
        config: where the checkpoint, the keys and the ledger are (:class:`GateConfig`).
        http: an ``httpx.Client`` whose base URL is the checkpoint (tests); by default
            one with TLS verified and no redirects (:func:`airlock.apiclient.checkpoint_http`).
        now: the clock, Unix seconds.

    Raises:
        ConfigError: the key set, the receipt key or the ledger URL is not usable.
    """

    def __init__(
        self,
        config: GateConfig,
        *,
        http: httpx.Client | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._now = now
        self._keys = _load_keys(config.keys)
        self._signer = ReceiptSigner.from_file(config.receipt_key)
        try:
            self._engine: Engine = make_engine(config.ledger_url)
        except store.ConfigError as exc:
            raise ConfigError(f"E_CONFIG: AIRLOCK_GATE_LEDGER_URL: {exc}") from None
        ledger.migrate(self._engine)
        self._owns_http = http is None
        if http is None:
            http = checkpoint_http(
                config.checkpoint_url, verify=_verify(config.ca_file), timeout=10.0
            )
        self._client = CheckpointClient(http, config.token)
        self._http = http
        self._binding = ToolBinding(config.audience)
        self._rec = Recorder(self._engine, self._signer, config.audience)
        self._fp = Failpoints.from_env(os.environ)
        self._guards: dict[str, Guard] = {}
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._outbox = Outbox(self._engine, self._client, self._clock)
        self._operator = Operator(
            engine=self._engine,
            recorder=self._rec,
            keys=self._keys,
            binding=self._binding,
            guards=self._guards,
            clock=self._clock,
            worker_id=self.worker_id,
            lease_seconds=config.lease_seconds,
            outbox=self._outbox,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Gate:
        """A gate configured from ``AIRLOCK_GATE_*`` (docs/gate.md#settings)."""
        return cls(GateConfig.from_env(environ))

    def __repr__(self) -> str:
        return f"Gate(audience={self.config.audience!r}, receipt_keyid={self._signer.keyid!r})"

    @property
    def engine(self) -> Engine:
        """The ledger database."""
        return self._engine

    @property
    def receipt_keys(self) -> KeySet:
        """The key set that verifies this gate's receipts (its public receipt key)."""
        return self._signer.key_set()

    def close(self) -> None:
        """Release the ledger's connections and the HTTP client this gate made."""
        self._engine.dispose()
        if self._owns_http:
            self._http.close()

    def _clock(self) -> int:
        return int(self._now())

    # -- the decorator ------------------------------------------------------------------

    def guard(
        self,
        *,
        risk: Risk,
        target: Named,
        effect_key: Named,
        premises: Callable[..., Mapping[str, Any]] | None = None,
        lookup: Callable[[str], bool] | None = None,
        summary: Named | None = None,
        tool: str | None = None,
        wait: float = 0.0,
        editable: bool = False,
    ) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """Guard a function (sync or ``async def``): each call is proposed, and runs
        once approved, at most once per effect key.

        Args:
            risk: ``low``, ``medium`` or ``high`` (a person types the target for high).
            target: the one thing the call acts on; a str or a function of the call's
                arguments.
            effect_key: the business identity of the effect (``refund:order-881``): one
                effect per key, ever. A str or a function of the arguments.
            premises: a function of the arguments giving the facts the decision rests on
                (names to JSON scalars); read when proposing and again right before the
                call.
            lookup: ``lookup(effect_key)`` says whether the effect happened; it settles a
                call that raised or was interrupted. Without it such a call is
                ``failed`` (it raised) or ``in_doubt`` (interrupted).
            summary: one line a person reads (default ``"<tool> on <target>"``).
            tool: the tool's name (default the function's).
            wait: seconds to wait for a decision before raising :class:`Pending`.
            editable: run a call a person edited before approving it, with the edited
                arguments (docs/gate.md#edits); by default such an approval is refused
                ``E_ARGUMENTS`` and the function is not called.

        The function's ``idempotency_key`` parameter, if it has one, is not an argument
        of the call: it receives the effect key. A call raises :class:`Pending`,
        :class:`Rejected`, :class:`Refused`, :class:`EffectKeyConflict`,
        :class:`InDoubt` or :class:`Unavailable` without calling the function, TypeError
        for an argument that is not strict JSON (a float), or whatever the function
        raises.
        """

        def decorate(fn: Callable[..., T]) -> Callable[..., T]:
            spec = Guard.of(
                fn,
                tool=tool,
                risk=risk,
                target=target,
                effect_key=effect_key,
                premises=premises,
                lookup=lookup,
                summary=summary,
                wait=wait,
                editable=editable,
            )
            if spec.tool in self._guards:
                # Recovery finds a call's lookup by its tool: one guard per tool.
                raise ValueError(f"E_CONFIG: tool {spec.tool!r} is guarded twice on this gate")
            self._guards[spec.tool] = spec
            if spec.is_async:
                return functools.wraps(fn)(self._async_wrapper(spec))  # type: ignore[return-value]

            @functools.wraps(fn)
            def call(*args: Any, **kwargs: Any) -> T:
                work, run = self._before_call(spec, spec.bind(args, kwargs))
                try:
                    value = fn(*run.args, **run.kwargs)
                except BaseException as exc:
                    self._after_raise(spec, work, exc)
                    raise
                self._after_return(spec, work)
                return value

            return call

        return decorate

    def _async_wrapper(self, spec: Guard) -> Callable[..., Coroutine[Any, Any, Any]]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            bound = spec.bind(args, kwargs)
            # The ledger and the checkpoint are blocking I/O: off the event loop.
            work, run = await asyncio.to_thread(self._before_call, spec, bound)
            try:
                value = await spec.fn(*run.args, **run.kwargs)
            except BaseException as exc:
                await asyncio.to_thread(self._after_raise, spec, work, exc)
                raise
            await asyncio.to_thread(self._after_return, spec, work)
            return value

        return call

    # -- before the call ----------------------------------------------------------------

    def _before_call(self, spec: Guard, call: BoundCall) -> tuple[Work, BoundCall]:
        """Propose, await, verify, consume, re-read, commit ``executing``: the row this
        process now holds and the call to make (``call``, or a person's edit of it), or
        an Error (the function is then never called)."""
        proposal = self._proposal(spec, call)
        proposal = self._await_decision(spec, proposal)
        try:
            return self._run_approved(spec, call, proposal)
        except BaseException:
            if proposal.approval is not None:  # a refusal's receipt, if it has one
                self._outbox.deliver_quietly(proposal.approval.approval_id)
            raise

    def _proposal(self, spec: Guard, call: BoundCall) -> Proposal:
        # Propose first, read only when the id is taken: a read of an id the checkpoint
        # does not know is a refusal it records and charges to the token's rate limit.
        pid = proposal_id_of(self.config.audience, call.effect_key)
        tool_call = spec.tool_call(
            call,
            proposal_id=pid,
            audience=self.config.audience,
            proposed_by=self.config.proposed_by,
            now=self._clock(),
        )
        submitted, proposal = self._client.submit(tool_call)
        if submitted is Submitted.DENIED:
            raise self._refuse_unsigned(GateCode.E_DENIED, "the policy denied it", pid)
        if submitted is Submitted.DUPLICATE_OPEN:
            raise EffectKeyConflict(
                call.effect_key, pid, "another open proposal holds this effect key"
            )
        if proposal is None:
            # CONFLICT: this id was proposed before (an earlier call, another process),
            # with other premises or time: read it and adopt it if it is this call.
            proposal = self._client.proposal(pid)
            if proposal is None:
                raise Unavailable(f"E_UNAVAILABLE: {pid} was submitted and is not found")
        proposal = self._follow(proposal)
        if proposal.approval is not None:
            # Decided: the signed bytes say what was approved, not this text; a call
            # other than this one is refused E_ARGUMENTS once they verify.
            return proposal
        try:
            proposed = ToolCall.from_json_bytes(proposal.action_jcs.encode("utf-8"))
        except ProtocolRefused as exc:
            raise EffectKeyConflict(call.effect_key, pid, f"not a tool call: {exc}") from None
        if proposed.audience != self.config.audience or not (
            call.same_as(spec.tool, proposed)
            # A person's edit: checked against the guard when it is approved.
            or (proposal.id != pid and _same_effect(spec, call, proposed))
        ):
            raise EffectKeyConflict(
                call.effect_key, pid, "its proposal names another tool, argument or target"
            )
        return proposal

    def _await_decision(self, spec: Guard, proposal: Proposal) -> Proposal:
        deadline = time.monotonic() + spec.wait
        delay = 0.1
        while proposal.state in _UNDECIDED:
            left = deadline - time.monotonic()
            if left <= 0:
                url = f"{self.config.checkpoint_url.rstrip('/')}/v1/proposals/{proposal.id}"
                raise Pending(proposal.id, url, proposal.state)
            time.sleep(min(delay, left))
            delay = min(delay * 2, _POLL_MAX_S)
            found = self._client.proposal(proposal.id)
            if found is None:
                raise Unavailable(f"E_UNAVAILABLE: {proposal.id} is no longer found")
            proposal = self._follow(found)
        if proposal.state == "rejected":
            rejection = proposal.rejection
            reason, note, by = (
                (rejection.reason_code, rejection.note, rejection.by)
                if rejection is not None
                else ("", "", "")
            )
            self._audit_refusal(GateCode.E_REJECTED, f"rejected by {by}: {reason}", proposal.id)
            raise Rejected(proposal.id, reason, note, by)
        if proposal.approval is None:
            code = _CLOSED.get(proposal.state)
            if code is None:
                raise Unavailable(f"E_UNAVAILABLE: {proposal.id} is {proposal.state!r}")
            raise self._refuse_unsigned(code, f"the proposal is {proposal.state}", proposal.id)
        return proposal

    def _follow(self, proposal: Proposal) -> Proposal:
        """The proposal a person's edit put in place of ``proposal`` (withdrawn, with
        ``superseded_by``), link by link; ``proposal`` itself when nobody edited it."""
        for _ in range(_EDITS_MAX):
            if proposal.state != "withdrawn" or proposal.superseded_by is None:
                return proposal
            found = self._client.proposal(proposal.superseded_by)
            if found is None:
                raise Unavailable(f"E_UNAVAILABLE: {proposal.superseded_by} is not found")
            proposal = found
        raise Unavailable(f"E_UNAVAILABLE: {proposal.id} was edited over {_EDITS_MAX} times")

    def _run_approved(
        self, spec: Guard, call: BoundCall, proposal: Proposal
    ) -> tuple[Work, BoundCall]:
        approval = proposal.approval
        assert approval is not None  # _await_decision returns only a proposal with one
        raw = canonical_bytes(
            {
                "action": b64encode(proposal.action_jcs.encode("utf-8")),
                "envelope": approval.envelope,
            }
        )
        bundle_sha = "sha256:" + hashlib.sha256(raw).hexdigest()
        pid = proposal.id
        now = self._clock()
        revoked = {approval.approval_id} if approval.revoked_at is not None else set()
        # (1)-(12)
        try:
            verified = verify_bundle(raw, self._keys, self._binding, now, revoked)
        except ProtocolRefused as exc:
            raise self._refuse_bundle(
                exc.code.value, exc.detail, bundle_sha, pid, approval_id=exc.approval_id
            ) from None
        st = verified.statement
        run = self._approved_call(spec, call, verified, pid, bundle_sha)
        if proposal.state in _SETTLED:
            self._settled(verified, proposal.state, bundle_sha)
        if proposal.state != "approved":  # revoked or lapsed, by the checkpoint's word
            raise self._refuse_bundle(
                _CLOSED.get(proposal.state, GateCode.E_NOT_APPROVED.value),
                f"the proposal is {proposal.state}",
                bundle_sha,
                pid,
                approval_id=st.approval_id,
                action_hash=verified.action_hash,
            )
        work = self._consume(verified, raw, bundle_sha, now)
        self._fp.hit("after_consume")
        # (14) the premises, right before the call
        try:
            current = spec.read_premises(run)
        except Exception as exc:
            self._finish_quietly(
                work,
                State.CLAIMED,
                State.REFUSED,
                code=GateCode.E_PREMISES,
                detail=f"the premises could not be read: {type(exc).__name__}",
            )
            raise
        changes = changed(verified.action.premises, current)
        if changes:
            detail = "premises moved: " + ", ".join(
                f"{c.field} was {c.was!r}, now {c.now!r}" for c in changes
            )
            self._finish_quietly(
                work, State.CLAIMED, State.REFUSED, code=GateCode.E_PREMISES, detail=detail
            )
            raise Refused(GateCode.E_PREMISES, clip(detail), pid, changes)
        # (15) commit executing, conditional on the lease, expiry and revocations
        now = self._clock()
        with self._engine.begin() as conn:
            AuditLog.lock(conn)
            late = ledger.begin_executing(
                conn,
                approval_id=work.approval_id,
                owner=work.owner,
                epoch=work.epoch,
                now=now,
                lease_expires=now + self.config.lease_seconds,
            )
            if late is None:
                self._rec.audit(
                    conn,
                    now,
                    {
                        "type": ExecutorEvent.EXECUTING,
                        "approval_id": work.approval_id,
                        "owner": work.owner,
                        "epoch": work.epoch,
                        "call": spec.tool,
                    },
                )
        if late is not None:
            detail = f"{late.value} before the call (seen at the executing commit)"
            self._finish_quietly(work, State.CLAIMED, State.REFUSED, code=late.value, detail=detail)
            raise Refused(late.value, detail, pid)
        self._fp.hit("after_executing")
        return work, run

    def _approved_call(
        self,
        spec: Guard,
        call: BoundCall,
        verified: VerifiedToolCall,
        pid: str,
        bundle_sha: str,
    ) -> BoundCall:
        """(a) The call to make: ``call`` when the approval is for it, or a person's edit
        of it that the guard takes (docs/gate.md#edits); else refused ``E_ARGUMENTS``."""
        if call.same_as(spec.tool, verified.action):
            return call
        why = "the approved call names another tool, argument, target or effect key"
        # Only a proposal reached through superseded_by is an edit: other arguments
        # approved under the call's own proposal id are not.
        if pid != proposal_id_of(self.config.audience, call.effect_key):
            try:
                return spec.edited(call, verified.action)
            except ValueError as exc:
                why = str(exc)
        raise self._refuse_bundle(
            GateCode.E_ARGUMENTS,
            why,
            bundle_sha,
            pid,
            approval_id=verified.statement.approval_id,
            action_hash=verified.action_hash,
        )

    def _settled(self, verified: VerifiedToolCall, state: str, bundle_sha: str) -> None:
        """The checkpoint says this approval was used already: never run it again. An
        ``in_doubt`` row here is :class:`InDoubt`; anything else is a replay."""
        st = verified.statement
        with self._engine.connect() as conn:
            row = ledger.get(conn, st.approval_id)
        if row is not None and row.state is State.IN_DOUBT:
            raise InDoubt(st.approval_id, st.effect_key, "a person resolves it: gate.resolve")
        raise self._refuse_bundle(
            protocol_errors.RefusalCode.E_REPLAY.value,
            f"the proposal is {state}: its approval was used",
            bundle_sha,
            st.proposal_id,
            approval_id=st.approval_id,
            action_hash=verified.action_hash,
        )

    def _consume(self, verified: VerifiedToolCall, raw: bytes, bundle_sha: str, now: int) -> Work:
        """(13) One INSERT; a lost race or a second use is recorded and raised E_REPLAY."""
        st = verified.statement
        owner, epoch = self.worker_id, 1
        row = {
            "approval_id": st.approval_id,
            "nonce": st.nonce,
            "action_hash": verified.action_hash,
            **ledger.target_columns(verified),
            "action": verified.action_bytes,
            "bundle": raw,
            "keyid": verified.keyid,
            "expires_at": st.expires_at,
            "state": State.CLAIMED.value,
            "lease_owner": owner,
            "lease_epoch": epoch,
            "lease_expires": now + self.config.lease_seconds,
            "claimed_at": now,
            "updated_at": now,
            "refusal_code": None,
            "cloud_request_id": None,
            "verified": False,
            "detail": "",
            "receipt": None,
            "effect_key": st.effect_key,
        }
        with self._engine.begin() as conn:
            AuditLog.lock(conn)  # the chain lock before any row lock (no lock cycles)
            consumed = ledger.consume(conn, row, now=now)
            if consumed:
                self._rec.audit(
                    conn,
                    now,
                    {
                        "type": ExecutorEvent.CONSUMED,
                        "approval_id": st.approval_id,
                        "action_hash": verified.action_hash,
                        "nonce": st.nonce,
                        "proposal_id": st.proposal_id,
                        "resource": {"type": ledger.TOOL_CALL_RESOURCE_TYPE, "id": st.target},
                        "region": "",
                        "operation": st.tool,
                        "keyid": verified.keyid,
                        "approvers": [a.id for a in st.approvers],
                        "owner": owner,
                        "epoch": epoch,
                    },
                )
            else:
                self._rec.refusal(
                    conn,
                    now,
                    protocol_errors.RefusalCode.E_REPLAY.value,
                    f"approval {st.approval_id} (or its effect key) was already used",
                    bundle_sha,
                    approval_id=st.approval_id,
                    action_hash=verified.action_hash,
                )
        if not consumed:
            with self._engine.connect() as conn:
                used = ledger.get(conn, st.approval_id)
            if used is not None and used.state is State.IN_DOUBT:
                # The replay is recorded; what the caller needs to know is the doubt.
                raise InDoubt(st.approval_id, st.effect_key, "a person resolves it: gate.resolve")
            raise Refused(
                protocol_errors.RefusalCode.E_REPLAY.value,
                f"{st.effect_key} was already used here",
                st.proposal_id,
            )
        return Work(
            st.approval_id, verified.action_hash, st.effect_key, st.proposal_id, owner, epoch
        )

    # -- after the call -----------------------------------------------------------------

    def _after_return(self, spec: Guard, work: Work) -> None:
        self._fp.hit("after_call")
        self._finish_quietly(work, State.EXECUTING, State.SUCCEEDED, detail=f"{spec.tool} returned")
        self._outbox.deliver_quietly(work.approval_id)

    def _after_raise(self, spec: Guard, work: Work, exc: BaseException) -> None:
        self._fp.hit("after_call")
        raised = type(exc).__name__
        state, verified, detail = ask(spec.lookup, work.effect_key, f"the call raised {raised}")
        if spec.lookup is None and isinstance(exc, Exception):
            # It raised: the function says it did not do it. Without a lookup, its word.
            state, detail = State.FAILED, f"the call raised {raised}"
        self._finish_quietly(work, State.EXECUTING, state, verified=verified, detail=detail)
        self._outbox.deliver_quietly(work.approval_id)

    def _finish_quietly(
        self,
        work: Work,
        from_state: State,
        to_state: State,
        *,
        code: str | None = None,
        verified: bool = False,
        detail: str = "",
    ) -> None:
        """Record the outcome; a row taken over meanwhile (Fenced) is recovery's now."""
        try:
            self._rec.finish(
                work,
                from_state,
                to_state,
                self._clock(),
                code=code,
                verified=verified,
                detail=detail,
            )
        except Fenced as exc:
            _log.warning("%s", exc)

    # -- refusals -----------------------------------------------------------------------

    def _refuse_bundle(
        self,
        code: str,
        detail: str,
        bundle_sha: str,
        proposal_id: str,
        *,
        approval_id: str | None,
        action_hash: str | None = None,
    ) -> Refused:
        """Record a refusal of a bundle that was never consumed; return it to raise."""
        with self._engine.begin() as conn:
            self._rec.refusal(
                conn,
                self._clock(),
                code,
                detail,
                bundle_sha,
                approval_id=approval_id,
                action_hash=action_hash,
            )
        return Refused(code, clip(detail), proposal_id)

    def _audit_refusal(self, code: str, detail: str, proposal_id: str | None) -> None:
        with self._engine.begin() as conn:
            self._rec.audit(
                conn,
                self._clock(),
                {
                    "type": ExecutorEvent.REFUSED,
                    "code": code,
                    "detail": clip(f"{proposal_id}: {detail}" if proposal_id else detail),
                    "approval_id": None,
                    "action_hash": None,
                    "bundle_sha256": "",
                },
            )

    def _refuse_unsigned(self, code: str, detail: str, proposal_id: str) -> Refused:
        """A refusal with no bundle to record (the checkpoint issued no approval): an
        audit event names it; the checkpoint, which decided it, needs no receipt."""
        self._audit_refusal(code, detail, proposal_id)
        return Refused(code, detail, proposal_id)

    # -- receipts -----------------------------------------------------------------------
    # -- operators (docs/gate.md#recovery) -----------------------------------------------

    def deliver(self) -> int:
        """Send every undelivered receipt to the checkpoint; return how many it took.

        A receipt the checkpoint refuses for good (a 4xx) is recorded ``rejected`` and
        leaves the outbox; one it cannot take now (no answer, 408, 425, 429, 5xx) stays.
        At least once: two processes may both send a receipt the outbox holds; the
        checkpoint takes the same receipt again as it took it first.

        Raises:
            Unavailable: the checkpoint did not answer (what was delivered stays so).
        """
        return self._outbox.deliver()

    def status(self) -> Status:
        """Ledger rows per state, and how many receipts are not delivered yet."""
        return self._operator.status()

    def recover(self, limit: int = 100) -> list[Settled]:
        """Settle calls whose process stopped (expired leases), verify-first; never call.

        ``claimed`` (nothing was called) → ``refused``: ``E_INTERRUPTED``, or the code
        the stored bundle is refused with today. ``executing`` (the call may have
        happened) → the ``lookup`` of the guard registered for its tool on this gate
        decides ``succeeded`` or ``failed``; without one, or when it fails, ``in_doubt``.
        Then undelivered receipts are sent.
        """
        return self._operator.recover(limit)

    def resolve(
        self,
        approval_id: str,
        decision: Literal["happened", "did_not_happen"],
        by: str,
        note: str = "",
    ) -> None:
        """Record a person's decision on an ``in_doubt`` call, with a signed receipt.

        Raises:
            Refused: ``E_INVALID`` (decision, who, note), ``E_NOT_FOUND``,
                ``E_NOT_IN_DOUBT`` or ``E_ALREADY_RESOLVED``; recorded in the audit
                chain too (``executor.resolution_refused``).
        """
        self._operator.resolve(approval_id, decision, by, note)


def _same_effect(spec: Guard, call: BoundCall, proposed: ToolCall) -> bool:
    """Does ``proposed`` act on this call's effect (tool, target, effect key)?"""
    return (
        proposed.tool == spec.tool
        and proposed.target == call.target
        and proposed.effect_key == call.effect_key
    )


def _load_keys(path: Path) -> KeySet:
    try:
        return KeySet.from_json_bytes(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"E_CONFIG: key set {path}: {exc.strerror}") from None
    except protocol_errors.KeySetError as exc:
        raise ConfigError(f"E_CONFIG: key set {path}: {exc}") from None


def _verify(ca_file: Path | None) -> ssl.SSLContext | Literal[True]:
    if ca_file is None:
        return True
    try:
        return ssl.create_default_context(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"E_CONFIG: AIRLOCK_GATE_CA_FILE {ca_file}: {exc}") from None
