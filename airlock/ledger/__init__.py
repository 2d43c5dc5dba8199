"""The approval ledger: consume an approval once, then move it through its states under a
lease (docs/protocol.md#ledger).

One implementation and one schema for every process that runs approved actions: the
executor (cloud actions) and a gate (tool calls). Consuming is one INSERT whose UNIQUE
keys decide a race; every later move is one UPDATE conditional on the lease, so a
worker whose lease was taken over matches zero rows and stops (:class:`Fenced`);
recovery takes an expired lease over by bumping its epoch and settles the row
verify-first. Triggers in the migrations keep terminal rows and a row's identity
unchanged, whatever the code above them does.

Every function runs inside the caller's open transaction and commits nothing. This
package imports only :mod:`airlock.protocol`, :mod:`airlock.store` and SQLAlchemy: no
service, no web framework, no cloud SDK. It never writes anywhere but its own tables.
"""

from pathlib import Path
from typing import Final

from sqlalchemy.engine import Engine

from ._ops import (
    begin_executing,
    consume,
    expired,
    forgotten_before,
    get,
    held_until,
    insert_ignore,
    insert_refusal,
    insert_resolution,
    of_proposal,
    queue_receipt,
    refusal_to_report,
    release,
    reportable_refusal,
    revoked,
    take_over,
    transition,
    why_not_consumed,
)
from .errors import Error, Fenced
from .models import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    TOOL_CALL_RESOURCE_TYPE,
    LedgerRow,
    State,
    checkpoint_head,
    deliveries,
    feed_cursor,
    ledger,
    ledger_holds,
    metadata,
    outbox,
    refusals,
    resends,
    resolutions,
    revocations,
    target_columns,
)

__all__ = [
    "ACTIVE_STATES",
    "MIGRATIONS_DIR",
    "TERMINAL_STATES",
    "TOOL_CALL_RESOURCE_TYPE",
    "Error",
    "Fenced",
    "LedgerRow",
    "State",
    "begin_executing",
    "checkpoint_head",
    "consume",
    "deliveries",
    "expired",
    "feed_cursor",
    "forgotten_before",
    "get",
    "held_until",
    "insert_ignore",
    "insert_refusal",
    "insert_resolution",
    "ledger",
    "ledger_holds",
    "metadata",
    "migrate",
    "of_proposal",
    "outbox",
    "queue_receipt",
    "refusal_to_report",
    "refusals",
    "release",
    "reportable_refusal",
    "resends",
    "resolutions",
    "revocations",
    "revoked",
    "take_over",
    "target_columns",
    "transition",
    "why_not_consumed",
]

#: The ledger database's Alembic migrations. Revision ids are those the executor's
#: databases already carry (0001_ledger onwards), so a database made before the ledger
#: moved into the kernel upgrades in place.
MIGRATIONS_DIR: Final = Path(__file__).parent / "migrations"


def migrate(engine: Engine) -> None:
    """Bring a ledger database to the latest revision (safe from several processes)."""
    from airlock.store import upgrade  # noqa: PLC0415 - keep `import airlock.ledger` light

    upgrade(engine, MIGRATIONS_DIR)
