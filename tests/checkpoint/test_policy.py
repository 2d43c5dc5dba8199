"""Policy: first match wins, tag matching, the default, and what a file may not say."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from services.checkpoint.errors import ConfigError
from services.checkpoint.policy import DEFAULT_RULE, Policy, load_policy

from .builders import action
from .harness import make_world

DEFAULT_POLICY = Path(__file__).parents[2] / "services" / "checkpoint" / "default-policy.toml"


@pytest.fixture(scope="module")
def default() -> Policy:
    return load_policy(DEFAULT_POLICY)


def test_default_policy_stop_needs_one_approver(default: Policy) -> None:
    decision = default.decide(action(operation="stop"))
    assert (decision.effect, decision.quorum, decision.confirm) == ("approve", 1, False)
    assert decision.rule == "stop-one-person"


def test_default_policy_delete_needs_two_approvers_and_typed_id(default: Policy) -> None:
    decision = default.decide(action(operation="delete"))
    assert (decision.effect, decision.quorum, decision.confirm, decision.risk) == (
        "approve",
        2,
        True,
        "high",
    )


@pytest.mark.parametrize(
    "tags",
    [
        {"airlock:protect": ""},
        {"AIRLOCK:PROTECT": "yes"},
        {"env": "prod"},
        {"Environment": "Production-eu"},
        {"ENV": "PROD"},
    ],
)
def test_protected_and_production_resources_are_denied(
    default: Policy, tags: dict[str, str]
) -> None:
    decision = default.decide(action(operation="stop", tags=tags))
    assert decision.effect == "deny"


@pytest.mark.parametrize("tags", [{"env": "staging"}, {"owner": "prod-team"}, {}])
def test_other_tags_are_not_denied(default: Policy, tags: dict[str, str]) -> None:
    assert default.decide(action(operation="stop", tags=tags)).effect == "approve"


def test_policy_hash_is_sha256_of_the_file_bytes(default: Policy) -> None:
    import hashlib

    assert default.hash == "sha256:" + hashlib.sha256(DEFAULT_POLICY.read_bytes()).hexdigest()


def test_first_match_wins_and_default_is_one_human() -> None:
    policy = Policy.from_bytes(
        b"""
