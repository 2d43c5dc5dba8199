"""Approval policy: which actions are denied, how many people must approve, what they type.

A policy is a TOML file of rules; the first rule whose match holds decides. Effects:

* ``deny``    — the proposal is refused at submit (403 ``E_POLICY_DENIED``) and recorded
  as ``denied``;
* ``approve`` — ``quorum`` distinct people (not the proposer) must approve, and with
  ``confirm = true`` each must type the resource id;
* ``auto``    — the policy itself approves. Only where a rule says so explicitly, only for
  operations it names, and never for ``delete`` or any high-risk operation: such a file
  is refused at load, so the service does not start.

When no rule matches the default is one human (plus the typed id for a high-risk
operation). The checkpoint never lets a rule weaken the typed confirmation of a high-risk
operation (docs/protocol.md#policy).

A rule is for one kind of action, never both: a cloud rule (``provider``, ``account``,
``region``, ``resource_type``, ``operation``, ``tags``, or no match at all) decides only
``airlock.action/v1``; a tool-call rule (``match.type = "airlock.tool-call/v1"``, or any
of ``tool``, ``risk``, ``arguments``) decides only ``airlock.tool-call/v1``. A tool call
that matches no rule needs one human, plus the typed target when its declared risk is
high. ``[tools.<tool>] reject_reasons`` adds reject reason codes for one tool.

Tags come from the action's ``evidence.tags`` (a JSON object of tag key → value, as the
agent read them). The checkpoint holds no cloud credential, so it cannot read tags
itself; the executor re-reads live tags before writing (``precondition.absent_tags``).

This module is pure: it reads the file once, at load, and never does I/O afterwards. It
must never return an ``auto`` decision for a high-risk operation.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Final, Literal, get_args

from pydantic import TypeAdapter, ValidationError

from airlock.protocol import (
    ACTION_TYPE,
    ALLOWED_OPERATIONS,
    HIGH_RISK_OPERATIONS,
    PROVIDER_RESOURCE_TYPES,
    TOOL_CALL_TYPE,
    Approver,
    PolicyRef,
    ProposedAction,
    ToolCall,
)

from ._toolrules import TOOL_PATTERN, ArgCondition, parse_arguments, parse_tools
from .errors import ConfigError
from .models import REJECT_REASONS
from .notify.config import NotifyConfig, parse_notify
from .notify.groups import Route, Routing, parse_groups, parse_route

__all__ = [
    "AUTO_APPROVER_PREFIX",
    "DEFAULT_RULE",
    "Decision",
    "Policy",
    "Risk",
    "action_tags",
    "load_policy",
]

Risk = Literal["low", "medium", "high"]
Effect = Literal["deny", "approve", "auto"]

DEFAULT_RULE: Final = "default-one-human"
#: An ``auto`` decision is signed with the approver id ``policy:<rule name>``.
AUTO_APPROVER_PREFIX: Final = "policy:"
_CLOUD_MATCH: Final = frozenset(
    {"provider", "account", "region", "resource_type", "operation", "tags"}
)
_TOOL_MATCH: Final = frozenset({"tool", "risk", "arguments"})
_MATCH_FIELDS: Final = _CLOUD_MATCH | _TOOL_MATCH | {"type"}
_RISKS: Final = ("low", "medium", "high")
_RULE_FIELDS: Final = frozenset(
    {"name", "effect", "match", "quorum", "confirm", "risk", "reason", "route", "sla", "notify"}
)
_ALL_OPERATIONS: Final = frozenset(op for ops in ALLOWED_OPERATIONS.values() for op in ops)
_HIGH_RISK_NAMES: Final = frozenset(op for _, op in HIGH_RISK_OPERATIONS)
_MAX_QUORUM: Final = 16


def _action_field(name: str) -> TypeAdapter[Any]:
    """The kernel's own check of one ``ProposedAction`` field, to hold a match value to:
    a value the action model refuses can never match, and a deny rule that can never
    match lets a later rule decide instead."""
    info = ProposedAction.model_fields[name]
    # Built at run time from the model's own field, so mypy cannot read it as a type.
    form: Any = Annotated[(info.annotation, *info.metadata)]
    return TypeAdapter(form)


_PROVIDERS: Final = frozenset(get_args(ProposedAction.model_fields["provider"].annotation))
_ACCOUNT: Final = _action_field("account")
_REGION: Final = _action_field("region")


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy says about one action."""

    rule: str
    effect: Effect
    quorum: int
    confirm: bool
    risk: Risk
    reason: str


