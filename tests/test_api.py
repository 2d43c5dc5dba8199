"""airlock.api: the one set of answer shapes the CLI and the web app both read.

Tested once here, through each client's own way of reading an answer (the CLI's
``parse``, the web app's ``CheckpointClient`` over a mock transport), so a change to the
shapes is seen by both: an unknown field from a newer checkpoint is ignored, a field an
older one does not send takes its default, a missing required field is the checkpoint
not speaking its API (each client's ``CheckpointUnavailable``), never a page or a line
built from half an answer. The sample is held to the checkpoint's own strict model, and
every client field to a field the checkpoint sends, so the two cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pydantic
import pytest

from airlock import api
from airlock.cli import _client as cli_client
from airlock.cli._proposal import parse as cli_parse
from services.checkpoint import schemas
from webapp import errors as webapp_errors
from webapp.client import CheckpointClient

_AT = 1_764_400_000


def _record(**changes: Any) -> dict[str, Any]:
    """A proposal record as a checkpoint sends it: approved, executed, refused once."""
    receipt = {"payloadType": "application/vnd.airlock.receipt.v1+json", "payload": ""}
    record: dict[str, Any] = {
        "id": "prop_shared000001",
        "state": "in_doubt",
        "action_hash": "sha256:" + "0" * 64,
        "action_jcs": "{}",
        "action": {},
        "provider": "alibaba",
        "account": "5123456789012345",
        "region": "ap-southeast-1",
        "resource_type": "ecs.instance",
        "resource_id": "i-t4n0example",
        "operation": "stop",
        "risk": "medium",
        "proposed_by": "agent:scanner-1",
        "submitted_by": "agent",
        "policy": {
            "rule": "stop-default",
            "effect": "approve",
            "quorum": 1,
            "confirm": False,
            "hash": "sha256:" + "1" * 64,
        },
        "deny_reason": None,
        "votes": [{"voter": "alice", "at": _AT, "note": "", "counts": True}],
        "votes_needed": 0,
        "approval_deadline": _AT + 86_400,
        "created_at": _AT,
        "updated_at": _AT + 60,
        "approval": {
            "approval_id": "apv_shared000001",
            "keyid": "ed25519:" + "2" * 32,
            "issued_at": _AT + 10,
            "expires_at": _AT + 910,
            "revoked_at": None,
            "revoked_by": None,
            "envelope": {"payloadType": "application/vnd.airlock.approval.v1+json"},
        },
        "rejection": None,
        "outcome": {
            "approval_id": "apv_shared000001",
            "outcome": "in_doubt",
            "refusal_code": None,
            "receipt_verified": True,
            "receipt_keyid": "ed25519:" + "3" * 32,
            "receipt": receipt,
            "late": False,
            "target_held_by": None,
            "reported_at": _AT + 20,
            "resolution": "happened",
            "resolved_by": "carol",
            "resolved_at": _AT + 30,
            "resolution_note": "",
            "executor_resolution": {
                "decision": "did_not_happen",
                "by": "dave",
                "at": _AT + 40,
                "note": "",
                "checkpoint_decision": "happened",
                "checkpoint_resolved_by": "carol",
                "conflict": True,
                "reported_at": _AT + 41,
                "receipt_keyid": "ed25519:" + "3" * 32,
                "receipt": receipt,
            },
        },
        "executor_refusals": [
            {
                "approval_id": "apv_shared000001",
                "refusal_code": "E_AUDIENCE",
                "detail": "audience",
                "executor": "prod-ap-southeast-1",
                "at": _AT + 15,
                "reported_at": _AT + 16,
            }
        ],
        "route": {
            "groups": ["payments", "leads"],
            "level": 0,
            "sla": 3600,
            "due_at": _AT + 3600,
            "may_vote": True,
        },
    }
    record.update(changes)
    return record


def _page(*items: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {"items": list(items), "next_before": None, "states": ["in_doubt"], **changes}


# -- each client's way of reading an answer -----------------------------------------------


def _by_cli(model: type[pydantic.BaseModel], body: Any) -> Any:
    return cli_parse(model, body)


def _by_webapp(model: type[pydantic.BaseModel], body: Any) -> Any:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=json.dumps(body).encode())

    client = CheckpointClient("http://checkpoint.test", transport=httpx.MockTransport(answer))
    try:
        if model is api.ProposalPage:
            return client.proposals("token")
        return client.proposal("token", "prop_shared000001")
    finally:
        client.close()


_Reader = Callable[[type[pydantic.BaseModel], Any], Any]
_CLIENTS = [
    pytest.param(_by_cli, cli_client.CheckpointUnavailable, id="cli"),
    pytest.param(_by_webapp, webapp_errors.CheckpointUnavailable, id="webapp"),
]


# -- the sample is a real answer; the client shapes are a part of it ----------------------


def test_the_sample_is_what_the_checkpoint_sends() -> None:
    """The checkpoint's own models forbid extra fields and require every one."""
    schemas.ProposalList.model_validate(_page(_record()))


