"""The directory and file bundle sources on their own: what they read and hand over."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from airlock.protocol import BUNDLE_MAX_BYTES
from services.executor import State
from services.executor.recover import run
from services.executor.sources import DIRECTORY_BATCH, DirectorySource

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