@dataclass(frozen=True, slots=True)
class _TagCondition:
    keys: frozenset[str]  # lower-cased; any of them
    value_prefix: str | None  # lower-cased

    def holds(self, tags: Mapping[str, str]) -> bool:
        for key, value in tags.items():
            if key.casefold() in self.keys and (
                self.value_prefix is None or value.casefold().startswith(self.value_prefix)
            ):
                return True
        return False


@dataclass(frozen=True, slots=True)
class _Rule:
    name: str
    effect: Effect
    provider: frozenset[str] | None
    account: frozenset[str] | None
    region: frozenset[str] | None
    resource_type: frozenset[str] | None
    operation: frozenset[str] | None
    tags: tuple[_TagCondition, ...]
    quorum: int
    confirm: bool
    risk: Risk | None
    reason: str
    kind: str = ACTION_TYPE  # the action type this rule decides
    tool: frozenset[str] | None = None
    tool_risk: frozenset[str] | None = None  # match.risk: the tool call's declared risk
    arguments: tuple[ArgCondition, ...] = ()

    def matches_tool_call(self, call: ToolCall) -> bool:
        if self.kind != TOOL_CALL_TYPE:
            return False
        if self.tool is not None and call.tool not in self.tool:
            return False
        if self.tool_risk is not None and call.risk not in self.tool_risk:
            return False
        return all(cond.holds(call.arguments) for cond in self.arguments)

    def matches(self, action: ProposedAction, tags: Mapping[str, str]) -> bool:
        if self.kind != ACTION_TYPE:
            return False
        fields = (
            (self.provider, action.provider),
            (self.account, action.account),
            (self.region, action.region),
            (self.resource_type, action.resource.type),
            (self.operation, action.operation),
        )
        if any(allowed is not None and value not in allowed for allowed, value in fields):
            return False
        return all(cond.holds(tags) for cond in self.tags)


class Policy:
    """A loaded policy: ordered rules, the file's hash, and :meth:`decide`."""

    __slots__ = ("_rules", "_tool_reasons", "hash", "notify", "source")

    def __init__(
        self,
        rules: tuple[_Rule, ...],
        digest: str,
        source: str,
        tool_reasons: Mapping[str, tuple[str, ...]] | None = None,
        notify: NotifyConfig | None = None,
    ) -> None:
        self._rules = rules
        #: Where notifications go (the ``[notify]`` table; docs/notifications.md).
        self.notify = notify or NotifyConfig()
        self._tool_reasons = dict(tool_reasons or {})
        self.hash = digest
        self.source = source

    def reject_reasons(self, tool: str | None) -> tuple[str, ...]:
        """The reason codes a rejection may give: the built-in ones, and for a tool
        call the ones the file names for its tool (``[tools.<tool>] reject_reasons``)."""
        extra = self._tool_reasons.get(tool, ()) if tool is not None else ()
        return (*REJECT_REASONS, *(r for r in extra if r not in REJECT_REASONS))

    @property
    def rule_names(self) -> tuple[str, ...]:
        return tuple(rule.name for rule in self._rules)

    def decide(self, action: ProposedAction | ToolCall) -> Decision:
        """The first matching rule's decision, or the default (one human)."""
        if isinstance(action, ToolCall):
            return self._decide_tool_call(action)
        tags = action_tags(action)
        high = action.is_high_risk
        for rule in self._rules:
            if not rule.matches(action, tags):
                continue
            if rule.effect == "auto" and high:
                # Unreachable for a policy that passed load; fail closed if it ever is not.
                raise ConfigError(f"rule {rule.name!r}: auto may never approve {action.operation}")
            risk: Risk = rule.risk or ("high" if high else "medium")
            return Decision(
                rule=rule.name,
                effect=rule.effect,
                quorum=rule.quorum,
                confirm=rule.confirm or high,
                risk=risk,
                reason=rule.reason,
            )
        return Decision(
            rule=DEFAULT_RULE,
            effect="approve",
            quorum=1,
            confirm=high,
            risk="high" if high else "medium",
            reason="no rule matched: one human approves",
        )

    def _decide_tool_call(self, call: ToolCall) -> Decision:
        high = call.is_high_risk
        for rule in self._rules:
            if not rule.matches_tool_call(call):
                continue
            if rule.effect == "auto" and high:
                # Unreachable for a policy that passed load; fail closed if it ever is not.
                raise ConfigError(f"rule {rule.name!r}: auto may never approve a high-risk call")
            return Decision(
                rule=rule.name,
                effect=rule.effect,
                quorum=rule.quorum,
                confirm=rule.confirm or high,
                risk=call.risk,
                reason=rule.reason,
            )
        return Decision(
            rule=DEFAULT_RULE,
            effect="approve",
            quorum=1,
            confirm=high,
            risk=call.risk,
            reason="no rule matched: one human approves",
        )

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<policy>") -> Policy:
        """Parse and check a policy, or raise :class:`ConfigError` naming the problem."""
        try:
            doc = tomllib.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"policy {source}: not valid TOML: {exc}") from None
        unknown = set(doc) - {"version", "rule", "tools", "notify", "groups"}
        if unknown:
            raise ConfigError(f"policy {source}: unknown top-level keys {sorted(unknown)}")
        if doc.get("version") != 1:
            raise ConfigError(f"policy {source}: needs version = 1")
        raw_rules = doc.get("rule", [])
        if not isinstance(raw_rules, list):
            raise ConfigError(f"policy {source}: rules are [[rule]] tables")
        rules: list[_Rule] = []
        for n, raw in enumerate(raw_rules):
            try:
                rules.append(_parse_rule(raw))
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"policy {source}: rule #{n + 1}: {exc}") from None
        names = [rule.name for rule in rules]
        if len(set(names)) != len(names):
            raise ConfigError(f"policy {source}: rule names must be unique")
        try:
            tool_reasons = parse_tools(doc.get("tools", {}))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"policy {source}: {exc}") from None
        try:
            notify = parse_notify(doc.get("notify"))
            notify = replace(notify, routing=_routing(doc.get("groups"), raw_rules, notify))
        except ConfigError as exc:
            raise ConfigError(f"policy {source}: {exc}") from None
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        return cls(tuple(rules), digest, source, tool_reasons, notify)


