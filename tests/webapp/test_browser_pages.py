"""What a newcomer reads in a real browser: a page for every address, ids read whole,
a destructive button that looks it, and words instead of codes.

Shares the stack, the browser and the people of ``test_browser.py`` (same fixtures).
"""

from __future__ import annotations

import httpx
import pytest

from tests.support.stack import PASSWORD, Stack

from .test_browser import Person, _action, browser, people, stack

pytestmark = pytest.mark.browser

from playwright.sync_api import Browser, Page, expect  # noqa: E402

__all__ = ["browser", "people", "stack"]  # fixtures, used by name

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
    response = page.goto("/no/such/page")
    assert response is not None and response.status == 404
    assert "text/html" in response.headers["content-type"]
    expect(page).to_have_title("Page not found · Airlock")
    expect(page.locator("h1")).to_have_text("Page not found")
    nav = page.get_by_role("navigation", name="Main")
    expect(nav).to_be_visible()
    nav.get_by_role("link", name="History").click()
    expect(page.locator("h1")).to_have_text("History")

    # A proposal that does not exist is "Not found", not "Refused", and keeps the menu.
    response = page.goto("/proposals/prop_nosuchproposal1")
    assert response is not None and response.status == 404
    expect(page).to_have_title("Not found · Airlock")
    expect(nav).to_be_visible()

    # Signed out: the same page, with the way to sign in.
    anonymous = browser.new_context(base_url=stack.webapp_url)
    try:
        other = anonymous.new_page()
        response = other.goto("/no/such/page")
        assert response is not None and response.status == 404
        expect(other.locator("h1")).to_have_text("Page not found")
    finally:
        anonymous.close()


def test_a_garbage_id_of_3000_characters_is_not_echoed_by_the_page(
    people: dict[str, Person],
) -> None:
    page = people["alice"].page
    garbage = "prop_" + "x" * 2995
    response = page.goto(f"/proposals/{garbage}")
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
    for width in (320, 360, 390):
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

    page.goto("/history")
    row = page.locator(f'tr[data-proposal="{rejected["id"]}"]')
    expect(row).to_contain_text("rejected (Not idle — it is in use)")
    expect(row).not_to_contain_text("not_idle")
    expect(page.locator(f'tr[data-proposal="{doubt["id"]}"]')).not_to_contain_text("in_doubt")

    page.goto("/")
    option = page.locator("#f-state option[value=in_doubt]")
    expect(option).to_have_text("in doubt — needs a person")
