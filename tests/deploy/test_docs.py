"""README, SECURITY.md and docs/ stay true to the code, and short enough to read."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Where a citation may stand: source, tests, configuration and documentation.
_CITING_SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".json", ".sh", ".html", ".ini"}
_NOT_OURS = {".git", ".venv", ".airlock", "node_modules", "__pycache__", ".mypy_cache"}
#: A citation of the design: ``docs/protocol.md#executor-checks``.
_CITATION = re.compile(r"docs/([\w-]+\.md)#([\w-]+)")
#: A relative Markdown link with an anchor: ``[x](operations.md#backup-and-restore)``.
_LINK = re.compile(r"\]\(([^()\s#]*)#([^()\s]+)\)")


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


def test_configuration_doc_matches_the_settings() -> None:
    from airlock.cli._config import markdown_table

    text = (ROOT / "docs" / "configuration.md").read_text()
    begin, end = "<!-- config-table:begin -->\n", "<!-- config-table:end -->"
    table = text[text.index(begin) + len(begin) : text.index(end)]
    assert table == markdown_table(), (
        "run `airlock config --markdown` and paste it into docs/configuration.md"
    )


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


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]{2,}|`", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            slug = _slug(m.group(1))
            n = 0
            while (candidate := slug if n == 0 else f"{slug}-{n}") in anchors:
                n += 1
            anchors.add(candidate)
    return anchors


def _our_files() -> Iterator[Path]:
    for directory, subdirs, files in os.walk(ROOT):
        subdirs[:] = [d for d in subdirs if d not in _NOT_OURS and not d.endswith(".egg-info")]
        for name in files:
            if Path(name).suffix in _CITING_SUFFIXES:
                yield Path(directory) / name


def test_every_design_citation_resolves_to_a_heading_in_docs() -> None:
    """Every citation of a heading in docs/ (``_CITATION``), and every relative Markdown
    link with an anchor (``_LINK``), names a heading that exists; the DESIGN section
    numbers the code once cited are gone."""
    retired = "DESIGN " + "\u00a7"
    broken: list[str] = []
    cited = 0
    for path in _our_files():
        text = path.read_text(errors="replace")
        where = path.relative_to(ROOT)
        if retired in text:
            broken.append(f"{where}: cites {retired}")
        targets = [(ROOT / "docs" / f, a) for f, a in _CITATION.findall(text)]
        if path.suffix == ".md":
            targets += [
                ((path.parent / f) if f else path, a)
                for f, a in _LINK.findall(text)
                if f.endswith(".md") or not f
            ]
        for target, anchor in targets:
            cited += 1
            if not target.is_file() or anchor not in _anchors(target):
                broken.append(f"{where}: {target.name}#{anchor}")
    assert cited >= 80
    assert broken == []


def test_the_readme_stays_a_five_minute_read() -> None:
    assert len((ROOT / "README.md").read_bytes()) < 12 * 1024


def _table_cells(path: Path) -> Iterator[str]:
    for line in path.read_text().splitlines():
        if line.startswith("|") and not re.match(r"\|[-| :]+\|$", line):
            yield from (c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1])


def test_no_table_cell_is_over_300_characters() -> None:
    """A table is for scanning: a long defence belongs in a section below the table."""
    # docs/configuration.md is generated: its cells are the settings' own comments.
    written = [p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "configuration.md"]
    paths = [ROOT / "README.md", ROOT / "SECURITY.md", ROOT / "bench" / "RESULTS.md", *written]
    long_cells = [
        f"{path.name}: {cell[:60]}…"
        for path in paths
        for cell in _table_cells(path)
        if len(cell) > 300
    ]
    assert long_cells == []