def _routing(raw_groups: Any, raw_rules: list[Any], notify: NotifyConfig) -> Routing:
    """``[groups]`` and each rule's ``route``, ``sla`` and ``notify`` (rules parsed)."""
    channels = frozenset(c.name for c in notify.channels)
    groups = parse_groups(raw_groups, channels)
    routes: dict[str, Route] = {}
    for raw in raw_rules:
        route = parse_route(raw["name"], raw, groups, channels)
        if route is not None:
            routes[raw["name"]] = route
    return Routing(groups, routes, notify.routing.people)


def load_policy(path: Path) -> Policy:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"policy {path}: cannot read: {exc.strerror}") from None
    return Policy.from_bytes(data, str(path))


def action_tags(action: ProposedAction) -> dict[str, str]:
    """The resource's tags as the agent reported them in ``evidence.tags`` (may be empty)."""
    tags = action.evidence.get("tags")
    if tags is None:
        return {}
    if not isinstance(tags, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in tags.items()
    ):
        raise ValueError("evidence.tags must be an object of string tag keys to string values")
    return tags


def _str_set(value: Any, field: str) -> frozenset[str] | None:
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(i, str) for i in items):
        raise ValueError(f"match.{field} must be a string or a non-empty list of strings")
    return frozenset(items)


def _parse_tags(value: Any) -> tuple[_TagCondition, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError("match.tags must be a list of {key = ..., value_prefix = ...}")
    conditions: list[_TagCondition] = []
    for cond in value:
        if not isinstance(cond, dict) or not {"key"} <= set(cond) <= {"key", "value_prefix"}:
            raise ValueError("each match.tags entry has key and optional value_prefix")
        keys = _str_set(cond["key"], "tags.key")
        prefix = cond.get("value_prefix")
        if prefix is not None and not isinstance(prefix, str):
            raise ValueError("match.tags value_prefix must be a string")
        assert keys is not None  # key is required above
        conditions.append(
            _TagCondition(
                frozenset(k.casefold() for k in keys),
                prefix.casefold() if prefix is not None else None,
            )
        )
    return tuple(conditions)


def _check_signable_name(name: str, effect: str) -> None:
    """The rule's name goes into every statement it decides (``policy.rule``) and, for
    ``auto``, is the approver (``policy:<name>``): a name the statement model would refuse
    must stop the load, not make every matching submit fail later."""
    try:
        PolicyRef.model_validate({"rule": name, "hash": "sha256:" + "0" * 64})
    except ValidationError:
        raise ValueError(f"rule name {name!r} must be NFC-normalised text") from None
    if effect == "auto":
        try:
            Approver.model_validate({"id": AUTO_APPROVER_PREFIX + name, "at": 0})
        except ValidationError:
            raise ValueError(
                f"auto rule name {name!r} must be a valid approver id after "
                f"{AUTO_APPROVER_PREFIX!r}: ASCII letters, digits and . _ : @ / - only, "
                f"at most {128 - len(AUTO_APPROVER_PREFIX)} characters"
            ) from None


_StrSet = frozenset[str] | None


def _parse_match(name: str, match: Mapping[str, Any]) -> tuple[_StrSet, ...]:
    """provider, account, region, resource_type, operation: each value one an action
    can carry (the kernel's allowlist and id patterns), or refuse the file."""
    provider = _str_set(match.get("provider"), "provider")
    if provider is not None and provider - _PROVIDERS:
        raise ValueError(
            f"{name}: unknown providers {sorted(provider - _PROVIDERS)} "
            f"(supported: {', '.join(sorted(_PROVIDERS))})"
        )
    resource_type = _str_set(match.get("resource_type"), "resource_type")
    if resource_type is not None and resource_type - ALLOWED_OPERATIONS.keys():
        raise ValueError(
            f"{name}: unknown resource types {sorted(resource_type - ALLOWED_OPERATIONS.keys())} "
            f"(known: {', '.join(sorted(ALLOWED_OPERATIONS))})"
        )
    # A type that none of the named providers has can never match.
    for rtype in sorted(resource_type or ()) if provider is not None else ():
        if not any(rtype in PROVIDER_RESOURCE_TYPES[p] for p in provider or ()):
            where = ", ".join(sorted(provider or ()))
            raise ValueError(f"{name}: resource type {rtype} does not exist at {where}")
    operation = _str_set(match.get("operation"), "operation")
    if operation is not None and operation - _ALL_OPERATIONS:
        raise ValueError(f"{name}: unknown operations {sorted(operation - _ALL_OPERATIONS)}")
    if operation is not None and resource_type is not None:
        possible = {op for rtype in resource_type for op in ALLOWED_OPERATIONS[rtype]}
        if operation - possible:
            raise ValueError(
                f"{name}: operations {sorted(operation - possible)} are not allowed for "
                f"{', '.join(sorted(resource_type))}"
            )
    ids = []
    for field, adapter in (("account", _ACCOUNT), ("region", _REGION)):
        values = _str_set(match.get(field), field)
        for value in sorted(values or ()):
            try:
                adapter.validate_python(value)
            except ValidationError:
                raise ValueError(
                    f"{name}: match.{field} {value!r} is not a valid {field} id"
                ) from None
        ids.append(values)
    account, region = ids
    return provider, account, region, resource_type, operation


def _parse_rule(raw: Any) -> _Rule:
    if not isinstance(raw, dict):
        raise TypeError("a rule is a table")
    unknown = set(raw) - _RULE_FIELDS
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}")
    name = raw.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= 128 or not name.isprintable():
        raise ValueError("name must be a printable string of 1 to 128 characters")
    effect = raw.get("effect")
    if effect not in ("deny", "approve", "auto"):
        raise ValueError(f"{name}: effect must be deny, approve or auto")
    _check_signable_name(name, effect)
    match = raw.get("match", {})
    if not isinstance(match, dict):
        raise ValueError(f"{name}: match is a table")
    if set(match) - _MATCH_FIELDS:
        raise ValueError(f"{name}: unknown match keys {sorted(set(match) - _MATCH_FIELDS)}")
    kind = _rule_kind(name, match)
    if kind == TOOL_CALL_TYPE:
        return _parse_tool_rule(name, effect, raw, match)
    provider, account, region, resource_type, operation = _parse_match(name, match)
    quorum, confirm, reason = _decision_fields(name, effect, raw)
    risk = raw.get("risk")
    if risk not in (None, *_RISKS):
        raise ValueError(f"{name}: risk must be low, medium or high")
    if effect == "auto":
        # docs/protocol.md#policy: auto only where the file names the operations, never for delete.
        if operation is None:
            raise ValueError(f"{name}: auto must name its operations in match.operation")
        if operation & _HIGH_RISK_NAMES:
            raise ValueError(f"{name}: auto is refused for {sorted(operation & _HIGH_RISK_NAMES)}")
    return _Rule(
        name=name,
        effect=effect,
        provider=provider,
        account=account,
        region=region,
        resource_type=resource_type,
        operation=operation,
        tags=_parse_tags(match.get("tags")),
        quorum=quorum,
        confirm=confirm,
        risk=risk,
        reason=reason,
    )


