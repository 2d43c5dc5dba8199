"""``airlock approvals show`` of a routed proposal: whom it is asked of, when the next
group is, and whether the signed-in person may approve it; no route line otherwise."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.notify.support import ROUTED_TAGS, SLA_S, routed_policy

from .conftest import Served


def test_show_prints_the_route_and_who_may_approve(served: Served) -> None:
    served.world.checkpoint.policy = routed_policy("")
    routed = served.submit(
        proposal_id="prop_route0000001", resource_id="i-routed1", tags=ROUTED_TAGS
    )
    plain = served.submit(proposal_id="prop_route0000002")
    due = datetime.fromtimestamp(served.world.clock() + SLA_S, UTC)
    route = (
        f"route      payments (asked), leads (next, at {due:%Y-%m-%d %H:%M:%S} UTC if unanswered)"
    )
    served.login("carol")
    result = served.run("approvals", "show", routed["id"])
    assert result.exit_code == 0, result.output
    assert f"{route}; only a member of payments may approve it\n" in result.stdout
    served.login("alice")
    result = served.run("approvals", "show", routed["id"])
    assert f"{route}; you may approve it\n" in result.stdout
    result = served.run("approvals", "show", plain["id"])
    assert result.exit_code == 0, result.output
    assert "route " not in result.stdout
