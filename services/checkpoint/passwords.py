"""Which new passwords the checkpoint accepts (NIST SP 800-63B §5.1.1.2).

A password is accepted when it has at least :data:`MIN_LENGTH` characters, is not one of
the 30,000 most common passwords (``common-passwords.json``, provenance in
``common-passwords.md``), is not one character repeated and is not the user name.
There are no composition rules (no "one digit, one symbol"): §5.1.1.2 says not to
impose them. Every refusal is one :class:`Refusal` with ``E_WEAK_PASSWORD`` and one line
that says which rule, never the password.

Nothing here reaches the network or logs a password.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Final

from .errors import ErrorCode, Refusal

__all__ = ["BLOCKLIST_PATH", "MIN_LENGTH", "blocklist", "check_new_password"]

#: At least the 8 of SP 800-63B §5.1.1.2; 12 since the first release, kept.
MIN_LENGTH: Final = 12
#: Longer ones are refused too (§5.1.1.2 asks for at least 64 to be allowed).
MAX_LENGTH: Final = 1024
BLOCKLIST_PATH: Final = Path(__file__).with_name("common-passwords.json")


@functools.cache
def blocklist() -> frozenset[str]:
    """The shipped common passwords, lowercase (read once)."""
    entries = json.loads(BLOCKLIST_PATH.read_text(encoding="utf-8"))
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise TypeError(f"{BLOCKLIST_PATH}: not a JSON list of strings")
    return frozenset(e.lower() for e in entries)


def _weak(message: str) -> Refusal:
    return Refusal(ErrorCode.E_WEAK_PASSWORD, message, 422)


def check_new_password(password: str, username: str) -> None:
    """Refuse a password no one should be given.

    Args:
        password: the new password, as typed.
        username: whose password it is to be.

    Raises:
        Refusal: ``E_WEAK_PASSWORD`` (422) naming the rule it broke: too short or too
            long, a common password (compared case-insensitively), one character
            repeated, or the user name.
    """
    if len(password) < MIN_LENGTH:
        raise _weak(f"password must have at least {MIN_LENGTH} characters")
    if len(password) > MAX_LENGTH:
        raise _weak(f"password must have at most {MAX_LENGTH} characters")
    folded = password.casefold()
    if folded in blocklist() or password.lower() in blocklist():
        raise _weak("password is one of the most common passwords; choose another")
    if len(set(folded)) == 1:
        raise _weak("password is one character repeated; choose another")
    if folded == username.casefold():
        raise _weak("password is the user name; choose another")