def _decision_fields(name: str, effect: str, raw: Mapping[str, Any]) -> tuple[int, bool, str]:
    """A rule's ``quorum``, ``confirm`` and ``reason``, checked."""
    quorum = raw.get("quorum", 1)
    if not isinstance(quorum, int) or isinstance(quorum, bool) or not 1 <= quorum <= _MAX_QUORUM:
        raise ValueError(f"{name}: quorum must be an integer from 1 to {_MAX_QUORUM}")
    confirm = raw.get("confirm", False)
    if not isinstance(confirm, bool):
        raise ValueError(f"{name}: confirm must be true or false")
    reason = raw.get("reason", "")
    if not isinstance(reason, str) or len(reason) > 500:
        raise ValueError(f"{name}: reason must be a string of at most 500 characters")
    if effect != "approve" and ("quorum" in raw or "confirm" in raw):
        raise ValueError(f"{name}: quorum and confirm apply only to effect = approve")
    return quorum, confirm, reason


def _rule_kind(name: str, match: Mapping[str, Any]) -> str:
    """The action type a rule decides: ``match.type``, else what its keys imply. A rule
    mixing cloud and tool-call keys, or naming a type its keys contradict, is refused."""
    kind = match.get("type")
    if kind is not None and kind not in (ACTION_TYPE, TOOL_CALL_TYPE):
        raise ValueError(f"{name}: match.type must be {ACTION_TYPE!r} or {TOOL_CALL_TYPE!r}")
    cloud, tool = set(match) & _CLOUD_MATCH, set(match) & _TOOL_MATCH
    if cloud and tool:
        raise ValueError(
            f"{name}: cloud keys {sorted(cloud)} and tool-call keys {sorted(tool)} in one rule"
        )
    implied = TOOL_CALL_TYPE if tool else ACTION_TYPE
    if kind is None:
        return implied
    if (kind == TOOL_CALL_TYPE and cloud) or (kind == ACTION_TYPE and tool):
        raise ValueError(f"{name}: match.type {kind!r} with keys of the other action type")
    return str(kind)


