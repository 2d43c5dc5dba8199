"""The checkpoint's HTTP API (``/v1``) and its error mapping.

Every route names the roles it admits (through the service call it makes); refusals are
``{"error": {"code": "E_…", "message": "…"}}`` with a stable code. Nothing here logs a
header, a body, a token or a password.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

import sqlalchemy as sa
from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)
from sqlalchemy.engine import Connection
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from airlock.api import BODY_MAX_BYTES
from airlock.protocol import ACTION_MAX_BYTES, Refused, loads_strict

from ._front import Front, token_key
from ._invalid import plain_invalid
from .auth import Accounts, Principal
from .errors import ConfigError, ErrorCode, Refusal, no_signing_key
from .refusals import RefusalRecorder, RefusedRequest
from .schemas import (
    PROPOSED_ACTION_SCHEMA,
    ApproveIn,
    AuditOut,
    EditIn,
    ErrorBody,
    ErrorDetail,
    FeedOut,
    LoginIn,
    LoginOut,
    MeOut,
    OutcomeIn,
    ProposalList,
    ProposalOut,
    ProposalState,
    ReceiptOut,
    ReceiptsIn,
    ReceiptsOut,
    RefusalIn,
    RejectIn,
    ResolveIn,
    RevokeIn,
    WithdrawIn,
)
from .service import Checkpoint
from .wake import FeedSignal

__all__ = ["FeedSignal", "Metrics", "client_address", "install", "router"]

_PROPOSAL_ID: Final = r"^prop_[A-Za-z0-9_-]{8,80}$"
_SHORT_ID: Final = r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$"
#: A gate's audience, as ``airlock.protocol.ToolCall`` takes it.
_AUDIENCE: Final = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$"
#: Room for non-canonical whitespace around a 16 KiB action; refused before parsing.
_SUBMIT_MAX_BYTES: Final = 4 * ACTION_MAX_BYTES
#: Every request body, read before the caller is authenticated. The largest one sent in
#: earnest is an outcome whose receipt payload is at its 64 KiB cap: ~88 KiB in base64.
_BODY_MAX_BYTES: Final = BODY_MAX_BYTES
_MAX_SAFE: Final = 2**53 - 1


class _StrictJSONRequest(Request):
    """A request whose JSON body is read by the kernel's strict parser, never by
    ``json.loads``, which keeps the last of two duplicate keys (docs/protocol.md#strict-json)."""

    async def json(self) -> Any:
        if not hasattr(self, "_strict_json"):
            try:
                # nfc=False: these bodies relay what people typed (notes, a password),
                # which nothing hashes or signs; the receipt in an outcome is checked by
                # its own rules once its signature verified.
                self._strict_json = loads_strict(
                    await self.body(), max_bytes=_BODY_MAX_BYTES, nfc=False
                )
            except Refused as exc:
                raise Refusal(ErrorCode.E_INVALID, f"{exc.code.value}: {exc.detail}", 422) from None
        return self._strict_json


class _StrictJSONRoute(APIRoute):
    """Every route that declares a JSON body parses it strictly, before anything else
    (FastAPI reads a body before it authenticates the caller): a duplicate key, NaN or
    Infinity, a float, a lone surrogate, a BOM or trailing data is 422 ``E_INVALID``
    and nothing happens. Submit declares no body; it reads and parses its own."""

    def get_route_handler(self) -> Any:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def strict(request: Request) -> Response:
            request = _StrictJSONRequest(request.scope, request.receive)
            if await request.body():
                # Refused here, outside FastAPI's own parsing (which would turn the
                # refusal into a bare 400), so the answer has the API's error shape.
                await request.json()
            response: Response = await handler(request)
            return response

        return strict


router = APIRouter(route_class=_StrictJSONRoute)
_bearer = HTTPBearer(auto_error=False, description="A session token or a service token")


class Metrics:
    """Prometheus counters in a registry of this app's own (no global state)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "airlock_checkpoint_requests",
            "HTTP requests by route and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.refusals = Counter(
            "airlock_checkpoint_refusals",
            "Refused requests by code",
            ["code"],
            registry=self.registry,
        )
        self.approvals_issued = Counter(
            "airlock_checkpoint_approvals_issued", "Signed approvals issued", registry=self.registry
        )
        self.proposals = Counter(
            "airlock_checkpoint_proposals_submitted",
            "New proposals recorded",
            registry=self.registry,
        )
        self.feed_waiting = Gauge(
            "airlock_checkpoint_feed_polls_waiting",
            "Feed long-polls waiting for a change in this process",
            registry=self.registry,
        )


def _service(request: Request) -> Checkpoint:
    service: Checkpoint = request.app.state.checkpoint
    return service


def _accounts(request: Request) -> Accounts:
    accounts: Accounts = request.app.state.accounts
    return accounts


def _refusals(request: Request) -> RefusalRecorder:
    recorder: RefusalRecorder = request.app.state.refusals
    return recorder


def _metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


def _address(text: str) -> str | None:
    """``text`` as an IP address, an IPv6 one as its /64 (one host holds a whole /64)."""
    try:
        ip = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def client_address(request: Request) -> str:
    """The address a request comes from, for sign-in throttling: the socket's peer, or,
    when that peer is one of ``app.state.trusted_proxies`` (a web app or a TLS proxy in
    front, ``AIRLOCK_CHECKPOINT_TRUSTED_PROXIES``), the last address its
    ``X-Forwarded-For`` names. From anyone else the header is ignored: it would let a
    guesser name a new address with each guess."""
    peer = request.client.host if request.client is not None else ""
    address = _address(peer) or "unknown"
    trusted: frozenset[str] = request.app.state.trusted_proxies
    if address in trusted:
        forwarded = ",".join(request.headers.getlist("x-forwarded-for")).split(",")[-1]
        return _address(forwarded) or address
    return address


#: A page's own periodic refresh sends this (``Airlock-Activity: background``): it is
#: no one's activity, so it does not keep an idle session alive.
_ACTIVITY_HEADER: Final = "airlock-activity"


async def _principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    return await _authenticated(request, credentials, defer_touch=False)


@dataclass(frozen=True, slots=True)
class _Bearer:
    """A caller's token, of the right form but not yet looked up (:func:`_deferred`)."""

    token: str = field(repr=False)  # a bearer secret: never in a log or a traceback
    activity: bool


async def _deferred(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> _Bearer:
    """The token, checked for form only: the route looks it up in the worker thread
    that does its work (:func:`_look_up`; the approve route writes the session's last
    use in the vote's transaction), one thread hop instead of two. A request refused
    before that (its path or body invalid) looks it up in ``_invalid``: an unknown token
    is 401 first, and a known caller's refusal is audited under their name."""
    token = _token(request, credentials)
    bearer = _Bearer(token, request.headers.get(_ACTIVITY_HEADER) != "background")
    request.state.bearer = bearer
    return bearer


def _token(request: Request, credentials: HTTPAuthorizationCredentials | None) -> str:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Refusal(ErrorCode.E_UNAUTHENTICATED, "send Authorization: Bearer <token>", 401)
    token = credentials.credentials
    if not token.isascii() or not token.isprintable() or len(token) > 256:
        raise Refusal(ErrorCode.E_UNAUTHENTICATED, "missing, unknown or expired token", 401)
    # Whose refusal budget a refusal of this request takes from (_front.Front).
    request.state.token_key = token_key(token)
    return token


async def _authenticated(
    request: Request, credentials: HTTPAuthorizationCredentials | None, *, defer_touch: bool
) -> Principal:
    token = _token(request, credentials)
    activity = request.headers.get(_ACTIVITY_HEADER) != "background"
    return await run_in_threadpool(_look_up, request, token, activity, defer_touch)


def _look_up(request: Request, token: str, activity: bool, defer_touch: bool) -> Principal:
    """The principal behind ``token`` (refused 401 if none), in a worker thread."""
    principal = _accounts(request).authenticate(token, activity=activity, defer_touch=defer_touch)
    # Kept so that a refusal of this caller's request can be audited under their name.
    request.state.principal = principal
    return principal


Caller = Annotated[Principal, Depends(_principal)]
#: The hot routes' caller (approve, outcome and refusal reports): looked up in the
#: endpoint's own worker thread.
Deferred = Annotated[_Bearer, Depends(_deferred)]
ProposalId = Annotated[str, PathParam(pattern=_PROPOSAL_ID)]


# -- health -----------------------------------------------------------------------------


@router.get("/healthz", tags=["health"])
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", tags=["health"], responses={503: {"model": ErrorBody}})
def readyz(request: Request) -> dict[str, str]:
    service = _service(request)
    try:
        with service.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        service.keys.signer()
    except ConfigError as exc:
        raise no_signing_key(exc) from None
    except sa.exc.SQLAlchemyError:
        raise Refusal(ErrorCode.E_INVALID, "database unreachable", 503) from None
    return {"status": "ready"}


@router.get(
    "/metrics",
    tags=["health"],
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
def metrics(request: Request) -> Response:
    return Response(generate_latest(_metrics(request).registry), media_type=CONTENT_TYPE_LATEST)


# -- sessions ---------------------------------------------------------------------------


@router.post(
    "/v1/sessions",
    status_code=201,
    tags=["sessions"],
    responses={429: {"model": ErrorBody, "description": "E_THROTTLED or E_BUSY; see Retry-After"}},
)
def login(request: Request, body: LoginIn) -> LoginOut:
    """Sign in. Refused sign-ins slow the next ones from the same client address (429
    ``E_THROTTLED`` with ``Retry-After`` until a growing delay passes)."""
    token, expires, role = _accounts(request).login(
        body.username, body.password, client=client_address(request)
    )
    return LoginOut(token=token, expires_at=expires, username=body.username, role=role)


@router.delete("/v1/sessions/current", status_code=204, tags=["sessions"])
def logout(request: Request, caller: Caller) -> Response:
    _accounts(request).logout(caller)
    return Response(status_code=204)


@router.get("/v1/me", tags=["sessions"])
def me(caller: Caller) -> MeOut:
    return MeOut(name=caller.name, kind=caller.kind, role=caller.role)


# -- proposals --------------------------------------------------------------------------


@router.post(
    "/v1/proposals",
    status_code=201,
    tags=["proposals"],
    responses={200: {"model": ProposalOut, "description": "The same proposal already exists"}},
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "A ProposedAction v1 (docs/protocol.md#action), parsed strictly: "
            "duplicate keys, non-NFC text and numbers other than integer literals are "
            "refused (1.0 and 1e0 too, which JSON Schema counts as integers)",
            "content": {"application/json": {"schema": PROPOSED_ACTION_SCHEMA}},
        }
    },
)
async def submit(request: Request, response: Response, caller: Caller) -> ProposalOut:
    """Submit a proposal (agent). Same id and hash → 200 with the record; other hash → 409."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > _SUBMIT_MAX_BYTES):
        raise Refusal(ErrorCode.E_INVALID, f"body over {_SUBMIT_MAX_BYTES} bytes", 422)
    body = await request.body()
    if len(body) > _SUBMIT_MAX_BYTES:
        raise Refusal(ErrorCode.E_INVALID, f"body over {_SUBMIT_MAX_BYTES} bytes", 422)
    record, created = await run_in_threadpool(_service(request).submit, caller, body)
    if created:
        _metrics(request).proposals.inc()
        if record.state == "approved":
            _metrics(request).approvals_issued.inc()
    else:
        response.status_code = 200
    return record


@router.get("/v1/proposals", tags=["proposals"])
def list_proposals(
    request: Request,
    caller: Caller,
    *,
    # Repeatable: ``state=executed&state=failed`` lists either (the web app's history).
    state: Annotated[
        list[ProposalState] | None,
        Query(max_length=12),
    ] = None,
    operation: Annotated[str | None, Query(pattern=r"^[a-z_]{1,32}$")] = None,
    account: Annotated[str | None, Query(pattern=_SHORT_ID)] = None,
    region: Annotated[str | None, Query(pattern=r"^[a-z0-9-]{1,40}$")] = None,
    resource_id: Annotated[str | None, Query(pattern=r"^[a-z0-9-]{1,80}$")] = None,
    proposed_by: Annotated[str | None, Query(pattern=_SHORT_ID)] = None,
    before: Annotated[str | None, Query(pattern=_PROPOSAL_ID)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> ProposalList:
    """Newest first, with filters; page with ``before`` = the last id of a page. ``state``
    may be given more than once: a proposal in any of them. The answer's ``states`` is
    the state filter applied (sorted, each once; null for none)."""
    return _service(request).list(
        caller,
        state=state or None,
        operation=operation,
        account=account,
        region=region,
        resource_id=resource_id,
        proposed_by=proposed_by,
        before=before,
        limit=limit,
    )


@router.get("/v1/proposals/{proposal_id}", tags=["proposals"])
def show_proposal(request: Request, caller: Caller, proposal_id: ProposalId) -> ProposalOut:
    """The canonical action, its hash, evidence, votes, state, rule, approval and outcome."""
    return _service(request).get(caller, proposal_id)


@router.post("/v1/proposals/{proposal_id}/approve", tags=["decisions"])
def approve(
    request: Request, bearer: Deferred, proposal_id: ProposalId, body: ApproveIn
) -> ProposalOut:
    """Vote to approve (approver). Quorum reached → the signed approval is issued."""
    accounts = _accounts(request)

    def caller(conn: Connection) -> Principal:
        # In the vote's transaction, as is the session's last use: an approve is one
        # transaction and one commit.
        principal = accounts.look_up(conn, bearer.token, activity=bearer.activity)
        # Kept so that a refusal of this caller's request can be audited under their name.
        request.state.principal = principal
        return principal

    try:
        record = _service(request).approve(
            caller, proposal_id, body.action_hash, body.confirm, body.note
        )
    except Refusal:
        known: Principal | None = getattr(request.state, "principal", None)
        if known is not None:  # still a use of the session, as for any request
            accounts.touch(known)
        raise
    if record.approval is not None and record.state == "approved":
        _metrics(request).approvals_issued.inc()
    return record


@router.post("/v1/proposals/{proposal_id}/edit", tags=["decisions"])
def edit(request: Request, caller: Caller, proposal_id: ProposalId, body: EditIn) -> ProposalOut:
    """Edit a pending tool call's arguments (approver): answers the new proposal, which
    supersedes this one (withdrawn), with the editor's vote counted on it."""
    record = _service(request).edit(
        caller, proposal_id, body.action_hash, body.set, confirm=body.confirm, note=body.note
    )
    if record.approval is not None and record.state == "approved":
        _metrics(request).approvals_issued.inc()
    return record


@router.post("/v1/proposals/{proposal_id}/reject", tags=["decisions"])
def reject(
    request: Request, caller: Caller, proposal_id: ProposalId, body: RejectIn
) -> ProposalOut:
    return _service(request).reject(caller, proposal_id, body.reason_code, body.note)


@router.post("/v1/proposals/{proposal_id}/revoke", tags=["decisions"])
def revoke(
    request: Request, caller: Caller, proposal_id: ProposalId, body: RevokeIn
) -> ProposalOut:
    """Revoke an issued approval that has not been executed."""
    return _service(request).revoke(caller, proposal_id, body.note)


@router.post("/v1/proposals/{proposal_id}/withdraw", tags=["decisions"])
def withdraw(
    request: Request, caller: Caller, proposal_id: ProposalId, body: WithdrawIn
) -> ProposalOut:
    """The agent withdraws an open proposal (an issued approval is revoked with it)."""
    return _service(request).withdraw(caller, proposal_id, body.note)


@router.post("/v1/proposals/{proposal_id}/resolve", tags=["decisions"])
def resolve(
    request: Request, caller: Caller, proposal_id: ProposalId, body: ResolveIn
) -> ProposalOut:
    """An admin decides an in_doubt execution: it happened, or it did not."""
    return _service(request).resolve(caller, proposal_id, body.decision, body.note)


# -- the executor -----------------------------------------------------------------------


@router.get("/v1/feed", tags=["executor"])
async def feed(
    request: Request,
    caller: Caller,
    *,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    after: Annotated[int, Query(ge=0, le=_MAX_SAFE)] = 0,
    wait: Annotated[int, Query(ge=0, le=600)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    audience: Annotated[str | None, Query(pattern=_AUDIENCE)] = None,
) -> FeedOut:
    """Long-poll: bundles and revocations after ``after``; returns at once if any exist.
    The executor (no ``audience``) gets cloud approvals; an agent token names its gate's
    ``audience`` and gets the tool-call approvals for it that it submitted."""
    service = _service(request)
    signal: FeedSignal = request.app.state.feed_signal
    deadline = time.monotonic() + min(wait, request.app.state.feed_max_wait)
    if credentials is None:  # never: Caller refused the request already
        raise Refusal(ErrorCode.E_UNAUTHENTICATED, "send Authorization: Bearer <token>", 401)
    token = credentials.credentials
    accounts = _accounts(request)

    def again() -> FeedOut:
        # The token is checked again before every query, not only when the poll began:
        # one revoked (or a session expired) while its poll waits gets no bundle. In the
        # thread that reads the page: one hop, not two, for a woken poll.
        return service.feed(accounts.authenticate(token), after, limit, audience)

    first = True
    while True:
        seen = signal.version
        if first:
            page = await run_in_threadpool(service.feed, caller, after, limit, audience)
        else:
            page = await run_in_threadpool(again)
        first = False
        if page.items or page.cursor != after or time.monotonic() >= deadline or signal.closed:
            return page
        if await request.is_disconnected():
            return page
        # Until something lands here (woken at once) or a second passes (another process
        # may have issued an approval into the shared database): then query again.
        with _metrics(request).feed_waiting.track_inprogress():
            await signal.wait(seen, min(deadline, time.monotonic() + 1.0) - time.monotonic())


@router.post("/v1/outcomes", tags=["executor"])
def report_outcome(request: Request, bearer: Deferred, body: OutcomeIn) -> ProposalOut:
    """The executor reports an outcome with its signed receipt (executor token); a gate
    reports a tool call's with a receipt signed by its audience's gate key (the agent
    token that submitted the tool call)."""
    caller = _look_up(request, bearer.token, bearer.activity, False)
    return _service(request).report_outcome(caller, body.receipt)


@router.post("/v1/refusals", tags=["executor"])
def report_refusal(request: Request, bearer: Deferred, body: RefusalIn) -> ProposalOut:
    """The executor reports, with its signed receipt, that it refused an approval before
    using it (executor token; a gate: as for outcomes). A note on the proposal: its state
    does not change."""
    caller = _look_up(request, bearer.token, bearer.activity, False)
    return _service(request).report_refusal(caller, body.receipt)


@router.post("/v1/receipts", tags=["executor"])
def report_receipts(request: Request, bearer: Deferred, body: ReceiptsIn) -> ReceiptsOut:
    """Up to 50 receipts in one request, each ``outcome`` or ``refusal`` as its own
    endpoint takes it; each recorded or refused on its own, and answered, in order, with
    the status and error its own endpoint would have given (never the proposal)."""
    caller = _look_up(request, bearer.token, bearer.activity, False)
    answers = _service(request).report_receipts(
        caller, [(item.kind, item.receipt) for item in body.receipts]
    )
    results = []
    for answer in answers:
        refusal = answer.refusal
        if refusal is None:
            results.append(ReceiptOut(status=answer.status))
            continue
        # Audited as its own endpoint's refusal is, after the batch's transaction.
        _metrics(request).refusals.labels(refusal.code.value).inc()
        write = _refusals(request).refused(
            caller,
            RefusedRequest(
                by=caller.name, role=caller.role, code=refusal.code.value, request=_RECEIPTS
            ),
            token_key=getattr(request.state, "token_key", None),
        )
        if write is not None:
            write()
        error = ErrorDetail(code=refusal.code.value, message=refusal.message)
        results.append(ReceiptOut(status=refusal.status, error=error))
    return ReceiptsOut(results=results)


_RECEIPTS: Final = "POST /v1/receipts"


@router.get(
    "/v1/keys",
    tags=["keys"],
    responses={
        200: {
            "description": "The public key set (active, staged, retired and revoked keys)",
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "required": ["keys"],
                        "properties": {
                            "keys": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["kid", "public_key", "status"],
                                    "properties": {
                                        "kid": {"type": "string"},
                                        "public_key": {"type": "string"},
                                        "status": {
                                            "type": "string",
                                            "enum": ["active", "next", "retired", "revoked"],
                                        },
                                        "not_after": {"type": "integer"},
                                    },
                                },
                            }
                        },
                    }
                }
            },
        }
    },
)
def keys(request: Request) -> JSONResponse:
    """The public key set to trust; what ``airlock keys export-public`` writes."""
    try:
        value = _service(request).keys.public_keyset().to_value()
    except ConfigError as exc:
        raise no_signing_key(exc) from None
    return JSONResponse(value)


