"""Figures shown to people read the same in the CLI, the web app and the agent's reason."""

from __future__ import annotations

import pytest

from airlock.cli._approvals_show import _evidence
from airlock.units import decimal_bytes, duration, money, span
from services.agent.idle import format_bytes
from webapp.charts import human_bytes


@pytest.mark.parametrize(
    ("n", "shown"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1_000, "1.0 kB"),
        (1_571_315, "1.5 MB"),  # truncated, never rounded up to 1.6
        (1_999_999, "1.9 MB"),
        (3 * 10**9, "3.0 GB"),
        (12_345 * 10**12, "12345.0 TB"),
    ],
)
def test_a_byte_count_is_truncated_to_one_place(n: int, shown: str) -> None:
    assert decimal_bytes(n) == shown
    assert human_bytes(n) == shown


def test_the_cli_evidence_never_reads_higher_than_the_agent_s_reason() -> None:
    """Found in a walkthrough: the reason said 1.5 MB/day and the evidence line beside
    it 1.6 MB/day for the same 1,571,315 bytes (one truncated, the other rounded)."""
    per_day = 1_571_315
    [line] = [x for x in _evidence({"net_bytes_per_day": per_day}) if "network" in x]
    assert f"network {format_bytes(per_day)}/day" in line


def test_a_delete_s_evidence_has_no_made_up_window() -> None:
    """Found in a walkthrough: a delete's evidence (a policy, no idle window) was shown
    as 'over ? days'."""
    lines = _evidence({"policy": "staged/v1", "stage": "delete"})
    assert lines[0] == "staged/v1"
    assert not any("?" in line for line in lines if "staged/v1" in line)
    stop = _evidence({"policy": "idle/v1", "window_days": 14})
    assert stop[0] == "idle/v1 over 14 days"


def test_a_negative_byte_count_is_an_error_not_a_figure() -> None:
    with pytest.raises(ValueError, match="not negative"):
        decimal_bytes(-1)


@pytest.mark.parametrize(
    ("seconds", "prose", "compact"),
    [
        (0, "0 seconds", "0 s"),
        (1, "1 second", "1 s"),
        (59, "59 seconds", "59 s"),
        (60, "1 minute", "1 min"),
        (119, "1 minute", "1 min"),  # truncated: never more than it was
        (7_200, "2 hours", "2 h 0 min"),
        (86_399, "23 hours", "23 h 59 min"),
        (86_400, "1 day", "1 d 0 h"),
        (7 * 86_400 + 3_600, "7 days", "7 d 1 h"),
    ],
)
def test_a_duration_is_the_largest_whole_unit_truncated(
    seconds: int, prose: str, compact: str
) -> None:
    assert span(seconds) == prose
    assert duration(seconds) == compact


def test_a_negative_duration_is_refused_in_prose_and_zero_in_a_table() -> None:
    with pytest.raises(ValueError, match="not negative"):
        span(-1)
    assert duration(-5) == "0 s"


def test_money_prints_minor_units_exactly() -> None:
    assert money(823449, "USD", 2) == "USD 8,234.49"
    assert money(5, "USD", 2) == "USD 0.05"
    assert money(0, "USD", 2) == "USD 0.00"
    assert money(1234, "JPY", 0) == "JPY 1,234"
    assert money(113000, "USD", 6) == "USD 0.113000"
    assert money(-150, "EUR", 2) == "EUR -1.50"
