"""The agent cannot reach the cloud writer: by import graph, by name, and at run time.

docs/architecture.md#components gives the agent a read key only. The key is the real boundary; these
tests keep the code from even offering a writer: ``AlibabaWriter`` lives alone in
``airlock.cloud.alibaba.writer`` and nothing the agent imports may import that module,
directly or through any chain (the same rule import-linter enforces in ``make lint``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp

from devstack.ports import free_port

_REPO = Path(__file__).resolve().parents[2]
_WRITER = "airlock.cloud.alibaba.writer"
#: The agent's code and the CLI module that wires it (docs/architecture.md#import-boundaries:
#: airlock.cli is the root).
_AGENT = ("services.agent", "airlock.cli._agent")
_WRITER_NAMES = frozenset({"CloudWriter", "AlibabaWriter", "writer"})


def _agent_sources() -> list[Path]:
    return [*sorted((_REPO / "services" / "agent").glob("*.py")), _REPO / "airlock/cli/_agent.py"]


def test_the_agent_holds_no_cloud_writer() -> None:
    """No chain of imports leads from the agent to the writer module, and no agent module
    names a writer, by import, by name or as an attribute (``alibaba.AlibabaWriter``)."""
    graph = grimp.build_graph("airlock", "services", cache_dir=None)
    assert _WRITER in graph.modules, "the writer module moved: update this test and the contract"
    for source in _AGENT:
        chain = graph.find_shortest_chain(importer=source, imported=_WRITER, as_packages=True)
        assert chain is None, f"{source} reaches the writer: {' -> '.join(chain or ())}"
    for path in _agent_sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.alias):
                names.update(node.name.split("."))
                names.add(node.asname or "")
            elif isinstance(node, ast.ImportFrom):
                names.update((node.module or "").split("."))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                # importlib.import_module("airlock.cloud.alibaba.writer") and friends
                assert _WRITER not in node.value, path.name
        assert not _WRITER_NAMES & names, f"{path.name}: {sorted(_WRITER_NAMES & names)}"


_PROBE = """
import sys
from typer.testing import CliRunner
from airlock.cli import app
result = CliRunner().invoke(app, ["agent", "--once", "--dry-run"])
print(result.exit_code)
print(sorted(m for m in sys.modules if m.startswith(("airlock.cloud", "services.agent"))))
"""


def test_running_the_agent_never_loads_the_cloud_writer(tmp_path: Path) -> None:
    """``airlock agent`` builds its reader and scans (here against a dead endpoint, so the
    run fails after wiring); the writer module is never loaded into its process, so no
    attribute path (``alibaba.writer.AlibabaWriter``) can reach it either."""
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(_REPO),
        "HOME": str(tmp_path),
        "AIRLOCK_ENV": "dev",
        "AIRLOCK_AGENT_CLOUD_ENDPOINT": f"127.0.0.1:{free_port()}",
        "AIRLOCK_AGENT_CLOUD_PROTOCOL": "http",
        "AIRLOCK_AGENT_CLOUD_CONNECT_TIMEOUT_MS": "500",
    }
    result = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=env,
    )
    exit_code, modules = result.stdout.strip().splitlines()[-2:]
    assert exit_code == "1", result.stdout + result.stderr  # wired, then the listing failed
    assert "'airlock.cloud.alibaba._reader'" in modules, modules
    assert "'services.agent.service'" in modules, modules
    assert _WRITER not in modules, modules
