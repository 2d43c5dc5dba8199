"""The sign-in throttle's pure core (``services/checkpoint/throttle.py``), with ``now``
given: delays double from the first after the free attempts up to the cap, a right
password forgets its pair, quiet counts are forgotten, and memory stays bounded."""

from __future__ import annotations

import pytest

from services.checkpoint.throttle import (
    ADDRESS_FREE,
    CAP,
    FORGET_AFTER,
    PAIR_FREE,
    SignInThrottle,
    Throttled,
    delay_after,
)


def test_delays_double_after_the_free_attempts_up_to_the_cap() -> None:
    assert [delay_after(n, 3) for n in range(1, 8)] == [0, 0, 1, 2, 4, 8, 16]
    assert delay_after(10_000, 3) == CAP


def _fail(throttle: SignInThrottle, address: str, name: str, now: int) -> None:
    admission = throttle.admit(address, name, now)
    throttle.done(admission)


def test_a_pair_is_slowed_and_its_right_password_forgets_it() -> None:
    throttle = SignInThrottle()
    for _ in range(PAIR_FREE):
        _fail(throttle, "10.0.0.1", "hmac:a", 0)
    with pytest.raises(Throttled) as slowed:
        throttle.admit("10.0.0.1", "hmac:a", 0)
    assert slowed.value.retry_after == 1
    throttle.admit("10.0.0.1", "hmac:b", 0)  # another name from there: not yet slowed
    right = throttle.admit("10.0.0.1", "hmac:a", 1)
    throttle.succeeded(right)
    throttle.done(right)
    assert throttle.retry_after("10.0.0.1", "hmac:a", 1) == 0


def test_an_address_is_slowed_across_names() -> None:
    throttle = SignInThrottle()
    for i in range(ADDRESS_FREE):
        _fail(throttle, "10.0.0.2", f"hmac:{i}", 0)
    with pytest.raises(Throttled):
        throttle.admit("10.0.0.2", "hmac:new", 0)
    throttle.admit("10.0.0.3", "hmac:new", 0)  # another address is not


def test_a_quiet_count_is_forgotten() -> None:
    throttle = SignInThrottle()
    for i in range(PAIR_FREE + 5):
        now = 10 * CAP * i  # past every delay
        _fail(throttle, "10.0.0.4", "hmac:a", now)
    later = now + FORGET_AFTER
    assert throttle.admit("10.0.0.4", "hmac:a", later).pair_failures == 1


def test_memory_is_bounded_by_dropping_the_least_recently_used() -> None:
    throttle = SignInThrottle(max_entries=100)
    for i in range(1000):
        _fail(throttle, f"10.1.{i // 250}.{i % 250}", "hmac:a", 0)
    assert len(throttle._counts) <= 100
