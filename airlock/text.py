"""Text from outside a process, made inert before a person reads it: the one definition.

A checkpoint's answers, a cloud provider's error messages, an audit event, a proposal
field written by an untrusted agent, a user name typed at sign-in can say anything.
Shown raw, a C0 or C1 control (U+009B alone is a CSI: it starts an escape sequence), a
bidi override or isolate (U+202E, U+2066…), another format character or a line
separator (U+2028) can redraw a terminal, forge a log line, reorder what a person reads
(``dorp-db`` shown as ``prod-db``) or hide part of it. So every character for which
``str.isprintable`` is False is written as a ``\\uXXXX`` escape (``\\UXXXXXXXX`` above
U+FFFF: one escape per character), and printable text, non-ASCII included (é, 中文,
emoji), is left as it is to be read. The CLI, ``airlock audit``, the web app, the
checkpoint and every service's log use these functions, so a person sees one style.

JSON output stays JSON with the same value (``json.loads`` of it is unchanged): the
escapes are JSON's own, above U+FFFF a UTF-16 surrogate pair (JSON has no ``\\U``).

Text stored in an audit record keeps the form it was stored in; this module never
rewrites a stored value, it only escapes for showing (the executor's stored forms say
why they differ: services/executor/errors.py ``recordable``).

Pure functions and a ``logging.Formatter``: no I/O, nothing imported beyond the standard
library (the CLI imports this on every start).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Final

__all__ = ["InertLogFormatter", "inert", "inert_json", "inert_json_line", "inert_log_config"]

#: Kept by ``inert(..., layout=True)``: on a page, where they are layout (HTML collapses
#: them or ``pre`` wraps on them), not a cursor movement.
_LAYOUT: Final = frozenset(" \n\r\t")


def _escaped(ch: str, *, utf16: bool) -> str:
    code = ord(ch)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    if not utf16:
        return f"\\U{code:08x}"  # read by people only: one escape per character
    code -= 0x10000
    return f"\\u{0xD800 | code >> 10:04x}\\u{0xDC00 | code & 0x3FF:04x}"


def _pieces(text: str, *, utf16: bool, keep: frozenset[str]) -> list[str]:
    return [ch if ch.isprintable() or ch in keep else _escaped(ch, utf16=utf16) for ch in text]


def inert(text: str, *, limit: int | None = None, layout: bool = False) -> str:
    """``text`` with every control, format (bidi), separator or other character that is
    not printable escaped (``\\u001b``, ``\\u202e``, ``\\U000e0041``); one line, always.

    ``limit``: at most that many characters, cut between escapes (never inside one) and
    ended with ``…`` when cut. ``layout``: line breaks and tabs kept, for a web page only.
    """
    if text.isprintable() and (limit is None or len(text) <= limit):
        return text
    pieces = _pieces(text, utf16=False, keep=_LAYOUT if layout else frozenset())
    if limit is None or sum(map(len, pieces)) <= limit:
        return "".join(pieces)
    out: list[str] = []
    size = 0
    for piece in pieces:
        if size + len(piece) > limit - 1:  # whole escapes only, then the ellipsis
            break
        out.append(piece)
        size += len(piece)
    return "".join(out) + "…"


def inert_json(value: Any, *, indent: int | None = 2, sort_keys: bool = False) -> str:
    """``value`` as JSON that is safe on a terminal and reads the same to a parser.

    json.dumps escapes C0 controls, quotes and backslashes, but with ``ensure_ascii=False``
    (kept so that é and 中文 stay readable) writes C1 controls, bidi and the rest raw. Those
    can only be inside strings: outside one, the only characters are the structure's and
    the indent's newlines and spaces. So each of them is replaced, in place, by the escape
    JSON itself would write, which is the same character to a parser.
    """
    text = json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=sort_keys)
    return "\n".join(inert_json_line(line) for line in text.split("\n"))


def inert_json_line(line: str) -> str:
    """One line of JSON text as RFC 8785 or json.dumps writes it (nothing outside a string
    but the structure and spaces), escaped in place as :func:`inert_json` does."""
    if line.isprintable():
        return line
    return "".join(_pieces(line, utf16=True, keep=frozenset()))


class InertLogFormatter(logging.Formatter):
    """Log lines with what a logged message carries from outside escaped (:func:`inert`).

    A service logs the checkpoint's, the cloud's and the agent's text, and uvicorn's
    access log the request line; a line break in one would forge a log line, so the
    message is escaped whole, and a traceback (whose lines quote an exception's message)
    line by line.
    """

    def formatMessage(self, record: logging.LogRecord) -> str:
        return inert(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return "\n".join(inert(line) for line in super().formatException(ei).split("\n"))

    def formatStack(self, stack_info: str) -> str:
        return "\n".join(inert(line) for line in super().formatStack(stack_info).split("\n"))


def inert_log_config(level: str = "INFO") -> dict[str, Any]:
    """A :func:`logging.config.dictConfig` for a service: every record, uvicorn's (at
    ``level``) and its access log's included, written to stderr through
    :class:`InertLogFormatter`.

    uvicorn takes this as its ``log_config``. Its own formatters are not used: they write
    the message as it is (and colour it on a terminal).
    """
    return {
        "version": 1,
        # Loggers created at import (airlock.*, services.*) must keep logging.
        "disable_existing_loggers": False,
        "formatters": {
            "inert": {
                "()": f"{__name__}.InertLogFormatter",
                "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
            }
        },
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "inert",
                "stream": "ext://sys.stderr",
            }
        },
        # uvicorn's loggers propagate to the root, which holds the one handler: each
        # record is written once, escaped.
        "loggers": {
            "uvicorn": {"level": level, "handlers": [], "propagate": True},
            "uvicorn.error": {"level": level, "handlers": [], "propagate": True},
            "uvicorn.access": {"level": level, "handlers": [], "propagate": True},
        },
        # The rest at WARNING, as Python's default handler showed it before: the
        # services' own INFO lines (a sweep's counts) stay out of their logs.
        "root": {"level": "WARNING", "handlers": ["stderr"]},
    }
