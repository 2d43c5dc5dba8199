"""The Airlock protocol, version 1: canonical actions, DSSE approvals and receipts, pure
verification.

Pure: no I/O, no clock reads, no private keys. Everything here is a function of bytes,
public keys and an injected ``now``. Signing lives with the key holders
(``services/checkpoint/signer.py`` for approvals, the executor for receipts).
"""

from ._action import (
    ACTION_MAX_BYTES,
    ACTION_TYPE,
    ALLOWED_OPERATIONS,
    CURRENCY_EXPONENTS,
    HIGH_RISK_OPERATIONS,
    HOURS_PER_MONTH,
    MAX_HOURLY_MICROS,
    PROVIDER_RESOURCE_TYPES,
    Precondition,
    ProposedAction,
    Provider,
    Resource,
    ResourceType,
    Saving,
    action_hash,
    check_operation,
    check_target,
    monthly_minor,
)
from ._approval import (
    APPROVAL_ID_PATTERN,
    APPROVAL_PAYLOAD_TYPE,
    APPROVAL_TYPE,
    ApprovalStatement,
    Approver,
    PolicyRef,
)
from ._b64 import b64decode_strict, b64encode
from ._dsse import Envelope, Signature, pae, verify_envelope
from ._json import MAX_SAFE_INTEGER, canonical_bytes, loads_strict
from ._keys import KeySet, KeyStatus, TrustedKey, key_id
from ._receipt import (
    RECEIPT_MAX_BYTES,
    RECEIPT_PAYLOAD_TYPE,
    RECEIPT_TYPE,
    AuditHead,
    Receipt,
    ReceiptOutcome,
    Resolution,
    VerifiedReceipt,
    verify_receipt,
)
from ._tool_call import (
    ARGUMENTS_MAX_BYTES,
    ARGUMENTS_MAX_DEPTH,
    TOOL_APPROVAL_TYPE,
    TOOL_CALL_MAX_BYTES,
    TOOL_CALL_TYPE,
    ToolApprovalStatement,
    ToolBinding,
    ToolCall,
    VerifiedToolCall,
)
from ._verify import BUNDLE_MAX_BYTES, Binding, VerifiedApproval, make_bundle, verify_bundle
from .errors import Error, InvalidReceipt, KeySetError, RefusalCode, Refused

__all__ = [
    "ACTION_MAX_BYTES",
    "ACTION_TYPE",
    "ALLOWED_OPERATIONS",
    "APPROVAL_ID_PATTERN",
    "APPROVAL_PAYLOAD_TYPE",
    "APPROVAL_TYPE",
    "BUNDLE_MAX_BYTES",
    "CURRENCY_EXPONENTS",
    "HIGH_RISK_OPERATIONS",
    "HOURS_PER_MONTH",
    "MAX_HOURLY_MICROS",
    "MAX_SAFE_INTEGER",
    "PROVIDER_RESOURCE_TYPES",
    "RECEIPT_MAX_BYTES",
    "RECEIPT_PAYLOAD_TYPE",
    "RECEIPT_TYPE",
    "ApprovalStatement",
    "Approver",
    "AuditHead",
    "Binding",
    "Envelope",
    "Error",
    "InvalidReceipt",
    "KeySet",
    "KeySetError",
    "KeyStatus",
    "PolicyRef",
    "Precondition",
    "ProposedAction",
    "Provider",
    "Receipt",
    "ReceiptOutcome",
    "RefusalCode",
    "Refused",
    "Resolution",
    "Resource",
    "ResourceType",
    "Saving",
    "Signature",
    "TrustedKey",
    "VerifiedApproval",
    "VerifiedReceipt",
    "action_hash",
    "b64decode_strict",
    "b64encode",
    "canonical_bytes",
    "check_operation",
    "check_target",
    "key_id",
    "loads_strict",
    "make_bundle",
    "monthly_minor",
    "pae",
    "verify_bundle",
    "verify_envelope",
    "verify_receipt",
]
# Tool calls (docs/protocol.md#tool-call), kept in one block.
__all__ += [
    "ARGUMENTS_MAX_BYTES",
    "ARGUMENTS_MAX_DEPTH",
    "TOOL_APPROVAL_TYPE",
    "TOOL_CALL_MAX_BYTES",
    "TOOL_CALL_TYPE",
    "ToolApprovalStatement",
    "ToolBinding",
    "ToolCall",
    "VerifiedToolCall",
]
