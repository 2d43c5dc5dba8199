"""Plain words for what a proposal will do, when, and under which conditions.

Pure functions of the proposal and ``now``: no I/O. Every string returned here is text;
the templates escape it (autoescape is on), so agent- or cloud-supplied values such as
names, tags and reasons can never become markup.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from markupsafe import Markup

from airlock import consoles, text
from airlock.api import ExecutorRefusal, Outcome, Proposal, Route, Vote
from airlock.protocol import (
    CURRENCY_EXPONENTS,
    HIGH_RISK_OPERATIONS,
    RECEIPT_PAYLOAD_TYPE,
    Envelope,
    InvalidReceipt,
    ProposedAction,
    Receipt,
    Refused,
    Saving,
    ToolCall,
    action_hash,
    canonical_bytes,
)
from airlock.units import duration, money

__all__ = [
    "OPEN_STATES",
    "REJECT_REASONS",
    "STATE_LABELS",
    "ReceiptFacts",
    "Savings",
    "bulk_problem",
    "console_url",
    "decision_label",
    "duration",
    "executor_conflict",
    "hash_matches",
    "instance_name",
    "json_rows",
    "json_text",
    "latest_refusal",
    "next_step",
    "outcome_label",
    "plain_action",
    "plain_precondition",
    "provider_name",
    "receipt_facts",
    "refusal_explanation",
    "route_label",
    "route_voters",
    "saving_label",
    "savings",
    "signed_action_problem",
    "signed_saving",
    "tags",
    "timestamp",
    "vote_of",
    "votes_label",
    "where",
]

REJECT_REASONS: Final = {
    "not_idle": "Not idle — it is in use",
    "protected": "Protected — must never be touched",
    "wrong_target": "Wrong target",
    "needs_more_info": "Needs more information",
    "other": "Other (say why in the note)",
}

STATE_LABELS: Final = {
    "pending": "waiting for approval",
    "approved": "approved, waiting for the executor",
    "executed": "executed",
    "refused": "refused by the executor",
    "failed": "failed",
    "in_doubt": "in doubt — needs a person",
    "rejected": "rejected",
    "expired": "expired unapproved",
    "withdrawn": "withdrawn by the agent",
    "revoked": "approval revoked",
    "lapsed": "approval lapsed unused",
    "denied": "denied by policy",
}

OPEN_STATES: Final = frozenset({"pending", "approved", "in_doubt"})


def inert(value: Any) -> Any:
    """Every string the pages print, with control, format (bidi) and separator characters
    shown as ``\\uXXXX`` — an agent's text must not reorder what an approver reads (a
    right-to-left override can make ``dorp-db`` read ``prod-db``). Line breaks and tabs
    stay: on a page they are layout. The escaping is the kernel's (``airlock.text``), as
    the CLI's is."""
    if not isinstance(value, str) or value.isprintable():
        return value
    shown = text.inert(value, layout=True)
    # Already-escaped markup stays markup: the replacements are plain ASCII.
    return Markup(shown) if isinstance(value, Markup) else shown  # noqa: S704 - was Markup


def provider_name(provider: str) -> str:
    """``AWS``, ``Alibaba Cloud``: a provider as people call it."""
    return consoles.provider_name(provider)


def where(p: Proposal) -> str:
    """``AWS us-east-1, account 123456789012``: the provider, region and account."""
    return f"{consoles.provider_name(p.provider)} {p.region}, account {p.account}"


def console_url(p: Proposal) -> str | None:
    """The resource's page in its provider's console; None for a tool call, or when the
    provider, type, region or id gives no link (:mod:`airlock.consoles`)."""
    if p.is_tool_call:
        return None
    return consoles.console_url(p.provider, p.resource_type, p.region, p.resource_id)


