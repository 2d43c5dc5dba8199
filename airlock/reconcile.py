"""Cross-check the checkpoint's and the executor's audit chains against each other.

Each chain alone proves that its own rows were not edited, removed or reordered
(:func:`airlock.store.verify_chain`). Read together, they prove what neither can alone:

* every approval the executor consumed was issued by *this* checkpoint, for the same
  action hash, with the same nonce, signing key and approvers (``R_UNISSUED``). An approval minted
  with a stolen signing key verifies at the executor, and only this comparison shows
  that no person approved it;
* no approval was committed to a cloud write twice (``R_WRITE_TWICE``), consumed twice
  (``R_CONSUMED_TWICE``) or written without being consumed (``R_WRITE_UNCONSUMED``);
* every executor receipt the checkpoint accepted names a row the executor chain still
  holds, with the same hash (``R_HEAD_MISMATCH``, ``R_HEAD_BEYOND``). Receipts carry the
  executor's chain head (with lanes, the head of the outcome's lane: docs/protocol.md#lanes),
  so a rewritten or cut executor chain shows here up to the last outcome the checkpoint
  recorded in each lane; and that row records the same outcome for the same
  approval (``R_OUTCOME_MISMATCH``);
* the same for every refusal receipt the checkpoint kept as a note
  (``checkpoint.executor_refusal``: an approval an executor refused before consuming
  it): its head names an ``executor.refused`` row the executor chain still holds, with
  the same hash, approval and code. So the executor's chain is anchored up to the last
  refusal noted too, not only the last outcome;
* every checkpoint chain head the executor recorded (``executor.checkpoint_head``, taken
  from the feed pages that delivered approvals and revocations) names a row the
  checkpoint chain still holds, with the same hash (``R_CHECKPOINT_HEAD_MISMATCH``,
  ``R_CHECKPOINT_HEAD_BEYOND``). So a checkpoint chain rewritten consistently from
  genesis (an approver renamed, every hash recomputed) or cut shows here, up to the
  last head the executor recorded;
* an ``in_doubt`` resolved in both places says the same in both: a person's resolution
  at the checkpoint (``checkpoint.execution.resolved``, ``airlock approvals resolve``)
  and a person's at the executor (``executor.resolved``, ``airlock executor resolve``)
  of one approval that disagree is ``R_RESOLUTION_CONFLICT``, whether or not the
  executor's receipt reached the checkpoint (before checkpoint migration 0006 it was
  refused there and left no trace in its chain). The executor's resolution receipt the
  checkpoint kept after the person's (``checkpoint.executor_resolution``) is anchored
  like any receipt: its head names that ``executor.resolved`` row, with that decision.
  One side resolved and the other not is no finding but a note (``resolutions`` in the
  report): resolved only at the executor, its receipt may simply not be delivered yet;
  resolved only at the checkpoint, the ledger still says ``in_doubt``, which is how it
  stays when an admin resolves there (nothing tells the executor), and the same
  decision can be recorded in the ledger too.

On a live system the chains grow while they are read, and no single read order covers
both directions, so the checkpoint's chain is read before and after the executor's:
receipts are checked up to the earlier read, everything else against the later one
(``reports_until`` of :func:`reconcile`). A head or a receipt that still falls past the
end of the other read is then a cut, not a race.

The inputs are the JSON lines of ``airlock audit export`` (or the databases themselves),
so anyone holding copies of both chains can run it. Pure reading: nothing is written.
The event names are the services' own; a test drives the real checkpoint and executor
and reconciles their chains, so a renamed event cannot leave this check empty.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from airlock.store import ChainReport
from airlock.text import inert

from ._reconcile_chains import (
    OUTCOME,
    REFUSED,
    RESOLVED,
    CheckpointChain,
    CheckpointHead,
    ExecutorChain,
    ExecutorResolutionNote,
    OutcomeReport,
    ReceiptRow,
    RefusalNote,
    scan,
)

__all__ = [
    "Finding",
    "ReconcileCode",
    "ReconcileReport",
    "printable",
    "reconcile",
    "shown",
]

#: The ``chain`` each service's genesis row names (its migration's create_audit_log).
CHECKPOINT_CHAIN: Final = "checkpoint"
EXECUTOR_CHAIN: Final = "executor"

_SHOWN_MAX: Final = 200


class ReconcileCode(enum.StrEnum):
    """What a finding is; stable, for scripts."""

    R_CHAIN = "R_CHAIN"  # a chain does not verify, or is not the service's chain
    R_UNISSUED = "R_UNISSUED"  # consumed an approval this checkpoint did not issue as such
    R_CONSUMED_TWICE = "R_CONSUMED_TWICE"  # one approval consumed more than once
    R_WRITE_TWICE = "R_WRITE_TWICE"  # one approval committed to a cloud write twice
    R_WRITE_UNCONSUMED = "R_WRITE_UNCONSUMED"  # a write committed for an unconsumed approval
    R_HEAD_BEYOND = "R_HEAD_BEYOND"  # a receipt names a row past the executor chain's end
    R_HEAD_MISMATCH = "R_HEAD_MISMATCH"  # a receipt names a row the chain holds differently
    R_OUTCOME_MISMATCH = "R_OUTCOME_MISMATCH"  # the checkpoint and executor disagree
    # the executor recorded a checkpoint head past the checkpoint chain's end
    R_CHECKPOINT_HEAD_BEYOND = "R_CHECKPOINT_HEAD_BEYOND"
    # the executor recorded a checkpoint head the checkpoint chain holds differently
    R_CHECKPOINT_HEAD_MISMATCH = "R_CHECKPOINT_HEAD_MISMATCH"
    # a person at the checkpoint and one at the executor resolved an in_doubt differently
    R_RESOLUTION_CONFLICT = "R_RESOLUTION_CONFLICT"


@dataclass(frozen=True, slots=True)
class Finding:
    code: ReconcileCode
    approval_id: str | None
    detail: str

    def to_value(self) -> dict[str, Any]:
        return {"code": self.code.value, "approval_id": self.approval_id, "detail": self.detail}

    def __str__(self) -> str:
        # Ids and hashes come from the exports, which anyone can write: escape what a
        # terminal would act on (a carriage return, ANSI sequences), so a crafted id can
        # never redraw the report.
        about = f" {printable(self.approval_id)}" if self.approval_id else ""
        return f"{self.code.value}{about}: {printable(self.detail)}"


@dataclass
class ReconcileReport:
    """What the two chains say together. ``ok`` when there is no finding."""

    findings: list[Finding] = field(default_factory=list)
    checkpoint_rows: int = 0
    executor_rows: int = 0
    issued: int = 0
    revoked: int = 0
    lapsed: int = 0
    reported: int = 0
    anchored: int = 0  # reports whose receipt head was checked against the executor chain
    reports_later: int = 0  # reports after the earlier checkpoint read: not checked here
    refusals: int = 0  # refusal receipts kept as notes (checkpoint.executor_refusal)
    refusals_anchored: int = 0  # of those, checked against the executor chain by their head
    refusals_later: int = 0  # noted after the earlier checkpoint read: not checked here
    consumed: int = 0
    writes: int = 0  # approvals committed to a cloud write (``executing``)
    outcomes: dict[str, int] = field(default_factory=dict)
    resolutions: int = 0
    # executor.checkpoint_head events checked against the checkpoint chain
    checkpoint_heads: int = 0
    not_consumed: int = 0  # issued, never consumed (revoked, lapsed, or not yet)
    not_reported: int = 0  # consumed and finished at the executor, no report recorded
    resolved_here: int = 0  # in_doubts a person resolved at the checkpoint
    # executor resolution receipts kept after a person's (checkpoint.executor_resolution)
    resolution_receipts: int = 0
    resolution_receipts_anchored: int = 0
    resolution_receipts_later: int = 0  # after the earlier checkpoint read: not checked
    resolutions_agree: int = 0  # resolved in both places, the same decision
    # Notes, not findings: resolved on one side only (see the module docstring).
    resolved_at_executor_only: list[str] = field(default_factory=list)
    resolved_at_checkpoint_only: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_value(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "findings": [f.to_value() for f in self.findings],
            "checkpoint": {
                "rows": self.checkpoint_rows,
                "issued": self.issued,
                "revoked": self.revoked,
                "lapsed": self.lapsed,
                "reported": self.reported,
                "anchored": self.anchored,
                "reported_later": self.reports_later,
                "refusals": self.refusals,
                "refusals_anchored": self.refusals_anchored,
                "refusals_later": self.refusals_later,
            },
            "executor": {
                "rows": self.executor_rows,
                "consumed": self.consumed,
                "writes": self.writes,
                "outcomes": dict(sorted(self.outcomes.items())),
                "resolutions": self.resolutions,
                "anchored": self.checkpoint_heads,
            },
            "not_consumed": self.not_consumed,
            "not_reported": self.not_reported,
            "resolutions": {
                "at_checkpoint": self.resolved_here,
                "at_executor": self.resolutions,
                "executor_receipts_kept": self.resolution_receipts,
                "executor_receipts_anchored": self.resolution_receipts_anchored,
                "executor_receipts_later": self.resolution_receipts_later,
                "agree": self.resolutions_agree,
                "conflict": sum(
                    1 for f in self.findings if f.code is ReconcileCode.R_RESOLUTION_CONFLICT
                ),
                "executor_only": self.resolved_at_executor_only,
                "checkpoint_only": self.resolved_at_checkpoint_only,
            },
        }


def _chain_findings(label: str, chain: str, report: ChainReport, name: str | None) -> list[Finding]:
    if report.fault is not None:
        return [
            Finding(
                ReconcileCode.R_CHAIN,
                None,
                f"the {label} chain does not verify: first bad row {report.fault}",
            )
        ]
    if name != chain:
        return [
            Finding(
                ReconcileCode.R_CHAIN,
                None,
                f"the {label} input is the {name!r} chain, not the {chain!r} chain",
            )
        ]
    return []


def reconcile(
    checkpoint_lines: Iterable[str],
    executor_lines: Iterable[str],
    *,
    reports_until: tuple[int, str] | None = None,
) -> ReconcileReport:
    """Verify both exports and cross-check them; see the module docstring for the rules.

    On a live system the two reads race, whichever comes first: a checkpoint read before
    the executor's misses approvals issued meanwhile (and the executor may consume them),
    one read after it holds receipts for executor rows the executor's read lacks. So the
    checkpoint's chain is read twice, before and after the executor's, and passed as the
    later read, with ``reports_until`` the ``(seq, row_hash)`` of the earlier read's
    head: receipts are then checked only up to that row (each names an executor row
    committed before it), issues and checkpoint heads against the whole later read. The
    earlier head must be a row of the later read, or the chain changed in between. None
    checks every receipt (a system at rest).
    """
    ex = ExecutorChain()
    report = ReconcileReport()
    # The executor's chain first: the checkpoint rows its heads name are then the only
    # row hashes of the checkpoint's chain that need keeping.
    ex_report, ex_name = scan(executor_lines, ex.take)
    wanted = set(_head_seqs(ex))
    if reports_until is not None:
        wanted.add(reports_until[0])
    cp = CheckpointChain(wanted=frozenset(wanted))
    cp_report, cp_name = scan(checkpoint_lines, cp.take)
    report.checkpoint_rows = cp_report.rows
    report.executor_rows = ex_report.rows
    report.findings += _chain_findings("checkpoint", CHECKPOINT_CHAIN, cp_report, cp_name)
    report.findings += _chain_findings("executor", EXECUTOR_CHAIN, ex_report, ex_name)
    if not report.findings and reports_until is not None:
        seq, digest = reports_until
        if cp.row_hashes.get(seq) != digest:
            report.findings.append(
                Finding(
                    ReconcileCode.R_CHAIN,
                    None,
                    f"the earlier read of the checkpoint's chain ends at row {seq} "
                    f"({digest}), which the later read does not hold: the chain changed "
                    "between the two reads",
                )
            )
    if report.findings:
        return report  # nothing read from a chain that does not verify can be relied on

    # (1) the executor's consumes and writes against what the checkpoint issued;
    # (2) the receipts the checkpoint recorded against the executor's chain; (3) the
    # resolutions at both places; (4) the checkpoint rows the executor recorded.
    report.findings += _check_consumed(cp, ex)
    report.findings += _check_reports(report, cp, ex, reports_until)
    report.findings += _check_resolutions(report, cp, ex, reports_until)
    for head in ex.checkpoint_heads:
        report.findings.extend(_check_checkpoint_head(head, cp))
        report.checkpoint_heads += 1
    _count(report, cp, ex)
    return report


def _check_consumed(cp: CheckpointChain, ex: ExecutorChain) -> list[Finding]:
    """Step (1): each consume against the approval issued under its id; each write once,
    after a consume."""
    findings: list[Finding] = []
    for aid, events in ex.consumed.items():
        if len(events) > 1:
            findings.append(
                Finding(ReconcileCode.R_CONSUMED_TWICE, aid, f"consumed {len(events)} times")
            )
        issued = cp.issued.get(aid)
        for event in events:
            if issued is None:
                findings.append(
                    Finding(
                        ReconcileCode.R_UNISSUED,
                        aid,
                        "the executor consumed an approval this checkpoint never issued "
                        f"(signed by {event.get('keyid')!r}): was the signing key used "
                        "elsewhere?",
                    )
                )
                continue
            differs = [
                name
                for name, theirs, ours in (
                    ("action_hash", event.get("action_hash"), issued.action_hash),
                    ("nonce", event.get("nonce"), issued.nonce),
                    ("keyid", event.get("keyid"), issued.keyid),
                    ("approvers", event.get("approvers"), issued.approvers),
                )
                if theirs != ours
            ]
            if differs:
                findings.append(
                    Finding(
                        ReconcileCode.R_UNISSUED,
                        aid,
                        "the executor consumed an approval whose "
                        + ", ".join(differs)
                        + " differ from what this checkpoint issued under that id",
                    )
                )
    for aid, count in sorted(ex.writes.items()):
        if count > 1:
            findings.append(
                Finding(
                    ReconcileCode.R_WRITE_TWICE, aid, f"committed to a cloud write {count} times"
                )
            )
    for aid in ex.write_before_consume:
        findings.append(
            Finding(
                ReconcileCode.R_WRITE_UNCONSUMED,
                aid,
                "committed to a cloud write with no consume before it",
            )
        )
    return findings


def _check_reports(
    report: ReconcileReport,
    cp: CheckpointChain,
    ex: ExecutorChain,
    reports_until: tuple[int, str] | None,
) -> list[Finding]:
    """Step (2): the outcome receipts and refusal notes the checkpoint recorded, against the
    executor's chain; those recorded after ``reports_until`` are counted, not checked."""
    findings: list[Finding] = []
    for rep in cp.reports:
        if reports_until is not None and rep.seq > reports_until[0]:
            report.reports_later += 1  # recorded after the executor's chain was read
            continue
        if rep.head is None:
            # Recorded before reports carried the receipt's head: match by approval id.
            done = ex.outcomes.get(rep.approval_id)
            state = None if done is None else done.get("state")
            if not (
                rep.outcome == state
                or (rep.outcome == "resolved" and rep.approval_id in ex.resolved)
            ):
                findings.append(
                    Finding(
                        ReconcileCode.R_OUTCOME_MISMATCH,
                        rep.approval_id,
                        f"the checkpoint recorded {rep.outcome!r} (checkpoint seq {rep.seq}), "
                        f"the executor chain {state!r}",
                    )
                )
            continue
        findings.extend(_check_anchored(rep, ex))
        report.anchored += 1
    # The refusal receipts kept as notes, the same way: each head is a row of the
    # executor's chain like an outcome receipt's.
    for note in cp.refusals:
        if reports_until is not None and note.seq > reports_until[0]:
            report.refusals_later += 1
            continue
        findings.extend(_check_refusal_note(note, ex))
        report.refusals_anchored += 1
    return findings


