"""Shared moves of the attacks: build actions, get approvals, read back what was recorded.

Every helper here acts the way a client of the system would (the agent's token, a
person's session, the cloud's admin door for the world changing out of band) and returns
plain values. None of them decides whether an attack passed.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from typing import Any

import httpx

from airlock.protocol import canonical_bytes

from .clouds import AttackCloud, DevcloudCloud, MotoCloud
from .registry import Observation, Target
from .rig import Checkpoint, ExecResult, Rig, bundle_of, deadline_poll

__all__ = [
    "api_code",
    "approved",
    "bundle",
    "checkpoint_refusal",
    "decode_bundle",
    "delete_action",
    "executor_refusal",
    "resource",
    "stop_action",
]


def _cloud(t: Target) -> AttackCloud:
    if not isinstance(t.ids, DevcloudCloud | MotoCloud):
        raise RuntimeError(f"target {t.name} is bound to no cloud")  # the runner binds it
    return t.ids


def resource(t: Target, n: int = 0) -> dict[str, str]:
    """The action's ``resource`` member for this attack's instance ``n``."""
    return _cloud(t).resource(t.instance(n))


def stop_action(t: Target, n: int = 0, **overrides: Any) -> dict[str, Any]:
    """A stop of this attack's instance ``n`` in the cloud's shape (the factory's ~1 KiB
    action: ECS at devcloud, EC2 at moto)."""
    value: dict[str, Any] = {"proposal_id": t.proposal(n), "resource": resource(t, n)}
    value.update(overrides)
    return _cloud(t).action(**value)


def delete_action(t: Target, n: int = 0, **overrides: Any) -> dict[str, Any]:
    """A delete (EC2: terminate) of this attack's (stopped) instance ``n``: high risk by
    policy."""
    value: dict[str, Any] = {
        "operation": "delete",
        "params": {},
        "precondition": {
            "status": "Stopped",
            "absent_tags": ["airlock:protect"],
            "observed_at": "2025-11-29T06:00:00Z",
        },
    }
    value.update(overrides)
    return stop_action(t, n, **value)


def approved(
    rig: Rig,
    cp: Checkpoint,
    action: Mapping[str, Any],
    *,
    status: str = "Running",
    create: bool = True,
) -> dict[str, Any]:
    """Create the target in the cloud, submit ``action`` as the agent, approve it as alice
    (and bob with the typed id for a delete); return the approved record."""
    if create:
        rig.instance(action["resource"]["id"], status=status)
    record = cp.submit(action)
    if action["operation"] == "delete":
        cp.approve(record, "alice", "bob", confirm=True)
    else:
        cp.approve(record, "alice")
    record = cp.view(record["id"])
    if record["state"] != "approved" and cp is not rig.cp:
        raise RuntimeError(f"{cp.name} did not approve {record['id']}: {record['state']}")
    return record


def decode_bundle(raw: bytes) -> tuple[bytes, dict[str, Any]]:
    """(action bytes, envelope value) of a bundle."""
    value = json.loads(raw)
    return base64.b64decode(value["action"]), dict(value["envelope"])


def bundle(action: bytes | Mapping[str, Any], envelope: Mapping[str, Any]) -> bytes:
    """A bundle of ``action`` (bytes as given, or a value made canonical) and ``envelope``."""
    data = action if isinstance(action, bytes) else canonical_bytes(dict(action))
    return canonical_bytes(
        {"action": base64.b64encode(data).decode("ascii"), "envelope": dict(envelope)}
    )


def approved_bundle(rig: Rig, cp: Checkpoint, action: Mapping[str, Any]) -> bytes:
    return bundle_of(approved(rig, cp, action))


def executor_refusal(
    rig: Rig, res: ExecResult, targets: tuple[str, ...], approved_writes: int = 0
) -> Observation:
    """The observation for a bundle E2 refused before any ledger row (steps 1–13): the
    refusals table and the audit chain must both hold an ``executor.refused`` event with
    the code, for these exact bundle bytes."""
    rows = rig.refusals(bundle_sha256=res.bundle_sha256, code=res.code)
    events = rig.executor_audit("executor.refused", code=res.code, bundle_sha256=res.bundle_sha256)
    ok = bool(rows) and bool(events)
    audit = (
        f"executor: refusals row + audit executor.refused {res.code}"
        if ok
        else f"executor: MISSING refusal record for {res.code}"
        f" (rows {len(rows)}, events {len(events)})"
    )
    return Observation(res.code, audit, ok, targets, approved_writes)


def api_code(response: httpx.Response) -> str:
    """``CODE (status)`` of a checkpoint answer; a kernel code in the message is shown as
    ``E_INVALID(E_PARSE)``."""
    try:
        error = response.json()["error"]
        code = str(error["code"])
        message = str(error["message"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}"
    head = message.split(":", 1)[0]
    if head.startswith("E_") and head.isupper():
        code = f"{code}({head})"
    return f"{code} ({response.status_code})"


#: How long a refusal's record may take to reach the chain: a repeat of a caller's code is
#: counted, and written at the checkpoint's next flush (``refusal_interval``, 60 s).
_AUDITED_WITHIN = 90.0


def _names(event: Mapping[str, Any], request: httpx.Request) -> bool:
    """Does a ``checkpoint.refused`` record count a refusal of ``request``'s route? It
    names route templates (``POST /v1/proposals/{proposal_id}/approve``): written at
    once, ``request``; counted in a window, ``requests``. A refusal of another route
    with the same code is not this one's record."""
    named = [event.get("request"), *event.get("requests", ())]
    return any(
        isinstance(template, str)
        and re.fullmatch(
            r"[^/]+".join(re.escape(part) for part in re.split(r"\{[^}/]+\}", template)),
            f"{request.method} {request.url.path}",
        )
        is not None
        for template in named
    )


def checkpoint_refusal(
    cp: Checkpoint,
    response: httpx.Response,
    before: float,
    *,
    absent: tuple[str, dict[str, Any]] | None = None,
    targets: tuple[str, ...] = (),
) -> Observation:
    """The observation for a request the checkpoint refused.

    The checkpoint rolls a refused request back whole and, for an authenticated caller,
    records a ``checkpoint.refused`` audit event with the code and the request's route in
    a transaction of its own (a repeat of the caller's code counted, and written at the
    next flush: waited for); an unauthenticated request (401) is only counted
    (``/metrics``). ``absent`` names an audit event that must NOT exist (e.g. the vote
    that was refused).
    """
    code = api_code(response)
    bare = code.split("(", 1)[0].split(" ", 1)[0]
    delta = cp.refusal_count(bare) - before
    parts = [f"checkpoint: refusal counter {bare} +{delta:g}"]
    ok = delta == 1
    if response.status_code != 401:

        def audited() -> list[dict[str, Any]] | None:
            found = cp.audit("checkpoint.refused", code=bare)
            return [e for e in found if _names(e, response.request)] or None

        try:
            recorded = deadline_poll("its record", audited, _AUDITED_WITHIN, step=0.5)
        except TimeoutError:
            recorded = []
        parts.append(
            f"audit checkpoint.refused {bare}" if recorded else "NO checkpoint.refused in audit"
        )
        ok = ok and bool(recorded)
    if absent is not None:
        kind, match = absent
        found = cp.audit(kind, **match)
        parts.append(f"no {kind} in audit" if not found else f"UNEXPECTED {kind} in audit")
        ok = ok and not found
    return Observation(code, "; ".join(parts), ok, targets)
