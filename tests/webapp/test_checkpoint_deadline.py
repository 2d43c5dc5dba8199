"""The web app gives up on a checkpoint that drips its answer, as on one that is down.

httpx's timeouts bound one socket operation each, so a checkpoint, or a proxy in front of
it, sending the status line and headers a byte at a time held a page (and the thread
serving it) for as long as it liked. The web app's client bounds each whole call by
``AIRLOCK_WEBAPP_CHECKPOINT_TIMEOUT`` too (:mod:`airlock.httpdeadline`). The checkpoint
here is a fake on a real loopback socket (tests/support/dripping.py); the web app is
built by its own factory from :class:`WebappSettings`, as ``airlock webapp`` builds it.
"""

from __future__ import annotations

import json
import time
import warnings

from airlock.settings import WebappSettings
from tests.support.dripping import DRIPPED_HEAD, GIVE_UP_SLACK_S, ok_json, serving_drips
from webapp import create_app

from .conftest import csrf_of
from .fakes import NOW, PASSWORD

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

#: The deadline given up at, and all the room the answer in time that follows gets. That
#: one waits for the server, which takes connections in turn, to see the client has left
#: the dripping one (a drip or two), then for its own answer: a loaded runner has stalled
#: a process 3 s. Without the deadline the given-up attempt takes the whole 60 s drip.
_TIMEOUT_S = 5.0


def test_a_checkpoint_dripping_its_answer_to_a_sign_in_is_given_up_at_the_deadline() -> None:
    assert DRIPPED_HEAD.byte_every_s < _TIMEOUT_S
    session = {"token": "als_dripped", "expires_at": NOW + 3600, "username": "alice"}
    answers = [
        DRIPPED_HEAD,
        ok_json(json.dumps({**session, "role": "approver"}).encode()),
    ]
    with serving_drips(answers) as server:
        settings = WebappSettings(
            checkpoint_url=server.url,
            checkpoint_timeout=_TIMEOUT_S,
            secure_cookies=False,
            allowed_hosts="testserver",
        )
        with TestClient(create_app(settings, now=lambda: NOW)) as browser:

            def sign_in() -> tuple[int, str]:
                form = {"username": "alice", "password": PASSWORD}
                form["csrf_token"] = csrf_of(browser.get("/login").text)
                response = browser.post("/login", data=form, follow_redirects=False)
                return response.status_code, response.text

            started = time.monotonic()
            status, text = sign_in()
            took = time.monotonic() - started
            # The page a checkpoint that does not answer gets, at the deadline.
            assert status == 502 and "The checkpoint is not reachable" in text, text
            assert "ReadTimeout" in text
            assert _TIMEOUT_S <= took < _TIMEOUT_S + GIVE_UP_SLACK_S
            # A checkpoint that answers in time signs the person in, over the same client.
            status, text = sign_in()
            assert status == 303, text
    assert server.requests == [b"POST /v1/sessions HTTP/1.1"] * 2
