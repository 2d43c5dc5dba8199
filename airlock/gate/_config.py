"""The gate's settings: one frozen record, read from ``AIRLOCK_GATE_*`` (docs/gate.md).

Not pydantic-settings: the gate is kernel and installs with the base dependencies only.
Never logs or shows the token.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from .errors import ConfigError

__all__ = ["ENV", "GateConfig"]

#: Every variable :meth:`GateConfig.from_env` reads, and its default (None: required).
ENV: Final[Mapping[str, str | None]] = {
    "AIRLOCK_GATE_CHECKPOINT_URL": None,
    "AIRLOCK_GATE_TOKEN": None,
    "AIRLOCK_GATE_KEYS": None,
    "AIRLOCK_GATE_AUDIENCE": None,
    "AIRLOCK_GATE_LEDGER_URL": "sqlite:///.airlock/gate.db",
    "AIRLOCK_GATE_RECEIPT_KEY": ".airlock/gate-receipt.pem",
    "AIRLOCK_GATE_PROPOSER": "",
    "AIRLOCK_GATE_CA_FILE": "",
    "AIRLOCK_GATE_LEASE_SECONDS": "60",
}


@dataclass(frozen=True, slots=True)
class GateConfig:
    """What a gate needs: where the checkpoint is and who it is there, whose approvals it
    trusts, who it is in them, and where it keeps its ledger and receipt key.

    Attributes:
        checkpoint_url: the checkpoint's base URL (``https://…``).
        token: the agent token the gate proposes and reports with.
        keys: the pinned checkpoint key set (JSON, as :class:`airlock.protocol.KeySet`
            reads it).
        audience: this gate's audience: approvals must name it.
        ledger_url: the ledger database (SQLite file, or ``postgresql+psycopg://`` for
            several processes).
        receipt_key: the gate's own Ed25519 receipt key (PKCS#8 PEM, mode 0600).
        proposer: ``proposed_by`` of its proposals (default: the audience).
        ca_file: a CA bundle for the checkpoint's TLS certificate (default: certifi's).
        lease_seconds: how long a call holds its ledger row before recovery may take it.
    """

    checkpoint_url: str
    token: str = field(repr=False)
    keys: Path
    audience: str
    ledger_url: str = "sqlite:///.airlock/gate.db"
    receipt_key: Path = Path(".airlock/gate-receipt.pem")
    proposer: str = ""
    ca_file: Path | None = None
    lease_seconds: int = 60

    def __post_init__(self) -> None:
        if not self.checkpoint_url or not self.token or not self.audience:
            raise ConfigError("E_CONFIG: the checkpoint URL, token and audience are required")
        if self.lease_seconds <= 0:
            raise ConfigError("E_CONFIG: lease_seconds must be positive")

    @property
    def proposed_by(self) -> str:
        return self.proposer or self.audience

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> GateConfig:
        """Read ``AIRLOCK_GATE_*`` (docs/gate.md#settings); raise :class:`ConfigError`
        naming the first missing or malformed variable."""
        env = os.environ if environ is None else environ
        values: dict[str, str] = {}
        for name, default in ENV.items():
            value = env.get(name, "").strip() or default
            if value is None:
                raise ConfigError(f"E_CONFIG: {name} is required")
            values[name] = value
        try:
            lease = int(values["AIRLOCK_GATE_LEASE_SECONDS"])
        except ValueError:
            raise ConfigError("E_CONFIG: AIRLOCK_GATE_LEASE_SECONDS is not an integer") from None
        ca = values["AIRLOCK_GATE_CA_FILE"]
        return cls(
            checkpoint_url=values["AIRLOCK_GATE_CHECKPOINT_URL"],
            token=values["AIRLOCK_GATE_TOKEN"],
            keys=Path(values["AIRLOCK_GATE_KEYS"]),
            audience=values["AIRLOCK_GATE_AUDIENCE"],
            ledger_url=values["AIRLOCK_GATE_LEDGER_URL"],
            receipt_key=Path(values["AIRLOCK_GATE_RECEIPT_KEY"]),
            proposer=values["AIRLOCK_GATE_PROPOSER"],
            ca_file=Path(ca) if ca else None,
            lease_seconds=lease,
        )
