"""The directory and file bundle sources on their own: what they read and hand over."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from airlock.protocol import BUNDLE_MAX_BYTES
from services.executor import State
from services.executor.recover import run
from services.executor.sources import DIRECTORY_BATCH, INBOX_SCAN_S, DirectorySource

from .conftest import Env
from .support import make_test_bundle


def test_a_directory_backlog_is_handed_over_a_batch_at_a_time(tmp_path: Path) -> None:
    """Seen in review: every file in the inbox was read into memory at once (each up
    to the 64 KiB cap), so a backlog of thousands could exhaust the executor's memory."""
    for n in range(DIRECTORY_BATCH + 5):
        (tmp_path / f"{n:03}.json").write_bytes(b"x" * (BUNDLE_MAX_BYTES + 1))
    source = DirectorySource(tmp_path)
    first = source.receive()
    assert [d.ref for d in first] == [f"{n:03}.json" for n in range(DIRECTORY_BATCH)]
    for delivery in first:
        source.ack(delivery)
    assert [d.ref for d in source.receive()] == [
        f"{n:03}.json" for n in range(DIRECTORY_BATCH, DIRECTORY_BATCH + 5)
    ]


def test_once_takes_every_file_the_directory_has_not_just_one_batch(
    env: Env, tmp_path: Path
) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    b = make_test_bundle(1, tag="sonce")
    env.cloud.add("ecs.instance", b.resource_id, "Running")
    for n in range(DIRECTORY_BATCH + 4):
        (inbox / f"{n:03}.json").write_bytes(b"not a bundle")
    (inbox / "999.json").write_bytes(b.raw)  # sorted last: in no first batch
    outcomes = run(env.executor, DirectorySource(inbox), once=True)
    assert len(outcomes) == DIRECTORY_BATCH + 5
    assert outcomes[-1].state is State.SUCCEEDED
    assert env.cloud.writes_for(b.resource_id) == 1
    assert list(inbox.glob("*.json")) == []


def test_a_fifo_swapped_in_after_the_check_is_skipped_not_waited_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in review: a FIFO put in place of a bundle between the ``is_file`` check
    and the open blocked the open, and the daemon with it (a SIGTERM too), until
    someone wrote to it; the files after it were never taken."""
    os.mkfifo(tmp_path / "a.json")
    (tmp_path / "b.json").write_bytes(b"{}")
    monkeypatch.setattr(Path, "is_file", lambda self: True)  # the check saw a file
    source = DirectorySource(tmp_path)
    got: list[list[str]] = []
    reader = threading.Thread(target=lambda: got.append([d.ref for d in source.receive()]))
    reader.start()
    reader.join(timeout=5)
    if reader.is_alive():  # release the blocked open so the test process can end
        os.close(os.open(tmp_path / "a.json", os.O_WRONLY))
        reader.join()
    assert got == [["b.json"]]


def test_a_symlink_in_the_inbox_is_not_followed_and_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Seen in review: a symlink planted in the inbox made the executor open whatever it
    named (any file it may read, or a device, whose open alone may act). Regular files
    only; the link is left in place and logged once, not at every poll."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(b"{}")
    (inbox / "a.json").symlink_to(elsewhere)
    (inbox / "b.json").write_bytes(b"{}")
    source = DirectorySource(inbox)
    with caplog.at_level("WARNING", logger="airlock.executor"):
        assert [d.ref for d in source.receive()] == ["b.json"]
        assert [d.ref for d in source.receive()] == ["b.json"]  # b not acknowledged here
    assert (inbox / "a.json").is_symlink()  # left in place
    warnings = [r.getMessage() for r in caplog.records if "a.json" in r.getMessage()]
    assert len(warnings) == 1 and "left in place" in warnings[0]


class _FakeTime:
    """A clock that moves only when slept on; ``on_sleep`` runs at each sleep."""

    def __init__(self, on_sleep: Callable[[int], None] | None = None) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.on_sleep = on_sleep

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(len(self.sleeps))

    def monotonic(self) -> float:
        return self.now


def test_a_waiting_inbox_takes_a_bundle_renamed_in_during_the_wait_at_the_next_scan(
    tmp_path: Path,
) -> None:
    """Seen in the attack suite: the daemon slept its whole poll wait between looks at
    an empty inbox, so a bundle dropped in waited up to that long (5 s by default)."""

    def drop(n: int) -> None:
        if n == 3:  # renamed in during the third scan interval
            (tmp_path / "a.json").write_bytes(b"{}")

    fake = _FakeTime(drop)
    source = DirectorySource(tmp_path, sleep=fake.sleep, monotonic=fake.monotonic)
    assert source.long_poll  # the daemon then adds no pause of its own
    assert [d.ref for d in source.receive(wait_s=5.0)] == ["a.json"]
    assert fake.sleeps == [INBOX_SCAN_S] * 3


def test_a_waiting_inbox_that_stays_empty_answers_at_the_end_of_the_wait(
    tmp_path: Path,
) -> None:
    fake = _FakeTime()
    source = DirectorySource(tmp_path, sleep=fake.sleep, monotonic=fake.monotonic)
    assert source.receive(wait_s=0.35) == []
    assert fake.now == pytest.approx(0.35)
    assert all(s <= INBOX_SCAN_S for s in fake.sleeps)


def test_an_inbox_without_a_sleep_answers_at_once_and_leaves_pacing_to_the_daemon(
    tmp_path: Path,
) -> None:
    source = DirectorySource(tmp_path)
    assert not source.long_poll
    assert source.receive(wait_s=5.0) == []
