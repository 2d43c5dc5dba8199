"""The checkpoint's modules stay small enough to read: no module over 800 lines and no
function over 100, migrations excepted (issue 22: each module has one job)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "services" / "checkpoint"
MODULE_MAX = 800
FUNCTION_MAX = 100
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)


def test_the_package_is_found() -> None:
    assert len(SOURCES) > 10, PACKAGE


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_no_module_over_800_lines(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MODULE_MAX, f"{path.name} has {lines} lines"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_no_function_over_100_lines(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    long = [
        f"{node.name} ({node.lineno}): {length} lines"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (length := (node.end_lineno or node.lineno) - node.lineno + 1) > FUNCTION_MAX
    ]
    assert not long, f"{path.name}: {long}"
