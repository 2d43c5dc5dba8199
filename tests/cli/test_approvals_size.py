"""airlock approvals' modules stay under the size limits (tests/test_module_size.py):
no module over 800 lines, no function over 100."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_module_size import FUNCTION_MAX_LINES, MODULE_MAX_LINES, _long_functions

CLI = Path(__file__).resolve().parents[2] / "airlock" / "cli"
MODULES = ("_approvals.py", "_approvals_show.py", "_proposal.py")


@pytest.mark.parametrize("name", MODULES)
def test_approvals_modules_keep_the_limits(name: str) -> None:
    source = (CLI / name).read_text(encoding="utf-8")
    assert len(source.splitlines()) <= MODULE_MAX_LINES
    assert _long_functions(source) == [], f"functions over {FUNCTION_MAX_LINES} lines"