@pytest.mark.parametrize(
    ("client_model", "server_model"),
    [
        (api.LoginAnswer, schemas.LoginOut),
        (api.ProposalPage, schemas.ProposalList),
        (api.Proposal, schemas.ProposalOut),
        (api.Policy, schemas.PolicyOut),
        (api.Vote, schemas.VoteOut),
        (api.Approval, schemas.ApprovalOut),
        (api.Rejection, schemas.RejectionOut),
        (api.Outcome, schemas.OutcomeOut),
        (api.ExecutorResolution, schemas.ExecutorResolutionOut),
        (api.ExecutorRefusal, schemas.ExecutorRefusalOut),
        (api.Route, schemas.RouteOut),
        (api.FeedPage, schemas.FeedOut),
        (api.FeedItem, schemas.FeedItem),
        (api.ChainHead, schemas.AuditHeadOut),
        (api.ExecutorHead, schemas.ExecutorHeadOut),
        (api.ReceiptReport, schemas.OutcomeIn),
        (api.ReceiptReport, schemas.RefusalIn),
    ],
)
def test_every_field_a_client_reads_is_one_the_checkpoint_sends(
    client_model: type[pydantic.BaseModel], server_model: type[pydantic.BaseModel]
) -> None:
    assert set(client_model.model_fields) <= set(server_model.model_fields)


# -- leniency and strictness, through both clients ------------------------------------------


@pytest.mark.parametrize(("read", "unavailable"), _CLIENTS)
def test_a_newer_checkpoints_unknown_fields_are_ignored(
    read: _Reader, unavailable: type[Exception]
) -> None:
    record = _record(banner="new")
    record["outcome"] = {**record["outcome"], "cost_saved": 12}
    record["votes"] = [{**record["votes"][0], "weight": 2}]
    page = read(api.ProposalPage, _page(record, total=1))
    assert isinstance(page, api.ProposalPage)
    assert page.items[0].outcome is not None
    assert page.items[0].outcome.executor_resolution is not None
    assert page.items[0].outcome.executor_resolution.conflict is True
    assert not hasattr(page.items[0], "banner")
    assert read(api.Proposal, record) == page.items[0]


@pytest.mark.parametrize(("read", "unavailable"), _CLIENTS)
def test_an_older_checkpoints_answer_takes_the_documented_defaults(
    read: _Reader, unavailable: type[Exception]
) -> None:
    record = _record()
    del record["executor_refusals"]  # before POST /v1/refusals
    del record["route"]  # before routes were shown
    record["votes"] = [{k: v for k, v in record["votes"][0].items() if k != "counts"}]
    outcome = record["outcome"]
    record["outcome"] = {
        k: v for k, v in outcome.items() if k not in ("target_held_by", "executor_resolution")
    }
    page = _page(record)
    del page["states"]  # before the repeatable state filter
    read_page = read(api.ProposalPage, page)
    assert read_page.states is None
    p = read_page.items[0]
    assert p.executor_refusals == []
    assert p.route is None
    assert p.votes[0].counts is True
    assert p.outcome is not None
    assert (p.outcome.target_held_by, p.outcome.executor_resolution) == (None, None)


