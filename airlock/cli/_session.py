"""Where a person's checkpoint session lives between commands, and how it is read back.

A login writes ``{url, token, username, expires_at}`` to ``$AIRLOCK_HOME/session.json``
(default ``$XDG_CONFIG_HOME/airlock/session.json``, else ``~/.config/airlock/``).
``AIRLOCK_HOME`` means this directory only (``airlock up``'s state is ``AIRLOCK_UP_HOME``,
see ``_up.py``). The file
is created with mode 0600 by ``open(2)`` itself — never written first and narrowed after —
inside a directory made 0700, then renamed over the previous session. Reading refuses a
file that anyone but its owner may read or write, a file owned by another user, and a
symbolic link: a session token is as good as the password for its lifetime.

``AIRLOCK_TOKEN`` with ``AIRLOCK_CHECKPOINT_URL`` stands in for the file (scripts, CI).

This module never prints or logs a token, and never loosens a file's mode.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "SESSION_FILE",
    "Credentials",
    "SessionError",
    "StoredSession",
    "check_url",
    "delete_session",
    "load_credentials",
    "prepare_session_dir",
    "read_session",
    "session_path",
    "write_session",
]

SESSION_FILE: Final = "session.json"
_FILE_MODE: Final = 0o600
_DIR_MODE: Final = 0o700
_MAX_BYTES: Final = 16 * 1024


class SessionError(Exception):
    """No usable credential: not logged in, or the session file is unsafe or unreadable."""


class StoredSession(BaseModel):
    """The session file's content."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(min_length=1, max_length=2048)
    token: str = Field(min_length=1, max_length=256)
    username: str = Field(min_length=1, max_length=64)
    expires_at: int


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a command authenticates with: a checkpoint URL and a bearer token."""

    url: str
    token: str = field(repr=False)  # kept out of tracebacks and debug output
    #: Who the token belongs to, when known (the session file says; AIRLOCK_TOKEN does not).
    username: str | None = None
    #: Where the token came from: the session file's path or ``AIRLOCK_TOKEN``.
    source: str = "session"


def check_url(url: str) -> str:
    """The checkpoint base URL without a trailing slash; only http(s) URLs are accepted."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or len(url) <= len("https://"):
        raise SessionError(f"checkpoint URL must start with http:// or https://, not {url!r}")
    return url


def session_path(environ: os._Environ[str] | dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    home = env.get("AIRLOCK_HOME")
    if home:
        return Path(home) / SESSION_FILE
    config = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "airlock" / SESSION_FILE


def prepare_session_dir(path: Path) -> None:
    """Make sure a session file at ``path`` can be kept private, before any is issued.

    ``airlock login`` calls this before it sends the password, so an unusable directory
    is reported while there is still no session to lose. Raises :class:`SessionError`.
    """
    _ensure_private_dir(path.parent)


def _ensure_private_dir(directory: Path) -> None:
    try:
        directory.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
        info = directory.lstat()
    except OSError as exc:
        raise SessionError(
            f"cannot use {directory} for the session file: {exc.strerror or exc}"
        ) from None
    if not stat.S_ISDIR(info.st_mode):
        raise SessionError(f"{directory} is not a directory")
    if info.st_uid != os.getuid():
        raise SessionError(f"{directory} belongs to another user")
    if info.st_mode & 0o022:
        # Anyone who may write the directory may swap the session file under us.
        raise SessionError(
            f"{directory} is writable by group or others (mode {stat.S_IMODE(info.st_mode):o}); "
            "chmod 700 it"
        )


def write_session(path: Path, session: StoredSession) -> None:
    """Write ``session`` to ``path`` atomically, the file born mode 0600.

    Raises :class:`SessionError` when it cannot (the message names the path and the
    system's reason, never the token); nothing is left behind at ``path`` then.
    """
    _ensure_private_dir(path.parent)
    try:
        _write_private(path, session)
    except OSError as exc:
        raise SessionError(f"cannot store the session in {path}: {exc.strerror or exc}") from None


def _write_private(path: Path, session: StoredSession) -> None:
    data = json.dumps(session.model_dump(), sort_keys=True).encode("utf-8") + b"\n"
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    # O_EXCL|O_NOFOLLOW: never reuse or follow something planted at the temporary name.
    # The mode is given to open(2), so no moment exists where the token is readable by
    # others; the umask can only narrow it further.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, _FILE_MODE)
    try:
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_session(path: Path) -> StoredSession | None:
    """The stored session, ``None`` when there is none; :class:`SessionError` if unsafe."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        # ELOOP from O_NOFOLLOW: a symlink where the session should be.
        raise SessionError(f"cannot open {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SessionError(f"{path} is not a regular file")
        if info.st_uid != os.getuid():
            raise SessionError(f"{path} belongs to another user; refusing to use its token")
        if info.st_mode & 0o077:
            raise SessionError(
                f"{path} is readable or writable by group or others "
                f"(mode {stat.S_IMODE(info.st_mode):o}); the token in it may have leaked. "
                "Run `airlock logout --forget` and log in again"
            )
        data = handle.read(_MAX_BYTES + 1)
    if len(data) > _MAX_BYTES:
        raise SessionError(f"{path} is too large to be a session file")
    try:
        return StoredSession.model_validate_json(data)
    except ValidationError:
        raise SessionError(f"{path} is not a valid session file; run `airlock login`") from None


def delete_session(path: Path) -> bool:
    """Remove the session file; ``True`` if there was one."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def load_credentials(environ: os._Environ[str] | dict[str, str] | None = None) -> Credentials:
    """``AIRLOCK_TOKEN`` (+ ``AIRLOCK_CHECKPOINT_URL``) if set, else the session file."""
    env = os.environ if environ is None else environ
    token = env.get("AIRLOCK_TOKEN")
    if token:
        url = env.get("AIRLOCK_CHECKPOINT_URL")
        if not url:
            raise SessionError("AIRLOCK_TOKEN is set but AIRLOCK_CHECKPOINT_URL is not")
        return Credentials(url=check_url(url), token=token.strip(), source="AIRLOCK_TOKEN")
    path = session_path(env)
    session = read_session(path)
    if session is None:
        raise SessionError("not logged in: run `airlock login` (or set AIRLOCK_TOKEN)")
    url = env.get("AIRLOCK_CHECKPOINT_URL")
    if url and check_url(url) != session.url:
        # Sending this session's token to a different server would hand it over.
        raise SessionError(
            f"AIRLOCK_CHECKPOINT_URL ({check_url(url)}) differs from the URL this session was "
            f"issued by ({session.url}); log in there or unset it"
        )
    return Credentials(
        url=session.url, token=session.token, username=session.username, source=str(path)
    )
