"""People and services: argon2 passwords, hashed session and service tokens, sign-in limits.

A token is 32 random bytes (URL-safe base64) handed out once; the database keeps only
its SHA-256, so a copy of the database authenticates nobody. A person's session ends
``session_ttl`` after sign-in, or ``session_idle`` after its last use, or at logout.

Sign-in is slowed where a guesser guesses from: every attempt is admitted by the
per-address and per-(address, name) throttle of ``throttle.py``, which refuses early
(``E_THROTTLED``, ``Retry-After``) while a growing delay runs, so the person whose name
is guessed signs in at once from another address. An account locks for
``lockout_seconds`` only as a last resort, after ``lockout_threshold`` failed logins in
a row of which each (address, name) pair counts at most ``throttle.PAIR_FREE``: many
addresses must fail at it, and ``airlock users unlock`` (an admin) lifts it. Each
counted attempt is claimed by one conditional UPDATE before its password is verified,
never read-then-write (see :meth:`Accounts._login`). A sign-in never tells which user
names exist: an unknown name, a wrong password and a locked account get the same answer
after the same argon2 work; only the log and the audit chain say which it was.

Nothing here logs or stores a password or a token, nor a user name as typed at a
refused sign-in: the log and the record name it by its keyed hash (:meth:`Accounts.name_key`,
HMAC-SHA-256 under the database's ``sign_in_key``), and the log gives only its length
when no such user exists. New passwords are checked by ``passwords.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

import sqlalchemy as sa
from argon2 import PasswordHasher, Type
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
from sqlalchemy.engine import Connection, Engine

from airlock.events import AddressCount, CheckpointEvent, SignInRefused
from airlock.store import AuditLog, Prepared

from ._db import Database
from .errors import ConfigError, ErrorCode, Refusal
from .limits import SharedSignInThrottle
from .models import ROLES, SERVICE_ROLES, service_tokens, sessions, sign_in_key, users
from .passwords import check_new_password
from .signins import RefusedSignIns, SignInReport, SignInTally
from .throttle import PAIR_FREE, Admission, SignInThrottle, Throttled

_log = logging.getLogger("airlock.checkpoint.auth")

__all__ = [
    "Accounts",
    "ListedToken",
    "ListedUser",
    "Principal",
    "hash_token",
    "password_hasher",
    "touch_session",
]

_USERNAME: Final = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
#: A session's last use is written at most this often, seconds: its idle end may come
#: up to this much early, and a busy session costs one UPDATE a minute, not one a request.
_TOUCH_EVERY: Final = 60
#: The address of a sign-in made in this process, not over HTTP (tests, tools).
LOCAL: Final = "local"
#: Password checks running at once. Each argon2 verify holds 64 MiB and anyone can ask
#: for one (a login for a user who does not exist verifies too): unbounded, 40 parallel
#: logins held ~2.4 GB. The rest wait their turn; people sign in a few times a day.
_CONCURRENT_VERIFIES: Final = 2
#: Sign-ins that may wait for one of those checks. Each waits in a thread of the worker
#: pool that also runs every other request (approvals, the executor's feed): unbounded,
#: anyone sending a few dozen sign-ins at once would take them all. Past this, a sign-in
#: is refused at once with E_BUSY (429) and Retry-After, before it is checked.
_WAITING_SIGN_INS: Final = 8
_BUSY_RETRY_AFTER: Final = 2
#: A flood of refused sign-ins is logged as one line per this many seconds.
_BUSY_LOG_EVERY: Final = 10.0
#: The one answer to a refused sign-in, whatever the cause: an unknown name, a wrong
#: password, a disabled or a locked account. A distinct answer for a locked account
#: would tell anyone who can lock one that the name exists (OWASP Authentication Cheat
#: Sheet, "Authentication and Error Messages"); the lock is named here so that a person
#: locked out still learns why the right password fails.
_SIGN_IN_REFUSED: Final = (
    "wrong username or password, or the account is locked after failed sign-ins from "
    "many places (an admin can unlock it)"
)

Role = Literal["viewer", "approver", "admin", "agent", "executor"]


def password_hasher() -> PasswordHasher:
    # RFC 9106 §4 second recommended option (argon2id, 64 MiB, t=3, p=4), set explicitly.
    return PasswordHasher(
        time_cost=3, memory_cost=64 * 1024, parallelism=4, hash_len=32, salt_len=16, type=Type.ID
    )


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


#: What a service token (:meth:`Accounts.create_service_token`) and a session's token
#: (:meth:`Accounts.login`) start with: never the same, so a token names its table.
_SERVICE_PREFIX: Final = "alt_"
_SESSION_PREFIX: Final = "als_"


def _new_token(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a signed-in person or a service token."""

    name: str
    kind: Literal["user", "service"]
    role: Role
    #: SHA-256 of the session token (for logout); None for service tokens.
    session: str | None = None
    #: This use's time, when it is due to be written as the session's last use by the
    #: caller's own write transaction (``authenticate(defer_touch=True)``,
    #: :func:`touch_session`); None when nothing is due.
    touch_at: int | None = None


