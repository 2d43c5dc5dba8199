"""services/checkpoint/signins.py: the tally of refused sign-ins written to the chain, and
the report ``airlock users sign-ins`` reads back from it, agree on every field.

Pure: no database, no clock; the chain is stood in for by the events as written.
"""

from __future__ import annotations

import dataclasses

from airlock.events import FIELDS, CheckpointEvent
from services.checkpoint.signins import (
    INTERVAL,
    TOP,
    ClientSignIns,
    RefusedSignIns,
    SignInTally,
    SignInTotals,
)

T0 = 1_764_400_000


def test_a_tally_written_is_read_back_whole() -> None:
    tallies = RefusedSignIns()
    for i in range(3):
        assert tallies.add("unknown_name", "192.0.2.7", f"hmac:{i:032x}", T0 + i) is None
    assert tallies.add("throttled", "198.51.100.3", f"hmac:{0:032x}", T0 + 3) is None
    closed = tallies.add("throttled", "192.0.2.7", f"hmac:{9:032x}", T0 + INTERVAL)
    assert closed is not None
    assert set(closed) == FIELDS[CheckpointEvent.SIGN_IN_REFUSED]
    assert (closed["from"], closed["to"]) == (T0, T0 + 3)
    assert closed["clients"] == [
        {"address": "192.0.2.7", "count": 3},
        {"address": "198.51.100.3", "count": 1},
    ]

    tally = SignInTally(since=T0)
    tally.wrong_password("dora", "192.0.2.7")
    tally.refused(closed)
    tally.wrong_password("dora", "192.0.2.7")
    tally.locked("dora")
    report = tally.report()
    assert report.totals == SignInTotals(wrong_password=2, unknown_name=3, throttled=1)
    assert list(report.clients) == ["192.0.2.7", "198.51.100.3"]  # first named, first
    assert report.clients["192.0.2.7"] == ClientSignIns(2, {"dora": 2}, 3)
    assert report.distinct_unknown_names == 3
    assert report.locked == ("dora",)


def test_the_report_as_json_keeps_the_names_the_command_printed() -> None:
    """``airlock users sign-ins --json`` prints ``dataclasses.asdict`` of the report."""
    tally = SignInTally(since=T0)
    tally.wrong_password("dora", "192.0.2.7")
    shown = dataclasses.asdict(tally.report())
    assert shown == {
        "since": T0,
        "totals": {"wrong_password": 1, "unknown_name": 0, "throttled": 0},
        "clients": {
            "192.0.2.7": {"wrong_password": 1, "users": {"dora": 1}, "unknown_name_or_throttled": 0}
        },
        "distinct_unknown_names": 0,
        "locked": (),
    }


def test_a_flood_of_addresses_names_only_the_top_ones_and_counts_the_rest() -> None:
    tallies = RefusedSignIns()
    for i in range(TOP + 5):
        tallies.add("unknown_name", f"203.0.113.{i}", "hmac:" + "0" * 32, T0)
    event = tallies.drain(T0, force=True)
    assert event is not None
    assert len(event["clients"]) == TOP and event["other_clients"] == 5
    assert event["names"] == [{"name_hmac": "hmac:" + "0" * 32, "count": TOP + 5}]