def plain_action(p: Proposal) -> str:
    """One sentence: what the executor (or a tool call's gate) will do if approved."""
    if p.is_tool_call:
        return (
            f"The gate {p.audience} calls the tool “{p.operation}” on {p.resource_id}, "
            "once, with exactly the arguments below."
        )
    where = f"in {consoles.provider_name(p.provider)} {p.region} (account {p.account})"
    what = f"{consoles.resource_kind(p.provider, p.resource_type)} {p.resource_id}"
    params = p.action.get("params") or {}
    if p.operation == "stop":
        mode = params.get("stopped_mode") if isinstance(params, Mapping) else None
        if mode == "StopCharging":
            detail = (
                " Compute billing stops; its disks and data are kept, and it can be started again."
            )
        elif mode == "KeepCharging":
            detail = " It keeps its resources and is still billed; it can be started again."
        else:
            detail = " It can be started again."
        return f"Stop the {what} {where}.{detail}"
    if p.operation == "delete":
        verb, lost = consoles.delete_words(p.provider)
        return f"Permanently {verb} the {what} {where}. This cannot be undone: {lost}."
    return f"Run “{p.operation}” on the {what} {where}."


def next_step(p: Proposal) -> str | None:
    """What happens after this closed proposal, for a person who wonders whether the
    agent will try again (services/agent/planner.py decides it); None while it is open,
    executed or denied."""
    if p.is_tool_call:
        if p.state in ("failed", "refused", "expired", "lapsed", "revoked", "withdrawn"):
            return (
                "Nothing more happens to this proposal. The caller may propose the same "
                "call again, as a new proposal that needs its own approval."
            )
        return None
    again = (
        f"If the resource still qualifies, the agent proposes the {p.operation} again at "
        "its next scan, as a new proposal with its own hash that needs its own approval."
    )
    if p.state in ("failed", "refused"):
        return f"Nothing more happens to this proposal: its approval is spent. {again}"
    if p.state in ("expired", "lapsed", "revoked", "withdrawn"):
        if p.approval is None or p.outcome is not None:
            return f"Nothing more happens to this proposal. {again}"
        return (
            "Nothing more happens to this proposal. The agent proposes again no earlier "
            f"than a few minutes after its approval's expiry ({timestamp(p.approval.expires_at)}),"
            " so that no executor can still be using it; the new proposal needs its own "
            "approval."
        )
    if p.state == "rejected":
        return "The agent does not propose it again until a whole idle window has passed."
    return None


def plain_precondition(p: Proposal) -> str:
    pre = p.action.get("precondition") or {}
    if not isinstance(pre, Mapping):
        return "No precondition."
    parts = []
    status = pre.get("status")
    if isinstance(status, str):
        parts.append(f"its status is still {status}")
    absent = pre.get("absent_tags")
    if isinstance(absent, list) and absent:
        parts.append("it carries none of the tags " + ", ".join(str(t) for t in absent))
    observed = pre.get("observed_at")
    seen = f" (as observed at {observed})" if isinstance(observed, str) else ""
    if not parts:
        return "No precondition."
    return (
        "The executor re-reads the resource just before acting and does nothing unless "
        + " and ".join(parts)
        + seen
        + "."
    )


def instance_name(evidence: Mapping[str, Any]) -> str | None:
    for key in ("name", "instance_name", "resource_name"):
        value = evidence.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def tags(evidence: Mapping[str, Any]) -> list[tuple[str, str]]:
    value = evidence.get("tags")
    if isinstance(value, Mapping):
        return [(str(k), str(v)) for k, v in value.items()]
    if isinstance(value, list):  # [[k, v], ...] or [{"key":..,"value":..}, ...]
        out = []
        for item in value:
            if isinstance(item, list) and len(item) == 2:
                out.append((str(item[0]), str(item[1])))
            elif isinstance(item, Mapping):
                out.append((str(item.get("key", "")), str(item.get("value", ""))))
        return out
    return []


def hash_matches(p: Proposal) -> bool:
    """The shown canonical text hashes to the shown hash (the page shows what is signed)."""
    try:
        return action_hash(p.action_jcs.encode("utf-8")) == p.action_hash
    except UnicodeEncodeError:
        return False


