"""How ``airlock approvals`` shows a proposal to a person: a cloud action from its signed
action, a tool call from its signed tool call (its tool, target, summary, audience,
effect key, and its arguments and premises as tables), then votes, decisions, outcome and
the canonical text. Not public; split from :mod:`airlock.cli._approvals`, whose commands
print these lines.

Every value the agent, a gate, the cloud or the checkpoint supplied is printed inert
(:mod:`airlock.cli._text`): control and invisible characters escaped, nothing read as
markup. Imports only what ``--help`` may load; the protocol kernel's types are for type
checking only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from airlock import consoles
from airlock.units import decimal_bytes, duration, money

from ._text import inert, say

if TYPE_CHECKING:
    from airlock.api import Proposal as _Proposal
    from airlock.api import Route as _Route
    from airlock.protocol import ProposedAction, Saving, ToolCall


# Codes in words for people; --json keeps the codes for programs.
_REASONS: Final = {
    "not_idle": "not idle, it is in use",
    "protected": "protected, must never be touched",
    "wrong_target": "wrong target",
    "needs_more_info": "needs more information",
    "other": "other (see the note)",
}
_DECISIONS: Final = {"happened": "it happened", "did_not_happen": "it did not happen"}
_OUTCOMES: Final = {
    "succeeded": "succeeded",
    "failed": "failed, nothing was changed",
    "in_doubt": "in doubt, the executor cannot tell whether it happened",
    "refused": "refused by the executor, nothing was written",
    "resolved": "resolved by a person",
}


def _words(words: Mapping[str, str], code: str | None) -> str:
    """A code in words; one this CLI does not know, escaped as it came."""
    return words.get(code or "", inert(str(code)))


# -- text for people -------------------------------------------------------------------


def _when(unix: int | None) -> str:
    if unix is None:
        return "-"
    try:
        return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (ValueError, OverflowError, OSError):  # out of datetime's range: say it raw
        return f"{unix} (Unix seconds)"


def _bp(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return f"{value // 100}.{value % 100:02d} %"
    return inert(str(value))


def _bytes(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return decimal_bytes(value)
    return inert(str(value))


def _duration(seconds: object) -> str:
    if isinstance(seconds, int) and not isinstance(seconds, bool):
        return duration(seconds)
    return inert(str(seconds))


def _plain(action: ProposedAction) -> str:
    """One sentence: what the executor will do if this is approved."""
    kind = consoles.resource_kind(action.provider, action.resource.type)
    what = f"{kind} {action.resource.id}"
    where = (
        f"in {consoles.provider_name(action.provider)} {action.region} (account {action.account})"
    )
    if action.operation == "stop":
        mode = action.params.get("stopped_mode")
        detail = {
            "StopCharging": " Compute billing stops; disks and data are kept; it can be "
            "started again.",
            "KeepCharging": " It keeps its resources and is still billed; it can be started again.",
        }.get(str(mode), " It can be started again.")
        return f"STOP the {what} {where}.{detail}"
    if action.operation == "delete":
        verb, lost = consoles.delete_words(action.provider)
        return f"PERMANENTLY {verb.upper()} the {what} {where}. This cannot be undone: {lost}."
    return f"Run {action.operation!r} on the {what} {where}."


def _where(action: ProposedAction) -> str:
    """Provider, region, account, and the resource's page in the provider's console."""
    where = f"{consoles.provider_name(action.provider)} {action.region}, account {action.account}"
    url = consoles.console_url(
        action.provider, action.resource.type, action.region, action.resource.id
    )
    return f"{where}; console {url}" if url else where


def _precondition(action: ProposedAction) -> str:
    pre = action.precondition
    tags = ", ".join(inert(t) for t in pre.absent_tags) or "none"
    return (
        f"only if, when re-read just before acting, its status is still {pre.status} and it "
        f"carries none of the tags [{tags}] (observed {pre.observed_at})"
    )


_EVIDENCE_SHOWN: Final = frozenset(
    {
        "policy",
        "window_days",
        "window_start",
        "window_end",
        "samples",
        "samples_expected",
        "cpu_avg_bp",
        "cpu_p95_bp",
        "mem_avg_bp",
        "net_bytes_per_day",
        "net_quiet_days",
        "thresholds",
        "name",
        "instance_type",
        "tags",
        "stage",
        "stop_proposal_id",
        "stopped_at",
        "stopped_seconds",
        "grace_seconds",
        "saving",
    }
)


def _evidence(evidence: Mapping[str, Any]) -> list[str]:
    """A few lines summarising the agent's evidence (the full text is in the action)."""
    lines: list[str] = []
    e = evidence

    def text(key: str) -> str:
        return inert(str(e.get(key, "?")))

    if "policy" in e or "window_days" in e:
        # A delete's evidence names its policy but has no idle window of its own.
        window = text("policy")
        if "window_days" in e:
            window += f" over {text('window_days')} days"
        if "window_start" in e and "window_end" in e:
            window += f" ({text('window_start')} to {text('window_end')})"
        if "samples" in e:
            expected = f" of {text('samples_expected')}" if "samples_expected" in e else ""
            window += f"; {text('samples')}{expected} hourly samples"
        lines.append(window)
    usage = []
    raw_thresholds = e.get("thresholds")
    thresholds: Mapping[str, Any] = raw_thresholds if isinstance(raw_thresholds, Mapping) else {}
    for key, label, limit in (
        ("cpu_avg_bp", "CPU avg", "cpu_avg_max_bp"),
        ("cpu_p95_bp", "CPU p95", "cpu_p95_max_bp"),
        ("mem_avg_bp", "memory avg", "mem_avg_max_bp"),
    ):
        if key in e:
            bound = f" (limit {_bp(thresholds[limit])})" if limit in thresholds else ""
            usage.append(f"{label} {_bp(e[key])}{bound}")
    if "net_bytes_per_day" in e:
        quiet = f", quiet {text('net_quiet_days')} days" if "net_quiet_days" in e else ""
        usage.append(f"network {_bytes(e['net_bytes_per_day'])}/day{quiet}")
    if usage:
        lines.append(", ".join(usage))
    if "stage" in e:
        lines.append(
            f"{text('stage')}: stopped by Airlock at {text('stopped_at')} "
            f"({text('stop_proposal_id')}), stopped for {_duration(e.get('stopped_seconds'))}, "
            f"grace {_duration(e.get('grace_seconds'))}"
        )
    about = []
    if isinstance(e.get("name"), str) and e["name"]:
        about.append(f"name {inert(e['name'])!s}")
    if isinstance(e.get("instance_type"), str):
        about.append(f"type {inert(e['instance_type'])}")
    tags = e.get("tags")
    if isinstance(tags, Mapping) and tags:
        about.append(
            "tags " + ", ".join(f"{inert(str(k))}={inert(str(v))}" for k, v in tags.items())
        )
    if about:
        lines.append("; ".join(about))
    for key, value in e.items():
        if key in _EVIDENCE_SHOWN:
            continue
        if isinstance(value, list | dict):
            lines.append(f"{inert(key)}: ({len(value)} values; see the action)")
        else:
            lines.append(f"{inert(key)}: {inert(str(value))}")
    return lines


