"""The proposal page offers Approve only when what it shows is what is hashed.

A person approves a hash. The page's headline, its "What will happen" sentence and the
confirm id come from the checkpoint's convenience fields and its parsed ``action``; the
hash covers ``action_jcs``. When the text does not hash to the hash, or the fields do not
say what the text says, approving would sign something other than what was read.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from airlock.api import Proposal
from webapp import present

from .conftest import Site
from .fakes import action_value


def _swap_target(record: dict[str, Any]) -> None:
    record["resource_id"] = "i-otherbox0002"
    record["action"] = copy.deepcopy(record["action"])
    record["action"]["resource"]["id"] = "i-otherbox0002"


def _swap_headline_only(record: dict[str, Any]) -> None:
    record["resource_id"] = "i-otherbox0002"


def _swap_operation(record: dict[str, Any]) -> None:
    record["operation"] = "delete"


def _swap_account(record: dict[str, Any]) -> None:
    record["account"] = "5999999999999999"


def _swap_region(record: dict[str, Any]) -> None:
    record["region"] = "cn-hangzhou"


def _swap_precondition(record: dict[str, Any]) -> None:
    record["action"] = copy.deepcopy(record["action"])
    record["action"]["precondition"]["status"] = "Stopped"


def _swap_hash(record: dict[str, Any]) -> None:
    record["action_hash"] = "sha256:" + "11" * 32


def _non_canonical_text(record: dict[str, Any]) -> None:
    from airlock.protocol import action_hash

    text = record["action_jcs"].replace(",", ", ", 1)
    record["action_jcs"] = text
    record["action_hash"] = action_hash(text.encode())


SWAPS: dict[str, Callable[[dict[str, Any]], None]] = {
    "target-in-fields-and-action": _swap_target,
    "target-in-headline": _swap_headline_only,
    "operation": _swap_operation,
    "account": _swap_account,
    "region": _swap_region,
    "precondition": _swap_precondition,
    "hash": _swap_hash,
    "non-canonical-text": _non_canonical_text,
}


@pytest.mark.parametrize("swap", SWAPS.values(), ids=SWAPS.keys())
def test_disagreeing_answer_is_not_offered_for_approval(
    site: Site, swap: Callable[[dict[str, Any]], None]
) -> None:
    site.sign_in()
    record = site.fake.add(action_value(resource_id="i-harmless0001"))
    swap(record)
    html = site.client.get("/proposals/prop_fake000001").text
    assert 'id="approve-form"' not in html
    assert 'id="signed-mismatch"' in html and "do not approve" in html.lower()
    assert 'id="reject-form"' in html  # rejecting what cannot be trusted stays possible


@pytest.mark.parametrize("swap", SWAPS.values(), ids=SWAPS.keys())
def test_approve_post_for_a_disagreeing_answer_is_refused_locally(
    site: Site, swap: Callable[[dict[str, Any]], None]
) -> None:
    site.sign_in()
    record = site.fake.add(action_value(resource_id="i-harmless0001"))
    token = site.csrf("/proposals/prop_fake000001")
    swap(record)
    response = site.client.post(
        "/proposals/prop_fake000001/approve",
        data={"csrf_token": token, "action_hash": record["action_hash"], "note": "typed"},
    )
    assert response.status_code == 409
    assert 'id="signed-mismatch"' in response.text
    assert "Nothing was sent" in response.text
    assert site.fake.calls == []


def test_agreeing_answer_offers_approve(site: Site) -> None:
    site.sign_in()
    site.fake.add(action_value())
    html = site.client.get("/proposals/prop_fake000001").text
    assert 'id="approve-form"' in html and 'id="signed-mismatch"' not in html
    assert 'id="hash-check">matches the text below' in html


def test_signed_action_problem_names_what_disagrees() -> None:
    from .fakes import FakeCheckpoint

    record = FakeCheckpoint().add(action_value())
    assert present.signed_action_problem(Proposal.model_validate(record)) is None
    _swap_target(record)
    problem = present.signed_action_problem(Proposal.model_validate(record))
    assert problem is not None and "resource id" in problem