def signed_action_problem(p: Proposal) -> str | None:
    """Why the page must not offer to approve ``p``; ``None`` when it shows what is hashed.

    A person approves ``action_hash``, which covers ``action_jcs`` only. The headline, the
    "What will happen" sentence and the confirm id are built from the record's convenience
    fields and its parsed ``action``, so each must say what the hashed text says. The
    same checks as the CLI's ``signed_action`` (``airlock/cli/_proposal.py``).
    """
    # (1) The text hashes to the hash the Approve button sends.
    if not hash_matches(p):
        return "the action text does not hash to the stated hash"
    data = p.action_jcs.encode("utf-8")
    if p.is_tool_call:
        return _tool_call_problem(p, data)
    # (2) The text is a valid action, in the RFC 8785 form that was hashed.
    try:
        action = ProposedAction.from_json_bytes(data)
        canonical = action.canonical_bytes()
    except Refused as exc:
        return f"the action text is not a valid action ({exc.detail})"
    if canonical != data:
        return "the action text is not in canonical form (RFC 8785)"
    # (3) Every headline field is the signed one.
    fields = (
        ("proposal id", action.proposal_id, p.id),
        ("provider", action.provider, p.provider),
        ("account", action.account, p.account),
        ("region", action.region, p.region),
        ("resource type", action.resource.type, p.resource_type),
        ("resource id", action.resource.id, p.resource_id),
        ("operation", action.operation, p.operation),
    )
    for name, signed, shown in fields:
        if signed != shown:
            return f"the page's {name} ({shown}) is not the signed {name} ({signed})"
    # (4) The parsed action the page reads params, precondition, evidence and reason from
    #     is the text itself.
    try:
        same = canonical_bytes(p.action) == data
    except ValueError:  # a float or an out-of-range integer: not what was hashed
        same = False
    if not same:
        return "the details shown are not the signed action text"
    return None


def _tool_call_problem(p: Proposal, data: bytes) -> str | None:
    """:func:`signed_action_problem`'s steps (2) to (4) for a tool call."""
    try:
        call = ToolCall.from_json_bytes(data)
        canonical = call.canonical_bytes()
    except Refused as exc:
        return f"the action text is not a valid tool call ({exc.detail})"
    if canonical != data:
        return "the action text is not in canonical form (RFC 8785)"
    fields = (
        ("proposal id", call.proposal_id, p.id),
        ("tool", call.tool, p.tool),
        ("tool", call.tool, p.operation),
        ("target", call.target, p.target),
        ("target", call.target, p.resource_id),
        ("effect key", call.effect_key, p.effect_key),
        ("audience", call.audience, p.audience),
        ("audience", call.audience, p.account),
        ("summary", call.summary, p.summary),
        ("risk", call.risk, p.risk),
    )
    for name, signed, shown in fields:
        if signed != shown:
            return f"the page's {name} ({shown}) is not the signed {name} ({signed})"
    try:
        same = canonical_bytes(p.action) == data
    except ValueError:
        same = False
    if not same:
        return "the details shown are not the signed tool call text"
    return None


def json_text(value: Any) -> str:
    """One value as its canonical JSON text (a string quoted), as the argument tables show it."""
    try:
        return canonical_bytes(value).decode("utf-8")
    except ValueError:  # not a signed value (a float): shown, never taken for one
        return repr(value)


def json_rows(value: Any) -> list[tuple[str, str]]:
    """A tool call's ``arguments`` or ``premises`` as (name, value) rows, every value as
    its canonical JSON text (a string quoted, an object in full), in the signed order."""
    if not isinstance(value, Mapping):
        return []
    rows = []
    for name, item in value.items():
        try:
            shown = canonical_bytes(item).decode("utf-8")
        except ValueError:  # not what was hashed: signed_action_problem says so
            shown = repr(item)
        rows.append((str(name), shown))
    return rows


def signed_saving(p: Proposal) -> Saving | None:
    """The saving estimate as signed in the action text (``evidence.saving``), or None.

    Read from ``action_jcs`` only when it hashes to ``action_hash``: a figure shown or
    totalled is one a person's approval covers.
    """
    if not hash_matches(p):
        return None
    try:
        return ProposedAction.from_json_bytes(p.action_jcs.encode("utf-8")).saving
    except Refused:
        return None


def saving_label(saving: Saving | None) -> str:
    """``USD 82.49`` a month, or ``—`` when the proposal carries no estimate."""
    if saving is None:
        return "—"
    return money(saving.monthly_minor, saving.currency, CURRENCY_EXPONENTS[saving.currency])


