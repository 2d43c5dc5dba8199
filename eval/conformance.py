"""The protocol conformance suite: third-party and own vectors, compared byte for byte.

``python -m eval`` (or ``airlock conformance``) prints how many vectors of each set pass
and exits non-zero on any miss. The test suite runs the same checks case by case.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from airlock.protocol import (
    ApprovalStatement,
    Binding,
    KeySet,
    ProposedAction,
    Refused,
    ToolApprovalStatement,
    ToolBinding,
    ToolCall,
    action_hash,
    canonical_bytes,
    pae,
    verify_bundle,
)

__all__ = ["DEFAULT_VECTORS", "Case", "Mismatch", "all_sets", "run"]

DEFAULT_VECTORS = Path(__file__).parent / "vectors"


class Mismatch(Exception):
    """A vector's expected bytes or outcome differ from what the code produced."""


@dataclass(frozen=True)
class Case:
    set_name: str
    name: str
    check: Callable[[], None]


def _expect(cond: bool, message: str) -> None:
    if not cond:
        raise Mismatch(message)


# --- RFC 8785 ---------------------------------------------------------------------------


def jcs_cases(root: Path) -> Iterator[Case]:
    base = root / "jcs"
    for source in sorted((base / "input").glob("*.json")):
        name = source.stem

        def check(source: Path = source, name: str = name) -> None:
            # These inputs hold floats (RFC 8785 §3.2.2.3), so they exercise the rfc8785
            # package directly; Airlock's signed objects refuse floats on top of it.
            produced = rfc8785.dumps(json.loads(source.read_bytes()))
            expected = (base / "output" / f"{name}.json").read_bytes()
            hex_text = (base / "outhex" / f"{name}.txt").read_text()
            _expect(produced == expected, f"{name}: canonical bytes differ from output/")
            _expect(produced == bytes.fromhex("".join(hex_text.split())), f"{name}: outhex differs")

        yield Case("RFC 8785 (JCS)", name, check)


# --- Wycheproof Ed25519 -----------------------------------------------------------------


def wycheproof_cases(root: Path) -> Iterator[Case]:
    data = json.loads((root / "wycheproof" / "ed25519_test.json").read_bytes())
    for group in data["testGroups"]:
        pk_hex = group["publicKey"]["pk"]
        curve = group["publicKey"]["curve"]
        for test in group["tests"]:

            def check(
                test: dict[str, Any] = test, pk_hex: str = pk_hex, curve: str = curve
            ) -> None:
                # A new kind of case (another curve) must not slip by as "refused".
                _expect(curve == "edwards25519", f"unexpected curve {curve}")
                _expect(test["result"] in ("valid", "invalid"), f"result {test['result']}")
                try:
                    key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(pk_hex))
                    key.verify(bytes.fromhex(test["sig"]), bytes.fromhex(test["msg"]))
                    verified = True
                except (InvalidSignature, ValueError):
                    verified = False
                _expect(
                    verified == (test["result"] == "valid"),
                    f"tcId {test['tcId']} ({test['comment']}): verified={verified}",
                )

            yield Case("Wycheproof Ed25519", f"tcId-{test['tcId']}", check)


# --- DSSE PAE ---------------------------------------------------------------------------


def dsse_cases(root: Path) -> Iterator[Case]:
    data = json.loads((root / "dsse" / "pae.json").read_bytes())
    for n, case in enumerate(data["cases"]):

        def check(case: dict[str, str] = case) -> None:
            produced = pae(case["payloadType"], case["payload_utf8"].encode())
            _expect(produced == case["pae_utf8"].encode(), f"PAE gave {produced!r}")

        yield Case("DSSE v1 PAE", f"pae-{n}", check)


# --- Airlock's own ----------------------------------------------------------------------


def action_cases(root: Path) -> Iterator[Case]:
    for vector in json.loads((root / "airlock" / "actions.json").read_bytes()):

        def check(v: dict[str, Any] = vector) -> None:
            expected = bytes.fromhex(v["canonical_hex"])
            from_value = ProposedAction.model_validate(v["action"])
            _expect(from_value.canonical_bytes() == expected, "canonical bytes differ")
            from_bytes = ProposedAction.from_json_bytes(expected)
            _expect(from_bytes == from_value, "strict parse of the canonical bytes differs")
            _expect(action_hash(expected) == v["action_hash"], "action_hash differs")
            _expect(from_value.action_hash() == v["action_hash"], "model action_hash differs")

        yield Case("Airlock actions", vector["name"], check)


