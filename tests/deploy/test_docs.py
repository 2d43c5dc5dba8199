"""README and SECURITY.md stay true to the code."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _test_names() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        names.update(re.findall(r"^(?:async )?def (test_\w+)", path.read_text(), re.MULTILINE))
    return names


def test_every_test_security_md_cites_exists() -> None:
    cited = set(re.findall(r"`(test_\w+)`", (ROOT / "SECURITY.md").read_text()))
    assert cited, "SECURITY.md cites no tests"
    assert sorted(cited - _test_names()) == []


def test_every_refusal_code_is_documented_in_security_md() -> None:
    from airlock.protocol import RefusalCode

    text = (ROOT / "SECURITY.md").read_text()
    assert [code.value for code in RefusalCode if code.value not in text] == []