def _check_resolutions(
    report: ReconcileReport,
    cp: CheckpointChain,
    ex: ExecutorChain,
    reports_until: tuple[int, str] | None,
) -> list[Finding]:
    """Step (3): the executor's resolution receipts kept at the checkpoint, anchored like the
    others; then each in_doubt resolved at both places, held to each other."""
    findings: list[Finding] = []
    for resolution in cp.executor_resolutions:
        if reports_until is not None and resolution.seq > reports_until[0]:
            report.resolution_receipts_later += 1
            continue
        findings.extend(_check_resolution_receipt(resolution, ex))
        report.resolution_receipts_anchored += 1
    reported_resolved = {rep.approval_id for rep in cp.reports if rep.outcome == "resolved"}
    kept = {r.approval_id for r in cp.executor_resolutions}
    for aid, (ex_seq, ex_event) in sorted(ex.resolved.items()):
        person = cp.person_resolved.get(aid)
        if person is None:
            if aid not in reported_resolved and aid not in kept:
                report.resolved_at_executor_only.append(aid)
            continue
        if person.decision == ex_event.get("decision"):
            report.resolutions_agree += 1
            continue
        findings.append(
            Finding(
                ReconcileCode.R_RESOLUTION_CONFLICT,
                aid,
                f"a person at the checkpoint ({person.by}, checkpoint seq {person.seq}) "
                f"resolved it as {person.decision!r}, a person at the executor "
                f"({ex_event.get('by')}, executor seq {ex_seq}) as "
                f"{ex_event.get('decision')!r}: the two records disagree on what happened. "
                "The executor's ledger is the record of what the executor did; check the "
                "resource in the cloud and both records (airlock audit trace ID)",
            )
        )
    report.resolved_at_checkpoint_only = sorted(
        aid for aid in cp.person_resolved if aid not in ex.resolved
    )
    return findings


