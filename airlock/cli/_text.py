"""Text from outside this process, made safe to print: the one place the CLI escapes it.

A checkpoint's answers, an executor ledger's text (which holds cloud providers' error
messages), an audit export, a receipt or key file can say anything. Written raw, a C0 or
C1 control (U+009B alone is a CSI: it starts an escape sequence), a bidi override or
isolate (U+202E, U+2066…), another format character or a line separator (U+2028) can
redraw the screen, reorder what a person reads (``dorp-db`` shown as ``prod-db``) or
hide part of it. So every character for which ``str.isprintable`` is False is written as
a ``\\uXXXX`` escape, and printable text, non-ASCII included (é, 中文, emoji), is left as
it is to be read. Nothing here is read as markup either. (``airlock audit`` escapes its
text with :func:`airlock.reconcile.printable`, as the reconcile findings it prints do.)

JSON output stays JSON with the same value (``json.loads`` of it is unchanged): the
escapes are JSON's own, above U+FFFF a UTF-16 surrogate pair (JSON has no ``\\U``).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import typer

__all__ = ["InertLogFormatter", "inert", "inert_json", "inert_json_line", "say"]


def _escaped(ch: str, *, utf16: bool) -> str:
    code = ord(ch)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    if not utf16:
        return f"\\U{code:08x}"  # read by people only: one escape per character
    code -= 0x10000
    return f"\\u{0xD800 | code >> 10:04x}\\u{0xDC00 | code & 0x3FF:04x}"


def _escape(text: str, *, utf16: bool) -> str:
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escaped(ch, utf16=utf16) for ch in text)


def inert(text: str) -> str:
    """``text`` with every control, format (bidi), separator or other character that is
    not printable escaped (``\\u001b``, ``\\u202e``, ``\\U000e0041``); one line, always."""
    return _escape(text, utf16=False)


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
    return _escape(line, utf16=True)


def say(text: str, *, err: bool = False) -> None:
    """``typer.echo`` of one line that may hold outside text, escaped (:func:`inert`)."""
    typer.echo(inert(text), err=err)


class InertLogFormatter(logging.Formatter):
    """Log lines with what a logged message carries from outside escaped (:func:`inert`).

    A daemon logs the checkpoint's and the cloud's answers; a line break in one would
    forge a log line too, so the message is escaped whole, and a traceback (whose lines
    quote an exception's message) line by line.
    """

    def formatMessage(self, record: logging.LogRecord) -> str:
        return inert(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return "\n".join(inert(line) for line in super().formatException(ei).split("\n"))
