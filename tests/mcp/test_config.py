"""The proxy's config is parsed at the boundary, and the command fails in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from airlock.cli import app
from airlock.mcp import ConfigError, ProxyConfig
from airlock.mcp._config import render

GOOD = """
[tools.refund]
effect_key = "refund:{order}"
target = "order"
risk = "high"
"""


def _load(tmp_path: Path, text: str) -> ProxyConfig:
    path = tmp_path / "airlock-mcp.toml"
    path.write_text(text)
    return ProxyConfig.load(path)


def test_a_config_names_its_gated_tools(tmp_path: Path) -> None:
    config = _load(tmp_path, GOOD)
    assert config.tools["refund"].risk == "high"
    assert config.wait == 30


@pytest.mark.parametrize(
    "template",
    ["refund:{order.__class__}", "refund:{order[0]}", "refund:{order!r}", "refund:{order:>9}"],
)
def test_template_that_evaluates_anything_is_refused(tmp_path: Path, template: str) -> None:
    with pytest.raises(ConfigError, match="E_CONFIG"):
        _load(tmp_path, GOOD.replace("refund:{order}", template))


@pytest.mark.parametrize(
    "text",
    [
        GOOD.replace('risk = "high"', 'risk = "none"'),
        GOOD + "surprise = 1\n",
        "wait = 1\n",  # no gated tool: a proxy that gates nothing is a mistake
        GOOD.replace("[tools.refund]", "[tools.refund"),
        'approval_url = "https://a.test/p/{id}"\n' + GOOD,
    ],
)
def test_invalid_config_is_one_error_with_a_code(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError, match=r"^E_CONFIG: "):
        _load(tmp_path, text)


def test_template_takes_strings_and_integers_only() -> None:
    assert render("refund:{order}:{n}", {"order": "o-1", "n": 2}) == "refund:o-1:2"
    for bad in ({"order": True, "n": 1}, {"order": {"a": 1}, "n": 1}, {"n": 1}):
        with pytest.raises(ValueError):
            render("refund:{order}:{n}", bad)


def test_command_with_a_missing_config_fails_in_one_line(tmp_path: Path) -> None:
    missing = str(tmp_path / "none.toml")
    result = CliRunner().invoke(app, ["mcp", "proxy", "--config", missing, "--", "true"])
    assert result.exit_code == 1
    assert result.output.startswith("error: E_CONFIG")
    assert len(result.output.strip().splitlines()) == 1