def _parse_tool_rule(
    name: str, effect: str, raw: Mapping[str, Any], match: Mapping[str, Any]
) -> _Rule:
    """A rule for tool calls: ``tool``, ``risk`` (the declared one), ``arguments``."""
    if "risk" in raw:
        raise ValueError(
            f"{name}: a tool call declares its own risk; match it with match.risk instead"
        )
    quorum, confirm, reason = _decision_fields(name, effect, raw)
    tool = _str_set(match.get("tool"), "tool")
    for unknown in sorted(t for t in tool or () if not TOOL_PATTERN.fullmatch(t)):
        raise ValueError(f"{name}: match.tool {unknown!r} is not a tool name a call can carry")
    tool_risk = _str_set(match.get("risk"), "risk")
    if tool_risk is not None and tool_risk - set(_RISKS):
        raise ValueError(f"{name}: match.risk must be among low, medium, high")
    arguments = parse_arguments(name, match.get("arguments"))
    if effect == "auto":
        # As for a cloud action: auto only where the file names the tools, and never
        # for a call that may be high risk.
        if tool is None:
            raise ValueError(f"{name}: auto must name its tools in match.tool")
        if tool_risk is None or "high" in tool_risk:
            raise ValueError(f"{name}: auto must name its risks in match.risk, never high")
    return _Rule(
        name=name,
        effect=effect,  # type: ignore[arg-type]  # checked by _parse_rule
        provider=None,
        account=None,
        region=None,
        resource_type=None,
        operation=None,
        tags=(),
        quorum=quorum,
        confirm=confirm,
        risk=None,
        reason=reason,
        kind=TOOL_CALL_TYPE,
        tool=tool,
        tool_risk=tool_risk,
        arguments=arguments,
    )