@dataclass(frozen=True, slots=True)
class ListedUser:
    """A person's account as ``airlock users list`` shows it (never its password hash)."""

    username: str
    role: str
    disabled: bool
    #: Unix seconds; None, or a time past, when the account is not locked.
    locked_until: int | None
    created_at: int


@dataclass(frozen=True, slots=True)
class ListedToken:
    """A service token as ``airlock tokens list`` shows it (never the token, nor its hash)."""

    name: str
    role: str
    created_at: int
    revoked_at: int | None


def _name_taken(name: str, by: str) -> Refusal:
    # People and service tokens share one namespace. Every record names its actor by name
    # alone (``by`` in the audit chain, a vote, ``revoked_by``, ``submitted_by``): a token
    # named like a person would act in the record as that person (an agent token "alice"
    # withdrawing an approved proposal reads as alice revoking it). Checked, not
    # constrained: both names are given by an administrator's command, and both commands
    # take the chain lock before they check, so two of them racing cannot both pass.
    return Refusal(
        ErrorCode.E_CONFLICT,
        f"{name} is the name of {by}; people and service tokens need distinct names, as "
        "the audit record names each by name alone",
        409,
    )


def _refused() -> Refusal:
    return Refusal(ErrorCode.E_UNAUTHENTICATED, _SIGN_IN_REFUSED, 401)


