"""The human gate in a real browser: Debian's chromium driven by Playwright.

One stack per session — devcloud, the checkpoint, the executor and the web app, each
its own process on loopback — and one browser; each person gets a fresh browser context
(their own cookies). Screenshots of the queue and a proposal page (desktop and phone
width) are written to the run's temporary directory, or to ``AIRLOCK_SCREENSHOTS_DIR``
for a person to look at — never into the checkout's ``.airlock/``, which is ``airlock
up``'s state directory: one made 0755 by a test and holding files up did not make is
refused by up, so ``make up`` after ``make test`` would fail on a fresh clone.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devstack.stack import ACCOUNT, PASSWORD, REGION, Stack, running_stack
from services.executor import ReceiptSigner
from services.executor.receipts import Receipt
from tests.checkpoint.builders import tool_call_value

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
HOSTILE_NAME = "<img src=x onerror=alert(1)>"
HOSTILE_TAG = '"><script>alert(1)</script>'


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots go (module docstring)."""
    chosen = os.environ.get("AIRLOCK_SCREENSHOTS_DIR")
    if not chosen:
        return tmp_path_factory.mktemp("screenshots")
    path = Path(chosen)
    path.mkdir(parents=True, exist_ok=True)
    return path


if not Path(CHROMIUM).exists():  # pragma: no cover - `make test` installs it first
    pytest.fail(f"{CHROMIUM} is missing: run `make test` (installs Debian's chromium)")

from playwright.sync_api import (  # noqa: E402
    Browser,
    BrowserContext,
    Dialog,
    Page,
    Response,
    expect,
    sync_playwright,
)
from playwright.sync_api import Error as PlaywrightError  # noqa: E402

#: How long an expect() waits for what it expects, in milliseconds.
_EXPECT_MS = 30_000
#: What Chromium says of a navigation another one cut short.
_CUT_SHORT = ("net::ERR_ABORTED", "interrupted by another navigation")


def goto(page: Page, url: str) -> Response | None:
    """``page.goto(url)``, asked once more if the page's own navigation cut it short: a
    page on an open proposal reloads itself once the proposal changes (app.js), which
    aborts a navigation the test started meanwhile, and its window is wide under load.
    Once there, the old page's script is gone: the second asking is not cut short."""
    try:
        return page.goto(url)
    except PlaywrightError as exc:
        if not any(cut in exc.message for cut in _CUT_SHORT):
            raise
    return page.goto(url)


def _action(proposal_id: str, resource_id: str, operation: str, **evidence: Any) -> dict[str, Any]:
    """An action shaped like the agent's (services/agent/planner.py)."""
    ev: dict[str, Any] = {
        "policy": "idle/v1",
        "window_days": 14,
        # As the agent reports them (services/agent/planner.py): hourly samples.
        "samples": 336,
        "samples_expected": 336,
        "cpu_avg_bp": 120,
        "cpu_p95_bp": 340,
        "net_bytes_per_day": 2_100_000,
        "daily_cpu_p95_bp": [310, 322, 340, 298, None, 333, 340, 329, 317, 305, 300, 311, 338, 326],
        "daily_net_bytes": [
            2_100_000,
            1_900_000,
            2_300_000,
            2_000_000,
            None,
            2_050_000,
            1_800_000,
            2_400_000,
            2_100_000,
            2_200_000,
            1_950_000,
            2_000_000,
            2_150_000,
            2_100_000,
        ],
        "thresholds": {"cpu_p95_max_bp": 1000, "net_quiet_bytes_per_day": 5_000_000},
        "name": "batch-worker-7",
        "instance_type": "ecs.g7.large",
        "tags": {"team": "data"},
    }
    ev.update(copy.deepcopy(evidence))
    return {
        "type": "airlock.action/v1",
        "proposal_id": proposal_id,
        "provider": "alibaba",
        "account": ACCOUNT,
        "region": REGION,
        "resource": {"type": "ecs.instance", "id": resource_id},
        "operation": operation,
        "params": {"stopped_mode": "StopCharging"} if operation == "stop" else {},
        "precondition": {
            "status": "Running" if operation == "stop" else "Stopped",
            "absent_tags": ["airlock:protect"],
            "observed_at": "2026-11-29T06:00:00Z",
        },
        "evidence": ev,
        "reason": "Idle 14 days: CPU p95 3.40% < 10.00%, network 2.1 MB/day",
        "proposed_by": "agent:scanner-1",
        "created_at": "2026-11-29T06:00:05Z",
    }


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("stack")) as s:
        yield s


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # Per module, never per session: while Playwright's sync API runs, the worker's main
    # thread holds a running event loop, and a later file on the same xdist worker could
    # neither start Playwright again nor call asyncio.run.
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
                "--disable-sync",
            ],
        )
        # Each expect() waits on the stack: a page polling once a second, an executor on
        # the feed. Playwright's 5 s per expect() is short on a loaded runner; this is a
        # wait, not a bound: it ends as soon as what is expected holds.
        expect.set_options(timeout=_EXPECT_MS)
        try:
            yield b
        finally:
            expect.set_options(timeout=None)
            b.close()


