"""The ``[notify]`` table: a secret is named by file, never written inline; a channel
that could not work is refused when the policy loads, naming the key."""

from __future__ import annotations

import pytest

from services.checkpoint.errors import ConfigError

from .support import notify_policy

_HOOK = '[notify.channels.ops]\ntype = "webhook"\nurl = "https://h.example/x"\n'


@pytest.mark.parametrize(
    ("table", "refusal"),
    [
        (
            _HOOK + 'secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"\n',
            "ops.secret: a secret is never",
        ),
        (_HOOK + 'token = "t"\n', "ops.token: a secret is never"),
        (
            '[notify.channels.s]\ntype = "slack"\nurl = "https://hooks.slack.com/services/T/B/X"\n',
            "s.url: a Slack webhook URL is a secret",
        ),
        (
            '[notify.channels.m]\ntype = "email"\nhost = "smtp.example"\npassword = "p"\n'
            'from = "a@example.com"\nto = ["b@example.com"]\n',
            "m.password: a secret is never",
        ),
    ],
    ids=["webhook-secret", "token", "slack-url", "smtp-password"],
)
def test_an_inline_secret_is_refused(table: str, refusal: str) -> None:
    with pytest.raises(ConfigError) as caught:
        notify_policy(table)
    assert refusal in str(caught.value)
    assert "whsec_MfKQ" not in str(caught.value)  # the refusal never repeats the secret


@pytest.mark.parametrize(
    ("table", "refusal"),
    [
        (_HOOK, "ops.secret_file: required"),
        ('[notify.channels.ops]\ntype = "pager"\n', "ops.type: one of"),
        (_HOOK + 'secret_file = "/s"\nevents = ["proposal.nope"]\n', "ops.events"),
        ('[notify]\nproposal_url = "https://a.example/"\n', "proposal_url"),
        ("[notify]\nretry_delays = []\n", "retry_delays"),
        ('[notify.channels.Bad]\ntype = "slack"\nurl_file = "/u"\n', "a name is"),
    ],
    ids=[
        "unsigned-webhook",
        "unknown-type",
        "unknown-event",
        "no-placeholder",
        "no-delays",
        "name",
    ],
)
def test_a_channel_that_could_not_work_is_refused_at_load(table: str, refusal: str) -> None:
    with pytest.raises(ConfigError, match=refusal.replace(".", r"\.")):
        notify_policy(table)


def test_a_policy_without_notify_has_no_channels() -> None:
    assert notify_policy("").notify.channels == ()