def _count(report: ReconcileReport, cp: CheckpointChain, ex: ExecutorChain) -> None:
    """Fill in the report's counts of what both chains hold."""
    report.issued = len(cp.issued)
    report.revoked = len(cp.revoked)
    report.lapsed = len(cp.lapsed)
    report.reported = len(cp.reports)
    report.refusals = len(cp.refusals)
    report.consumed = len(ex.consumed)
    report.writes = len(ex.writes)
    report.outcomes = dict(Counter(str(e.get("state")) for e in ex.outcomes.values()))
    report.resolutions = len(ex.resolved)
    report.resolved_here = len(cp.person_resolved)
    report.resolution_receipts = len(cp.executor_resolutions)
    report.not_consumed = sum(1 for aid in cp.issued if aid not in ex.consumed)
    reported_ids = {rep.approval_id for rep in cp.reports}
    report.not_reported = sum(1 for aid in ex.outcomes if aid not in reported_ids)


def _receipt_row(
    approval_id: str, where: int, head: object, ex: ExecutorChain
) -> Finding | tuple[int, ReceiptRow]:
    """The executor row a receipt head recorded at checkpoint seq ``where`` names, or
    the finding that it names none the executor chain holds."""
    if (
        not isinstance(head, dict)
        or not isinstance(head.get("seq"), int)
        or isinstance(head.get("seq"), bool)
        or not isinstance(head.get("hash"), str)
    ):
        return Finding(
            ReconcileCode.R_HEAD_MISMATCH,
            approval_id,
            f"checkpoint seq {where} records a malformed executor head {head!r}",
        )
    seq: int = head["seq"]
    digest: str = head["hash"]
    if seq > ex.last_seq:
        return Finding(
            ReconcileCode.R_HEAD_BEYOND,
            approval_id,
            f"the checkpoint holds a receipt naming executor row {seq}, but the executor "
            f"chain ends at row {ex.last_seq}: it was cut, or this export is older than "
            "the checkpoint's (export the executor's chain last)",
        )
    row = ex.receipt_rows.get(seq)
    if row is None or row.row_hash != digest:
        return Finding(
            ReconcileCode.R_HEAD_MISMATCH,
            approval_id,
            f"the receipt names executor row {seq} with hash {digest}, which the executor "
            "chain holds differently: it was rewritten",
        )
    return seq, row


