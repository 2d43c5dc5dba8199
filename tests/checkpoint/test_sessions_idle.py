"""A person's session ends after ``session_idle`` seconds without use, beside the absolute
``session_ttl``; each use keeps it alive, a page's own background refresh does not.
Sessions had an absolute limit only (8 h). The clock is injected (``world.clock``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import SESSION_TTL, World, opened_world

IDLE = 30 * 60


@pytest.fixture
def idle_world(db_url: str, tmp_path: Path) -> Iterator[World]:
    with opened_world(db_url, tmp_path, session_idle=IDLE) as w:
        yield w


def _me(world: World, who: str, **headers: str) -> int:
    return int(world.client.get("/v1/me", headers={**world.auth(who), **headers}).status_code)


def test_an_idle_session_ends(idle_world: World) -> None:
    world = idle_world
    world.clock.advance(IDLE - 1)
    assert _me(world, "bob") == 200
    world.clock.advance(IDLE)  # IDLE after that use
    assert _me(world, "bob") == 401
    assert _me(world, "agent") == 200  # service tokens have no idle end


def test_use_keeps_a_session_alive_until_the_absolute_limit(idle_world: World) -> None:
    world = idle_world
    used = 0
    while used + IDLE - 1 < SESSION_TTL:
        world.clock.advance(IDLE - 1)
        used += IDLE - 1
        assert _me(world, "alice") == 200, used
    world.clock.advance(SESSION_TTL - used)
    assert _me(world, "alice") == 401  # the absolute limit holds however active


def test_a_background_refresh_does_not_keep_an_idle_session_alive(idle_world: World) -> None:
    """The web app's queue asks for new rows every few seconds on its own; counted as
    use, an open tab would keep an unattended session alive for ever."""
    world = idle_world
    world.clock.advance(IDLE - 100)
    assert _me(world, "carol", **{"Airlock-Activity": "background"}) == 200
    world.clock.advance(100)
    assert _me(world, "carol", **{"Airlock-Activity": "background"}) == 401