@pytest.mark.parametrize(
    "path",
    [
        ("state",),
        ("action_jcs",),
        ("submitted_by",),  # was read by the web app only
        ("approval", "envelope"),  # was read by the web app only
        ("outcome", "receipt"),  # was read by the web app only
        ("outcome", "executor_resolution", "reported_at"),  # was read by the CLI only
        ("outcome", "executor_resolution", "receipt"),  # was read by the web app only
    ],
)
@pytest.mark.parametrize(("read", "unavailable"), _CLIENTS)
def test_an_answer_missing_a_required_field_is_the_checkpoint_unavailable(
    read: _Reader, unavailable: type[Exception], path: tuple[str, ...]
) -> None:
    record = _record()
    holder = record
    for key in path[:-1]:
        holder[key] = dict(holder[key])
        holder = holder[key]
    del holder[path[-1]]
    with pytest.raises(unavailable):
        read(api.Proposal, record)


@pytest.mark.parametrize(("read", "unavailable"), _CLIENTS)
def test_a_field_of_the_wrong_type_is_the_checkpoint_unavailable(
    read: _Reader, unavailable: type[Exception]
) -> None:
    with pytest.raises(unavailable):
        read(api.Proposal, _record(votes_needed="one"))
    with pytest.raises(unavailable):
        read(api.ProposalPage, _page(_record(), items=None))


def test_the_cli_names_the_missing_field_it_refuses() -> None:
    record = _record()
    record["approval"] = {k: v for k, v in record["approval"].items() if k != "envelope"}
    with pytest.raises(cli_client.CheckpointUnavailable, match=r"approval\.envelope: Field"):
        cli_parse(api.Proposal, record)


_LOGIN = {"token": "t" * 43, "expires_at": _AT + 3600, "username": "alice", "role": "approver"}


def _login_by_webapp(body: dict[str, Any]) -> api.LoginAnswer:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=json.dumps(body).encode())

    client = CheckpointClient("http://checkpoint.test", transport=httpx.MockTransport(answer))
    try:
        return client.login("alice", "password")
    finally:
        client.close()


def test_a_login_answer_ignores_unknown_fields_and_needs_every_known_one() -> None:
    """``airlock login`` validates the answer itself (its own message, exit 3); the web
    app through its client."""
    schemas.LoginOut.model_validate(_LOGIN)
    newer = {**_LOGIN, "mfa": "totp"}
    assert api.LoginAnswer.model_validate(newer) == _login_by_webapp(newer)
    assert _login_by_webapp(newer).role == "approver"
    short = {k: v for k, v in _LOGIN.items() if k != "role"}
    with pytest.raises(pydantic.ValidationError):
        api.LoginAnswer.model_validate(short)
    with pytest.raises(webapp_errors.CheckpointUnavailable):
        _login_by_webapp(short)


def test_a_read_answer_cannot_be_changed_afterwards() -> None:
    p = api.Proposal.model_validate(_record())
    with pytest.raises(pydantic.ValidationError):
        p.state = "approved"  # type: ignore[misc]
    assert p.outcome is not None
    with pytest.raises(pydantic.ValidationError):
        p.outcome.outcome = "succeeded"  # type: ignore[misc]


# -- the executor's feed page and receipt reports -----------------------------------------


def _feed_page(**changes: Any) -> dict[str, Any]:
    """A feed page as a checkpoint sends it: an approval and a revocation."""
    page: dict[str, Any] = {
        "items": [
            {
                "seq": 11,
                "kind": "approval",
                "approval_id": "apv_shared000001",
                "bundle": {"action": "e30=", "envelope": {"payloadType": "x"}},
            },
            {"seq": 12, "kind": "revocation", "approval_id": "apv_shared000002", "bundle": None},
        ],
        "cursor": 12,
        "audit_head": {"seq": 40, "hash": "a" * 64},
        "feed_head": 12,
        "executor_head": {"seq": 7, "hash": "b" * 64, "at": _AT},
    }
    page.update(changes)
    return page


