"""The distribution a user installs: one version, a licence, and a kernel without the web stack.

pyproject's base dependencies are the kernel's only (``airlock.protocol``, ``airlock.store``,
``airlock.api``); the services, the CLI and the cloud SDKs come with extras. The slow test
installs the base alone into a fresh virtual environment and imports the kernel there.
"""

from __future__ import annotations

import fnmatch
import importlib.metadata
import re
import shutil
import subprocess
import tomllib
import venv
from pathlib import Path

import pytest

import airlock

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

#: What a program embedding the kernel must never be made to install.
HEAVY = (
    "fastapi",
    "starlette",
    "uvicorn",
    "typer",
    "pydantic_settings",
    "psycopg",
    "argon2",
    "jinja2",
    "alibabacloud_ecs20140526",
    "alibabacloud_tea_openapi",
    "mcp",
    "boto3",
    "botocore",
)


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_version_has_one_source() -> None:
    project = PYPROJECT["project"]
    assert "version" not in project
    assert "version" in project["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "airlock.__version__"}
    assert importlib.metadata.version("airlock") == airlock.__version__


def test_the_changelog_has_an_entry_for_this_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(airlock.__version__)}\b", text, re.MULTILINE)


def test_the_licence_file_is_the_licence_pyproject_names() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a notice


def test_the_base_install_holds_no_web_stack_no_cli_and_no_cloud_sdk() -> None:
    base = _names(PYPROJECT["project"]["dependencies"])
    assert base.isdisjoint(
        {"fastapi", "uvicorn", "typer", "pydantic-settings", "psycopg", "jinja2"}
    )
    assert not any(name.startswith("alibabacloud") for name in base)
    assert not any(name.startswith(("boto", "moto")) for name in base)


def test_the_dev_install_holds_every_extra() -> None:
    """``make up`` and ``make test`` install ``.[dev]``: it must bring everything."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert "airlock[all]" in extras["dev"]
    assert "airlock[server,alibaba,aws]" in extras["all"]
    assert "boto3" in _names(extras["aws"])
    assert "moto" in _names(extras["dev"])  # the AWS tests run moto's server
    assert "airlock[cli,postgres]" in extras["server"]


def test_the_dev_stack_eval_bench_and_tests_are_not_shipped() -> None:
    """devstack/ holds fixed passwords and test seeds: it must never land in the wheel."""
    include = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    for package in ("devstack", "devstack.stack", "eval", "bench", "tests"):
        assert not any(fnmatch.fnmatchcase(package, pattern) for pattern in include), package
    assert any(fnmatch.fnmatchcase("services.checkpoint", pattern) for pattern in include)


@pytest.mark.slow
def test_the_kernel_imports_from_a_base_install_without_fastapi(tmp_path: Path) -> None:
    """``pip install airlock`` alone, in a fresh environment: the kernel, the receipt
    verifier, the gate and the tool loop import, and nothing heavy was installed for
    them (not the ``mcp`` SDK either: the loop's MCP bridge is in the ``mcp`` extra)."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    for package in ("airlock", "services", "webapp"):
        shutil.copytree(
            ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", source],
        check=True,
        timeout=240,
    )
    probe = (
        "import importlib.metadata, importlib.util, sys\n"
        "import airlock, airlock.protocol, airlock.store, airlock.api\n"
        "from airlock.protocol import verify_receipt\n"
        "assert importlib.metadata.version('airlock') == airlock.__version__\n"
        "import airlock.ledger\n"
        "assert (airlock.ledger.MIGRATIONS_DIR / 'versions' / '0001_ledger.py').is_file()\n"
        "import airlock.gate\n"
        "from airlock.gate import Gate, GateConfig, Refused\n"
        "from airlock.agents import Agent, OpenAIChat, ScriptedProvider, ToolError\n"
        f"present = [m for m in {HEAVY!r} if importlib.util.find_spec(m) is not None]\n"
        "assert present == [], present\n"
        f"leaked = [m for m in sys.modules if m.split('.')[0] in {HEAVY!r}]\n"
        "assert leaked == [], leaked\n"
    )
    result = subprocess.run(
        [python, "-c", probe], check=False, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr


def test_the_image_installs_every_extra() -> None:
    """The base install has no server: an image built from it could run no service."""
    text = (ROOT / "infra" / "Dockerfile").read_text()
    assert 'pip wheel --wheel-dir /wheels ".[all]"' in text
    assert '--find-links=/wheels "airlock[all]"' in text
