"""``--help`` that names what to type, not Python types: the ``Typer`` every command uses.

typer (0.29) prints each parameter's annotation in help: ``--help <bool>``,
``--json <bool>``, ``--db <str>``, ``--region <list[str]>``, an argument as
``username <str>`` and, in the usage line, ``{username}``. A flag takes no value, and
``<str>`` tells nobody what to write. Commands built through :class:`Typer` show instead:

- a flag: nothing after its name (``--json``, ``--help``);
- an option: its metavar (``--db URL``); without one, its choices (``--role
  [viewer|approver|admin]``) or its name in capitals (``--keys-dir KEYS_DIR``);
- an argument: its metavar, else its name in capitals, in the usage line as click writes
  it (``USERNAME``, ``[SERVICE]``).

typer builds the parameters itself from the annotations, with no hook for their class, so
the commands below give each of theirs the display subclass in place (``__class__``; the
subclasses add no state, only how the value is named in help). Parsing is untouched. A
test renders the help of every command and holds it to this.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.models import CommandFunctionType

__all__ = ["Command", "Group", "Typer"]


class _Option(TyperOption):
    def display_type_rich(self, ctx: Any) -> str | None:
        if self.is_flag or self.count:
            return None
        if self.metavar is not None:
            return self.metavar
        choices = self.type_descriptor.choices if self.type_descriptor.is_choice else None
        if choices:
            return "[" + "|".join(str(getattr(c, "value", c)) for c in choices) + "]"
        return (self.name or "value").upper()


class _Argument(TyperArgument):
    def display_type_rich(self, ctx: Any) -> str | None:
        return None  # the name column already shows the metavar

    def get_usage_pieces(self, ctx: Any) -> list[str]:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return [name + ("..." if self.nargs != 1 else "")]


def _plain(param: object) -> None:
    if type(param) is TyperOption:
        param.__class__ = _Option
    elif type(param) is TyperArgument:
        param.__class__ = _Argument
        if param.metavar is None:
            param.metavar = (param.name or "value").upper()


class _PlainParameters:
    """For a click command class: its parameters, and its --help, name what to type."""

    params: list[Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            _plain(param)

    def get_help_option(self, ctx: Any) -> TyperOption | None:
        option: TyperOption | None = super().get_help_option(ctx)  # type: ignore[misc]
        _plain(option)
        return option


class Command(_PlainParameters, TyperCommand):
    pass


class Group(_PlainParameters, TyperGroup):
    pass


class Typer(typer.Typer):
    """``typer.Typer`` whose groups and commands are :class:`Group` and :class:`Command`."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", Group)
        super().__init__(**kwargs)

    def command(
        self, name: str | None = None, **kwargs: Any
    ) -> Callable[[CommandFunctionType], CommandFunctionType]:
        kwargs.setdefault("cls", Command)
        return super().command(name, **kwargs)