def test_the_feed_sample_is_what_the_checkpoint_sends_and_the_executor_reads_it() -> None:
    schemas.FeedOut.model_validate(_feed_page())
    page = api.FeedPage.model_validate(_feed_page())
    assert page.has_approval and page.cursor == 12 and page.feed_head == 12
    first, second = page.items
    assert first is not None and first.has_bundle and first.bundle["action"] == "e30="
    assert second is not None and second.kind == "revocation"
    assert page.audit_head == api.ChainHead(seq=40, hash="a" * 64)
    assert page.executor_head == api.ExecutorHead(seq=7, hash="b" * 64, at=_AT)


def test_an_older_checkpoints_feed_page_reads_without_its_heads() -> None:
    page = api.FeedPage.model_validate({"items": [], "cursor": 0})
    assert (page.audit_head, page.feed_head, page.executor_head) == (None, None, None)


@pytest.mark.parametrize(
    "changes",
    [
        {"audit_head": {"seq": 1, "hash": "not hex"}},
        {"audit_head": {"seq": "1", "hash": "a" * 64}},
        {"feed_head": -1},
        {"feed_head": True},
        {"executor_head": {"seq": -3, "hash": "b" * 64}},
    ],
)
def test_a_malformed_head_reads_as_absent_not_as_a_refused_page(changes: dict[str, Any]) -> None:
    page = api.FeedPage.model_validate(_feed_page(**changes))
    assert None in (page.audit_head, page.feed_head, page.executor_head)
    assert page.items[0] is not None


def test_a_malformed_item_reads_as_none_for_the_reader_to_cut_the_page_at() -> None:
    page = api.FeedPage.model_validate(
        _feed_page(items=[{"seq": 11, "kind": "approval"}, "junk", {"seq": "13"}])
    )
    assert page.items[0] is not None and not page.items[0].has_bundle
    assert page.items[1:] == [None, None]


@pytest.mark.parametrize("changes", [{"items": None}, {"cursor": "12"}, {"cursor": True}])
def test_a_feed_page_without_items_or_an_integer_cursor_is_refused(
    changes: dict[str, Any],
) -> None:
    with pytest.raises(pydantic.ValidationError):
        api.FeedPage.model_validate(_feed_page(**changes))


def test_a_receipt_report_is_a_body_the_checkpoint_takes() -> None:
    envelope = {
        "payloadType": "application/vnd.airlock.receipt.v1+json",
        "payload": "e30=",
        "signatures": [{"keyid": "ed25519:" + "3" * 32, "sig": "AA=="}],
    }
    report = api.ReceiptReport.of(json.dumps(envelope))
    body = json.loads(report.to_json_bytes())
    assert body == {"receipt": envelope}
    schemas.OutcomeIn.model_validate(body)
    schemas.RefusalIn.model_validate(body)
    for broken in ("[]", '{"payload": "e30="}', '{"a": 1, "a": 2}', "{"):
        with pytest.raises(ValueError, match="not"):
            api.ReceiptReport.of(broken)


@pytest.mark.parametrize(
    ("request_", "server_model"),
    [
        (api.ApproveRequest(action_hash="sha256:" + "0" * 64, note="ok"), schemas.ApproveIn),
        (
            api.ApproveRequest(action_hash="sha256:" + "0" * 64, confirm="i-t4n0example"),
            schemas.ApproveIn,
        ),
        (api.RejectRequest(reason_code="not_idle", note="busy"), schemas.RejectIn),
        (api.NoteRequest(note="changed my mind"), schemas.RevokeIn),
        (api.NoteRequest(), schemas.WithdrawIn),
        (api.ResolveRequest(decision="happened"), schemas.ResolveIn),
    ],
)
def test_every_request_a_client_sends_is_one_the_checkpoint_takes(
    request_: pydantic.BaseModel, server_model: type[pydantic.BaseModel]
) -> None:
    """The server's request models forbid unknown fields: a field a client sends that the
    checkpoint does not take fails here, not as a 422 in front of a person."""
    body = api.request_body(request_)  # type: ignore[arg-type]
    assert server_model.model_validate(body).model_dump(exclude_defaults=True) == {
        k: v for k, v in body.items() if v != ""
    }
    if isinstance(request_, api.ApproveRequest) and request_.confirm is None:
        assert "confirm" not in body  # no typed id is sent as none at all