@dataclass(frozen=True, slots=True)
class Savings:
    """What the pending proposals of a list save a month, summed from their signed text."""

    #: Per currency, in minor units, currencies sorted.
    totals: tuple[tuple[str, int], ...]
    pending: int
    #: Pending proposals with no signed estimate (not counted in ``totals``).
    unpriced: int

    @property
    def label(self) -> str:
        if not self.totals:
            return "—"
        return " + ".join(
            money(minor, currency, CURRENCY_EXPONENTS[currency]) for currency, minor in self.totals
        )


def savings(items: list[Proposal]) -> Savings:
    """The monthly savings of the pending proposals among ``items`` (:func:`signed_saving`)."""
    totals: dict[str, int] = {}
    pending = unpriced = 0
    for p in items:
        if p.state != "pending":
            continue
        pending += 1
        saving = signed_saving(p)
        if saving is None:
            unpriced += 1
            continue
        totals[saving.currency] = totals.get(saving.currency, 0) + saving.monthly_minor
    return Savings(tuple(sorted(totals.items())), pending, unpriced)


def bulk_problem(p: Proposal) -> str | None:
    """Why ``p`` cannot be decided in a bulk action, or None when it can.

    Only a pending proposal whose page would offer Approve, and never a high-risk one
    (its resource id is typed, one at a time). Same operation and risk across a
    selection is checked by the caller.
    """
    if p.state != "pending":
        return f"it is {STATE_LABELS.get(p.state, p.state)}"
    if p.is_tool_call:
        return "it is a tool call: open it and decide it alone"
    if (
        p.risk == "high"
        or p.policy.confirm
        or (p.resource_type, p.operation) in HIGH_RISK_OPERATIONS
    ):
        return "it is high risk: open it and decide it alone"
    problem = signed_action_problem(p)
    if problem is not None:
        return problem
    if p.route is not None and not p.route.may_vote:
        return f"only {route_voters(p.route)} may approve it"
    return None


def route_label(route: Route) -> str:
    """Whom a routed proposal is asked of, in order: ``payments (asked), leads (next, at
    … if unanswered)``."""
    shown = []
    for n, group in enumerate(route.groups):
        if n <= route.level:
            shown.append(f"{group} (asked)")
        elif n == route.level + 1 and route.due_at is not None:
            shown.append(f"{group} (next, at {timestamp(route.due_at)} if unanswered)")
        else:  # asked only after the next group's SLA passes, or (no SLA) never
            shown.append(f"{group} ({'later' if route.due_at is not None else 'not asked'})")
    return ", ".join(shown)


def route_voters(route: Route) -> str:
    """Who may approve a routed proposal now: ``a member of payments or leads``."""
    return "a member of " + " or ".join(route.asked)


_REFUSAL_EXPLANATIONS: Final = {
    "E_AUDIENCE": "The executor is configured for another audience than the one this "
    "checkpoint signs for: check the executor's and the checkpoint's audience settings.",
    "E_ACCOUNT": "The executor is bound to another provider, account or region than "
    "this action's: check which account the executor is configured for.",
    "E_NOT_YET_VALID": "The approval was not valid yet by the executor's clock: the "
    "executor's and the checkpoint's clocks disagree.",
    "E_EXPIRED": "The approval had expired by the executor's clock: the executor took "
    "it up too late (it was down or behind), or the clocks disagree.",
    "E_TTL": "The approval lives longer than the executor allows: the checkpoint's "
    "execution window is over the executor's maximum lifetime (AIRLOCK_EXECUTOR_MAX_TTL).",
    "E_REVOKED": "The approval was revoked before the executor took it up.",
}
_REFUSAL_GENERIC: Final = (
    "The executor would not use this approval; the code and its detail say why."
)


_DETAIL_MAX: Final = 2000


@dataclass(frozen=True, slots=True)
class ReceiptFacts:
    """What the executor's receipt says about the effect, apart from its signature.

    ``effect_key`` is one of ``confirmed`` (seen in live state), ``accepted`` (the
    provider accepted the call; no live read confirmed it), ``failed``, ``unknown``
    (in_doubt), ``none`` (refused before a write) and ``resolved`` (a person decided).
    ``detail`` is the executor's own text (it quotes the cloud: shown escaped).
    """

    effect_key: str
    effect: str
    detail: str
    cloud_request_id: str | None


