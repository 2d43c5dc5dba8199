"""Every ``--help`` of the command tree: no Python type placeholders, nothing undocumented.

typer renders each parameter's annotation (``--json <bool>``, ``--db <str>``,
``{username}``); airlock.cli._help replaces that with what to type. This walks the
whole tree, renders each help as a person sees it, and holds it to that, so a new
command or option cannot bring the placeholders back or arrive without help text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from typer.core import TyperArgument, TyperOption
from typer.main import get_command

from airlock.cli import app

from .conftest import airlock

# `<bool>`, `<str>`, `<list[str]>`, `<viewer|approver>`: anything in angle brackets.
_PLACEHOLDER = re.compile(r"<[^<>\s]+>")


def _tree(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from _tree(sub, (*path, name))


_COMMANDS = list(_tree(get_command(app)))


def _id(path: tuple[str, ...]) -> str:
    return " ".join(path) or "airlock"


def test_the_walk_reaches_every_command() -> None:
    paths = {_id(path) for path, _ in _COMMANDS}
    assert {"airlock", "users add", "audit reconcile", "approvals reject", "up"} <= paths
    assert len(paths) >= 40


@pytest.mark.parametrize(("path", "command"), _COMMANDS, ids=[_id(p) for p, _ in _COMMANDS])
def test_help_shows_no_type_placeholders(path: tuple[str, ...], command: Any) -> None:
    result = airlock(*path, "--help", env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    text = result.output
    assert _PLACEHOLDER.findall(text) == [], text
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert "{" not in usage, usage  # typer writes a required argument as {name}
    for param in command.params:
        if isinstance(param, TyperOption) and param.is_flag:
            # A flag takes no value: its row holds its names, then its help.
            name = next(o for o in param.opts if o.startswith("--"))
            row = next(r for r in text.splitlines() if re.match(rf"│\s+(\*\s+)?{name}\b", r))
            # (after its short and --no- forms, if any)
            after = re.sub(r"^(--?[\w-]+\s+)+", "", row.split(name, 1)[1].strip(" │"))
            assert after.startswith(str(param.help).split()[0]), row


@pytest.mark.parametrize(("path", "command"), _COMMANDS, ids=[_id(p) for p, _ in _COMMANDS])
def test_every_command_and_parameter_has_help(path: tuple[str, ...], command: Any) -> None:
    assert (command.help or "").strip(), f"{_id(path)} has no help text"
    for param in command.params:
        assert isinstance(param, TyperOption | TyperArgument), param
        assert (param.help or "").strip(), f"{_id(path)}: {param.name} has no help text"


@pytest.mark.parametrize(("path", "command"), _COMMANDS, ids=[_id(p) for p, _ in _COMMANDS])
def test_help_paragraphs_are_one_line_each(path: tuple[str, ...], command: Any) -> None:
    """Rich help keeps a docstring's line breaks and then wraps again, so a paragraph
    written over two lines shows as a ragged half line; each is one line here."""
    for paragraph in (command.help or "").split("\n\n"):
        assert "\n" not in paragraph.strip(), f"{_id(path)}: {paragraph!r}"