class Person:
    """One signed-in person: their own browser context (cookies), one page."""

    def __init__(self, browser: Browser, stack: Stack, name: str, *, width: int = 1200) -> None:
        self.stack = stack
        self.context: BrowserContext = browser.new_context(
            viewport={"width": width, "height": 900}, base_url=stack.webapp_url
        )
        self.context.set_default_timeout(10_000)
        self.page: Page = self.context.new_page()
        self.dialogs: list[str] = []

        def on_dialog(dialog: Dialog) -> None:
            self.dialogs.append(dialog.message)
            dialog.dismiss()

        self.page.on("dialog", on_dialog)
        self.sign_in(name)

    def sign_in(self, name: str) -> None:
        # Keyboard only: the sign-in form is usable without a pointer.
        goto(self.page, "/login")
        # The username field has autofocus; wait until the browser has applied it, or the
        # first keystrokes can land before focus does (seen in CI: "bob" typed as "ob").
        expect(self.page.locator("input[name=username]")).to_be_focused()
        self.page.keyboard.type(name)
        self.page.keyboard.press("Tab")
        self.page.keyboard.type(PASSWORD)
        self.page.keyboard.press("Enter")
        expect(self.page.locator(".who .user")).to_contain_text(name)

    def open(self, proposal_id: str) -> Page:
        goto(self.page, f"/proposals/{proposal_id}")
        return self.page

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def people(browser: Browser, stack: Stack) -> Iterator[dict[str, Person]]:
    opened: dict[str, Person] = {}

    class _Lazy(dict[str, Person]):
        def __missing__(self, name: str) -> Person:
            opened[name] = Person(browser, stack, name)
            return opened[name]

    yield _Lazy()
    for person in opened.values():
        person.close()


def test_alice_approves_a_stop_and_sees_the_executed_outcome_with_a_verified_receipt(
    stack: Stack, people: dict[str, Person], screenshots: Path
) -> None:
    rid = "i-t4ne2estop001"
    stack.devcloud.admin.create_instance(rid, status="Running", name="batch-worker-7")
    proposal = stack.submit(_action("prop_e2estop0001", rid, "stop"))
    alice = people["alice"]
    page = alice.page
    goto(page, "/")
    row = page.locator(f'tr[data-proposal="{proposal["id"]}"]')
    expect(row).to_contain_text("0 of 1")
    expect(row).to_contain_text("to approve")
    row.get_by_role("link", name=rid).click()

    expect(page.locator("#plain")).to_contain_text(f"Stop the ECS instance {rid}")
    expect(page.locator("figure.chart-cpu svg")).to_be_visible()
    expect(page.locator("figure.chart-net svg")).to_be_visible()
    expect(page.locator("#action-hash")).to_have_text(proposal["action_hash"])
    expect(page.locator("#action-jcs")).to_have_text(proposal["action_jcs"])
    expect(page.locator("#hash-check")).to_have_text("matches the text below")
    expect(page.locator("#rule")).to_have_text("stop-one-person")
    page.screenshot(path=str(screenshots / "proposal.png"), full_page=True)

    page.fill("#approve-note", "idle since the migration")
    page.click("#approve-button")
    expect(page.locator("#done")).to_contain_text("Your approval was recorded")

    # No reload: the page follows the proposal to its end state by itself.
    expect(page.locator("#state")).to_have_attribute("data-state", "executed")
    expect(page.locator("#h-what")).to_have_text("What was done")
    expect(page.locator("#outcome")).to_have_attribute("data-outcome", "succeeded")
    # The receipt's signature and the write's effect are two facts, named apart: the
    # provider accepted the stop, and no live read confirmed it.
    expect(page.locator("#receipt")).to_have_attribute("data-signature", "valid")
    expect(page.locator("#receipt")).to_contain_text("signature valid")
    expect(page.locator("#effect")).to_have_attribute("data-effect", "accepted")
    expect(page.locator("#effect")).to_contain_text("not yet confirmed by a live read")
    expect(page.locator("#executor-detail")).to_have_text("ecs.StopInstance accepted")
    assert len(stack.devcloud.admin.writes(resource_id=rid)) == 1

    goto(page, "/history")
    expect(page.locator(f'tr[data-proposal="{proposal["id"]}"]')).to_contain_text("signature valid")
    assert alice.dialogs == []


def test_an_open_proposal_page_follows_another_persons_approval_to_the_executed_end(
    stack: Stack, people: dict[str, Person]
) -> None:
    """Alice watches a pending stop; Bob approves it in his own browser. Alice's page,
    never reloaded by her, goes on to show the executed outcome."""
    rid = "i-t4nfollow0001"
    stack.devcloud.admin.create_instance(rid, status="Running", name="batch-worker-8")
    proposal = stack.submit(_action("prop_followexec0001", rid, "stop"))
    watching = people["alice"].open(proposal["id"])
    expect(watching.locator("#state")).to_have_attribute("data-state", "pending")
    expect(watching.locator("#h-what")).to_have_text("What will happen")

    bob = people["bob"].open(proposal["id"])
    bob.click("#approve-button")
    expect(bob.locator("#done")).to_contain_text("Your approval was recorded")

    expect(watching.locator("#state")).to_have_attribute("data-state", "executed")
    expect(watching.locator("#outcome")).to_have_attribute("data-outcome", "succeeded")
    expect(watching.locator("#h-what")).to_have_text("What was done")
    expect(watching.get_by_text("What will happen")).to_have_count(0)
    # The end state is final: the page stops asking.
    expect(watching.locator("#state-box")).not_to_have_attribute("data-poll-url", re.compile(".*"))


