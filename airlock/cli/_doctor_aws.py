"""``airlock doctor``'s AWS checks: whose credentials a service holds, and that they can
describe instances, without writing anything.

Two calls per service, both read-only: STS ``GetCallerIdentity`` (who the credentials
are; every principal may call it) and EC2 ``DescribeInstances`` with ``DryRun`` (EC2
answers ``DryRunOperation`` when the call would be allowed and ``UnauthorizedOperation``
when not, and lists nothing either way). The identity's account must be the account the
service is bound to. No retries: a doctor reports what it sees once. Not public.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ._text import inert

if TYPE_CHECKING:
    import boto3
    from mypy_boto3_ec2 import EC2Client

    from airlock.settings import AgentSettings, ExecutorSettings

__all__ = ["AwsTarget", "aws_checks", "settings_checks"]

Status = Literal["ok", "warn", "fail"]
_DENIED = frozenset({"UnauthorizedOperation", "AccessDenied", "AccessDeniedException"})
_BAD_KEYS = frozenset(
    {"InvalidClientTokenId", "SignatureDoesNotMatch", "AuthFailure", "ExpiredToken"}
)


@dataclass(frozen=True, slots=True)
class AwsTarget:
    """What one service uses: its session (profile, role or keys), region, endpoint (None:
    AWS's own; a local moto server in dev) and the account it is bound to."""

    service: str  # "agent" or "executor"
    session: boto3.Session
    region: str
    endpoint_url: str | None
    account: str


def aws_checks(target: AwsTarget) -> list[tuple[Status, str, str]]:
    """The checks' (status, name, detail), in order; never raises for a cloud answer."""
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    name = f"aws.{target.service}"
    config = Config(
        retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=10
    )

    try:
        sts = target.session.client(
            "sts", region_name=target.region, endpoint_url=target.endpoint_url, config=config
        )
        ident = sts.get_caller_identity()
    except NoCredentialsError:
        return [("fail", name, "no AWS credentials found (profile, role or keys)")]
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        why = "refused" if code in _BAD_KEYS else "failed"
        return [("fail", name, f"sts:GetCallerIdentity {why}: {inert(code)}")]
    except BotoCoreError as exc:
        return [("fail", name, f"sts:GetCallerIdentity failed: {inert(str(exc))}")]
    arn, account = str(ident.get("Arn", "")), str(ident.get("Account", ""))
    out: list[tuple[Status, str, str]] = [
        ("ok", name, f"credentials of {inert(arn)} (account {inert(account)})")
    ]
    if target.account and account != target.account:
        out.append(
            (
                "fail",
                f"{name}.account",
                f"the credentials are account {inert(account)}, the {target.service} is "
                f"bound to {inert(target.account)}",
            )
        )
    ec2 = target.session.client(
        "ec2", region_name=target.region, endpoint_url=target.endpoint_url, config=config
    )
    out.append(_describe_dry_run(ec2, name, target.region))
    return out


def _describe_dry_run(ec2: EC2Client, name: str, region: str) -> tuple[Status, str, str]:
    from botocore.exceptions import BotoCoreError, ClientError

    check = f"{name}.describe"
    try:
        ec2.describe_instances(DryRun=True, MaxResults=5)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code == "DryRunOperation":
            return ("ok", check, f"may call ec2:DescribeInstances in {region} (dry run)")
        if code in _DENIED:
            return ("fail", check, f"ec2:DescribeInstances in {region} is denied: {inert(code)}")
        return ("fail", check, f"ec2:DescribeInstances dry run failed: {inert(code)}")
    except BotoCoreError as exc:
        return ("fail", check, f"ec2:DescribeInstances dry run failed: {inert(str(exc))}")
    # An endpoint that ignores DryRun has listed instances: still nothing was written.
    return ("warn", check, f"ec2:DescribeInstances in {region} answered without a dry run")


def settings_checks(
    service: str, settings: AgentSettings | ExecutorSettings
) -> list[tuple[Status, str, str]]:
    """:func:`aws_checks` for a service whose provider is aws, with the credentials,
    region, endpoint and account its settings give it; [] for another provider."""
    from airlock.settings import AgentSettings

    if settings.provider != "aws":
        return []
    from airlock.cloud.aws import AwsConfig
    from airlock.cloud.aws._common import _session  # the adapter's own credential chain

    region = settings.cloud_regions[0] if isinstance(settings, AgentSettings) else settings.region
    try:
        session = _session(AwsConfig.from_settings(settings))
    except Exception as exc:  # a role that cannot be assumed, a profile that is not there
        return [("fail", f"aws.{service}", f"no session: {inert(str(exc))}")]
    target = AwsTarget(
        service, session, region, settings.aws_endpoint_url, settings.account_or_default()
    )
    return aws_checks(target)
