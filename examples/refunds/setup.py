"""Set the refunds example's gate up against ``make up``'s stack (README.md, step 2).

``python -m examples.refunds.setup [--home .airlock]`` reads where the stack runs
(``up.json``) and the agent's token (``service-tokens.json``) from the state directory,
pins the checkpoint's key set (``airlock gate keys fetch``), creates the gate's receipt
key and registers it for the audience ``refunds`` in the checkpoint's gate key file
(``airlock gate keys init --register``), and writes the gate's settings to
``refunds-gate.env`` (mode 0600: it holds the token) for the agent to load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

AUDIENCE = "refunds"


def _airlock(*args: str) -> None:
    airlock = Path(sys.executable).with_name("airlock")
    subprocess.run([str(airlock), *args], check=True)  # noqa: S603 - our own command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.refunds.setup", description=__doc__)
    parser.add_argument("--home", type=Path, default=Path(".airlock"), help="up's state directory")
    args = parser.parse_args(argv)
    home: Path = args.home
    try:
        up = json.loads((home / "up.json").read_text())
        token = json.loads((home / "service-tokens.json").read_text())["agent"]
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: no running `make up` state in {home}: {exc}", file=sys.stderr)
        return 1
    url = up["checkpoint_url"]
    pinned, receipt_key = home / "gate-trusted-keys.json", home / "gate-receipt.pem"
    try:
        _airlock("gate", "keys", "fetch", "--checkpoint", url, "--out", str(pinned), "--replace")
        _airlock(
            "gate", "keys", "init", "--out", str(receipt_key),
            "--register", str(home / "gate-keys.json"), "--audience", AUDIENCE,
        )  # fmt: skip
    except subprocess.CalledProcessError as exc:
        return exc.returncode
    settings = {
        "AIRLOCK_GATE_CHECKPOINT_URL": url,
        "AIRLOCK_GATE_TOKEN": token,
        "AIRLOCK_GATE_KEYS": str(pinned),
        "AIRLOCK_GATE_AUDIENCE": AUDIENCE,
        "AIRLOCK_GATE_PROPOSER": "support-agent",
        "AIRLOCK_GATE_LEDGER_URL": f"sqlite:///{home / 'refunds-gate.db'}",
        "AIRLOCK_GATE_RECEIPT_KEY": str(receipt_key),
    }
    env_file = home / "refunds-gate.env"
    fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.writelines(f"{name}={value}\n" for name, value in settings.items())
    print(f"wrote {env_file}; load it with: set -a; . {env_file}; set +a")
    print(f"the web app: {up.get('webapp_url', '(see make up)')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