def _sign_in_on_this_page(page: Page, name: str) -> None:
    """Sign in on the sign-in page the browser is on, keeping its ``next``."""
    page.fill("input[name=username]", name)
    page.fill("input[name=password]", PASSWORD)
    page.press("input[name=password]", "Enter")
    expect(page.locator(".who .user")).to_contain_text(name)


def test_approving_after_signing_out_in_another_tab_says_nothing_was_approved_and_returns(
    stack: Stack, people: dict[str, Person]
) -> None:
    proposal = stack.submit(_action("prop_e2eended0001", "i-t4ne2eended01", "stop"))
    alice = people["alice"]
    page = alice.open(proposal["id"])
    other = alice.context.new_page()  # a second tab: same cookies
    goto(other, "/")
    other.click(".who button")
    expect(other.locator("input[name=username]")).to_be_visible()
    other.close()

    page.click("#approve-button")
    notice = page.locator("#login-notice")
    expect(notice).to_contain_text("Your session had ended, so your approval was not recorded")
    expect(notice).to_contain_text("nothing was approved")
    expect(page.locator("h1")).to_have_text("Sign in")
    _sign_in_on_this_page(page, "alice")
    assert page.url.endswith(f"/proposals/{proposal['id']}")
    expect(page.locator("#votes")).to_contain_text("0 of 1")
    expect(page.locator("#approve-form")).to_be_visible()
    assert stack.agent_view(proposal["id"])["votes"] == []


def test_approving_after_the_checkpoint_ended_the_session_says_so_and_returns(
    stack: Stack, people: dict[str, Person]
) -> None:
    proposal = stack.submit(_action("prop_e2eended0002", "i-t4ne2eended02", "stop"))
    alice = people["alice"]
    page = alice.open(proposal["id"])
    session = next(c for c in alice.context.cookies() if c["name"] == "airlock_session")
    ended = httpx.delete(
        f"{stack.checkpoint_url}/v1/sessions/current",
        headers={"Authorization": f"Bearer {session['value']}"},
        trust_env=False,
    )
    assert ended.status_code == 204

    page.click("#approve-button")
    expect(page.locator("#login-notice")).to_contain_text("nothing was approved")
    _sign_in_on_this_page(page, "alice")
    assert page.url.endswith(f"/proposals/{proposal['id']}")
    assert stack.agent_view(proposal["id"])["votes"] == []


