"""The checkpoint: proposals, votes, policy and the only signer of approvals.

It holds the Ed25519 private signing key and its own database; it must never hold a
cloud credential or import the cloud adapters.

The names in ``__all__`` are the package's face for the CLI and other composition
roots; modules whose names start with ``_`` are not public. A name is imported on first
use (PEP 562), so ``import services.checkpoint.errors`` stays as light as that module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._db import MIGRATIONS, Database
    from .app import build, create_app
    from .auth import Accounts
    from .errors import ConfigError, ErrorCode, Refusal
    from .keyaudit import ChainKeyAudit
    from .keys import KeyDirectory, KeyRing
    from .service import Checkpoint, CheckpointConfig
    from .signer import Signer

__all__ = [
    "MIGRATIONS",
    "Accounts",
    "ChainKeyAudit",
    "Checkpoint",
    "CheckpointConfig",
    "ConfigError",
    "Database",
    "ErrorCode",
    "KeyDirectory",
    "KeyRing",
    "Refusal",
    "Signer",
    "build",
    "create_app",
]

_HOME = {
    "Database": "._db",
    "MIGRATIONS": "._db",
    "build": ".app",
    "create_app": ".app",
    "Accounts": ".auth",
    "ConfigError": ".errors",
    "ErrorCode": ".errors",
    "Refusal": ".errors",
    "ChainKeyAudit": ".keyaudit",
    "KeyDirectory": ".keys",
    "KeyRing": ".keys",
    "Checkpoint": ".service",
    "CheckpointConfig": ".service",
    "Signer": ".signer",
}


def __getattr__(name: str) -> object:
    """One of ``__all__``, imported from its module on first use.

    Raises:
        AttributeError: ``name`` is not part of the public face.
    """
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home, __name__), name)