def approval_cases(root: Path) -> Iterator[Case]:
    for vector in json.loads((root / "airlock" / "approvals.json").read_bytes()):

        def check(v: dict[str, Any] = vector) -> None:
            payload = bytes.fromhex(v["payload_hex"])
            statement = ApprovalStatement.model_validate(v["statement"])
            _expect(statement.canonical_bytes() == payload, "statement JCS differs from payload")
            _expect(canonical_bytes(v["statement"]) == payload, "JCS of the value differs")
            message = pae(v["payload_type"], payload)
            _expect(message == bytes.fromhex(v["pae_hex"]), "PAE bytes differ")
            public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(v["public_key_hex"]))
            try:
                public.verify(base64.b64decode(v["signature_b64"]), message)
            except InvalidSignature:
                raise Mismatch("signature does not verify over the PAE bytes") from None
            envelope = v["envelope"]
            _expect(base64.b64decode(envelope["payload"]) == payload, "envelope payload differs")
            _expect(envelope["signatures"][0]["sig"] == v["signature_b64"], "envelope sig differs")
            bundle = base64.b64decode(v["bundle_b64"])
            _expect(
                json.loads(bundle)["action"]
                == base64.b64encode(bytes.fromhex(v["action_hex"])).decode(),
                "bundle action differs",
            )
            try:
                verify_bundle(
                    bundle,
                    KeySet.from_value(v["trusted_keys"]),
                    Binding(**v["binding"]),
                    v["now"],
                )
                observed = "ok"
            except Refused as exc:
                observed = exc.code.value
            _expect(observed == v["expected"], f"expected {v['expected']}, got {observed}")

        yield Case("Airlock approvals", vector["name"], check)


def tool_call_cases(root: Path) -> Iterator[Case]:
    for vector in json.loads((root / "airlock" / "tool_calls.json").read_bytes()):

        def check(v: dict[str, Any] = vector) -> None:
            expected = bytes.fromhex(v["canonical_hex"])
            from_value = ToolCall.model_validate(v["tool_call"])
            _expect(from_value.canonical_bytes() == expected, "canonical bytes differ")
            from_bytes = ToolCall.from_json_bytes(expected)
            _expect(from_bytes == from_value, "strict parse of the canonical bytes differs")
            _expect(action_hash(expected) == v["action_hash"], "action_hash differs")
            _expect(from_value.action_hash() == v["action_hash"], "model action_hash differs")

        yield Case("Airlock tool calls", vector["name"], check)


def tool_approval_cases(root: Path) -> Iterator[Case]:
    for vector in json.loads((root / "airlock" / "tool_approvals.json").read_bytes()):

        def check(v: dict[str, Any] = vector) -> None:
            payload = bytes.fromhex(v["payload_hex"])
            statement = ToolApprovalStatement.model_validate(v["statement"])
            _expect(statement.canonical_bytes() == payload, "statement JCS differs from payload")
            _expect(canonical_bytes(v["statement"]) == payload, "JCS of the value differs")
            message = pae(v["payload_type"], payload)
            _expect(message == bytes.fromhex(v["pae_hex"]), "PAE bytes differ")
            public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(v["public_key_hex"]))
            try:
                public.verify(base64.b64decode(v["signature_b64"]), message)
            except InvalidSignature:
                raise Mismatch("signature does not verify over the PAE bytes") from None
            bundle = base64.b64decode(v["bundle_b64"])
            _expect(
                json.loads(bundle)["action"]
                == base64.b64encode(bytes.fromhex(v["action_hex"])).decode(),
                "bundle action differs",
            )
            try:
                verify_bundle(
                    bundle,
                    KeySet.from_value(v["trusted_keys"]),
                    ToolBinding(**v["binding"]),
                    v["now"],
                )
                observed = "ok"
            except Refused as exc:
                observed = exc.code.value
            _expect(observed == v["expected"], f"expected {v['expected']}, got {observed}")

        yield Case("Airlock tool approvals", vector["name"], check)


def all_sets(root: Path = DEFAULT_VECTORS) -> dict[str, list[Case]]:
    sets: dict[str, list[Case]] = {}
    for make in (
        jcs_cases,
        wycheproof_cases,
        dsse_cases,
        action_cases,
        approval_cases,
        tool_call_cases,
        tool_approval_cases,
    ):
        for case in make(root):
            sets.setdefault(case.set_name, []).append(case)
    return sets


def run(root: Path | None = None) -> int:
    """Run every set, print one line per set, return the process exit code."""
    failed = 0
    for set_name, cases in all_sets(root or DEFAULT_VECTORS).items():
        misses: list[str] = []
        for case in cases:
            try:
                case.check()
            except (Mismatch, Refused, ValueError) as exc:
                misses.append(f"{case.name}: {exc}")
        passed = len(cases) - len(misses)
        unit = "sets" if set_name.startswith("RFC 8785") else "cases"
        print(f"{set_name:<22} {passed}/{len(cases)} {unit} passed")
        for miss in misses:
            print(f"    MISS {miss}")
        failed += len(misses)
    print("conformance: OK" if failed == 0 else f"conformance: {failed} MISSES")
    return 0 if failed == 0 else 1
