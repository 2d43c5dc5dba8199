"""The history lists every decided proposal, in the order its caption names.

The checkpoint lists newest first by creation. The history asks it once for every
decided state and takes that page when the answer echoes exactly those states; a
checkpoint older than the repeatable ``state`` keeps only the last one and echoes
nothing, and then the history asks it per decided state and merges. Either way pending
proposals (however many, however new) never push decided ones off a page, and the pages
follow one another without a gap or a repeat: each test of that runs against both.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from airlock.settings import WebappSettings
from tests.checkpoint.harness import PASSWORD, make_world
from webapp import create_app
from webapp.client import CheckpointClient
from webapp.present import STATE_LABELS

from .conftest import Site, ToCheckpoint, csrf_of, make_site
from .fakes import NOW, action_value

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

_ROW = re.compile(r'<tr class="state-[a-z_]+" data-proposal="(prop_[a-z0-9]+)">')
_DECIDED = ("executed", "rejected", "expired", "withdrawn", "revoked", "lapsed", "failed")
#: What the history lists: every state the web app names but pending.
_EVERY_DECIDED = tuple(s for s in STATE_LABELS if s != "pending")


def _site(*, older: bool) -> Iterator[Site]:
    s = make_site()
    s.fake.older = older
    with s.client:
        yield s


@pytest.fixture(params=[False, True], ids=["echoing-checkpoint", "older-checkpoint"])
def site(request: pytest.FixtureRequest) -> Iterator[Site]:
    yield from _site(older=request.param)


@pytest.fixture
def echoing_site() -> Iterator[Site]:
    yield from _site(older=False)


@pytest.fixture
def older_site() -> Iterator[Site]:
    yield from _site(older=True)


def _calls_per_page(site: Site) -> int:
    # One call with every decided state; an older checkpoint's answer to it is dropped
    # and the page is asked for state by state.
    return 1 + len(_EVERY_DECIDED) if site.fake.older else 1


def _add(site: Site, n: int, *, state: str, created_at: int, updated_at: int | None = None) -> str:
    pid = f"prop_{state.replace('_', '')[:4]}{n:08d}"
    record = site.fake.add(action_value(proposal_id=pid, resource_id=f"i-t4n{n:09d}"), state=state)
    record["created_at"] = created_at
    record["updated_at"] = updated_at if updated_at is not None else created_at
    return pid


def _rows(html: str) -> list[str]:
    return _ROW.findall(html)


def test_history_rows_follow_the_order_the_page_names(site: Site) -> None:
    site.sign_in()
    # Proposed in one order, last changed in another.
    oldest = _add(site, 1, state="rejected", created_at=NOW - 3000, updated_at=NOW - 10)
    middle = _add(site, 2, state="executed", created_at=NOW - 2000, updated_at=NOW - 1900)
    newest = _add(site, 3, state="expired", created_at=NOW - 1000, updated_at=NOW - 900)
    html = site.client.get("/history").text
    assert _rows(html) == [newest, middle, oldest]
    assert "Decided proposals, most recently proposed first" in html
    assert '<th scope="col">Proposed</th>' in html
    assert "newest first" not in html  # the caption no longer claims the last change's order


def test_decided_proposals_behind_more_than_a_page_of_pending_ones_are_listed(
    site: Site,
) -> None:
    site.sign_in()
    decided = [_add(site, n, state="executed", created_at=NOW - 10_000 + n) for n in range(3)]
    for n in range(150):  # newer than all of them
        _add(site, 100 + n, state="pending", created_at=NOW - 5_000 + n)
    html = site.client.get("/history").text
    assert _rows(html) == decided[::-1]
    assert "No decided proposals yet" not in html


def test_history_pages_follow_one_another_without_a_gap_or_a_repeat(site: Site) -> None:
    site.sign_in()
    expected = []
    for n in range(130):
        # Several states interleaved; some proposed in the same second (ties on the id).
        expected.append(
            _add(site, n, state=_DECIDED[n % len(_DECIDED)], created_at=NOW - 100_000 + n // 2)
        )
        if n % 3 == 0:
            _add(site, 1000 + n, state="pending", created_at=NOW - 100_000 + n // 2)
    expected.sort(key=lambda pid: (site.fake.proposals[pid]["created_at"], pid), reverse=True)
    seen: list[str] = []
    url = "/history"
    pages = 0
    while url:
        html = site.client.get(url).text
        seen.extend(_rows(html))
        pages += 1
        older = re.search(r'href="(/history\?before=prop_[a-z0-9]+)">Older', html)
        url = older.group(1) if older else ""
    assert seen == expected
    assert pages == 3  # 50, 50, 30
    assert site.fake.list_calls == pages * _calls_per_page(site)


def test_a_last_page_that_holds_nothing_older_says_so(site: Site) -> None:
    site.sign_in()
    only = _add(site, 1, state="executed", created_at=NOW - 100)
    html = site.client.get(f"/history?before={only}").text
    assert _rows(html) == []
    assert "No older decided proposals." in html


def _one_in_every_decided_state(site: Site) -> list[str]:
    """A proposal in every decided state and a newer pending one, newest first."""
    ids = [
        _add(site, n, state=state, created_at=NOW - 1000 + n)
        for n, state in enumerate(_EVERY_DECIDED)
    ]
    _add(site, 99, state="pending", created_at=NOW)
    return ids[::-1]


def test_history_is_one_call_for_every_decided_state_when_the_checkpoint_echoes_them(
    echoing_site: Site,
) -> None:
    site = echoing_site
    site.sign_in()
    expected = _one_in_every_decided_state(site)
    site.fake.list_calls = 0
    site.fake.list_states.clear()
    html = site.client.get("/history").text
    # Every decided state was asked for, and so every decided proposal is listed: a
    # state dropped from the call would be a row missing here.
    assert _rows(html) == expected
    assert site.fake.list_calls == 1
    assert sorted(site.fake.list_states[-1]) == sorted(_EVERY_DECIDED)


def test_an_older_checkpoint_that_keeps_only_the_last_state_loses_no_decided_proposal(
    older_site: Site,
) -> None:
    site = older_site
    site.sign_in()
    expected = _one_in_every_decided_state(site)
    site.fake.list_calls = 0
    site.fake.list_states.clear()
    html = site.client.get("/history").text
    assert _rows(html) == expected
    # The one call's answer (the last state's proposals only) was dropped for one call
    # per state.
    assert site.fake.list_calls == 1 + len(_EVERY_DECIDED)
    assert sorted(site.fake.list_states[0]) == sorted(_EVERY_DECIDED)
    assert sorted(s for [s] in site.fake.list_states[1:]) == sorted(_EVERY_DECIDED)


def test_an_answer_whose_states_differ_from_those_asked_for_is_not_taken(
    echoing_site: Site,
) -> None:
    site = echoing_site
    site.sign_in()
    expected = _one_in_every_decided_state(site)
    checkpoint = site.fake.handle

    def drops_a_state(request: httpx.Request) -> httpx.Response:
        # Something between the web app and the checkpoint loses one of several states;
        # the checkpoint echoes the filter it applied, which is not the one asked for.
        states = request.url.params.get_list("state")
        if request.url.path == "/v1/proposals" and len(states) > 1:
            kept = [
                (k, v) for k, v in request.url.params.multi_items() if (k, v) != ("state", "failed")
            ]
            request = httpx.Request(
                request.method, request.url.copy_with(params=kept), headers=request.headers
            )
        return checkpoint(request)

    site.fake.handle = drops_a_state  # type: ignore[method-assign]
    site.fake.list_calls = 0
    site.fake.list_states.clear()
    html = site.client.get("/history").text
    assert "failed" not in site.fake.list_states[0]  # lost on the way
    assert _rows(html) == expected
    assert site.fake.list_calls == 1 + len(_EVERY_DECIDED)


def test_the_real_checkpoint_echoes_what_the_history_asks_so_a_page_is_one_call(
    sqlite_url: str, tmp_path: Path
) -> None:
    # The fakes above answer as the web app expects; this is the checkpoint itself.
    world = make_world(sqlite_url, tmp_path)
    to_checkpoint = ToCheckpoint(world.client)
    settings = WebappSettings(
        checkpoint_url="http://checkpoint.invalid", secure_cookies=False, allowed_hosts="testserver"
    )
    app = create_app(settings, transport=to_checkpoint, now=world.clock)
    try:
        with TestClient(app) as web:
            login = web.get("/login").text
            signed_in = web.post(
                "/login",
                data={"username": "alice", "password": PASSWORD, "csrf_token": csrf_of(login)},
                follow_redirects=False,
            )
            assert signed_in.status_code == 303, signed_in.text
            submitted = []
            for n in range(3):
                p = world.submit(proposal_id=f"prop_hist{n:08d}", resource_id=f"i-hist{n}")
                submitted.append(p.json())
                world.clock.advance(1)
            ids = [p["id"] for p in submitted]
            approved = world.approve("bob", ids[0], submitted[0]["action_hash"])
            assert approved.json()["state"] == "approved"
            rejected = world.client.post(
                f"/v1/proposals/{ids[1]}/reject",
                json={"reason_code": "other", "note": "no"},
                headers=world.auth("bob"),
            )
            assert rejected.json()["state"] == "rejected"
            to_checkpoint.requests.clear()
            html = web.get("/history").text
    finally:
        world.client.close()
        world.checkpoint.db.dispose()
    assert _rows(html) == [ids[1], ids[0]]  # ids[2] is pending
    listed = [r for r in to_checkpoint.requests if r.startswith("GET /v1/proposals?")]
    assert len(listed) == 1, listed
    assert sorted(re.findall(r"[?&]state=([a-z_]+)", listed[0])) == sorted(_EVERY_DECIDED)


def test_an_empty_list_of_states_is_refused_not_sent_as_a_listing_of_every_state() -> None:
    sent: list[httpx.Request] = []

    def checkpoint(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"items": [], "next_before": None, "states": None})

    client = CheckpointClient("http://checkpoint.test", transport=httpx.MockTransport(checkpoint))
    with pytest.raises(ValueError, match="empty"):
        client.proposals("als_token", state=())
    assert sent == []
    client.proposals("als_token", state=("executed", "failed"))
    assert sent[0].url.params.get_list("state") == ["executed", "failed"]