def _name_hmac(key: bytes, name: str) -> str:
    digest = hmac.new(key, name.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
    return "hmac:" + digest[:32]


# Every request's statements, compiled once and run on the driver's cursor.
_SESSION = Prepared(
    sa.select(users.c.username, users.c.role, sessions.c.last_seen_at)
    .select_from(sessions.join(users, sessions.c.username == users.c.username))
    .where(
        sessions.c.token_hash == sa.bindparam("digest"),
        sessions.c.revoked_at.is_(None),
        sessions.c.expires_at > sa.bindparam("now"),
        sessions.c.last_seen_at > sa.bindparam("idle"),
        users.c.disabled.is_(False),
    )
)
_SERVICE = Prepared(
    sa.select(service_tokens.c.name, service_tokens.c.role).where(
        service_tokens.c.token_hash == sa.bindparam("digest"),
        service_tokens.c.revoked_at.is_(None),
    )
)
# Parameters not named after a column: SQLAlchemy keeps those for the SET clause.
_TOUCH = Prepared(
    sessions.update()
    .where(
        sessions.c.token_hash == sa.bindparam("digest", type_=sessions.c.token_hash.type),
        sessions.c.last_seen_at < sa.bindparam("at", type_=sessions.c.last_seen_at.type),
    )
    .values(last_seen_at=sa.bindparam("at", type_=sessions.c.last_seen_at.type))
)


def touch_session(conn: Connection, principal: Principal) -> None:
    """Write a deferred last use of ``principal``'s session in the caller's transaction
    (nothing when none is due). Take it before the audit chain's lock, as logout does."""
    if principal.session is None or principal.touch_at is None:
        return
    _TOUCH.rowcount(conn, {"digest": principal.session, "at": principal.touch_at})


def _end_sessions(conn: Connection, username: str, now: int) -> None:
    """Revoke every live session of ``username`` in the caller's transaction."""
    conn.execute(
        sessions.update()
        .where(sessions.c.username == username, sessions.c.revoked_at.is_(None))
        .values(revoked_at=now)
    )


class Accounts:
    """Users, sessions and service tokens in the checkpoint database."""

    def __init__(
        self,
        db: Database,
        now: Callable[[], int],
        *,
        session_ttl: int,
        lockout_threshold: int,
        lockout_seconds: int,
        session_idle: int = 30 * 60,
        hasher: PasswordHasher | None = None,
        throttle: SignInThrottle | None = None,
        sign_ins: bool = True,
    ) -> None:
        """``session_idle``: seconds of no use after which a person's session ends;
        ``throttle``: the sign-in throttle (if not given: one in memory on SQLite, the
        replicas' shared one in the database on PostgreSQL, ``limits.py``);
        ``sign_ins=False``: for administration only, :meth:`login` raises RuntimeError
        (no dummy hash is made, an argon2 hash's time saved)."""
        self._db = db
        self._now = now
        self._session_ttl = session_ttl
        self._session_idle = session_idle
        self._threshold = lockout_threshold
        self._lockout = lockout_seconds
        self._hasher = hasher or password_hasher()
        if throttle is None:
            replicated = db.engine.dialect.name == "postgresql"
            throttle = SharedSignInThrottle(db.engine) if replicated else SignInThrottle()
        self.throttle = throttle
        self._refused_sign_ins = RefusedSignIns()
        self._key: bytes | None = None
        self._verifying = threading.BoundedSemaphore(_CONCURRENT_VERIFIES)
        self._admission = threading.Lock()
        self._signing_in = 0  # verifying, or waiting for a verify slot
        self._busy_refused = 0
        self._busy_logged_at = -_BUSY_LOG_EVERY
        # Verified against when the user does not exist, so timing does not tell.
        self._dummy = self._hasher.hash(secrets.token_hex(16)) if sign_ins else ""

    @property
    def _engine(self) -> Engine:
        return self._db.engine

    # -- administration (the CLI) --------------------------------------------------

    def add_user(self, username: str, password: str, role: str) -> None:
        if not _USERNAME.fullmatch(username):
            raise Refusal(ErrorCode.E_INVALID, "username: lowercase letters, digits, . _ -", 422)
        if role not in ROLES:
            raise Refusal(ErrorCode.E_INVALID, f"role must be one of {', '.join(ROLES)}", 422)
        check_new_password(password, username)
        now = self._now()
        password_hash = self._hasher.hash(password)  # ~100 ms: not under the lock
        with self._engine.begin() as conn:
            # The chain lock first: the name checks below read two tables, and only
            # serialized with tokens create (which takes it too) do they hold on
            # PostgreSQL, where READ COMMITTED let both commands pass and commit.
            AuditLog.lock(conn)
            exists = conn.execute(
                sa.select(users.c.username).where(users.c.username == username)
            ).first()
            if exists:
                raise Refusal(ErrorCode.E_CONFLICT, f"user {username} exists", 409)
            if conn.execute(
                sa.select(service_tokens.c.name).where(service_tokens.c.name == username)
            ).first():
                raise _name_taken(username, "a service token")
            conn.execute(
                users.insert().values(
                    username=username,
                    password_hash=password_hash,
                    role=role,
                    disabled=False,
                    failed_logins=0,
                    locked_until=None,
                    created_at=now,
                )
            )
            _audit(conn, now, {"type": CheckpointEvent.USER_ADDED, "user": username, "role": role})

    def disable_user(self, username: str) -> None:
        now = self._now()
        with self._engine.begin() as conn:
            done = conn.execute(
                users.update().where(users.c.username == username).values(disabled=True)
            ).rowcount
            if not done:
                raise Refusal(ErrorCode.E_NOT_FOUND, f"no user {username}", 404)
            _end_sessions(conn, username, now)
            _audit(conn, now, {"type": CheckpointEvent.USER_DISABLED, "user": username})

    def unlock_user(self, username: str) -> None:
        """End a lockout now and clear the failed-login count (an admin's call, audited)."""
        now = self._now()
        with self._engine.begin() as conn:
            done = conn.execute(
                users.update()
                .where(users.c.username == username)
                .values(failed_logins=0, locked_until=None)
            ).rowcount
            if not done:
                raise Refusal(ErrorCode.E_NOT_FOUND, f"no user {username}", 404)
            _audit(conn, now, {"type": CheckpointEvent.USER_UNLOCKED, "user": username})

    def set_password(self, username: str, password: str) -> None:
        """Replace a person's password (an admin's call, audited): their sessions end and
        any lockout is cleared. A disabled account stays disabled.

        Raises:
            Refusal: ``E_WEAK_PASSWORD`` (``passwords.check_new_password``), or
                ``E_NOT_FOUND``.
        """
        check_new_password(password, username)
        encoded = self._hasher.hash(password)  # slow by design: outside the transaction
        now = self._now()
        with self._engine.begin() as conn:
            done = conn.execute(
                users.update()
                .where(users.c.username == username)
                .values(password_hash=encoded, failed_logins=0, locked_until=None)
            ).rowcount
            if not done:
                raise Refusal(ErrorCode.E_NOT_FOUND, f"no user {username}", 404)
            _end_sessions(conn, username, now)
            _audit(conn, now, {"type": CheckpointEvent.USER_PASSWORD_SET, "user": username})

    def list_users(self) -> list[ListedUser]:
        """Every person's account, by user name."""
        with self._engine.connect() as conn:
            rows = conn.execute(
                sa.select(
                    users.c.username,
                    users.c.role,
                    users.c.disabled,
                    users.c.locked_until,
                    users.c.created_at,
                ).order_by(users.c.username)
            ).all()
        return [
            ListedUser(r.username, r.role, r.disabled, r.locked_until, r.created_at) for r in rows
        ]

    def create_service_token(self, name: str, role: str) -> str:
        """A new service token; the caller shows it once. Only its hash is kept."""
        if not _USERNAME.fullmatch(name):
            raise Refusal(ErrorCode.E_INVALID, "token name: lowercase letters, digits, . _ -", 422)
        if role not in SERVICE_ROLES:
            raise Refusal(ErrorCode.E_INVALID, "role must be agent or executor", 422)
        token = _new_token(_SERVICE_PREFIX)
        now = self._now()
        with self._engine.begin() as conn:
            AuditLog.lock(conn)  # serialized with add_user: see there
            if conn.execute(
                sa.select(service_tokens.c.name).where(service_tokens.c.name == name)
            ).first():
                raise Refusal(ErrorCode.E_CONFLICT, f"a token named {name} exists", 409)
            if conn.execute(sa.select(users.c.username).where(users.c.username == name)).first():
                raise _name_taken(name, "a person")
            conn.execute(
                service_tokens.insert().values(
                    token_hash=hash_token(token), name=name, role=role, created_at=now
                )
            )
            _audit(conn, now, {"type": CheckpointEvent.TOKEN_CREATED, "name": name, "role": role})
        return token

    def revoke_service_token(self, name: str) -> None:
        """Revoke a service token by name; it authenticates nobody from the next request."""
        now = self._now()
        with self._engine.begin() as conn:
            done = conn.execute(
                service_tokens.update()
                .where(service_tokens.c.name == name, service_tokens.c.revoked_at.is_(None))
                .values(revoked_at=now)
            ).rowcount
            if not done:
                exists = conn.execute(
                    sa.select(service_tokens.c.name).where(service_tokens.c.name == name)
                ).first()
                if exists is None:
                    raise Refusal(ErrorCode.E_NOT_FOUND, f"no service token named {name}", 404)
                raise Refusal(ErrorCode.E_STATE, f"the token {name} is already revoked", 409)
            _audit(conn, now, {"type": CheckpointEvent.TOKEN_REVOKED, "name": name})

    def list_service_tokens(self) -> list[ListedToken]:
        """Name, role, created_at and revoked_at of every service token (never the token)."""
        with self._engine.connect() as conn:
            rows = conn.execute(
                sa.select(
                    service_tokens.c.name,
                    service_tokens.c.role,
                    service_tokens.c.created_at,
                    service_tokens.c.revoked_at,
                ).order_by(service_tokens.c.name)
            ).all()
        return [ListedToken(r.name, r.role, r.created_at, r.revoked_at) for r in rows]

    # -- sign-in ------------------------------------------------------------------

    def name_key(self, name: str) -> str:
        """``hmac:`` and 32 hex digits of HMAC-SHA-256 of ``name`` under the database's
        ``sign_in_key``: how a user name from a sign-in is logged and recorded.

        Raises:
            ConfigError: the database has no ``sign_in_key`` (not migrated).
        """
        if self._key is None:
            with self._engine.connect() as conn:
                hexkey = conn.execute(
                    sa.select(sign_in_key.c.key).where(sign_in_key.c.id == 1)
                ).scalar()
            if not hexkey:
                raise ConfigError("the checkpoint database has no sign_in_key (migration 0007)")
            self._key = bytes.fromhex(hexkey)
        return _name_hmac(self._key, name)

    def login(self, username: str, password: str, *, client: str = LOCAL) -> tuple[str, int, str]:
        """Sign in from the address ``client``: return ``(token, expires_at, role)``.

        Raises:
            Refusal: ``E_THROTTLED`` (429, ``retry_after``) while the address or the
                (address, name) pair is being slowed after failures, or when the address
                has sign-ins in progress already, before anything is checked;
                ``E_BUSY`` (429, ``retry_after``) past ``_WAITING_SIGN_INS`` waiting;
                ``E_UNAUTHENTICATED`` (401), alike for an unknown name, a wrong password,
                a disabled and a locked account.
            RuntimeError: these Accounts were made with ``sign_ins=False``.
        """
        if not self._dummy:
            raise RuntimeError("sign-in on Accounts made for administration (sign_ins=False)")
        now = self._now()
        key = self.name_key(username)
        try:
            admission = self.throttle.admit(client, key, now)
        except Throttled as exc:
            self._tally("throttled", client, key, now)
            raise Refusal(
                ErrorCode.E_THROTTLED,
                f"too many failed sign-ins from this address; try again in {exc.retry_after} s",
                429,
                retry_after=exc.retry_after,
            ) from None
        try:
            self._admit()
            try:
                answer = self._login(username, password, admission)
            finally:
                with self._admission:
                    self._signing_in -= 1
            self.throttle.succeeded(admission)
            return answer
        finally:
            self.throttle.done(admission)

    @property
    def signing_in(self) -> int:
        """Sign-ins in progress: verifying a password, or waiting for a slot to."""
        return self._signing_in

    def _admit(self) -> None:
        with self._admission:
            if self._signing_in < _CONCURRENT_VERIFIES + _WAITING_SIGN_INS:
                self._signing_in += 1
                return
            self._busy_refused += 1
            now = time.monotonic()
            if now - self._busy_logged_at >= _BUSY_LOG_EVERY:
                refused, self._busy_refused = self._busy_refused, 0
                self._busy_logged_at = now
            else:
                refused = 0
        if refused:
            _log.warning(
                "refused %d sign-in(s) with E_BUSY: %d already in progress (logged at most "
                "every %.0f s)",
                refused,
                _CONCURRENT_VERIFIES + _WAITING_SIGN_INS,
                _BUSY_LOG_EVERY,
            )
        # 429, not 503: the server is well, it limits how many sign-ins it checks at once.
        raise Refusal(
            ErrorCode.E_BUSY,
            "too many sign-ins at once; try again in a few seconds",
            429,
            retry_after=_BUSY_RETRY_AFTER,
        )

    def _tally(
        self, kind: Literal["unknown_name", "throttled"], client: str, key: str, now: int
    ) -> None:
        """Count a refused sign-in that involved no account; write the interval's event
        (``signins.py``) when this one closed it."""
        event = self._refused_sign_ins.add(kind, client, key, now)
        if event is not None:
            self._write_refused_sign_ins(event, now)

    def flush_refused_sign_ins(self, *, force: bool = False) -> None:
        """Write the tally of refused sign-ins if its interval is over (or now, with
        ``force``: the server is stopping). The sweeper calls this."""
        now = self._now()
        event = self._refused_sign_ins.drain(now, force=force)
        if event is not None:
            self._write_refused_sign_ins(event, now)

    def _write_refused_sign_ins(self, event: SignInRefused, now: int) -> None:
        with self._engine.begin() as conn:
            _audit(conn, now, {"type": CheckpointEvent.SIGN_IN_REFUSED, **event})
        top = event["clients"][0] if event["clients"] else AddressCount(address="-", count=0)
        _log.warning(
            "refused sign-ins from %d to %d: %d unknown names, %d throttled; most from %s (%d)",
            event["from"],
            event["to"],
            event["unknown_name"],
            event["throttled"],
            top["address"],
            top["count"],
        )

    def _login(self, username: str, password: str, admission: Admission) -> tuple[str, int, str]:
        """Sign in an admitted attempt: return ``(token, expires_at, role)`` or refuse.

        Claim, then act (STYLE §6): (1) when the attempt is among its (address, name)
        pair's first ``PAIR_FREE``, one conditional UPDATE counts it as a failure of the
        account *before* the slow argon2 verify, and only while the account is neither
        locked nor has ``lockout_threshold`` unproven attempts already, so concurrent
        guesses can never verify more than the threshold per lockout window; a later
        attempt of the pair (the throttle slowed it already) is not counted, so one
        address cannot lock an account; it is verified only while the account is
        unlocked; (2) verify; (3) a right password clears the count only while the
        account is still unlocked. A guess that was verified after another one locked
        the account is answered as a wrong password, right or not: the answer never
        tells which.

        An unknown name and an attempt that could not claim (a locked account) verify the
        password against a dummy hash through the same slot-limited :meth:`_verify`, and
        every refusal is the same 401: neither the answer nor the argon2 time tells them
        from a wrong password (the database work still differs by the audit record a
        wrong password commits; SECURITY.md, Honest limits). The dummy verify is not a
        guess at the account's password, so the threshold still bounds those.
        """
        now = self._now()
        client, key = admission.address, admission.name_key
        counts = admission.pair_failures <= PAIR_FREE
        unlocked = sa.or_(users.c.locked_until.is_(None), users.c.locked_until <= now)
        with self._engine.begin() as conn:
            claimed = self._claim(conn, username, counts, unlocked)  # (1)
            row = conn.execute(sa.select(users).where(users.c.username == username)).first()
            if row is not None and not claimed:
                # Locked, or the threshold's worth of attempts is in flight or was never
                # settled (a crash mid-verify): lock now, so the count cannot stay stuck.
                self._lock_if_saturated(conn, username, now, unlocked)
        if row is None or not claimed:
            # The same argon2 work as a wrong password, so its time does not tell either.
            self._verify(self._dummy, password)
        if row is None:
            # Not one audit row each (anyone can send these): tallied into one row per
            # interval. The name may be a password typed in the wrong field: the log
            # gives only its length, the record only its keyed hash.
            _log.warning(
                "failed sign-in from %s: no such user (a name of %d characters)",
                client,
                len(username),
            )
            self._tally("unknown_name", client, key, now)
            raise _refused()
        if not claimed:
            # Answered like a wrong password; the operator sees the lock here, in the
            # audit chain (checkpoint.user.locked) and in ``airlock users list``.
            _log.warning("failed sign-in from %s: user %s is locked", client, key)
            raise _refused()
        # (2) verify, outside any transaction (it takes ~100 ms by design)
        ok = self._verify(row.password_hash, password) and not row.disabled
        with self._engine.begin() as conn:
            if ok:
                # (3) the attempt proved right: clear the count, unless the account was
                # locked meanwhile by other attempts; then answer as for a wrong password.
                ok = bool(
                    conn.execute(
                        users.update()
                        .where(users.c.username == username, unlocked)
                        .values(failed_logins=0)
                    ).rowcount
                )
            if not ok:
                # A counted failure stays counted (from the claim); it may complete the lock.
                _log.warning("failed sign-in from %s: wrong password for user %s", client, key)
                if not (counts and self._lock_if_saturated(conn, username, now, unlocked)):
                    _audit(
                        conn,
                        now,
                        {"type": CheckpointEvent.LOGIN_FAILED, "user": username, "client": client},
                    )
            else:
                token = _new_token(_SESSION_PREFIX)
                expires = now + self._session_ttl
                conn.execute(
                    sessions.insert().values(
                        token_hash=hash_token(token),
                        username=username,
                        created_at=now,
                        expires_at=expires,
                        last_seen_at=now,
                    )
                )
                _audit(
                    conn,
                    now,
                    {"type": CheckpointEvent.SESSION_CREATED, "user": username, "client": client},
                )
        # Refused only after the commit: a rolled-back count would never lock anyone.
        if not ok:
            raise _refused()
        return token, expires, str(row.role)

    def _claim(
        self, conn: Connection, username: str, counts: bool, unlocked: sa.ColumnElement[bool]
    ) -> int:
        """Step (1) of :meth:`_login`: count one attempt against an unlocked account below
        the threshold when ``counts``, else only check that it is unlocked; 1 if so."""
        if counts:
            return int(
                conn.execute(
                    users.update()
                    .where(
                        users.c.username == username,
                        unlocked,
                        users.c.failed_logins < self._threshold,
                    )
                    .values(failed_logins=users.c.failed_logins + 1)
                ).rowcount
            )
        return int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(users)
                .where(users.c.username == username, unlocked)
            ).scalar_one()
        )

    def _lock_if_saturated(
        self, conn: Connection, username: str, now: int, unlocked: sa.ColumnElement[bool]
    ) -> bool:
        locked = conn.execute(
            users.update()
            .where(
                users.c.username == username,
                unlocked,
                users.c.failed_logins >= self._threshold,
            )
            .values(failed_logins=0, locked_until=now + self._lockout)
        ).rowcount
        if locked:
            _audit(conn, now, {"type": CheckpointEvent.USER_LOCKED, "user": username})
        return bool(locked)

    def _verify(self, encoded: str, password: str) -> bool:
        with self._verifying:
            try:
                return self._hasher.verify(encoded, password)
            except (VerifyMismatchError, VerificationError, InvalidHashError):
                return False

    def logout(self, principal: Principal) -> None:
        if principal.session is None:
            raise Refusal(ErrorCode.E_FORBIDDEN, "service tokens do not log out", 403)
        now = self._now()
        with self._engine.begin() as conn:
            conn.execute(
                sessions.update()
                .where(sessions.c.token_hash == principal.session, sessions.c.revoked_at.is_(None))
                .values(revoked_at=now)
            )
            _audit(conn, now, {"type": CheckpointEvent.SESSION_REVOKED, "user": principal.name})

    def authenticate(
        self, token: str, *, activity: bool = True, defer_touch: bool = False
    ) -> Principal:
        """The principal behind a bearer token, or refuse with E_UNAUTHENTICATED.

        A person's session is refused once ``session_ttl`` has passed since sign-in or
        ``session_idle`` since its last use. With ``activity`` (a person's request, not
        a page's own background refresh) this use keeps it alive: its last use is
        written, at most once per ``_TOUCH_EVERY`` seconds, in a commit of its own, or
        with ``defer_touch`` not at all: the principal's ``touch_at`` says it is due, and
        the caller's write transaction writes it (:func:`touch_session`), so a vote is
        one commit.
        """
        with self._engine.connect() as conn:
            conn.begin()  # a read: rolled back when the connection closes
            principal = self.look_up(conn, token, activity=activity)
        if not defer_touch:
            self.touch(principal)
        return principal

    def look_up(self, conn: Connection, token: str, *, activity: bool = True) -> Principal:
        """:meth:`authenticate` with ``defer_touch``, in ``conn``'s open transaction (the
        caller's write transaction: the lookup and the write are one transaction)."""
        digest = hash_token(token)
        now = self._now()
        row = svc = None
        if token.startswith(_SERVICE_PREFIX):
            # Never a session's (see _SERVICE_PREFIX): one read for every request of
            # the executor and the agents.
            svc = _SERVICE.row(conn, {"digest": digest})
        else:
            session = {"digest": digest, "now": now, "idle": now - self._session_idle}
            row = _SESSION.row(conn, session)
            if row is None:
                svc = _SERVICE.row(conn, {"digest": digest})
        if row is not None:
            principal = Principal(row.username, "user", row.role, session=digest)
            if activity and now - row.last_seen_at >= _TOUCH_EVERY:
                principal = dataclasses.replace(principal, touch_at=now)
            return principal
        if svc is not None:
            return Principal(svc.name, "service", svc.role)
        raise Refusal(ErrorCode.E_UNAUTHENTICATED, "missing, unknown or expired token", 401)

    def touch(self, principal: Principal) -> None:
        """Write a deferred last use in a transaction of its own (:func:`touch_session`)."""
        if principal.touch_at is not None:
            with self._engine.begin() as conn:
                touch_session(conn, principal)

    def sign_in_report(self, since: int) -> SignInReport:
        """Refused sign-ins recorded in the audit chain since ``since`` (Unix seconds), by
        client address: wrong passwords (by user), unknown names and throttled attempts
        (from the ``checkpoint.sign_in.refused`` tallies, their top addresses), and the
        accounts locked. What ``airlock users sign-ins`` prints."""
        kinds = (
            CheckpointEvent.LOGIN_FAILED,
            CheckpointEvent.SIGN_IN_REFUSED,
            CheckpointEvent.USER_LOCKED,
        )
        tally = SignInTally(since)
        with self._engine.connect() as conn:
            texts = conn.execute(
                sa.text("SELECT event FROM audit_log WHERE seq > 0 ORDER BY seq")
            ).scalars()
            for text in texts:
                if not any(f'"type":"{k}"' in text for k in kinds):
                    continue
                # Our own chain, written by this module to airlock.events' shapes.
                event = json.loads(text)
                at = int(datetime.fromisoformat(event["at"]).timestamp())
                if at < since:
                    continue
                if event["type"] == CheckpointEvent.USER_LOCKED:
                    tally.locked(event["user"])
                elif event["type"] == CheckpointEvent.LOGIN_FAILED:
                    tally.wrong_password(event["user"], str(event.get("client", "?")))
                else:
                    tally.refused(event)
        return tally.report()


def _audit(conn: Connection, now: int, event: Mapping[str, object]) -> None:
    AuditLog.append(conn, event, at=datetime.fromtimestamp(now, UTC))
