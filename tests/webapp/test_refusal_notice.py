"""The proposal page says when an executor refused the approval before using it, and the
queue and history lists mark such a proposal with the latest refusal's code.

Against the real checkpoint (tests/checkpoint/harness.py: real database, fixed clock):
the executor's signed refusal receipt is posted to ``POST /v1/refusals`` as the
executor does, and the web app, reaching that checkpoint through its own API client,
shows each one as a notice with a plain explanation. Everything in it is the executor's
text and is shown escaped.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock.settings import WebappSettings
from tests.checkpoint.harness import START, World, make_world, signed_receipt
from webapp import create_app, present

from .conftest import Site, ToCheckpoint, WebStack
from .fakes import action_value

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient


Stack = WebStack


@pytest.fixture
def stack(sqlite_url: str, tmp_path: Path) -> Iterator[Stack]:
    world = make_world(sqlite_url, tmp_path)
    settings = WebappSettings(
        checkpoint_url="http://checkpoint.invalid", secure_cookies=False, allowed_hosts="testserver"
    )
    app = create_app(settings, transport=ToCheckpoint(world.client), now=world.clock)
    try:
        with TestClient(app) as web:
            yield Stack(world, web)
    finally:
        world.client.close()
        world.checkpoint.db.dispose()


def _approved(world: World) -> tuple[str, str]:
    proposal = world.submit().json()
    record = world.approve("alice", proposal["id"], proposal["action_hash"]).json()
    assert record["state"] == "approved", record
    return proposal["id"], record["approval"]["approval_id"]


def _refuse(world: World, approval_id: str, code: str, **kwargs: Any) -> None:
    receipt = signed_receipt(approval_id, None, "refused", refusal_code=code, **kwargs)
    response = world.client.post(
        "/v1/refusals", json={"receipt": receipt}, headers=world.auth("executor")
    )
    assert response.status_code == 200, response.text


def test_an_executor_refusal_is_shown_as_a_notice_with_its_text_escaped(stack: Stack) -> None:
    world = stack.world
    proposal_id, approval_id = _approved(world)
    _refuse(
        world,
        approval_id,
        "E_AUDIENCE",
        executor="<b>airlock-executor/staging</b>",
        detail="<script>alert(1)</script> audience \u202eevil",
        at=START + 5,
    )
    stack.sign_in("bob")
    html = stack.web.get(f"/proposals/{proposal_id}").text
    assert 'id="executor-refusal-1"' in html and 'data-code="E_AUDIENCE"' in html
    assert "The executor refused this approval before using it" in html
    assert "configured for another audience" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; audience \\u202eevil" in html
    assert "<script>alert" not in html and "\u202e" not in html
    assert "&lt;b&gt;airlock-executor/staging&lt;/b&gt;" in html and "<b>airlock" not in html
    assert "2025-11-29 07:06:45 UTC" in html  # the executor's time of refusal
    # A note: the state the page shows is still the checkpoint's.
    assert 'data-state="approved"' in html and 'id="revoke-form"' in html


@pytest.mark.parametrize(
    ("code", "explained"),
    [
        ("E_AUDIENCE", "configured for another audience"),
        ("E_ACCOUNT", "bound to another provider, account or region"),
        ("E_NOT_YET_VALID", "clocks disagree"),
        ("E_EXPIRED", "took it up too late"),
        ("E_TTL", "over the executor&#39;s maximum lifetime"),
        ("E_REVOKED", "revoked before the executor took it up"),
    ],
)
def test_each_refusal_code_is_explained_in_plain_words(
    stack: Stack, code: str, explained: str
) -> None:
    proposal_id, approval_id = _approved(stack.world)
    _refuse(stack.world, approval_id, code, detail="")
    stack.sign_in("viewer")
    html = stack.web.get(f"/proposals/{proposal_id}").text
    assert f'data-code="{code}"' in html and explained in html


def test_a_proposal_no_executor_refused_shows_no_notice(stack: Stack) -> None:
    proposal_id, _ = _approved(stack.world)
    stack.sign_in("bob")
    html = stack.web.get(f"/proposals/{proposal_id}").text
    assert "executor-refusal" not in html


@pytest.mark.parametrize("unix", [253402300800, 2**53 - 1, -(2**53)])
def test_a_time_out_of_the_calendar_is_shown_raw_not_a_failed_page(unix: int) -> None:
    """Times come from other services (a receipt's, an executor's clock): one datetime
    cannot show must not take the page that shows it away (found in review)."""
    assert present.timestamp(unix) == f"{unix} (Unix seconds)"
    assert present.timestamp(0) == "1970-01-01 00:00:00 UTC"


# -- the lists ---------------------------------------------------------------------------


def _row(html: str, proposal_id: str) -> str:
    """The list row of one proposal (rows carry ``data-proposal``)."""
    rows = re.findall(r"<tr [^>]*>.*?</tr>", html, re.DOTALL)
    [row] = [r for r in rows if f'data-proposal="{proposal_id}"' in r]
    return row


def _badges(row: str) -> list[str]:
    return re.findall(r'<span class="badge warn executor-refused"[^>]*>.*?</span>', row)


def test_the_queue_marks_a_proposal_an_executor_refused_with_the_latest_code(
    stack: Stack,
) -> None:
    """Without opening each proposal, people see the approved one an executor will not
    run: a badge in words with the last note's code, and how many notes there are."""
    world = stack.world
    refused_id, approval_id = _approved(world)
    other = world.submit(proposal_id="prop_other0000001", resource_id="i-t4n0other01").json()
    _refuse(world, approval_id, "E_NOT_YET_VALID", at=START + 5)
    _refuse(world, approval_id, "E_AUDIENCE", at=START + 6)
    stack.sign_in("viewer")
    for path in ("/", "/queue/rows"):
        html = stack.web.get(path).text
        row = _row(html, refused_id)
        [badge] = _badges(row)
        assert 'data-code="E_AUDIENCE"' in badge
        assert re.sub(r"<[^>]+>", "", badge) == "executor refused (E_AUDIENCE)"
        assert "2 refusals" in row
        assert "approved, waiting for the executor" in row  # the state is still the state
        assert _badges(_row(html, other["id"])) == []