@router.get("/v1/audit", tags=["audit"])
def audit(request: Request, caller: Caller) -> AuditOut:
    """Whether the checkpoint's audit chain verifies, and its head."""
    return _service(request).audit_status(caller)


# -- errors -----------------------------------------------------------------------------


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


async def _audit_refused(request: Request, code: ErrorCode) -> None:
    """Count a refusal, and audit it when the caller was authenticated before it."""
    request.app.state.metrics.refusals.labels(code.value).inc()
    principal: Principal | None = getattr(request.state, "principal", None)
    if principal is None:
        # Unauthenticated requests are only counted: auditing them would let anyone
        # write to the chain.
        return
    # Every refusal of an authenticated caller has an audit record (refusals.py: a row
    # of its own, or a count in an aggregated row), never in the refused request's
    # transaction, which rolled back (no other effect). That includes a request refused
    # as malformed after the caller was known (FastAPI authenticates before it validates
    # parameters and the parsed body).
    route = request.scope.get("route")
    write = _refusals(request).refused(
        principal,
        RefusedRequest(
            by=principal.name,
            role=principal.role,
            code=code.value,
            request=f"{request.method} {getattr(route, 'path', '?')}",
            proposal_id=request.path_params.get("proposal_id"),
        ),
        token_key=getattr(request.state, "token_key", None),
    )
    if write is not None:
        await run_in_threadpool(write)


