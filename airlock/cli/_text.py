"""Text from outside this process, made safe to print: the CLI's face of :mod:`airlock.text`.

The escaping itself (what is inert, and how it is written) is defined once, in the
kernel's :mod:`airlock.text`, so the CLI, ``airlock audit``, the web app and the
services' logs show the same text the same way. Only :func:`say` lives here: it needs
typer, which the kernel does not import.
"""

from __future__ import annotations

import typer

from airlock.text import InertLogFormatter, inert, inert_json, inert_json_line, inert_log_config

__all__ = [
    "InertLogFormatter",
    "inert",
    "inert_json",
    "inert_json_line",
    "inert_log_config",
    "say",
]


def say(text: str, *, err: bool = False) -> None:
    """``typer.echo`` of one line that may hold outside text, escaped (:func:`inert`)."""
    typer.echo(inert(text), err=err)