version = 1
[[rule]]
name = "rds-two"
effect = "approve"
quorum = 2
match.resource_type = "rds.instance"
[[rule]]
name = "rds-deny"
effect = "deny"
match.resource_type = "rds.instance"
"""
    )
    rds = action(resource_type="rds.instance", resource_id="rm-abcd1234")
    assert policy.decide(rds).rule == "rds-two"
    fallback = policy.decide(action(operation="stop"))
    assert (fallback.rule, fallback.effect, fallback.quorum) == (DEFAULT_RULE, "approve", 1)


def test_default_rule_still_demands_typed_id_for_delete() -> None:
    policy = Policy.from_bytes(b"version = 1\n")
    decision = policy.decide(action(operation="delete"))
    assert decision.confirm and decision.risk == "high"


def test_a_rule_cannot_waive_typed_confirmation_for_delete() -> None:
    policy = Policy.from_bytes(
        b'version = 1\n[[rule]]\nname = "lax"\neffect = "approve"\nconfirm = false\n'
        b'match.operation = "delete"\n'
    )
    assert policy.decide(action(operation="delete")).confirm


def test_auto_for_stop_is_allowed_where_named() -> None:
    policy = Policy.from_bytes(
        b'version = 1\n[[rule]]\nname = "auto-dev-stop"\neffect = "auto"\n'
        b'match.operation = "stop"\nmatch.account = "5123456789012345"\n'
    )
    assert policy.decide(action(operation="stop")).effect == "auto"


@pytest.mark.parametrize(
    "operation_line",
    ['match.operation = "delete"', 'match.operation = ["stop", "delete"]', ""],
)
def test_auto_for_delete_is_refused_at_load(operation_line: str) -> None:
    text = f'version = 1\n[[rule]]\nname = "auto-all"\neffect = "auto"\n{operation_line}\n'
    with pytest.raises(ConfigError, match="auto"):
        Policy.from_bytes(text.encode())


@pytest.mark.parametrize(
    "name",
    ["auto stop dev", "stop+dev", "stop\u00e9", "a" * 122],
    ids=["space", "plus", "non-ascii", "too-long"],
)
def test_auto_rule_whose_name_is_no_approver_id_is_refused_at_load(name: str) -> None:
    text = f'version = 1\n[[rule]]\nname = "{name}"\neffect = "auto"\nmatch.operation = "stop"\n'
    with pytest.raises(ConfigError, match=r"rule #1: auto rule name .* valid approver id"):
        Policy.from_bytes(text.encode(), "test.toml")


def test_auto_rule_with_the_longest_valid_name_signs(sqlite_url: str, tmp_path: Path) -> None:
    name = "auto-" + "x" * 116  # "policy:" + 121 characters = 128, the id limit
    policy = Policy.from_bytes(
        f'version = 1\n[[rule]]\nname = "{name}"\neffect = "auto"\n'
        f'match.operation = "stop"\n'.encode()
    )
    world = make_world(sqlite_url, tmp_path, policy)
    try:
        record = world.submit().json()
    finally:
        world.client.close()
        world.checkpoint.db.dispose()
    assert record["state"] == "approved"
    statement = json.loads(base64.b64decode(record["approval"]["envelope"]["payload"]))
    assert statement["approvers"][0]["id"] == "policy:" + name
    assert statement["policy"]["rule"] == name


def test_rule_name_that_is_not_nfc_is_refused_at_load() -> None:
    text = 'version = 1\n[[rule]]\nname = "stope\u0301"\neffect = "approve"\n'
    with pytest.raises(ConfigError, match="NFC"):
        Policy.from_bytes(text.encode(), "test.toml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"version = 1\n[[rule]\n", "not valid TOML"),
        (b"[[rule]]\nname='a'\neffect='deny'\n", "version = 1"),
        (b"version = 1\n[[rule]]\nname='a'\neffect='allow'\n", "effect must be"),
        (b"version = 1\n[[rule]]\nname='a'\neffect='approve'\nquorum=0\n", "quorum"),
        (b"version = 1\n[[rule]]\nname='a'\neffect='approve'\nmatch.opration='stop'\n", "unknown"),
        (b"version = 1\n[[rule]]\nname='a'\neffect='deny'\nmatch.operation='reboot'\n", "reboot"),
        (b"version = 1\nextra = 1\n", "unknown top-level"),
        (
            b"version = 1\n[[rule]]\nname='a'\neffect='deny'\n[[rule]]\nname='a'\neffect='deny'\n",
            "unique",
        ),
        (b"\xff\xfe", "not valid TOML"),
    ],
)
def test_malformed_policy_is_refused_with_a_clear_error(text: bytes, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Policy.from_bytes(text, "test.toml")


def test_missing_policy_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_policy(tmp_path / "absent.toml")


_TYPO_DENY = """version = 1
[[rule]]
name = "never-touch-rds"
effect = "deny"
{match}
[[rule]]
name = "auto-stop"
effect = "auto"
match.operation = "stop"
"""


@pytest.mark.parametrize(
    ("match", "message"),
    [
        ('match.resource_type = "rds"', r"unknown resource types \['rds'\]"),
        ('match.resource_type = ["ecs.instance", "RDS"]', r"unknown resource types \['RDS'\]"),
        ('match.provider = "aliyun"', r"unknown providers \['aliyun'\]"),
        ('match.region = "AP-Southeast-1"', r"match.region 'AP-Southeast-1' is not a valid"),
        ('match.region = "ap southeast 1"', r"match.region 'ap southeast 1' is not a valid"),
        ('match.account = "5123 4567"', r"match.account '5123 4567' is not a valid"),
        ('match.account = "\u0405123456789012345"', r"match.account '.1234567890"),  # Cyrillic S
        (
            'match.resource_type = "rds.instance"\nmatch.operation = "delete"',
            r"operations \['delete'\] are not allowed for rds.instance",
        ),
    ],
)
def test_a_deny_rule_that_could_never_match_is_refused_at_load_not_skipped(
    match: str, message: str
) -> None:
    """A typo in a deny rule's match (``rds`` for ``rds.instance``) would make it never
    match, and the auto rule after it would approve what it was written to stop: the
    file is refused, naming the rule and the value."""
    with pytest.raises(ConfigError, match=r"rule #1: never-touch-rds: " + message):
        Policy.from_bytes(_TYPO_DENY.format(match=match).encode(), "test.toml")


def test_match_values_an_action_can_carry_load_and_match() -> None:
    policy = Policy.from_bytes(
        _TYPO_DENY.format(
            match='match.resource_type = "rds.instance"\nmatch.provider = "alibaba"\n'
            'match.region = ["ap-southeast-1", "cn-hangzhou"]\n'
            'match.account = "5123456789012345"'
        ).encode()
    )
    rds = action(resource_type="rds.instance", resource_id="rm-abcd1234")
    assert policy.decide(rds).rule == "never-touch-rds"
    assert policy.decide(action()).rule == "auto-stop"
