"""The pure half of ``airlock doctor``'s trust checks: one side's key set against the other's.

Each function compares what the checkpoint publishes (or the executor holds) with the key
set the other side trusts and returns findings as ``(status, detail)``; it reads no file,
no network and no clock (``now`` is an argument). :mod:`airlock.cli._doctor` gathers the
inputs and prints the findings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from pathlib import Path

    from airlock.protocol import KeySet, TrustedKey

__all__ = ["Status", "approval_trust", "receipt_trust"]

Status = Literal["ok", "warn", "fail"]


def _unusable(key: TrustedKey, now: int) -> str | None:
    """Why a verifier refuses this key's signatures (E_KEY_REVOKED), if it does; as
    airlock.protocol's verify_envelope decides (revoked, or past its ``not_after``)."""
    from airlock.protocol import KeyStatus

    if key.status is KeyStatus.REVOKED:
        return "revoked"
    if key.not_after is not None and now > key.not_after:
        return f"past its not_after ({key.not_after})"
    return None


def approval_trust(
    published: KeySet, trusted: KeySet, path: Path, now: int
) -> list[tuple[Status, str]]:
    """The key set the checkpoint publishes (``GET /v1/keys``) against the one the
    executor trusts (its file at ``path``), pure: a (status, detail) per finding."""
    from airlock.protocol import KeyStatus

    fix = f"at the checkpoint run airlock keys export-public --out FILE and install FILE as {path}"
    found: list[tuple[Status, str]] = []
    active = [kid for kid, key in published.items() if key.status is KeyStatus.ACTIVE]
    if not active:
        found.append(("fail", "the checkpoint publishes no active key: it signs nothing"))
    for kid in active:
        ours = trusted.get(kid)
        if ours is None:
            found.append(
                (
                    "fail",
                    f"the executor does not trust {kid}, the checkpoint's active key: "
                    f"every approval is refused E_UNKNOWN_KEY; {fix}",
                )
            )
        elif (why := _unusable(ours, now)) is not None:
            found.append(
                (
                    "fail",
                    f"the executor's key set has {kid}, the checkpoint's active key, {why}: "
                    f"every approval is refused E_KEY_REVOKED; {fix}",
                )
            )
        else:
            found.append(("ok", f"the executor trusts {kid}, the checkpoint's active key"))
    # A staged key signs nothing yet; `keys rotate` makes it the one that signs, and every
    # executor that does not trust it by then refuses each approval.
    for kid in [kid for kid, key in published.items() if key.status is KeyStatus.NEXT]:
        ours = trusted.get(kid)
        if ours is None:
            found.append(
                (
                    "warn",
                    f"the executor does not trust {kid}, the checkpoint's staged key: after "
                    f"airlock keys rotate every approval would be refused E_UNKNOWN_KEY; {fix}",
                )
            )
        elif (why := _unusable(ours, now)) is not None:
            found.append(
                (
                    "warn",
                    f"the executor's key set has {kid}, the checkpoint's staged key, {why}: "
                    f"after airlock keys rotate every approval would be refused "
                    f"E_KEY_REVOKED; {fix}",
                )
            )
        else:
            found.append(
                (
                    "ok",
                    f"the executor trusts {kid}, the checkpoint's staged key (ready for "
                    "airlock keys rotate)",
                )
            )
    # A retired key still verifies approvals in flight (KeyStatus.RETIRED): trusting one is
    # what `export-public` writes, until its not_after. A revoked one is revoked only
    # where the file says so.
    for kid, key in published.items():
        ours = trusted.get(kid)
        if (
            key.not_after is not None
            and ours is not None
            and _unusable(ours, now) is None
            and (ours.not_after is None or ours.not_after > key.not_after)
        ):
            found.append(
                (
                    "warn",
                    f"the executor trusts {kid} longer than the checkpoint does (its not_after "
                    f"is {key.not_after}, the executor's {ours.not_after}); {fix}",
                )
            )
        if key.status is KeyStatus.REVOKED and ours is not None and _unusable(ours, now) is None:
            found.append(
                (
                    "warn",
                    f"the executor still trusts {kid}, which the checkpoint revoked: its own "
                    f"key set decides, and accepts approvals signed with it; {fix}",
                )
            )
    return found


def receipt_trust(receipt_keys: KeySet, path: Path, kid: str, now: int) -> tuple[Status, str]:
    """The executor's receipt key id against the checkpoint's receipt key set (the file at
    ``path``), pure."""
    fix = (
        "install there the public key set written with the executor's key "
        "(airlock executor keygen --public FILE)"
    )
    key = receipt_keys.get(kid)
    if key is None:
        found = f"lacks the executor's receipt key {kid}"
    elif (why := _unusable(key, now)) is not None:
        found = f"has the executor's receipt key {kid} {why}"
    else:
        return "ok", f"the checkpoint's receipt key set trusts the executor's receipt key {kid}"
    return (
        "fail",
        f"the checkpoint's receipt key set {path} {found}: every outcome the executor "
        f"reports is refused E_RECEIPT; {fix}",
    )
