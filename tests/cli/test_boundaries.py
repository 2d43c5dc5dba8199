"""The commands for people are clients: running them loads no service and no web app."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import dead_url

_REPO = Path(__file__).resolve().parents[2]
_PROBE = """
import sys
from typer.testing import CliRunner
from airlock.cli import app
runner = CliRunner()
url, home = sys.argv[1], sys.argv[2]
env = {"AIRLOCK_TOKEN": "x" * 40, "AIRLOCK_CHECKPOINT_URL": url, "AIRLOCK_HOME": home}
for args in (["approvals", "list"], ["approvals", "show", "prop_probe00001"], ["logout"],
             ["login", "-u", "a", "--password-stdin", "--url", url], ["doctor"]):
    runner.invoke(app, args, env=env, input="pw\\n")
print(sorted({m.split(".")[0] for m in sys.modules} & {"services", "webapp"}))
"""


def test_people_commands_import_no_service(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, dead_url(), str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(_REPO), "HOME": str(tmp_path)},
    )
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout + result.stderr
