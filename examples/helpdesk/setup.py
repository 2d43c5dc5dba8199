"""Set the help desk's gate up against ``make up``'s stack (the demo runs it if needed).

``python -m examples.helpdesk.setup [--home .airlock]`` reads where the stack runs
(``up.json``) and the agent's token (``service-tokens.json``) from the state directory,
pins the checkpoint's key set (``airlock gate keys fetch``), creates the proxy's receipt
key and registers it for the audience ``helpdesk`` in the checkpoint's gate key file
(``airlock gate keys init --register``), and writes the gate's settings for
``airlock mcp proxy`` to ``helpdesk-gate.env`` (mode 0600: it holds the token).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

AUDIENCE = "helpdesk"
ENV_NAME = "helpdesk-gate.env"


def _airlock(*args: str) -> None:
    command = [sys.executable, "-m", "airlock.cli", *args]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)  # noqa: S603 - our own command


def settings(home: Path) -> dict[str, str]:
    """The gate's settings (``AIRLOCK_GATE_*``) in ``home``'s env file, or {} if absent."""
    try:
        text = (home / ENV_NAME).read_text()
    except FileNotFoundError:
        return {}
    return dict(line.partition("=")[::2] for line in text.splitlines() if "=" in line)


def setup(home: Path) -> dict[str, str]:
    """Pin the keys, make and register the receipt key, write the env file.

    Raises OSError, ValueError or KeyError (no ``make up`` state in ``home``), or
    subprocess.CalledProcessError (an ``airlock gate keys`` step failed).
    """
    home = home.resolve()
    up = json.loads((home / "up.json").read_text())
    token = json.loads((home / "service-tokens.json").read_text())["agent"]
    url = up["checkpoint_url"]
    pinned, receipt_key = home / "gate-trusted-keys.json", home / "helpdesk-gate-receipt.pem"
    _airlock("gate", "keys", "fetch", "--checkpoint", url, "--out", str(pinned), "--replace")
    _airlock(
        "gate", "keys", "init", "--out", str(receipt_key),
        "--register", str(home / "gate-keys.json"), "--audience", AUDIENCE,
    )  # fmt: skip
    values = {
        "AIRLOCK_GATE_CHECKPOINT_URL": url,
        "AIRLOCK_GATE_TOKEN": token,
        "AIRLOCK_GATE_KEYS": str(pinned),
        "AIRLOCK_GATE_AUDIENCE": AUDIENCE,
        "AIRLOCK_GATE_PROPOSER": "helpdesk-agent",
        "AIRLOCK_GATE_LEDGER_URL": f"sqlite:///{home / 'helpdesk-gate.db'}",
        "AIRLOCK_GATE_RECEIPT_KEY": str(receipt_key),
    }
    fd = os.open(home / ENV_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.writelines(f"{name}={value}\n" for name, value in values.items())
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.helpdesk.setup", description=__doc__)
    parser.add_argument("--home", type=Path, default=Path(".airlock"), help="up's state directory")
    args = parser.parse_args(argv)
    try:
        setup(args.home)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: no running `make up` state in {args.home}: {exc}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:
        return exc.returncode
    print(f"wrote {args.home / ENV_NAME}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
