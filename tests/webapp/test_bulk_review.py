"""Deciding a batch in the browser: the queue's savings, one confirmation, twenty votes.

Its own stack (devcloud, the checkpoint, the executor and the web app, each a process on
loopback) and Debian's chromium, as in test_browser.py. The judge of what happened is
devcloud's write log (tests/support/bulk.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airlock.units import money
from devstack.stack import Stack, running_stack
from tests.support.bulk import assert_each_executed_once, signed_savings_minor, submit_batch

from .test_browser import Person, browser, goto  # noqa: F401 (a fixture, used by name)

pytestmark = pytest.mark.browser

from playwright.sync_api import Browser, expect  # noqa: E402


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("stack")) as s:
        yield s


def test_twenty_approved_in_one_browser_action_execute_once_each_and_one_withdrawn_is_named(
    stack: Stack,
    browser: Browser,  # noqa: F811 (the fixture imported above)
) -> None:
    records = submit_batch(stack, "webbulk", 21)
    gone = records[11]
    alice = Person(browser, stack, "alice")
    try:
        page = alice.page
        goto(page, "/")
        # The queue's total is the sum of the savings signed into the 21 actions.
        total = money(signed_savings_minor(records), "USD", 2)
        expect(page.locator("#queue-savings-total")).to_have_text(total)
        expect(page.locator("#queue-savings")).to_contain_text("Pending: 21 proposals")
        first = page.locator(f'tr[data-proposal="{records[0]["id"]}"] td.saving')
        expect(first).to_have_text("USD 82.49")
        for record in records:
            page.locator(f'tr[data-proposal="{record["id"]}"] input[type=checkbox]').check()
        page.locator("#bulk-review").click()
        # One confirmation that lists every proposal with its full hash.
        rows = page.locator("#bulk-items tr[data-proposal]")
        expect(rows).to_have_count(21)
        for record in records:
            row = page.locator(f'#bulk-items tr[data-proposal="{record["id"]}"]')
            expect(row.locator("code.hash")).to_have_text(record["action_hash"])
        expect(page.locator("#bulk-total")).to_have_text(total)
        # The agent withdraws one while the person reads the confirmation.
        response = stack._http.post(
            f"/v1/proposals/{gone['id']}/withdraw",
            json={"note": "running again"},
            headers=stack.auth("agent"),
        )
        assert response.status_code == 200, response.text
        page.locator("#bulk-approve-button").click()
        expect(page.locator("h1")).to_have_text("Approved 20 of 21")
        refused = page.locator("#bulk-refused li")
        expect(refused).to_have_count(1)
        expect(refused).to_have_attribute("data-proposal", gone["id"])
        expect(page.locator("#bulk-done li")).to_have_count(20)
    finally:
        alice.close()
    assert_each_executed_once(stack, [r for r in records if r is not gone], [gone])