def _votes(p: _Proposal) -> str:
    """Votes that count toward the quorum, of the quorum."""
    return f"{sum(1 for v in p.votes if v.counts)} of {p.policy.quorum}"


def _echo_lines(lines: list[str], *, err: bool = False) -> None:
    # Escaped again as a whole: a field of the answer formatted without ``inert`` (a
    # state, a code, an id) cannot reach the terminal raw either.
    for line in lines:
        say(line, err=err)


def _summary(p: _Proposal, action: ProposedAction | ToolCall) -> list[str]:
    """What a person needs before deciding: what, why, under which rule, and the hash."""
    from airlock.protocol import ToolCall

    if isinstance(action, ToolCall):
        lines = _tool_call_lines(p, action)
    else:
        lines = _action_lines(p, action)
    confirm = (
        f", typed {'target' if p.is_tool_call else 'resource id'} required"
        if p.policy.confirm
        else ""
    )
    lines.append(
        f"policy     rule {inert(p.policy.rule)} ({p.policy.effect}, quorum "
        f"{p.policy.quorum}{confirm}); risk {p.risk}; policy hash {p.policy.hash}"
    )
    voters = ", ".join(
        f"{inert(v.voter)} at {_when(v.at)}" + ("" if v.counts else " (does not count)")
        for v in p.votes
    )
    if p.route is not None:
        lines.append(f"route      {_route(p.route, pending=p.state == 'pending')}")
    lines.append(f"votes      {_votes(p)}" + (f" ({voters})" if voters else ""))
    if p.state == "pending":
        lines.append(f"deadline   approval window closes {_when(p.approval_deadline)}")
    lines.append(f"hash       {p.action_hash}")
    return lines


