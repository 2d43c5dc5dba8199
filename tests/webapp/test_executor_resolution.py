"""The executor's resolution of an in_doubt that came after an admin resolved it here.

The checkpoint keeps the proposal in the state the admin gave it and shows the
executor's signed resolution beside it (``outcome.executor_resolution``). The page says
loudly when the two disagree (the ledger is the record of what the executor did), quietly
when they agree, and nothing from an older checkpoint that has no such field. The
executor's ``by`` and note are outside text, shown escaped. Against the test fake.
"""

from __future__ import annotations

import re

from .conftest import Site, csrf_of
from .fakes import action_value

PID = "prop_fake000001"
PAGE = f"/proposals/{PID}"


def _resolved_here(site: Site, decision: str) -> None:
    site.fake.add(action_value())
    site.fake.in_doubt(PID)
    site.sign_in("admin")
    page = site.client.get(PAGE).text
    response = site.client.post(
        f"{PAGE}/resolve",
        data={"decision": decision, "note": "looked", "csrf_token": csrf_of(page)},
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text


def _text(html: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>(.*?)</(?:dd|div)>', html, re.S)
    assert match is not None, f"no #{element_id}"
    return " ".join(re.sub(r"<[^>]+>", "", match.group(1)).split())


def test_a_conflicting_executor_resolution_is_an_alert_naming_both_records(site: Site) -> None:
    _resolved_here(site, "happened")
    site.fake.executor_resolved(PID, "did_not_happen", by="ops-carol", note="still running")
    html = site.client.get(PAGE).text
    assert 'role="alert" id="resolution-conflict"' in html
    notice = _text(html, "resolution-conflict")
    assert (
        "The checkpoint records it happened (admin); the executor's ledger records "
        "it did not happen (ops-carol, 2025-11-29 07:08:40 UTC). The ledger is the record "
        "of what the executor did: check the resource in the cloud and the receipt."
    ) in notice.replace("&#39;", "'")
    assert "still running" in notice
    assert 'data-conflict="yes"' in html and "agrees" not in html
    # The proposal keeps the checkpoint's state.
    assert 'data-state="executed"' in html
    assert "Executor's resolution receipt" in html


def test_an_agreeing_executor_resolution_is_a_quiet_line(site: Site) -> None:
    _resolved_here(site, "did_not_happen")
    site.fake.executor_resolved(PID, "did_not_happen", by="ops-carol")
    html = site.client.get(PAGE).text
    assert 'id="resolution-conflict"' not in html
    line = _text(html, "executor-resolution").replace("&#39;", "'")
    assert line.startswith("The executor's ledger agrees (ops-carol, 2025-11-29 07:08:40 UTC)")
    assert 'data-conflict="no"' in html


def test_without_an_executor_resolution_the_page_says_nothing_of_one(site: Site) -> None:
    # The fake's outcome has no ``executor_resolution`` key: an older checkpoint.
    _resolved_here(site, "happened")
    assert "executor_resolution" not in site.fake.proposals[PID]["outcome"]
    html = site.client.get(PAGE).text
    assert 'id="resolution-conflict"' not in html and 'id="executor-resolution"' not in html
    assert "ledger disagrees" not in site.client.get("/history").text
    site.fake.proposals[PID]["outcome"]["executor_resolution"] = None
    html = site.client.get(PAGE).text
    assert 'data-state="executed"' in html and 'id="executor-resolution"' not in html


def test_a_hostile_executor_name_and_note_are_shown_as_text(site: Site) -> None:
    _resolved_here(site, "happened")
    site.fake.executor_resolved(
        PID,
        "did_not_happen",
        by="<img src=x onerror=alert(1)>",
        note="<script>alert(2)</script> \u202eevil",
    )
    html = site.client.get(PAGE).text
    assert "<img src=x" not in html and "<script>alert(2)" not in html
    assert "\u202e" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "&lt;script&gt;alert(2)&lt;/script&gt; \\u202eevil" in html


def test_a_conflict_is_badged_in_history_and_the_queue(site: Site) -> None:
    _resolved_here(site, "happened")
    before = site.client.get("/queue/rows?state=executed")
    site.fake.executor_resolved(PID, "did_not_happen")
    history = site.client.get("/history").text
    assert 'class="badge bad resolution-conflict">ledger disagrees<' in history
    rows = site.client.get("/queue/rows?state=executed")
    assert "ledger disagrees" in rows.text
    # The poll's signature changes with it, though the state does not.
    sig = re.compile(r'data-signature="([0-9a-f]+)"')
    assert sig.search(rows.text) and sig.search(before.text)
    assert sig.search(rows.text).group(1) != sig.search(before.text).group(1)  # type: ignore[union-attr]


def test_an_agreeing_resolution_has_no_badge(site: Site) -> None:
    _resolved_here(site, "happened")
    site.fake.executor_resolved(PID, "happened")
    assert "ledger disagrees" not in site.client.get("/history").text


def test_the_resolve_form_says_to_prefer_the_executor(site: Site) -> None:
    site.fake.add(action_value())
    site.fake.in_doubt(PID)
    site.sign_in("admin")
    html = site.client.get(PAGE).text
    assert 'id="resolve-form"' in html
    where = _text(html.replace("</p>", "</div>"), "resolve-where")
    assert "Prefer airlock executor resolve on the executor" in where
    assert "only when nobody can reach the executor" in where
    assert "record the same decision there" in where


def test_the_fakes_executor_resolution_is_the_checkpoints_shape(site: Site) -> None:
    from services.checkpoint.schemas import ExecutorResolutionOut

    _resolved_here(site, "happened")
    record = site.fake.executor_resolved(PID, "did_not_happen")
    ExecutorResolutionOut.model_validate(record["outcome"]["executor_resolution"])