def test_a_single_refusal_shows_no_count(stack: Stack) -> None:
    proposal_id, approval_id = _approved(stack.world)
    _refuse(stack.world, approval_id, "E_ACCOUNT")
    stack.sign_in("viewer")
    row = _row(stack.web.get("/").text, proposal_id)
    assert len(_badges(row)) == 1 and "refusals" not in row


def test_the_queue_poll_shows_a_refusal_that_arrives_after_the_page(stack: Stack) -> None:
    """A note changes no state or vote: the rows' signature must still change, or the
    polling page would neither say "The queue was updated." nor swap the rows while a
    keyboard user's focus is in them (app.js), and the badge would not show."""
    proposal_id, approval_id = _approved(stack.world)
    stack.sign_in("viewer")
    signature = re.compile(r'data-signature="([0-9a-f]+)"')
    before = stack.web.get("/queue/rows").text
    assert _badges(_row(before, proposal_id)) == []
    _refuse(stack.world, approval_id, "E_TTL")
    after = stack.web.get("/queue/rows").text
    assert len(_badges(_row(after, proposal_id))) == 1
    assert signature.findall(after) != signature.findall(before)


def test_history_marks_a_lapsed_proposal_an_executor_refused(stack: Stack) -> None:
    world = stack.world
    proposal_id, approval_id = _approved(world)
    _refuse(world, approval_id, "E_EXPIRED")
    world.clock.advance(901)
    assert world.checkpoint.sweep()["lapsed"] == 1
    stack.sign_in("viewer")
    row = _row(stack.web.get("/history").text, proposal_id)
    assert "approval lapsed unused" in row
    [badge] = _badges(row)
    assert 'data-code="E_EXPIRED"' in badge and "executor refused (<code>E_EXPIRED</code>)" in badge


def test_a_refusal_code_in_a_list_is_shown_as_text(site: Site) -> None:
    """The real checkpoint keeps six codes only; the web app does not count on it."""
    site.sign_in("viewer")
    record = site.fake.add(action_value(), state="approved")
    hostile = '"><script>alert(1)</script>\u202e'
    record["executor_refusals"] = [
        {
            "approval_id": "apv_fake",
            "refusal_code": hostile,
            "detail": "",
            "executor": "airlock-executor/staging",
            "at": 1,
            "reported_at": 2,
        }
    ]
    for path in ("/", "/queue/rows", "/history"):
        html = site.client.get(path).text
        assert "<script>alert" not in html and "\u202e" not in html
        row = _row(html, record["id"])
        assert "&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;\\u202e" in row