def test_a_delete_needs_two_people_and_the_typed_id(
    stack: Stack, people: dict[str, Person]
) -> None:
    rid = "i-t4ne2edel0001"
    # Last started (created) before the action's observed_at, as the agent would see it.
    stack.devcloud.admin.create_instance(rid, status="Stopped", created_at=1_764_000_000)
    proposal = stack.submit(_action("prop_e2edel00001", rid, "delete", stage="delete-after-stop"))
    page = people["alice"].open(proposal["id"])
    expect(page.locator("#plain")).to_contain_text("Permanently delete")
    button = page.locator("#approve-button")
    expect(button).to_be_disabled()
    page.fill("#confirm", rid[:-1] + "2")
    expect(button).to_be_disabled()

    # The button is only a convenience: forced past it, the checkpoint still refuses.
    page.evaluate("document.getElementById('approve-button').disabled = false")
    button.click()
    expect(page.locator("#refusal")).to_contain_text("does not match this resource")
    expect(page.locator("#refusal")).to_contain_text("E_CONFIRM_MISMATCH")
    expect(page.locator("#votes")).to_contain_text("0 of 2")

    page.fill("#confirm", rid)
    expect(button).to_be_enabled()
    button.click()
    expect(page.locator("#votes")).to_contain_text("1 of 2")
    expect(page.locator("#state")).to_have_attribute("data-state", "pending")
    # alice has voted: the page says so and offers no second Approve (E_ALREADY_VOTED).
    expect(page.locator("#my-vote")).to_contain_text("1 more vote is needed")
    expect(page.locator("#approve-form")).to_have_count(0)
    expect(page.locator("#reject-form")).to_be_visible()
    assert stack.devcloud.admin.writes(resource_id=rid) == []

    # bob approves with the keyboard only: type the id, Tab past the note, Enter.
    page = people["bob"].open(proposal["id"])
    page.focus("#confirm")
    page.keyboard.type(rid)
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    expect(page.locator("#approve-button")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#done")).to_be_visible()

    record = stack.wait_state(proposal["id"], {"executed", "refused", "failed", "in_doubt"})
    assert [v["voter"] for v in record["votes"]] == ["alice", "bob"]
    # No reload: the page follows the proposal to its end by itself, and a reload asked
    # for here could meet the one its poll starts (net::ERR_ABORTED, on a loaded runner).
    expect(page.locator("#state")).to_have_attribute("data-state", "executed")
    expect(page.locator("#receipt")).to_have_attribute("data-signature", "valid")
    assert len(stack.devcloud.admin.writes(resource_id=rid)) == 1


def test_an_in_doubt_execution_shows_the_executors_detail_to_the_admin(
    stack: Stack, people: dict[str, Person]
) -> None:
    """The provider answers the stop with a 500: the executor probes, sees no effect and
    records in_doubt with why. The page shows that detail from the signed receipt, so
    an admin need not read the executor's log to resolve it."""
    rid = "i-t4ne2edoubt01"
    stack.devcloud.admin.create_instance(rid, status="Running")
    proposal = stack.submit(_action("prop_e2edoubt0001", rid, "stop"))
    stack.devcloud.admin.set_faults(fail_next_writes=1, fail_kind="internal")
    try:
        page = people["alice"].open(proposal["id"])
        page.click("#approve-button")
        record = stack.wait_state(proposal["id"], {"executed", "refused", "failed", "in_doubt"})
    finally:
        stack.devcloud.admin.reset_faults()
    assert record["state"] == "in_doubt", record["state"]
    page = people["admin"].open(proposal["id"])
    expect(page.locator("#effect")).to_have_attribute("data-effect", "unknown")
    detail = page.locator("#executor-detail")
    expect(detail).to_contain_text("effect not visible; a write may have happened")
    expect(detail).to_contain_text("ecs.StopInstance")
    expect(page.locator("#in-doubt-detail")).to_contain_text("a write may have happened")
    expect(page.locator("#resolve-form")).to_be_visible()

    # Resolved "did not happen": the page says what comes next, not just that it failed.
    page.check("#d-not")
    page.fill("#resolve-note", "still Running in the console")
    page.click("#resolve-button")
    expect(page.locator("#state")).to_have_attribute("data-state", "failed")
    expect(page.locator("#next-step")).to_contain_text(
        "the agent proposes the stop again at its next scan, as a new proposal with its own"
        " hash that needs its own approval"
    )
    expect(page.locator("#h-what")).to_have_text("What was proposed")


def test_an_executor_refusal_reported_while_the_queue_is_open_shows_in_its_row(
    stack: Stack, people: dict[str, Person], screenshots: Path
) -> None:
    """Another executor refused the approval this stack's executor then ran (a note, not
    a state): the open queue picks the note up on its next poll, without a reload and
    with the focus on the row, as a badge whose text names the code."""
    rid = "i-t4ne2erefuse1"
    stack.devcloud.admin.create_instance(rid, status="Running", name="batch-worker-9")
    proposal = stack.submit(_action("prop_e2erefuse001", rid, "stop"))
    page = people["alice"].open(proposal["id"])
    page.click("#approve-button")
    expect(page.locator("#done")).to_contain_text("Your approval was recorded")
    stack.wait_state(proposal["id"], {"executed", "refused", "failed", "in_doubt"})
    approval_id = stack.agent_view(proposal["id"])["approval"]["approval_id"]

    goto(page, "/")
    row = page.locator(f'tr[data-proposal="{proposal["id"]}"]')
    expect(row).to_contain_text("executed")
    expect(row.locator(".executor-refused")).to_have_count(0)
    # A keyboard user on the row: app.js swaps the rows under the focus only when their
    # signature changed, and only then says so.
    row.get_by_role("link", name=rid).focus()
    receipt = Receipt.model_validate(
        {
            "type": "airlock.receipt/v1",
            "executor": "airlock-executor/another-region",
            "approval_id": approval_id,
            "action_hash": None,
            "outcome": "refused",
            "verified": False,
            "refusal_code": "E_AUDIENCE",
            "cloud_request_id": None,
            "resolution": None,
            "at": int(time.time()),
            "audit_head": {"seq": 1, "hash": "0" * 64},
            "detail": "approval is for another audience",
        }
    )
    signed = ReceiptSigner.from_file(stack.workdir / "receipt-key.pem")
    response = httpx.post(
        f"{stack.checkpoint_url}/v1/refusals",
        json={"receipt": signed.sign(receipt).to_value()},
        headers=stack.auth("executor"),
        trust_env=False,
    )
    assert response.status_code == 200, response.text

    badge = row.get_by_text("executor refused (E_AUDIENCE)")
    expect(badge).to_be_visible()  # the poll swapped the rows in
    expect(page.locator("#queue-status")).to_have_text("The queue was updated.")
    expect(badge).to_have_attribute("data-code", "E_AUDIENCE")
    expect(row).to_contain_text("executed")  # the state is still the state
    page.screenshot(path=str(screenshots / "queue-refusal.png"), full_page=True)


def test_reject_with_a_reason_code_is_what_the_agent_reads_back(
    stack: Stack, people: dict[str, Person]
) -> None:
    bob = people["bob"]
    page = bob.page
    goto(page, "/")
    # Arrives while the queue is open: it appears without a reload.
    proposal = stack.submit(_action("prop_e2erej00001", "i-t4ne2erej0001", "stop"))
    row = page.locator(f'tr[data-proposal="{proposal["id"]}"]')
    expect(row).to_be_visible()
    row.get_by_role("link").click()
    page.select_option("#reason_code", "not_idle")
    page.fill("#reject-note", "nightly batch job")
    page.click("#reject-button")
    expect(page.locator("#rejection")).to_have_attribute("data-reason", "not_idle")

    readback = stack.agent_view(proposal["id"])
    assert readback["state"] == "rejected"
    assert readback["rejection"]["reason_code"] == "not_idle"
    assert readback["rejection"]["note"] == "nightly batch job"


def test_reject_for_other_without_a_note_is_refused_and_says_why(
    stack: Stack, people: dict[str, Person]
) -> None:
    proposal = stack.submit(_action("prop_e2erejother1", "i-t4ne2erejoth01", "stop"))
    page = people["bob"].open(proposal["id"])
    page.select_option("#reason_code", "other")
    page.click("#reject-button")
    expect(page.locator("#refusal")).to_contain_text("Rejecting for “Other” needs a note")
    expect(page.locator("#refusal")).to_contain_text("E_NOTE_REQUIRED")
    expect(page.locator("#state")).to_have_attribute("data-state", "pending")
    assert stack.agent_view(proposal["id"])["state"] == "pending"
    # What the person chose is kept: they add the note and reject again.
    expect(page.locator("#reason_code")).to_have_value("other")
    page.fill("#reject-note", "the owner asked to keep it")
    page.click("#reject-button")
    expect(page.locator("#rejection")).to_have_attribute("data-reason", "other")


def test_hostile_instance_name_and_tag_are_shown_as_text_and_no_dialog_opens(
    stack: Stack, people: dict[str, Person]
) -> None:
    proposal = stack.submit(
        _action(
            "prop_e2exss00001",
            "i-t4ne2exss0001",
            "stop",
            name=HOSTILE_NAME,
            tags={"owner": HOSTILE_TAG},
        )
    )
    alice = people["alice"]
    page = alice.page
    goto(page, "/")
    expect(page.locator(f'tr[data-proposal="{proposal["id"]}"] .name')).to_have_text(HOSTILE_NAME)
    page = alice.open(proposal["id"])
    expect(page.locator("#resource-name")).to_have_text(HOSTILE_NAME)
    expect(page.locator("#tags")).to_contain_text(HOSTILE_TAG)
    assert page.locator("main img").count() == 0
    assert page.locator("main script").count() == 0
    assert alice.dialogs == []


def test_form_posts_without_the_token_or_from_another_origin_are_refused(
    stack: Stack, people: dict[str, Person]
) -> None:
    proposal = stack.submit(_action("prop_e2ecsrf0001", "i-t4ne2ecsrf001", "stop"))
    alice = people["alice"]
    target = f"{stack.webapp_url}/proposals/{proposal['id']}/approve"

    # Same browser, same cookies, no token.
    response = alice.context.request.post(target, form={"action_hash": proposal["action_hash"]})
    assert response.status == 403
    assert "no security token" in response.text()

    # Another origin, even one that somehow knew the token: the browser says where the
    # form came from, and the web app refuses it.
    page = alice.open(proposal["id"])
    token = page.locator('#approve-form input[name="csrf_token"]').get_attribute("value")
    evil = (
        f'<form method="post" action="{target}">'
        f'<input name="csrf_token" value="{token}">'
        f'<input name="action_hash" value="{proposal["action_hash"]}">'
        '<button id="go">win a prize</button></form>'
    )
    alice.context.route(
        "http://evil.example/**",
        lambda route: route.fulfill(status=200, content_type="text/html", body=evil),
    )
    goto(page, "http://evil.example/")
    page.click("#go")
    expect(page.locator("h1")).to_have_text("Form refused")
    assert stack.agent_view(proposal["id"])["votes"] == []


def test_pages_fit_a_phone_screen_and_carry_the_security_headers(
    browser: Browser, stack: Stack, screenshots: Path
) -> None:
    phone = Person(browser, stack, "admin", width=390)
    try:
        response = goto(phone.page, "/")
        assert response is not None
        headers = response.headers
        assert "default-src 'self'" in headers["content-security-policy"]
        assert headers["x-frame-options"] == "DENY"
        width = phone.page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390
        phone.page.screenshot(path=str(screenshots / "queue-phone.png"), full_page=True)
        first = phone.page.locator("#queue-rows tr a").first
        first.click()
        expect(phone.page.locator("#plain")).to_be_visible()
        phone.page.wait_for_load_state("load")  # the stylesheet is applied
        assert phone.page.evaluate("document.documentElement.scrollWidth") <= 390
        phone.page.screenshot(path=str(screenshots / "proposal-phone.png"), full_page=True)
        # The desktop queue, by now holding proposals in several states.
        phone.page.set_viewport_size({"width": 1200, "height": 700})
        goto(phone.page, "/")
        phone.page.screenshot(path=str(screenshots / "queue.png"), full_page=True)
        cookies = {c["name"]: c for c in phone.context.cookies()}
        session = cookies["airlock_session"]
        assert session["httpOnly"] and session["sameSite"] == "Strict"
        assert re.fullmatch(r"als_[A-Za-z0-9_-]+", session["value"])
    finally:
        phone.close()


# -- what a newcomer reads: a page for every address, ids whole, words not codes ------

#: How many lines the text of each element matching the selector takes: one rectangle
#: per line box its text is laid out in (a Range over the text, so inline and
#: inline-block elements are measured alike).
_LINES = """sel => [...document.querySelectorAll(sel)].map(el => {
  const range = document.createRange();
  range.selectNodeContents(el);
  const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
  return [el.textContent, tops.size];
})"""


def test_an_unknown_address_is_a_page_with_the_navigation_not_json(
    browser: Browser, stack: Stack, people: dict[str, Person]
) -> None:
    page = people["alice"].page
    response = goto(page, "/no/such/page")
    assert response is not None and response.status == 404
    assert "text/html" in response.headers["content-type"]
    expect(page).to_have_title("Page not found · Airlock")
    expect(page.locator("h1")).to_have_text("Page not found")
    nav = page.get_by_role("navigation", name="Main")
    expect(nav).to_be_visible()
    nav.get_by_role("link", name="History").click()
    expect(page.locator("h1")).to_have_text("History")

    # A proposal that does not exist is "Not found", not "Refused", and keeps the menu.
    response = goto(page, "/proposals/prop_nosuchproposal1")
    assert response is not None and response.status == 404
    expect(page).to_have_title("Not found · Airlock")
    expect(nav).to_be_visible()

    # Signed out: the same page, with the way to sign in.
    anonymous = browser.new_context(base_url=stack.webapp_url)
    try:
        other = anonymous.new_page()
        response = goto(other, "/no/such/page")
        assert response is not None and response.status == 404
        expect(other.locator("h1")).to_have_text("Page not found")
    finally:
        anonymous.close()


def test_a_garbage_id_of_3000_characters_is_not_echoed_by_the_page(
    people: dict[str, Person],
) -> None:
    page = people["alice"].page
    garbage = "prop_" + "x" * 2995
    response = goto(page, f"/proposals/{garbage}")
    assert response is not None and response.status == 404
    expect(page.locator("h1")).to_have_text("Not found")
    assert "x" * 60 not in page.content()


def _lines(page: Page, selector: str) -> list[tuple[str, int]]:
    measured: list[tuple[str, int]] = [tuple(m) for m in page.evaluate(_LINES, selector)]
    assert measured, f"nothing matches {selector}"
    return measured


def test_ids_and_hashes_never_break_across_lines_at_a_phone_width(
    browser: Browser, stack: Stack
) -> None:
    """The typed-id prompt broke "i-" / "t4ne…" over two lines, and a hash broke
    anywhere: a person compares and types them whole."""
    rid = "i-t4ne2ewrap00001"
    stack.devcloud.admin.create_instance(rid, status="Stopped", created_at=1_764_000_000)
    proposal = stack.submit(_action("prop_e2ewrap000001", rid, "delete", stage="delete-after-stop"))
    for width in (320, 360, 390, 660):  # 660: the queue is a table of eight columns
        phone = Person(browser, stack, "alice", width=width)
        try:
            page = phone.open(proposal["id"])
            page.wait_for_load_state("load")  # the stylesheet is applied
            for selector in (
                "label[for=confirm] code",
                "h1 .rid",
                "#action-hash",
                "code.hash",
                ".crumbs code",
            ):
                for text, lines in _lines(page, selector):
                    assert lines == 1, (width, selector, text, lines)
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            goto(page, "/?state=pending")
            page.wait_for_load_state("load")
            for text, lines in _lines(page, '#queue-rows td[data-label="Resource"] > a'):
                assert lines == 1, (width, "queue", text, lines)
        finally:
            phone.close()


def _background(page: Page, selector: str) -> str:
    color: str = page.eval_on_selector(selector, "el => getComputedStyle(el).backgroundColor")
    return color


def test_a_deletes_approve_button_looks_destructive_and_a_stops_does_not(
    stack: Stack, people: dict[str, Person]
) -> None:
    rid = "i-t4ne2edanger01"
    stack.devcloud.admin.create_instance(rid, status="Stopped", created_at=1_764_000_000)
    delete = stack.submit(_action("prop_e2edanger0001", rid, "delete", stage="delete-after-stop"))
    stop = stack.submit(_action("prop_e2edanger0002", "i-t4ne2edanger02", "stop"))
    page = people["alice"].open(delete["id"])
    page.fill("#confirm", rid)
    button = page.locator("#approve-button")
    expect(button).to_be_enabled()
    expect(button).to_contain_text("delete")
    danger = _background(page, "#reject-button")
    assert _background(page, "#approve-button") == danger

    page = people["alice"].open(stop["id"])
    expect(page.locator("#approve-button")).to_have_text("Approve")
    assert _background(page, "#approve-button") != _background(page, "#reject-button")


def _session(stack: Stack, name: str) -> dict[str, str]:
    r = httpx.post(
        f"{stack.checkpoint_url}/v1/sessions",
        json={"username": name, "password": PASSWORD},
        trust_env=False,
    )
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['token']}"}