_EFFECTS: Final = {
    "confirmed": "confirmed by a live read: the executor saw the effect in the resource's "
    "live state",
    "accepted": "the provider accepted the call; not yet confirmed by a live read",
    "failed": "none: the provider refused the call",
    "unknown": "unknown: the executor cannot tell whether the write happened",
    "none": "none: the executor refused the approval and wrote nothing",
}


def receipt_facts(outcome: Outcome) -> ReceiptFacts | None:
    """The effect and detail the outcome's signed receipt states, or None.

    Read only from a receipt whose signature the checkpoint checked
    (``receipt_verified``), and only when it names this outcome's approval and outcome:
    an unchecked or mismatched receipt says nothing here. The payload is the kernel's
    :class:`~airlock.protocol.Receipt`, parsed strictly (docs/protocol.md#strict-json).
    """
    if not outcome.receipt_verified:
        return None
    try:
        envelope = Envelope.from_value(outcome.receipt, payload_type=RECEIPT_PAYLOAD_TYPE)
        payload = Receipt.from_json_bytes(envelope.payload)
    except (Refused, InvalidReceipt):
        return None
    kind, detail, request_id = payload.outcome, payload.detail, payload.cloud_request_id
    if payload.approval_id != outcome.approval_id or kind != outcome.outcome:
        return None
    if kind == "succeeded":
        key = "confirmed" if payload.verified else "accepted"
    elif kind == "resolved":
        if payload.resolution is None:
            return None
        decision = payload.resolution.decision
        said = "it happened" if decision == "happened" else "it did not happen"
        return ReceiptFacts(
            "resolved", f"as resolved by a person: {said}", detail[:_DETAIL_MAX], request_id
        )
    else:
        key = {"failed": "failed", "in_doubt": "unknown", "refused": "none"}[kind]
    return ReceiptFacts(key, _EFFECTS[key], detail[:_DETAIL_MAX], request_id)


_DECISIONS: Final = {"happened": "it happened", "did_not_happen": "it did not happen"}

_OUTCOMES: Final = {
    "succeeded": "succeeded",
    "failed": "failed: nothing was changed",
    "in_doubt": "in doubt: the executor cannot tell whether it happened",
    "refused": "refused by the executor: nothing was written",
    "resolved": "resolved by a person",
}


def outcome_label(outcome: str) -> str:
    """An executor's outcome in words; a value this page does not know, as it came."""
    return _OUTCOMES.get(outcome, outcome)


def decision_label(decision: str) -> str:
    """An in_doubt resolution in words; a value this page does not know, as it came."""
    return _DECISIONS.get(decision, decision)


def executor_conflict(p: Proposal) -> bool:
    """The executor's ledger resolved the in_doubt otherwise than the checkpoint did."""
    x = p.outcome.executor_resolution if p.outcome else None
    return x is not None and x.conflict


def latest_refusal(p: Proposal) -> ExecutorRefusal | None:
    """The executor refusal note reported last (the checkpoint lists them oldest first),
    for the lists' badge; None when no executor refused the approval."""
    return p.executor_refusals[-1] if p.executor_refusals else None


def refusal_explanation(code: str) -> str:
    """A short explanation for people of why an executor refused an approval before use."""
    return _REFUSAL_EXPLANATIONS.get(code, _REFUSAL_GENERIC)


def vote_of(p: Proposal, name: str) -> Vote | None:
    """``name``'s approve vote on ``p``, if they cast one (the checkpoint allows one each)."""
    return next((v for v in p.votes if v.voter == name), None)


def votes_label(p: Proposal) -> str:
    """Votes that count toward the quorum, of the quorum."""
    return f"{sum(1 for v in p.votes if v.counts)} of {p.policy.quorum}"


def timestamp(unix: int | None) -> str:
    if unix is None:
        return "—"
    try:
        return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (ValueError, OverflowError, OSError):  # out of datetime's range: say it raw
        return f"{unix} (Unix seconds)"
