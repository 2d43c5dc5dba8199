"""Attacks on configuration: a policy that would let the machine approve deletes.

The checkpoint is started as an operator starts it (``airlock checkpoint``) with the
hostile file, in a directory of its own; it must refuse to start, say why, and leave no
server listening.
"""

from __future__ import annotations

import shutil
import subprocess

import httpx

from .registry import Observation, Target, attack
from .rig import CLI, Rig, free_port, rig_env

__all__: list[str] = []

_AUTO_DELETE = """\
version = 1

[[rule]]
name = "clean-up-everything"
effect = "auto"
match.operation = ["stop", "delete"]
"""


@attack(
    "policy_grants_auto_for_delete",
    surface="checkpoint startup",
    expect="EXIT 2",
    does="The checkpoint is started with a policy file whose rule auto-approves stop and delete.",
)
def _auto_delete(rig: Rig, t: Target) -> Observation:
    home = rig.workdir / t.name
    home.mkdir()
    shutil.copytree(rig.aux_keys_dir, home / "keys")
    (home / "policy.toml").write_text(_AUTO_DELETE)
    port = free_port()
    done = subprocess.run(
        [*CLI, "checkpoint", "--port", str(port)],
        cwd=home,
        env=rig_env(
            {
                "AIRLOCK_CHECKPOINT_DATABASE_URL": f"sqlite:///{home / 'checkpoint.db'}",
                "AIRLOCK_CHECKPOINT_KEYS_DIR": str(home / "keys"),
                "AIRLOCK_CHECKPOINT_POLICY_PATH": str(home / "policy.toml"),
                # Everything else is valid, so the refusal can only be the policy's.
                "AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH": str(rig.aux_receipt_keys),
            }
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    listening = True
    try:
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1.0, trust_env=False)
    except httpx.TransportError:
        listening = False
    said = "refusing to start" in done.stderr and "delete" in done.stderr
    ok = said and not listening
    audit = (
        "stderr: refusing to start, names auto for delete; nothing listening"
        if ok
        else f"stderr {done.stderr.strip()[:200]!r}; listening {listening}"
    )
    return Observation(f"EXIT {done.returncode}", audit, ok)
