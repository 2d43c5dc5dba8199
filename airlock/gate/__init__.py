"""The gate: put an Airlock approval in front of any Python function (docs/gate.md).

::

    gate = Gate.from_env()

    @gate.guard(risk="high", target=lambda order, amount: order,
                effect_key=lambda order, amount: f"refund:{order}",
                premises=lambda order, amount: {"refunded": refunded_total(order)},
                lookup=lambda key: find_refund(key) is not None)
    def refund(order: str, amount: int, *, idempotency_key: str) -> str: ...

A call proposes the tool call to the checkpoint and runs the function once a person
approved exactly it: verified against the pinned checkpoint keys, consumed once in the
gate's ledger (the executor's ledger, :mod:`airlock.ledger`), premises re-read, called
once, reported with a receipt signed by the gate's own key. ``recover()`` settles calls a
crash interrupted without ever calling twice.

Kernel: imports the protocol, store, ledger, api and apiclient modules and the base
dependencies only — never a web framework, a CLI toolkit, a cloud SDK or a service. It
holds one private key, its own receipt key; never an approval key.
"""

from ._call import changed
from ._config import GateConfig
from ._gate import Gate, Settled, Status
from ._receipts import ReceiptSigner, generate_receipt_key
from .errors import (
    Change,
    ConfigError,
    EffectKeyConflict,
    Error,
    GateCode,
    InDoubt,
    Pending,
    Refused,
    Rejected,
    Unavailable,
)

__all__ = [
    "Change",
    "ConfigError",
    "EffectKeyConflict",
    "Error",
    "Gate",
    "GateCode",
    "GateConfig",
    "InDoubt",
    "Pending",
    "ReceiptSigner",
    "Refused",
    "Rejected",
    "Settled",
    "Status",
    "Unavailable",
    "changed",
    "generate_receipt_key",
]
