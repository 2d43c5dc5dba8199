"""The history lists every decided proposal, in the order its caption names.

The checkpoint lists newest first by creation and filters by one state; the history
asks it per decided state, so pending proposals (however many, however new) never push
decided ones off a page, and the pages follow one another without a gap or a repeat.
"""

from __future__ import annotations

import re

from .conftest import Site
from .fakes import NOW, action_value

_ROW = re.compile(r'<tr class="state-[a-z_]+" data-proposal="(prop_[a-z0-9]+)">')
_DECIDED = ("executed", "rejected", "expired", "withdrawn", "revoked", "lapsed", "failed")


def _add(site: Site, n: int, *, state: str, created_at: int, updated_at: int | None = None) -> str:
    pid = f"prop_{state[:4]}{n:08d}"
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


def test_a_last_page_that_holds_nothing_older_says_so(site: Site) -> None:
    site.sign_in()
    only = _add(site, 1, state="executed", created_at=NOW - 100)
    html = site.client.get(f"/history?before={only}").text
    assert _rows(html) == []
    assert "No older decided proposals." in html