def _route(route: _Route, *, pending: bool) -> str:
    """Whom a routed proposal is asked of, in order, and (pending) whether the caller is
    among those who may approve it (docs/notifications.md#routing-slas-and-escalation)."""
    shown = []
    for n, group in enumerate(inert(g) for g in route.groups):
        if n <= route.level:
            shown.append(f"{group} (asked)")
        elif n == route.level + 1 and route.due_at is not None:
            shown.append(f"{group} (next, at {_when(route.due_at)} if unanswered)")
        else:  # asked only after the next group's SLA passes, or (no SLA) never
            shown.append(f"{group} ({'later' if route.due_at is not None else 'not asked'})")
    if not pending:
        return ", ".join(shown)
    asked = " or ".join(inert(g) for g in route.asked)
    who = "you may approve it" if route.may_vote else f"only a member of {asked} may approve it"
    return ", ".join(shown) + f"; {who}"


def _tool_call_lines(p: _Proposal, call: ToolCall) -> list[str]:
    """A tool call from its signed text: the call, its arguments and premises as tables
    (every value as its canonical JSON, escaped), and who proposed it."""
    lines = [
        f"proposal   {p.id}  ({p.state})",
        f"tool call  the gate {inert(call.audience)} calls {inert(call.tool)} on "
        f"{inert(call.target)}, once",
        f"summary    {inert(call.summary)}",
        f"target     {inert(call.target)}",
        f"effect key {inert(call.effect_key)} (one effect per key, ever)",
        f"audience   {inert(call.audience)}",
    ]
    for title, values in (("arguments", call.arguments), ("premises", call.premises)):
        rows = _json_rows(values)
        lines.append(f"{title:<10} " + ("(none)" if not rows else f"{len(rows)}, as JSON:"))
        width = max((len(name) for name, _ in rows), default=0)
        lines.extend(f"           {name:<{width}}  {value}" for name, value in rows)
    lines.append(f"proposed   by {inert(call.proposed_by)} at {call.created_at}")
    return lines