def test_people_read_words_not_codes_for_reasons_outcomes_and_resolutions(
    stack: Stack, people: dict[str, Person]
) -> None:
    rejected = stack.submit(_action("prop_e2ewords0001", "i-t4ne2ewords01", "stop"))
    r = httpx.post(
        f"{stack.checkpoint_url}/v1/proposals/{rejected['id']}/reject",
        json={"reason_code": "not_idle", "note": "nightly batch"},
        headers=_session(stack, "bob"),
        trust_env=False,
    )
    assert r.status_code == 200, r.text

    rid = "i-t4ne2ewords02"
    stack.devcloud.admin.create_instance(rid, status="Running")
    doubt = stack.submit(_action("prop_e2ewords0002", rid, "stop"))
    stack.devcloud.admin.set_faults(fail_next_writes=1, fail_kind="internal")
    try:
        r = httpx.post(
            f"{stack.checkpoint_url}/v1/proposals/{doubt['id']}/approve",
            json={"action_hash": doubt["action_hash"]},
            headers=_session(stack, "alice"),
            trust_env=False,
        )
        assert r.status_code == 200, r.text
        record = stack.wait_state(doubt["id"], {"executed", "refused", "failed", "in_doubt"})
    finally:
        stack.devcloud.admin.reset_faults()
    assert record["state"] == "in_doubt"
    r = httpx.post(
        f"{stack.checkpoint_url}/v1/proposals/{doubt['id']}/resolve",
        json={"decision": "did_not_happen", "note": "still running in the console"},
        headers=_session(stack, "admin"),
        trust_env=False,
    )
    assert r.status_code == 200, r.text

    page = people["admin"].open(doubt["id"])
    expect(page.locator("#resolution")).to_have_attribute("data-decision", "did_not_happen")
    expect(page.locator("#resolution")).to_contain_text("it did not happen — by admin")
    expect(page.locator("#outcome")).to_have_attribute("data-outcome", "in_doubt")
    expect(page.locator("#outcome")).to_contain_text("the executor cannot tell")
    for code in ("did_not_happen", "in_doubt"):
        expect(page.locator("#state-box, .state-box")).not_to_contain_text(code)

    goto(page, "/history")
    row = page.locator(f'tr[data-proposal="{rejected["id"]}"]')
    expect(row).to_contain_text("rejected (Not idle — it is in use)")
    expect(row).not_to_contain_text("not_idle")
    expect(page.locator(f'tr[data-proposal="{doubt["id"]}"]')).not_to_contain_text("in_doubt")

    goto(page, "/")
    option = page.locator("#f-state option[value=in_doubt]")
    expect(option).to_have_text("in doubt — needs a person")


