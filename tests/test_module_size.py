"""Size limits on the source tree: no module over 800 lines, no function over 100.

A module that outgrows the limit holds more than one job (STYLE.md item 17); a function
that does is several steps that want names. The trees checked are listed in ``TREES``;
migrations are exempt.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The trees whose modules and functions are held to the limits.
TREES = ("airlock", "services", "webapp", "devstack", "eval", "bench", "examples")
MODULE_MAX_LINES = 800
FUNCTION_MAX_LINES = 100


def _modules() -> list[Path]:
    return sorted(
        path
        for tree in TREES
        for path in (ROOT / tree).rglob("*.py")
        if "migrations" not in path.relative_to(ROOT).parts
    )


def _long_functions(source: str) -> list[tuple[str, int, int]]:
    """Each function (or method) over the limit: its name, first line and length."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length > FUNCTION_MAX_LINES:
                found.append((node.name, node.lineno, length))
    return found


def test_the_trees_hold_modules() -> None:
    assert all((ROOT / tree).is_dir() for tree in TREES)
    assert _modules()


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_over_800_lines(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MODULE_MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_function_over_100_lines(path: Path) -> None:
    assert _long_functions(path.read_text(encoding="utf-8")) == []


def test_a_method_one_line_over_the_limit_is_found() -> None:
    def body(lines: int) -> str:
        return "\n".join(f"        x{i} = {i}" for i in range(lines))

    at_limit, over = FUNCTION_MAX_LINES - 1, FUNCTION_MAX_LINES
    source = f"class C:\n    def ok(self):\n{body(at_limit)}\n    def over(self):\n{body(over)}\n"
    assert _long_functions(source) == [("over", 2 + at_limit + 1, FUNCTION_MAX_LINES + 1)]
