"""``airlock up --cloud aws-moto``: the services against a local moto server, AWS's
double, seeded with a fleet of EC2 and RDS instances and their CloudWatch metrics.

moto runs as ``python -m devstack.aws_demo`` from this checkout (the dev stack is not
part of the installed package, and moto is a dev dependency), keeps everything in
memory and seeds again at each start. The agent reads and the executor writes with keys
of their own, as against AWS; the demo's moto does not enforce IAM (``infra/aws/``
has the policies, and the tests that enforce them use ``devstack.moto``). Not public.
"""

from __future__ import annotations

import enum
import importlib.util
from pathlib import Path
from typing import Final, Literal

__all__ = ["ACCOUNT", "REGION", "AwsMoto", "Cloud", "CloudChoice"]

Cloud = Literal["devcloud", "aws-moto"]


class CloudChoice(enum.StrEnum):
    """``up --cloud``: the values of :data:`Cloud`, as the command line offers them."""

    DEVCLOUD = "devcloud"
    AWS_MOTO = "aws-moto"


#: moto's account: every request lands in it.
ACCOUNT: Final = "123456789012"
REGION: Final = "us-east-1"
#: The demo's idle window, days: the seeding writes a day more of hourly metrics (moto's
#: metric store is slow to fill, so the demo looks at less history than production).
WINDOW_DAYS: Final = 2


class AwsMoto:
    """moto's process for ``up``, and what the agent and the executor are told of it."""

    module = "devstack.aws_demo"

    def __init__(self, home: Path, port: int, instances: int) -> None:
        self.home = home
        self.port = port
        self.instances = instances
        self.url = f"http://127.0.0.1:{port}"
        self.ready_file = home / "moto-fleet.json"
        self.checkout = str(Path(__file__).resolve().parents[2])

    def check(self) -> None:
        """Raise UpError unless this is a checkout with the dev install (moto, devstack)."""
        from ._stack import UpError

        if not (Path(self.checkout) / "devstack" / "aws_demo.py").is_file():
            raise UpError("--cloud aws-moto runs from a checkout of Airlock (devstack/)")
        if importlib.util.find_spec("moto") is None or importlib.util.find_spec("boto3") is None:
            raise UpError("--cloud aws-moto needs the dev install: pip install -e '.[dev]'")
        self.ready_file.unlink(missing_ok=True)  # this start's seeding writes it anew

    def args(self) -> list[str]:
        return [
            "--port",
            str(self.port),
            "--instances",
            str(self.instances),
            "--region",
            REGION,
            "--days",
            str(WINDOW_DAYS + 1),
            "--ready",
            str(self.ready_file),
        ]

    def ready(self) -> bool:
        return self.ready_file.exists()

    def _cloud(self, prefix: str, key: str) -> dict[str, str]:
        return {
            f"{prefix}PROVIDER": "aws",
            f"{prefix}ACCOUNT": ACCOUNT,
            f"{prefix}CLOUD_REGIONS": REGION,
            f"{prefix}AWS_ENDPOINT_URL": self.url,
            f"{prefix}CLOUD_ACCESS_KEY_ID": key,
            f"{prefix}CLOUD_ACCESS_KEY_SECRET": key,
        }

    def agent_env(self) -> dict[str, str]:
        return {
            **self._cloud("AIRLOCK_AGENT_", "demo-read"),
            "AIRLOCK_AGENT_WINDOW_DAYS": str(WINDOW_DAYS),
            "AIRLOCK_AGENT_NET_QUIET_MIN_DAYS": str(WINDOW_DAYS),
        }

    def executor_env(self) -> dict[str, str]:
        return {**self._cloud("AIRLOCK_EXECUTOR_", "demo-write"), "AIRLOCK_EXECUTOR_REGION": REGION}
