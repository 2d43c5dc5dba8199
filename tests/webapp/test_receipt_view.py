"""A receipt's signature and the write's effect are named apart.

"Receipt signature valid" says the executor wrote the receipt; the effect line says
what the receipt states about the write: confirmed by a live read, or only accepted by
the provider. The executor's detail (why an execution is in doubt, say) comes from the
signed receipt the checkpoint relays, shown as text like every other outside value.
"""

from __future__ import annotations

import re

from .conftest import Site
from .fakes import action_value

PAGE = "/proposals/prop_fake000001"


def _text(html: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>(.*?)</(?:dd|p)>', html, re.S)
    assert match is not None, f"no #{element_id}"
    return re.sub(r"<[^>]+>", "", match.group(1))


def test_a_stop_the_provider_accepted_is_not_called_verified(site: Site) -> None:
    site.sign_in()
    site.fake.add(action_value())
    site.fake.executed(
        "prop_fake000001",
        verified=False,
        detail="ecs.StopInstance accepted",
        cloud_request_id="R-1",
    )
    html = site.client.get(PAGE).text
    receipt = _text(html, "receipt")
    assert "signature valid" in receipt and "verified" not in receipt.lower()
    effect = _text(html, "effect")
    assert "the provider accepted the call; not yet confirmed by a live read" in effect
    assert 'data-effect="accepted"' in html and "R-1" in effect
    assert _text(html, "executor-detail") == "ecs.StopInstance accepted"


def test_an_effect_seen_in_live_state_is_confirmed_by_a_live_read(site: Site) -> None:
    site.sign_in()
    site.fake.add(action_value())
    site.fake.executed("prop_fake000001", verified=True, detail="effect verified in live state")
    html = site.client.get(PAGE).text
    assert 'data-effect="confirmed"' in html
    assert "confirmed by a live read" in _text(html, "effect")


def test_history_names_the_receipt_signature_not_a_bare_verified(site: Site) -> None:
    site.sign_in()
    site.fake.add(action_value())
    site.fake.executed("prop_fake000001")
    html = site.client.get("/history").text
    assert "signature valid" in html and ">verified<" not in html


def test_an_in_doubt_page_shows_the_executors_detail_as_text(site: Site) -> None:
    site.sign_in("admin")
    site.fake.add(action_value())
    site.fake.in_doubt(
        "prop_fake000001",
        detail="ecs.StopInstance outcome unknown: ReadTimeout: <b>Read timed out</b>",
    )
    html = site.client.get(PAGE).text
    assert "unknown: the executor cannot tell whether the write happened" in _text(html, "effect")
    shown = "ecs.StopInstance outcome unknown: ReadTimeout: &lt;b&gt;Read timed out&lt;/b&gt;"
    assert shown in _text(html, "executor-detail")
    assert shown in _text(html, "in-doubt-detail")
    assert "<b>Read timed out" not in html


def test_a_receipt_for_another_approval_or_unchecked_says_nothing_of_the_effect(
    site: Site,
) -> None:
    site.sign_in()
    site.fake.add(action_value())
    record = site.fake.executed("prop_fake000001", verified=True, detail="all good")
    record["outcome"]["approval_id"] = "apv_" + "2" * 32  # the receipt names another one
    html = site.client.get(PAGE).text
    assert 'id="effect"' not in html and "all good" not in html.split('id="h-what"')[0]
    record = site.fake.executed("prop_fake000001", verified=True, detail="all good")
    record["outcome"]["receipt_verified"] = False
    html = site.client.get(PAGE).text
    assert 'id="effect"' not in html and "signature not checked" in html
