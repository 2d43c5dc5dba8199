"""The executor: verifies approvals, consumes each once in its own ledger, and writes.

The only process with a cloud write credential. It must never hold the approval signing
key, and never import the checkpoint or the agent.

Public face: :class:`Executor` (execute, recover, resolve), :func:`migrate`, the bundle
sources and outcome sinks, the receipt signer and verifier.
"""

from pathlib import Path
from typing import Final

from sqlalchemy.engine import Engine

from .errors import ConfigError, ExecutorError, Fenced, InvalidReceipt, ResolutionError
from .failpoints import FAILPOINTS, Failpoints
from .models import Outcome, State
from .receipts import (
    RECEIPT_PAYLOAD_TYPE,
    Receipt,
    ReceiptSigner,
    generate_receipt_key,
    verify_receipt,
)
from .service import Executor, client_token
from .sources import (
    BundleSource,
    Delivery,
    DirectorySource,
    FileSource,
    OutcomeSink,
    ReceiptDirectorySink,
)

__all__ = [
    "FAILPOINTS",
    "MIGRATIONS_DIR",
    "RECEIPT_PAYLOAD_TYPE",
    "BundleSource",
    "ConfigError",
    "Delivery",
    "DirectorySource",
    "Executor",
    "ExecutorError",
    "Failpoints",
    "Fenced",
    "FileSource",
    "InvalidReceipt",
    "Outcome",
    "OutcomeSink",
    "Receipt",
    "ReceiptDirectorySink",
    "ReceiptSigner",
    "ResolutionError",
    "State",
    "client_token",
    "generate_receipt_key",
    "migrate",
    "verify_receipt",
]

MIGRATIONS_DIR: Final = Path(__file__).parent / "migrations"


def migrate(engine: Engine) -> None:
    """Bring the ledger database to the latest revision (safe from several processes)."""
    from airlock.store import upgrade  # noqa: PLC0415 - keep `import services.executor` light

    upgrade(engine, MIGRATIONS_DIR)