def test_a_thousand_guesses_through_the_web_app_slow_the_guesser_not_alice(
    stack: Stack, browser: Browser
) -> None:
    """Five wrong passwords locked a name for 15 minutes, through the web app too. 1,000
    wrong sign-ins for alice through the web app's form from 127.0.0.2 (each with its
    CSRF token, as a browser sends them): after the free ones each is refused at once
    (429, Retry-After), never a 5xx; then alice, in a browser at 127.0.0.1, signs in at
    once. The checkpoint recorded the guesser's address, forwarded by the web app."""
    guesser = httpx.Client(
        base_url=stack.webapp_url,
        transport=httpx.HTTPTransport(local_address="127.0.0.2"),
        trust_env=False,
        timeout=10.0,
    )
    statuses: list[int] = []
    waits: list[int] = []
    times: list[tuple[float, float]] = []  # when each was sent and answered, Unix seconds
    with guesser:
        token = re.search(r'name="csrf_token" value="([0-9a-f]{64})"', guesser.get("/login").text)
        assert token is not None
        form = {"username": "alice", "password": "not her password", "csrf_token": token[1]}
        for _ in range(1000):
            sent = time.time()
            answer = guesser.post("/login", data=form)
            times.append((sent, time.time()))
            statuses.append(answer.status_code)
            if answer.status_code == 429:
                waits.append(int(answer.headers["Retry-After"]))
                assert "Too many failed sign-ins from your address" in answer.text
    assert set(statuses) == {401, 429}
    # Only the free guesses and those made after a delay passed were checked: a handful
    # in the seconds the 1,000 took, not 1,000.
    assert statuses[:3] == [401] * 3
    # The first delay (1 s) ends at the next turn of the checkpoint's clock, whole Unix
    # seconds: the fourth is checked only if a second turned between the third's sending
    # and the fourth's answer (on a loaded runner it may; on a quiet one it seldom does).
    assert statuses[3] == 429 or int(times[3][1]) > int(times[2][0]), times[2:4]
    assert statuses.count(401) <= 12
    assert min(waits) >= 1
    alice = Person(browser, stack, "alice")  # signs in, and sees her queue
    try:
        expect(alice.page.locator("h1")).to_be_visible()
    finally:
        alice.close()
    with sqlite3.connect(stack.workdir / "checkpoint.db") as db:
        events = [json.loads(e) for (e,) in db.execute("SELECT event FROM audit_log")]
    failed = [e for e in events if e["type"] == "checkpoint.login.failed"]
    assert {e["client"] for e in failed} == {"127.0.0.2"}
    assert len(failed) == statuses.count(401)
    created = [e for e in events if e["type"] == "checkpoint.session.created"]
    assert created[-1]["user"] == "alice" and created[-1]["client"] == "127.0.0.1"
    assert not [e for e in events if e["type"] == "checkpoint.user.locked"]