def _check_anchored(rep: OutcomeReport, ex: ExecutorChain) -> list[Finding]:
    found = _receipt_row(rep.approval_id, rep.seq, rep.head, ex)
    if isinstance(found, Finding):
        return [found]
    seq, row = found
    event = row.event
    kind = event.get("type")
    if kind == OUTCOME:
        said = event.get("state")
    elif kind == RESOLVED:
        said = "resolved"
    else:
        said = "refused"
    if event.get("approval_id") != rep.approval_id or said != rep.outcome:
        return [
            Finding(
                ReconcileCode.R_OUTCOME_MISMATCH,
                rep.approval_id,
                f"the checkpoint recorded {rep.outcome!r}; executor row {seq} records "
                f"{said!r} for {event.get('approval_id')!r}",
            )
        ]
    return []


def _check_refusal_note(note: RefusalNote, ex: ExecutorChain) -> list[Finding]:
    # Unlike an outcome report, a note has no form without the head (the event carried it
    # from the first): a missing one is the malformed head it reads as, not an old row.
    found = _receipt_row(note.approval_id, note.seq, note.head, ex)
    if isinstance(found, Finding):
        return [found]
    seq, row = found
    event = row.event
    # A refusal before the consume is an executor.refused row; an executor.outcome whose
    # state is refused came after one (E_PRECONDITION), which no note is for.
    if (
        event.get("type") != REFUSED
        or event.get("approval_id") != note.approval_id
        or event.get("code") != note.refusal_code
    ):
        said = (
            f"a refusal {event.get('code')!r}"
            if event.get("type") == REFUSED
            else f"{event.get('type')!r}"
        )
        return [
            Finding(
                ReconcileCode.R_OUTCOME_MISMATCH,
                note.approval_id,
                f"the checkpoint noted the executor's refusal {note.refusal_code!r} "
                f"(checkpoint seq {note.seq}); executor row {seq} records {said} for "
                f"{event.get('approval_id')!r}",
            )
        ]
    return []


