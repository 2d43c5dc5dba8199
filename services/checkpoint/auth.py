"""People and services: argon2 passwords, hashed session and service tokens, lockout.

A token is 32 random bytes (URL-safe base64) handed out once; the database keeps only
its SHA-256, so a copy of the database authenticates nobody. Sessions expire and can be
revoked (logout). After ``lockout_threshold`` failed logins in a row an account is
locked for ``lockout_seconds``; each attempt is counted by one conditional UPDATE before
its password is verified, never read-then-write (see :meth:`Accounts.login`). A sign-in
never tells which user names exist: an unknown name, a wrong password and a locked
account get the same answer after the same argon2 work; only the log and the audit
chain say which it was.

Nothing here logs or stores a password or a token; audit events name the user only.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

import sqlalchemy as sa
from argon2 import PasswordHasher, Type
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
from sqlalchemy.engine import Connection, Engine

from airlock.events import CheckpointEvent
from airlock.store import AuditLog

from ._db import Database
from .errors import ErrorCode, Refusal
from .models import ROLES, SERVICE_ROLES, service_tokens, sessions, users

_log = logging.getLogger("airlock.checkpoint.auth")

__all__ = ["Accounts", "Principal", "hash_token", "password_hasher"]

_USERNAME: Final = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_MIN_PASSWORD: Final = 12
#: Password checks running at once. Each argon2 verify holds 64 MiB and anyone can ask
#: for one (a login for a user who does not exist verifies too): unbounded, 40 parallel
#: logins held ~2.4 GB. The rest wait their turn; people sign in a few times a day.
_CONCURRENT_VERIFIES: Final = 2
#: Sign-ins that may wait for one of those checks. Each waits in a thread of the worker
#: pool that also runs every other request (approvals, the executor's feed): unbounded,
#: anyone sending a few dozen sign-ins at once would take them all. Past this, a sign-in
#: is refused at once with E_BUSY and Retry-After, before it counts as an attempt.
_WAITING_SIGN_INS: Final = 8
_BUSY_RETRY_AFTER: Final = 2
#: A flood of refused sign-ins is logged as one line per this many seconds.
_BUSY_LOG_EVERY: Final = 10.0
#: The one answer to a refused sign-in, whatever the cause: an unknown name, a wrong
#: password, a disabled or a locked account. A distinct answer for a locked account (it
#: was 423 E_LOCKED) told anyone who sent threshold+1 guesses that the name exists
#: (OWASP Authentication Cheat Sheet, "Authentication and Error Messages"); the lockout
#: is named here so that a person locked out still learns why the right password fails.
_SIGN_IN_REFUSED: Final = (
    "wrong username or password, or too many failed sign-ins (the account is then locked "
    "for a while)"
)

Role = Literal["viewer", "approver", "admin", "agent", "executor"]


def password_hasher() -> PasswordHasher:
    # RFC 9106 §4 second recommended option (argon2id, 64 MiB, t=3, p=4), set explicitly.
    return PasswordHasher(
        time_cost=3, memory_cost=64 * 1024, parallelism=4, hash_len=32, salt_len=16, type=Type.ID
    )


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


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
        hasher: PasswordHasher | None = None,
    ) -> None:
        self._db = db
        self._now = now
        self._session_ttl = session_ttl
        self._threshold = lockout_threshold
        self._lockout = lockout_seconds
        self._hasher = hasher or password_hasher()
        self._verifying = threading.BoundedSemaphore(_CONCURRENT_VERIFIES)
        self._admission = threading.Lock()
        self._signing_in = 0  # verifying, or waiting for a verify slot
        self._busy_refused = 0
        self._busy_logged_at = -_BUSY_LOG_EVERY
        # Verified against when the user does not exist, so timing does not tell.
        self._dummy = self._hasher.hash(secrets.token_hex(16))

    @property
    def _engine(self) -> Engine:
        return self._db.engine

    # -- administration (the CLI) --------------------------------------------------

    def add_user(self, username: str, password: str, role: str) -> None:
        if not _USERNAME.fullmatch(username):
            raise Refusal(ErrorCode.E_INVALID, "username: lowercase letters, digits, . _ -", 422)
        if role not in ROLES:
            raise Refusal(ErrorCode.E_INVALID, f"role must be one of {', '.join(ROLES)}", 422)
        if len(password) < _MIN_PASSWORD:
            raise Refusal(
                ErrorCode.E_INVALID, f"password must have at least {_MIN_PASSWORD} characters", 422
            )
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
        any lockout is cleared. A disabled account stays disabled."""
        if len(password) < _MIN_PASSWORD:
            raise Refusal(
                ErrorCode.E_INVALID, f"password must have at least {_MIN_PASSWORD} characters", 422
            )
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

    def list_users(self) -> list[dict[str, Any]]:
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
        return [dict(row._mapping) for row in rows]

    def create_service_token(self, name: str, role: str) -> str:
        """A new service token; the caller shows it once. Only its hash is kept."""
        if not _USERNAME.fullmatch(name):
            raise Refusal(ErrorCode.E_INVALID, "token name: lowercase letters, digits, . _ -", 422)
        if role not in SERVICE_ROLES:
            raise Refusal(ErrorCode.E_INVALID, "role must be agent or executor", 422)
        token = _new_token("alt_")
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

    def list_service_tokens(self) -> list[dict[str, Any]]:
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
        return [dict(row._mapping) for row in rows]

    # -- sign-in ------------------------------------------------------------------

    def login(self, username: str, password: str) -> tuple[str, int, str]:
        """Return ``(token, expires_at, role)`` or refuse: E_UNAUTHENTICATED, alike for an
        unknown name, a wrong password and a locked account, or E_BUSY past
        ``_WAITING_SIGN_INS`` waiting, refused before anything is recorded."""
        self._admit()
        try:
            return self._login(username, password)
        finally:
            with self._admission:
                self._signing_in -= 1

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
        raise Refusal(
            ErrorCode.E_BUSY,
            "too many sign-ins at once; try again in a few seconds",
            503,
            retry_after=_BUSY_RETRY_AFTER,
        )

    def _login(self, username: str, password: str) -> tuple[str, int, str]:
        """Sign in: return ``(token, expires_at, role)`` or refuse.

        Claim, then act (STYLE §6): (1) one conditional UPDATE counts the attempt as a
        failure *before* the slow argon2 verify, and only while the account is neither
        locked nor has ``lockout_threshold`` unproven attempts already, so concurrent
        guesses can never verify more than the threshold per lockout window; (2) verify;
        (3) a right password clears the count only while the account is still unlocked.
        A guess that was verified after another one locked the account is answered as a
        wrong password, right or not: the answer never tells which.

        An unknown name and an attempt that could not claim (a locked account) verify the
        password against a dummy hash through the same slot-limited :meth:`_verify`, and
        every refusal is the same 401: neither the answer nor the argon2 time tells them
        from a wrong password (the database work still differs by the audit record a
        wrong password commits; SECURITY.md, Honest limits). The dummy verify is not a
        guess at the account's password, so the threshold still bounds those.
        """
        now = self._now()
        unlocked = sa.or_(users.c.locked_until.is_(None), users.c.locked_until <= now)
        with self._engine.begin() as conn:
            # (1) claim one attempt
            claimed = conn.execute(
                users.update()
                .where(
                    users.c.username == username,
                    unlocked,
                    users.c.failed_logins < self._threshold,
                )
                .values(failed_logins=users.c.failed_logins + 1)
            ).rowcount
            row = conn.execute(sa.select(users).where(users.c.username == username)).first()
            if row is not None and not claimed:
                # Locked, or the threshold's worth of attempts is in flight or was never
                # settled (a crash mid-verify): lock now, so the count cannot stay stuck.
                self._lock_if_saturated(conn, username, now, unlocked)
        if row is None or not claimed:
            # The same argon2 work as a wrong password, so its time does not tell either.
            self._verify(self._dummy, password)
        if row is None:
            # Not in the audit chain (anyone can send these, and the chain would grow
            # with them), but an operator must be able to see password spraying.
            # A name that cannot be a user may be a password typed in the wrong field:
            # log only its length then, never the text.
            if _USERNAME.fullmatch(username):
                _log.warning("failed login: no such user %r", username)
            else:
                _log.warning("failed login: a malformed user name (%d characters)", len(username))
            raise _refused()
        if not claimed:
            # Answered like a wrong password; the operator sees the lock here, in the
            # audit chain (checkpoint.user.locked) and in ``airlock users list``.
            _log.warning("failed login: %r is locked", username[:64])
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
                # The failure stays counted (from the claim); it may complete the lock.
                _log.warning("failed login: wrong password for %r", username[:64])
                if not self._lock_if_saturated(conn, username, now, unlocked):
                    _audit(conn, now, {"type": CheckpointEvent.LOGIN_FAILED, "user": username})
            else:
                token = _new_token("als_")
                expires = now + self._session_ttl
                conn.execute(
                    sessions.insert().values(
                        token_hash=hash_token(token),
                        username=username,
                        created_at=now,
                        expires_at=expires,
                    )
                )
                _audit(conn, now, {"type": CheckpointEvent.SESSION_CREATED, "user": username})
        # Refused only after the commit: a rolled-back count would never lock anyone.
        if not ok:
            raise _refused()
        return token, expires, str(row.role)

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

    def authenticate(self, token: str) -> Principal:
        """The principal behind a bearer token, or refuse with E_UNAUTHENTICATED."""
        digest = hash_token(token)
        now = self._now()
        with self._engine.connect() as conn:
            row = conn.execute(
                sa.select(users.c.username, users.c.role)
                .select_from(sessions.join(users, sessions.c.username == users.c.username))
                .where(
                    sessions.c.token_hash == digest,
                    sessions.c.revoked_at.is_(None),
                    sessions.c.expires_at > now,
                    users.c.disabled.is_(False),
                )
            ).first()
            if row is not None:
                return Principal(row.username, "user", row.role, session=digest)
            svc = conn.execute(
                sa.select(service_tokens.c.name, service_tokens.c.role).where(
                    service_tokens.c.token_hash == digest, service_tokens.c.revoked_at.is_(None)
                )
            ).first()
        if svc is not None:
            return Principal(svc.name, "service", svc.role)
        raise Refusal(ErrorCode.E_UNAUTHENTICATED, "missing, unknown or expired token", 401)


def _audit(conn: Connection, now: int, event: Mapping[str, object]) -> None:
    AuditLog.append(conn, event, at=datetime.fromtimestamp(now, UTC))
