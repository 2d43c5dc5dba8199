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


def test_readme_configuration_table_matches_the_settings() -> None:
    from airlock.cli._config import markdown_table

    text = (ROOT / "README.md").read_text()
    begin, end = "<!-- config-table:begin -->\n", "<!-- config-table:end -->"
    table = text[text.index(begin) + len(begin) : text.index(end)]
    assert table == markdown_table(), "run `airlock config --markdown` and paste it into README"


def test_every_setting_is_documented() -> None:
    from airlock.cli._config import _comments, services

    undocumented = [
        f"{name}.{field}"
        for name, cls in services().items()
        for field in cls.model_fields
        if field not in _comments(cls)
    ]
    assert undocumented == []


def test_readme_promises_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make up" in text and "make test" in text


def test_every_attack_security_md_cites_exists() -> None:
    cited = set(re.findall(r"the attack `(\w+)`", (ROOT / "SECURITY.md").read_text()))
    results = set(
        re.findall(r"^\| \d+ \| `(\w+)` \|", (ROOT / "eval" / "RESULTS.md").read_text(), re.M)
    )
    assert cited, "SECURITY.md cites no attack"
    assert len(results) >= 40
    assert sorted(cited - results) == []
