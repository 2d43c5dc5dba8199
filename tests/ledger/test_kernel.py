"""The ledger is a kernel package: one schema and one migration chain, importable alone.

docs/protocol.md#ledger. The executor's behaviour on it is proven by tests/executor; what
is proven here is what the move into the kernel must keep: the revision ids every
existing database carries, and an import that pulls in no service, web stack or cloud SDK.
"""

from __future__ import annotations

import subprocess
import sys

from alembic.script import ScriptDirectory

import airlock.ledger
import services.executor
from airlock.store import alembic_config

#: The revisions of every ledger database made before the ledger moved into the kernel,
#: in order. An existing database names one of them in ``alembic_version``.
HISTORIC = (
    "0001_ledger",
    "0002_feed",
    "0003_outbox",
    "0004_checkpoint_head",
    "0005_resends",
    "0006_ledger_holds",
    "0007_refusal_receipts",
    "0008_no_replace",
    "0009_ledger_columns",
)


def _chain() -> list[str]:
    script = ScriptDirectory.from_config(alembic_config(airlock.ledger.MIGRATIONS_DIR))
    assert len(script.get_heads()) == 1, "the ledger's migrations must have one head"
    return [revision.revision for revision in reversed(list(script.walk_revisions()))]


def test_the_migration_chain_keeps_every_historic_revision_id_in_order() -> None:
    assert tuple(_chain()[: len(HISTORIC)]) == HISTORIC


def test_the_executor_migrates_with_the_ledgers_migrations() -> None:
    assert services.executor.MIGRATIONS_DIR == airlock.ledger.MIGRATIONS_DIR


def test_the_executor_shares_the_ledgers_tables_and_errors() -> None:
    from services.executor import Fenced, State, models

    assert models.ledger is airlock.ledger.ledger
    assert models.metadata is airlock.ledger.metadata
    assert Fenced is airlock.ledger.Fenced
    assert State is airlock.ledger.State


def test_importing_the_ledger_loads_no_service_web_stack_or_cloud_sdk() -> None:
    heavy = ("services", "webapp", "fastapi", "starlette", "httpx", "typer", "alibabacloud")
    probe = (
        "import sys\n"
        "import airlock.ledger\n"
        f"leaked = sorted(m for m in sys.modules if m.split('.')[0].startswith({heavy!r}))\n"
        "assert leaked == [], leaked\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], check=False, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
