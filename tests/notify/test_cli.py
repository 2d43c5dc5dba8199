"""``airlock notify test`` against a real receiver, and ``airlock notify outbox`` listing
and re-sending a dead delivery, on the checkpoint's own settings and database."""

from __future__ import annotations

import json
from pathlib import Path

from standardwebhooks import Webhook

from services.checkpoint.app import DEFAULT_POLICY
from services.checkpoint.notify import Outbox
from services.checkpoint.policy import load_policy
from tests.checkpoint.harness import AUDIENCE, make_world
from tests.cli.conftest import airlock

from .support import receiver, webhook_secret, write_secret


def _policy(tmp_path: Path, url: str, secret: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_bytes(
        DEFAULT_POLICY.read_bytes()
        + f"""
[notify.channels.ops]
type = "webhook"
url = "{url}"
secret_file = "{write_secret(tmp_path, "hook", secret)}"
""".encode()
    )
    return path


def test_notify_test_sends_a_signed_message_and_says_so(tmp_path: Path) -> None:
    secret = webhook_secret()
    with receiver([200, 500]) as rx:
        env = {
            "AIRLOCK_CHECKPOINT_POLICY_PATH": str(_policy(tmp_path, rx.url, secret)),
            "AIRLOCK_CHECKPOINT_DATABASE_URL": f"sqlite:///{tmp_path / 'cp.db'}",
            "AIRLOCK_CHECKPOINT_AUDIENCE": AUDIENCE,
        }
        sent = airlock("notify", "test", "ops", env=env)
        assert sent.exit_code == 0, sent.output
        (request,) = rx.got()
        body = Webhook(secret).verify(request.body, request.headers)
        assert body["type"] == "notify.test" and f"sent {body['id']} to ops" in sent.output
        refused = airlock("notify", "test", "ops", env=env)
        assert refused.exit_code == 1 and "E_DELIVERY: ops: HTTP 500" in refused.output
        unknown = airlock("notify", "test", "pager", env=env)
        assert unknown.exit_code == 2 and "E_NOT_FOUND" in unknown.output
        assert "configured: ops" in unknown.output


def test_notify_outbox_lists_a_dead_delivery_and_resends_it(tmp_path: Path) -> None:
    secret = webhook_secret()
    with receiver() as rx:
        policy = _policy(tmp_path, rx.url, secret)
        url = f"sqlite:///{tmp_path / 'cp.db'}"
        world = make_world(url, tmp_path, load_policy(policy))
        world.submit()
        outbox = Outbox(world.checkpoint.engine, world.clock)
        (pending,) = outbox.listing(["pending"])
        outbox.kill(pending.id, "HTTP 500")
        env = {
            "AIRLOCK_CHECKPOINT_POLICY_PATH": str(policy),
            "AIRLOCK_CHECKPOINT_DATABASE_URL": url,
            "AIRLOCK_CHECKPOINT_AUDIENCE": AUDIENCE,
        }
        listed = airlock("notify", "outbox", "--json", env=env)
        assert listed.exit_code == 0, listed.output
        (row,) = [json.loads(line) for line in listed.output.splitlines()]
        assert row["state"] == "dead" and row["kind"] == "proposal.needs_vote"
        assert row["last_error"] == "HTTP 500" and row["event_id"] == pending.event_id
        shown = airlock("notify", "outbox", "--dead", env=env)
        assert f"{pending.id:>6}  dead" in shown.output
        resent = airlock("notify", "outbox", "--resend", str(pending.id), env=env)
        assert resent.exit_code == 0 and "pending again" in resent.output
        again = airlock("notify", "outbox", "--resend", str(pending.id), env=env)
        assert again.exit_code == 1 and "E_STATE" in again.output
        assert [d.state for d in outbox.listing(["pending"])] == ["pending"]
        world.app.state.notify.stop()
        world.checkpoint.db.dispose()