EDIT_PID = "prop_browseredit01"


def test_alice_edits_a_tool_calls_argument_and_approves_the_edited_call(
    stack: Stack, people: dict[str, Person]
) -> None:
    """An approver changes an argument in the Edit form; the browser lands on the new
    proposal (changed value, who edited it from what, the vote counted); the old one
    shows it is superseded. A tool call's approval is its gate's to use: the executor
    has no part in it."""
    old = stack.submit(
        tool_call_value(
            proposal_id=EDIT_PID,
            target="order-4242",
            effect_key="refund:order-4242",
            arguments={"order": "order-4242", "amount": 12500, "currency": "EUR"},
            summary="Refund 125.00 EUR on order-4242",
        )
    )
    alice = people["alice"]
    page = alice.open(EDIT_PID)
    expect(page.locator("#state")).to_have_attribute("data-state", "pending")
    page.click("#edit-details > summary")
    amount = page.locator('input[data-argument="amount"]')
    expect(amount).to_have_value("12500")
    expect(page.locator('input[data-argument="currency"]')).to_have_value('"EUR"')
    amount.fill("1500")
    page.fill("#edit-note", "only the shipping was lost")
    page.click("#edit-button")

    # The new proposal's page: the edited value, who edited it from what, the vote.
    expect(page.locator("#done")).to_contain_text("Your edit was recorded")
    expect(page.locator("#edited")).to_contain_text(f"Edited by alice from {EDIT_PID}")
    expect(page.locator("#edited-note")).to_have_text("only the shipping was lost")
    change = page.locator("#changes tbody tr")
    expect(change).to_have_count(1)
    expect(change).to_contain_text("amount")
    expect(change.locator("td").nth(1)).to_have_text("12500")
    expect(change.locator("td").nth(2)).to_have_text("1500")
    expect(page.locator("#arguments")).to_contain_text("1500")
    expect(page.locator("#state")).to_have_attribute("data-state", "approved")
    expect(page.locator(".votes-list")).to_contain_text("alice approved")
    new_id = page.url.rsplit("/", 1)[-1]
    assert new_id != EDIT_PID and new_id.startswith("prop_")
    new = stack.agent_view(new_id)
    assert new["action"]["arguments"]["amount"] == 1500
    assert new["action_hash"] != old["action_hash"]

    # The old one: superseded, withdrawn, nothing left to decide.
    page.click("#edited-from")
    expect(page.locator("#superseded")).to_contain_text(f"Superseded by {new_id}")
    expect(page.locator("#state")).to_have_attribute("data-state", "withdrawn")
    expect(page.locator("#edit-form")).to_have_count(0)
    assert stack.agent_view(EDIT_PID)["superseded_by"] == new_id
    assert alice.dialogs == []


