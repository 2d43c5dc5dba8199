"""The committed OpenAPI document matches the code, and the app honours it (schemathesis).

Regenerate with ``python -m services.checkpoint.openapi > services/checkpoint/openapi.json``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from services.checkpoint.openapi import render

from .harness import World

COMMITTED = Path(__file__).parents[2] / "services" / "checkpoint" / "openapi.json"
EXAMPLES_PER_ROLE = 6
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
# Logging out would end the session the rest of the run uses; it has its own test.
SKIP = {("DELETE", "/v1/sessions/current")}


def test_committed_openapi_matches_the_code() -> None:
    assert COMMITTED.read_text() == render(), (
        "services/checkpoint/openapi.json is out of date: run "
        "`python -m services.checkpoint.openapi > services/checkpoint/openapi.json`"
    )


#: Refusals that say the request is malformed. Every other refusal of a positive example
#: is about state or rights (E_FORBIDDEN, E_NOT_FOUND, E_STATE, a receipt whose signature
#: does not verify…), which no schema can promise.
_MALFORMED_RECEIPT = ("E_ENVELOPE", "E_PARSE", "E_SIZE")
#: The one rule JSON Schema cannot state: since draft 6, 1.0 is an integer, and
#: schemathesis spells integers so; the server takes integer literals only
#: (docs/protocol.md#strict-json), which the document says in words.
_WHOLE_FLOAT = re.compile(r"non-integer number '(-?[0-9]+\.0+)'")


#: What every request text field's declared pattern refuses: NUL and lone surrogates.
_UNTEXT = re.compile("[\x00\ud800-\udfff]")


def _breaks_the_text_pattern(value: Any) -> bool:
    """Whether a string in ``value`` holds what the text pattern refuses: the generator
    does not always keep to that pattern, and such an example is not a positive one."""
    if isinstance(value, str):
        return _UNTEXT.search(value) is not None
    if isinstance(value, dict):
        return any(_breaks_the_text_pattern(v) for v in (*value, *value.values()))
    if isinstance(value, list):
        return any(_breaks_the_text_pattern(v) for v in value)
    return False


@schemathesis.check
def request_schema_conformance(ctx: Any, response: Any, case: Any) -> bool | None:
    """A request built from the schema (positive) is never refused as malformed: the
    document promises nothing the server does not take."""
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return None
    if not 400 <= response.status_code < 500:
        return None
    error = response.json()["error"]
    code, message = error["code"], error["message"]
    malformed = code == "E_INVALID" or (
        code == "E_RECEIPT" and message.split(":", 1)[0] in _MALFORMED_RECEIPT
    )
    if malformed and _WHOLE_FLOAT.search(message):
        return None
    if malformed and _breaks_the_text_pattern(case.body):
        return None
    assert not malformed, f"a request the schema allows was refused {code}: {message}"
    return None


#: Every role, each with its own token: reader, approver, admin, agent, executor.
ROLES = ["viewer", "alice", "admin", "agent", "executor"]


@pytest.mark.parametrize("role", ROLES)
def test_api_matches_its_schema_and_never_fails_with_5xx(sqlite_world: World, role: str) -> None:
    world = sqlite_world
    world.app.state.feed_max_wait = 0  # long-polls would only slow the run down
    # Hundreds of refusals on one token: rate-limited answers would hide the real ones.
    world.app.state.refusals.burst = 10**9
    world.submit(proposal_id="prop_schema0000001")
    schema = schemathesis.openapi.from_dict(json.loads(COMMITTED.read_text()))
    schema.app = world.app
    operations = [
        result.ok()
        for result in schema.get_all_operations()
        if (result.ok().method.upper(), result.ok().path) not in SKIP
    ]
    assert len(operations) >= 15
    headers = world.auth(role)
    strategy = st.one_of([op.as_strategy(mode) for op in operations for mode in GenerationMode])

    @given(case=strategy)
    @settings(
        max_examples=EXAMPLES_PER_ROLE * len(operations),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        case.call_and_validate(headers=headers, checks=[*CHECKS, request_schema_conformance])

    run()


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/v1/proposals", "GET, POST"),
        ("DELETE", "/v1/me", "GET"),
        ("GET", "/v1/proposals/prop_aaaaaaaa/approve", "POST"),
        ("POST", "/v1/sessions/current", "DELETE"),
        ("POST", "/openapi.json", "GET, HEAD"),
    ],
)
def test_a_method_the_path_does_not_take_is_answered_with_allow(
    sqlite_world: World, method: str, path: str, allow: str
) -> None:
    # RFC 9110 §15.5.6: a 405 names every method the target takes, not only those of
    # the first route whose path matched.
    world = sqlite_world
    response = world.client.request(method, path, headers=world.auth("alice"))
    assert response.status_code == 405
    assert response.headers["Allow"] == allow
    assert response.json()["error"]["code"] == "E_INVALID"
