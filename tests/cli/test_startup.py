"""``airlock --help`` and a group's help load only what registering the commands needs.

Every command imports its heavy dependencies (httpx, pydantic, pydantic-settings,
SQLAlchemy, the protocol kernel, the settings, TLS) inside itself, so the CLI starts
quickly and ``--help`` never pays for them. This is checked by what is loaded, not by a
clock: a fresh interpreter builds the app, renders help, and lists the modules it holds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]

#: Loaded only by a command that runs (packages match their submodules too).
_HEAVY = (
    "httpx",
    "httpcore",
    "pydantic",
    "pydantic_core",
    "pydantic_settings",
    "sqlalchemy",
    "cryptography",
    "uvicorn",
    "services",
    "webapp",
    "airlock.protocol",
    "airlock.settings",
    "airlock.store",
    "airlock.tls",
    "airlock.httpdeadline",
    "airlock.api",
    "airlock.cli._session",
    "airlock.cli._proposal",
)

_PROBE = """
import json, sys
import typer.main
from typer.testing import CliRunner
import airlock.cli
heavy = tuple(json.loads(sys.argv[1]))

def loaded():
    under = tuple(h + "." for h in heavy)
    return sorted(m for m in sys.modules if m in heavy or m.startswith(under))

report = {"import": loaded()}
typer.main.get_command(airlock.cli.app)
report["build"] = loaded()
runner = CliRunner()
for args in json.loads(sys.argv[2]):
    result = runner.invoke(airlock.cli.app, [*args, "--help"])
    assert result.exit_code == 0, (args, result.output)
report["help"] = loaded()
print(json.dumps(report))
"""


def _loaded_after(help_of: list[list[str]]) -> dict[str, list[str]]:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(_HEAVY), json.dumps(help_of)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=_REPO,
    )
    report: dict[str, list[str]] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


def test_importing_the_cli_and_rendering_help_loads_no_heavy_module() -> None:
    groups = [
        [],
        ["approvals"],
        ["approvals", "list"],
        ["approvals", "approve"],
        ["executor"],
        ["executor", "receipts", "list"],
        ["receipts"],
        ["audit"],
        ["keys"],
        ["users"],
        ["tokens"],
        ["devcloud"],
        ["config"],
        ["doctor"],
        ["login"],
        ["logout"],
        ["up"],
        ["agent"],
        ["checkpoint"],
        ["webapp"],
    ]
    report = _loaded_after(groups)
    assert report["import"] == [], "importing airlock.cli"
    assert report["build"] == [], "building the click commands"
    # typer 0.29 coerces every parameter value it parses through pydantic
    # (typer._adapters), the root's --version too: a group's --help loads pydantic through
    # typer itself. Nothing else on the list may follow it.
    assert [m for m in report["help"] if not m.startswith("pydantic")] == [], "rendering help"


def test_the_startup_probe_sees_a_heavy_module_when_one_is_loaded() -> None:
    """The probe itself works: a command that runs does load what it needs."""
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from airlock.cli import _client; "
            "_client.CheckpointClient('http://127.0.0.1:9').__exit__(); "
            "print('httpx' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=_REPO,
    )
    assert result.stdout.strip() == "True"


def test_the_airlock_script_loads_no_database_driver_for_help() -> None:
    """``main`` turns an unreachable database into one line without importing SQLAlchemy
    up front: ``airlock --help`` through the console script's own entry point."""
    probe = (
        "import atexit, json, sys\n"
        "heavy = tuple(json.loads(sys.argv[1]))\n"
        "atexit.register(lambda: print(json.dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in heavy or m in heavy))))\n"
        "sys.argv[1:] = ['--help']\n"
        "from airlock.cli import main\n"
        "main()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(_HEAVY)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=_REPO,
    )
    assert "Usage:" in result.stdout
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