def test_a_person_sets_their_notification_preference_and_sees_it_saved(
    people: dict[str, Person],
) -> None:
    page = people["bob"].page
    goto(page, "/notifications")
    expect(page.locator("#status")).to_contain_text("You have set no preference")
    page.check('input[name=event][value="proposal.needs_vote"]')
    page.check('input[name=event][value="proposal.expiring"]')
    page.fill("#email", "bob@example.com")
    page.fill("#slack-url", "https://hooks.slack.com/services/T0/B0/BOBSECRET")
    page.click("#save")
    expect(page.locator("#done")).to_contain_text("preferences were saved")
    # What the checkpoint stored, read back on a fresh load of the page.
    page.reload()
    expect(page.locator("#status")).to_contain_text("Your own preferences")
    expect(page.locator('input[name=event][value="proposal.needs_vote"]')).to_be_checked()
    expect(page.locator('input[name=event][value="proposal.expiring"]')).to_be_checked()
    expect(page.locator('input[name=event][value="proposal.approved"]')).not_to_be_checked()
    expect(page.locator("#email")).to_have_value("bob@example.com")
    expect(page.locator("#slack-kept")).to_have_text("hooks.slack.com …CRET")
    expect(page.locator("#slack-url")).to_have_value("")  # the URL is never put back
    assert "BOBSECRET" not in page.content()
    # Back to the groups' default, so the shared stack's other tests see none.
    page.click("#use-default")
    expect(page.locator("#done")).to_contain_text("default applies again")
    expect(page.locator("#status")).to_contain_text("You have set no preference")