def _allowed_methods(request: Request, named: str | None) -> str:
    methods = {m.strip() for m in (named or "").split(",") if m.strip()}
    for route in router.routes:  # this API's routes (not the app's /openapi.json)
        if isinstance(route, APIRoute) and route.matches(request.scope)[0] is not Match.NONE:
            methods |= route.methods or set()
    return ", ".join(sorted(methods))


def mount(app: FastAPI, routes: APIRouter) -> None:
    """Put ``routes``' routes on ``app``'s own router, as they are: FastAPI's
    ``include_router`` keeps them behind a router that matches each request's path
    twice, against every route before its own, for the same answer."""
    app.router.routes.extend(routes.routes)


def guard(app: FastAPI, *, hosts: Iterable[str], host_refusal: bytes) -> None:
    """Put :class:`~._front.Front` in front of ``app``'s routes: the ``Host`` allowlist
    (``hosts``; anything else is answered ``host_refusal``), the refusal budgets, the
    body cap and the count of answers. A body over the cap is refused 413 ``E_INVALID``
    through ``_http`` (:func:`install`), mostly before a caller is known, as FastAPI reads
    a body before it authenticates (submit reads its own after)."""
    app.add_middleware(
        Front,
        hosts=hosts,
        host_refusal=host_refusal,
        max_bytes=_BODY_MAX_BYTES,
        routes=router.routes,
        proposal_id=_PROPOSAL_ID,
    )


