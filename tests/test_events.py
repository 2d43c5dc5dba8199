"""airlock.events: the one audit event vocabulary, held to the code that writes events.

Read from the source (no service runs): every event a service builds names its type
from :mod:`airlock.events`, never a copied string, and holds only the fields
:data:`airlock.events.FIELDS` lists for that type; every type listed is written
somewhere.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import get_type_hints

import pytest

from airlock.events import (
    FIELDS,
    CheckpointEvent,
    ExecutorEvent,
    RefusedCounted,
    RefusedOnce,
    SignInRefused,
)

ROOT = Path(__file__).parents[1]
_VOCABULARY = {e.value: e for e in (*CheckpointEvent, *ExecutorEvent)}
_CLASSES = {"CheckpointEvent": CheckpointEvent, "ExecutorEvent": ExecutorEvent}


def _sources() -> Iterator[tuple[Path, ast.Module]]:
    for package in ("services", "airlock", "webapp"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "airlock" / "events.py" or "migrations" in path.parts:
                continue
            yield path, ast.parse(path.read_text(), str(path))


def _event_type(node: ast.expr) -> str | None:
    """``CheckpointEvent.X`` / ``ExecutorEvent.X`` as its value, else None."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in _CLASSES
    ):
        return str(_CLASSES[node.value.id][node.attr].value)
    return None


def _called(func: ast.expr) -> str | None:
    """The name a call calls: ``f`` of ``f(…)`` and of ``obj.f(…)``."""
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _events_built() -> Iterator[tuple[str, str, set[str]]]:
    """(where, type, field names) for each event literal a service builds."""
    for path, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                keys = [k.value if isinstance(k, ast.Constant) else None for k in node.keys]
                if "type" not in keys:
                    continue
                kind = _event_type(node.values[keys.index("type")])
                if kind is not None:
                    fields = {k for k in keys if isinstance(k, str) and k != "type"}
                    yield f"{path.relative_to(ROOT)}:{node.lineno}", kind, fields
            elif (
                isinstance(node, ast.Call)
                and _called(node.func) in {"_audit", "audit"}
                and len(node.args) == 3
            ):
                kind = _event_type(node.args[2])
                if kind is not None:
                    fields = {k.arg for k in node.keywords if k.arg is not None}
                    yield f"{path.relative_to(ROOT)}:{node.lineno}", kind, fields


def test_no_module_copies_an_event_type_name() -> None:
    copies = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
        for path, tree in _sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in _VOCABULARY
    ]
    assert copies == []


def test_every_event_a_service_builds_holds_only_its_listed_fields() -> None:
    built = list(_events_built())
    assert len(built) > 30  # the scan found the services' events
    extra = [
        (where, kind, sorted(fields - FIELDS[kind]))
        for where, kind, fields in built
        if not fields <= FIELDS[kind]
    ]
    assert extra == []


def test_every_listed_event_type_is_written_somewhere() -> None:
    text = "\n".join(path.read_text() for path, _ in _sources())
    unused = [
        f"{cls.__name__}.{member.name}"
        for cls in (CheckpointEvent, ExecutorEvent)
        for member in cls
        if not re.search(rf"\b{cls.__name__}\.{member.name}\b", text)
    ]
    assert unused == []
    assert set(FIELDS) == set(_VOCABULARY)


@pytest.mark.parametrize("member", [*CheckpointEvent, *ExecutorEvent])
def test_an_event_type_names_its_chain(member: CheckpointEvent | ExecutorEvent) -> None:
    chain = "checkpoint" if isinstance(member, CheckpointEvent) else "executor"
    assert re.fullmatch(rf"{chain}(\.[a-z_]+)+", member.value)


@pytest.mark.parametrize(
    ("kind", "models"),
    [
        (CheckpointEvent.SIGN_IN_REFUSED, [SignInRefused]),
        (CheckpointEvent.REFUSED, [RefusedOnce, RefusedCounted]),
    ],
)
def test_a_typed_event_holds_exactly_its_listed_fields(
    kind: CheckpointEvent, models: list[type]
) -> None:
    """A field added to a typed event and not to FIELDS (or the reverse) fails here."""
    keys = [set(get_type_hints(model)) for model in models]
    assert set().union(*keys) == FIELDS[kind]
    assert all("type" not in k for k in keys)  # the writer adds it


def test_a_counted_refusal_and_a_single_one_share_only_who_and_why() -> None:
    """A reader tells them apart by ``count``: a row without it counts one."""
    assert set(get_type_hints(RefusedOnce)) & set(get_type_hints(RefusedCounted)) == {
        "by",
        "role",
        "code",
    }