def _json_rows(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    from airlock.protocol import canonical_bytes

    return [
        (inert(str(name)), inert(canonical_bytes(value).decode("utf-8")))
        for name, value in values.items()
    ]


def _action_lines(p: _Proposal, action: ProposedAction) -> list[str]:
    """A cloud action from its signed text: what, why, evidence and saving."""
    lines = [
        f"proposal   {p.id}  ({p.state})",
        f"action     {_plain(action)}",
        f"where      {_where(action)}",
        f"           {_precondition(action)}",
        f"reason     {inert(action.reason)}",
        f"proposed   by {inert(action.proposed_by)} at {action.created_at}",
    ]
    evidence = _evidence(action.evidence)
    if evidence:
        lines.append(f"evidence   {evidence[0]}")
        lines.extend(f"           {line}" for line in evidence[1:])
    saving = action.saving
    if saving is not None:
        what = (
            "its compute price stops"
            if saving.basis == "compute"
            else "no charge Airlock prices stops"
        )
        lines.append(
            f"saves      {_saving_label(saving)} a month (est.: {what}; price "
            f"{money(saving.hourly_price_micros, saving.currency, 6)} an hour from "
            f"{inert(saving.source)}, {saving.hours_per_month} h a month)"
        )
    return lines


def _edit_lines(p: _Proposal) -> list[str]:
    """Where an edited tool call came from, or went (docs/protocol.md#editing-a-tool-call)."""
    lines = []
    if p.superseded_by:
        lines.append(f"superseded by {p.superseded_by}: edited into it, so this one is withdrawn")
    if (e := p.edit) is not None:
        said = f": {inert(e.note)}" if e.note else ""
        lines.append(f"edited     by {inert(e.by)} at {_when(e.at)} from {e.supersedes}{said}")
        for c in e.changes:
            was, now = (inert(json.dumps(v, ensure_ascii=False)) for v in (c.was, c.now))
            lines.append(f"  changed  {inert(c.argument)}: {was} -> {now}")
    return lines


def _details(p: _Proposal) -> list[str]:
    lines = _edit_lines(p)
    if p.deny_reason:
        lines.append(f"denied     {inert(p.deny_reason)}")
    for v in p.votes:
        if v.note:
            lines.append(f"note       {inert(v.voter)}: {inert(v.note)}")
    if p.approval is not None:
        a = p.approval
        revoked = (
            f"; revoked by {inert(a.revoked_by or '?')} at {_when(a.revoked_at)}"
            if a.revoked_at
            else ""
        )
        lines.append(
            f"approval   {a.approval_id} signed by {a.keyid} at {_when(a.issued_at)}, valid until "
            f"{_when(a.expires_at)}{revoked}"
        )
    if p.rejection is not None:
        r = p.rejection
        lines.append(
            f"rejected   {_words(_REASONS, r.reason_code)} by {inert(r.by)} at {_when(r.at)}"
            + (f": {inert(r.note)}" if r.note else "")
        )
    if p.outcome is not None:
        o = p.outcome
        code = f" ({o.refusal_code})" if o.refusal_code else ""
        receipt = "verified receipt" if o.receipt_verified else "receipt NOT verified"
        late = ", reported late" if o.late else ""
        outcome = _words(_OUTCOMES, o.outcome)
        lines.append(f"outcome    {outcome}{code}, {receipt}{late}, at {_when(o.reported_at)}")
        if o.resolution:
            lines.append(
                f"resolved   {_words(_DECISIONS, o.resolution)} by "
                f"{inert(o.resolved_by or '?')} at {_when(o.resolved_at)}: "
                f"{inert(o.resolution_note or '')}"
            )
        if (x := o.executor_resolution) is not None:
            # The executor's signed resolution, come after the one above: the ledger's.
            said = (
                f"executor   resolved {_words(_DECISIONS, x.decision)} by {inert(x.by)} at "
                f"{_when(x.at)} in its "
                f"ledger (reported {_when(x.reported_at)})"
                + (f": {inert(x.note)}" if x.note else "")
            )
            lines.append(said)
            if x.conflict:
                lines.append(
                    f"CONFLICT   the checkpoint says {_words(_DECISIONS, x.checkpoint_decision)} "
                    f"({inert(x.checkpoint_resolved_by or '?')}), the executor's ledger "
                    f"{_words(_DECISIONS, x.decision)}; the ledger is the record of what the "
                    "executor did. "
                    "Check the resource in the cloud and the receipt (--json), then tell "
                    "whoever recorded the wrong one"
                )
    for note in p.executor_refusals:
        # A note from the executor's signed receipt; the state above is unchanged by it.
        detail = f": {inert(note.detail)}" if note.detail else ""
        lines.append(
            f"refused    before use by executor {inert(note.executor)} at {_when(note.at)}: "
            f"{inert(note.refusal_code)}{detail} (reported {_when(note.reported_at)}; "
            "the state is unchanged)"
        )
    return lines


def _canonical_text(p: _Proposal) -> list[str]:
    shown = inert(p.action_jcs)
    kind = "tool call" if p.is_tool_call else "action"
    lines = [f"canonical {kind} (RFC 8785), exactly as hashed and signed:", shown]
    if shown != p.action_jcs:
        lines.append(
            "warning: the action holds control or invisible characters, shown above as \\u "
            "escapes; they are part of what is signed"
        )
    return lines


def _saving_label(saving: Saving | None) -> str:
    from airlock.protocol import CURRENCY_EXPONENTS

    if saving is None:
        return "-"
    return money(saving.monthly_minor, saving.currency, CURRENCY_EXPONENTS[saving.currency])
