"""What a person sees of a cloud provider: its name, the kind of a resource, and a link to
the resource in the provider's own web console, for the web app and the CLI alike.

A link is a convenience to check the resource by hand; it is built only from values that
match the provider's id formats (else no link), so an agent-written id can never turn a
link into one to somewhere else. Pure functions over the standard library: no I/O, and
nothing here decides anything.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import quote

__all__ = ["console_url", "delete_words", "provider_name", "resource_kind"]

_NAMES: Final = {"alibaba": "Alibaba Cloud", "aws": "AWS"}
_KINDS: Final = {
    ("alibaba", "ecs.instance"): "ECS instance",
    ("alibaba", "rds.instance"): "RDS database instance",
    ("aws", "ec2.instance"): "EC2 instance",
    ("aws", "rds.instance"): "RDS DB instance",
}
_DELETE: Final = {
    "alibaba": ("delete", "the instance and its system disk are released"),
    "aws": ("terminate", "the instance and its volumes marked delete-on-termination are deleted"),
}
# Tighter than the protocol's shared patterns on purpose: a value outside these gets no
# link, whatever the protocol accepts.
_REGION: Final = re.compile(r"[a-z]{2}(-[a-z0-9]+){1,4}")
_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")


def provider_name(provider: str) -> str:
    """``"AWS"`` for ``aws``, ``"Alibaba Cloud"`` for ``alibaba``; an unknown one as given."""
    return _NAMES.get(provider, provider)


def resource_kind(provider: str, resource_type: str) -> str:
    """``"EC2 instance"``, ``"ECS instance"``…; an unknown pair: the resource type."""
    return _KINDS.get((provider, resource_type), resource_type)


def delete_words(provider: str) -> tuple[str, str]:
    """What the provider calls deleting an instance, and what is lost:
    ``("terminate", "the instance and its volumes … are deleted")`` for AWS."""
    return _DELETE.get(provider, ("delete", "the instance is released"))


def console_url(provider: str, resource_type: str, region: str, resource_id: str) -> str | None:
    """The resource's page in its provider's console, or None when there is none to give
    (an unknown provider or type, a region or id outside the formats, an AWS partition
    with no public console)."""
    if not _REGION.fullmatch(region) or not _ID.fullmatch(resource_id):
        return None
    r, i = quote(region, safe=""), quote(resource_id, safe="")
    if provider == "alibaba":
        if resource_type == "ecs.instance":
            return f"https://ecs.console.aliyun.com/server/{i}/detail?regionId={r}"
        if resource_type == "rds.instance":
            return f"https://rdsnext.console.aliyun.com/detail/{i}/basicInfo?region={r}"
        return None
    if provider == "aws":
        home = _aws_console(r)
        if home is None:
            return None
        if resource_type == "ec2.instance":
            return f"{home}/ec2/home?region={r}#InstanceDetails:instanceId={i}"
        if resource_type == "rds.instance":
            return f"{home}/rds/home?region={r}#database:id={i};is-cluster=false"
    return None


def _aws_console(region: str) -> str | None:
    """The console's origin for the region's partition."""
    if region.startswith("us-gov-"):
        return "https://console.amazonaws-us-gov.com"
    if region.startswith("cn-"):
        return f"https://{region}.console.amazonaws.cn"
    if "-iso" in region:  # the isolated partitions have no console on the internet
        return None
    return f"https://{region}.console.aws.amazon.com"