def _check_resolution_receipt(note: ExecutorResolutionNote, ex: ExecutorChain) -> list[Finding]:
    found = _receipt_row(note.approval_id, note.seq, note.head, ex)
    if isinstance(found, Finding):
        return [found]
    seq, row = found
    event = row.event
    if (
        event.get("type") != RESOLVED
        or event.get("approval_id") != note.approval_id
        or event.get("decision") != note.decision
    ):
        return [
            Finding(
                ReconcileCode.R_OUTCOME_MISMATCH,
                note.approval_id,
                f"the checkpoint kept the executor's resolution {note.decision!r} "
                f"(checkpoint seq {note.seq}); executor row {seq} records "
                f"{event.get('type')!r} {event.get('decision')!r} for "
                f"{event.get('approval_id')!r}",
            )
        ]
    return []


def _head_fields(event: dict[str, Any]) -> tuple[int, str] | None:
    seq, digest = event.get("seq"), event.get("hash")
    if type(seq) is not int or seq < 0 or not isinstance(digest, str):
        return None
    return seq, digest


def _head_seqs(ex: ExecutorChain) -> Iterator[int]:
    for head in ex.checkpoint_heads:
        fields = _head_fields(head.event)
        if fields is not None:
            yield fields[0]


def _check_checkpoint_head(head: CheckpointHead, cp: CheckpointChain) -> list[Finding]:
    fields = _head_fields(head.event)
    if fields is None:
        return [
            Finding(
                ReconcileCode.R_CHECKPOINT_HEAD_MISMATCH,
                None,
                f"executor seq {head.seq} records a malformed checkpoint head: seq "
                f"{head.event.get('seq')!r}, hash {head.event.get('hash')!r}",
            )
        ]
    seq, digest = fields
    where = f"executor seq {head.seq} (at {head.event.get('at')}, feed {head.event.get('feed')})"
    if seq > cp.last_seq:
        return [
            Finding(
                ReconcileCode.R_CHECKPOINT_HEAD_BEYOND,
                None,
                f"{where} recorded checkpoint row {seq}, but the checkpoint chain ends at "
                f"row {cp.last_seq}: it was cut, or this export was taken before the "
                "executor recorded that head (export the checkpoint's chain again, after "
                "the executor's, to check it)",
            )
        ]
    if cp.row_hashes.get(seq) != digest:
        return [
            Finding(
                ReconcileCode.R_CHECKPOINT_HEAD_MISMATCH,
                None,
                f"{where} recorded checkpoint row {seq} with hash {digest}, which the "
                "checkpoint chain holds differently: it was rewritten",
            )
        ]
    return []


#: What ``airlock audit`` prints from a chain, escaped as everything else shown to a
#: person is (``\\u001b``; airlock.text): kept under this name for its callers.
printable: Final = inert


def shown(findings: list[Finding]) -> tuple[list[Finding], int]:
    """The findings to print, and how many more there are."""
    return findings[:_SHOWN_MAX], max(0, len(findings) - _SHOWN_MAX)
