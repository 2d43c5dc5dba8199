"""The committed OpenAPI document matches the code, and the app honours it (schemathesis).

Regenerate with ``python -m services.checkpoint.openapi > services/checkpoint/openapi.json``.
"""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("role", ["admin", "agent", "executor"])
def test_api_matches_its_schema_and_never_fails_with_5xx(sqlite_world: World, role: str) -> None:
    world = sqlite_world
    world.app.state.feed_max_wait = 0  # long-polls would only slow the run down
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
        case.call_and_validate(headers=headers, checks=CHECKS)

    run()
