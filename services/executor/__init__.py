"""The executor: verifies approvals, consumes each once in its own ledger, and writes.

The only process with a cloud write credential. It must never hold the approval signing
key, and never import the checkpoint or the agent.

Public face: :class:`Executor` (execute, resolve), recovery (:func:`recover_expired`),
:func:`migrate`, the bundle sources (a directory, a file, the checkpoint feed) and
outcome sinks, the outcome outbox reporter, the operator's resend of rejected receipts
(:func:`request_resend`) and redelivery of delivered ones after a checkpoint restore
(:func:`request_redelivery`), the daemon loop (:func:`serve`), the receipt signer and
verifier.
"""

from typing import Final

from sqlalchemy.engine import Engine

from airlock import ledger

from ._http import Backoff, checkpoint_client, feed_name
from .daemon import Heartbeat, Shutdown, heartbeat_age, serve
from .errors import (
    CheckpointUnauthorized,
    ConfigError,
    ExecutorError,
    Fenced,
    InvalidReceipt,
    OperatorRefusal,
    ResendRefused,
    ResolutionError,
)
from .failpoints import FAILPOINTS, FEED_FAILPOINTS, Failpoints
from .feed import CheckpointFeedSource, LedgerRevocations
from .keys import TrustedKeysFile, TrustedKeysUnavailable
from .models import Outcome, State
from .outbox import OutboxReporter
from .receipts import (
    RECEIPT_PAYLOAD_TYPE,
    Receipt,
    ReceiptSigner,
    generate_receipt_key,
    verify_receipt,
)
from .recover import recover_expired
from .resend import (
    ReceiptHistory,
    Resend,
    check_requester,
    plan_redelivery,
    plan_resend,
    receipt_history,
    request_redelivery,
    request_resend,
    without_receipt,
)
from .service import Executor, client_token
from .sources import (
    BundleSource,
    Delivery,
    DirectorySource,
    FileSource,
    OutcomeSink,
    ReceiptDirectorySink,
    Revoked,
    read_revocations_file,
)

__all__ = [
    "FAILPOINTS",
    "FEED_FAILPOINTS",
    "MIGRATIONS_DIR",
    "RECEIPT_PAYLOAD_TYPE",
    "Backoff",
    "BundleSource",
    "CheckpointFeedSource",
    "CheckpointUnauthorized",
    "ConfigError",
    "Delivery",
    "DirectorySource",
    "Executor",
    "ExecutorError",
    "Failpoints",
    "Fenced",
    "FileSource",
    "Heartbeat",
    "InvalidReceipt",
    "LedgerRevocations",
    "OperatorRefusal",
    "OutboxReporter",
    "Outcome",
    "OutcomeSink",
    "Receipt",
    "ReceiptDirectorySink",
    "ReceiptHistory",
    "ReceiptSigner",
    "Resend",
    "ResendRefused",
    "ResolutionError",
    "Revoked",
    "Shutdown",
    "State",
    "TrustedKeysFile",
    "TrustedKeysUnavailable",
    "check_requester",
    "checkpoint_client",
    "client_token",
    "feed_name",
    "generate_receipt_key",
    "heartbeat_age",
    "migrate",
    "plan_redelivery",
    "plan_resend",
    "read_revocations_file",
    "receipt_history",
    "recover_expired",
    "request_redelivery",
    "request_resend",
    "serve",
    "verify_receipt",
    "without_receipt",
]

#: The ledger's migrations (:data:`airlock.ledger.MIGRATIONS_DIR`): the executor's
#: database is a ledger database.
MIGRATIONS_DIR: Final = ledger.MIGRATIONS_DIR


def migrate(engine: Engine) -> None:
    """Bring the ledger database to the latest revision (safe from several processes)."""
    ledger.migrate(engine)