def install(app: FastAPI) -> None:
    """Mount the routes and the error mapping on ``app``."""
    mount(app, router)

    @app.exception_handler(Refusal)
    async def _refusal(request: Request, exc: Refusal) -> JSONResponse:
        await _audit_refused(request, exc.code)
        response = _error(exc.status, exc.code.value, exc.message)
        if exc.status == 401:
            response.headers["WWW-Authenticate"] = "Bearer"
        if exc.retry_after is not None:
            response.headers["Retry-After"] = str(exc.retry_after)
        return response

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        bearer: _Bearer | None = getattr(request.state, "bearer", None)
        if bearer is not None and getattr(request.state, "principal", None) is None:
            try:  # a token not looked up yet (_deferred)
                await run_in_threadpool(_look_up, request, bearer.token, bearer.activity, True)
            except Refusal as unknown:
                return await _refusal(request, unknown)
        # The field and the limit in words: never echo the submitted value.
        message = plain_invalid(list(exc.errors()))
        await _audit_refused(request, ErrorCode.E_INVALID)
        return _error(422, ErrorCode.E_INVALID.value, message[:300])

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {
            404: ErrorCode.E_NOT_FOUND,
            401: ErrorCode.E_UNAUTHENTICATED,
            403: ErrorCode.E_FORBIDDEN,
        }.get(exc.status_code, ErrorCode.E_INVALID)
        await _audit_refused(request, code)
        response = _error(exc.status_code, code.value, str(exc.detail)[:300])
        # WWW-Authenticate on a 401: what Starlette set.
        for name, value in (exc.headers or {}).items():
            response.headers[name] = value
        if exc.status_code == 405:
            # Every method the path takes (RFC 9110 §15.5.6), not only those of the first
            # route that matched it, which is all Starlette names.
            response.headers["Allow"] = _allowed_methods(request, (exc.headers or {}).get("Allow"))
        return response
