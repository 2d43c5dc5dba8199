"""airlock.consoles: provider names and console links, and no link from a forged value."""

from __future__ import annotations

import pytest

from airlock.consoles import console_url, delete_words, provider_name, resource_kind


@pytest.mark.parametrize(
    ("provider", "rtype", "region", "rid", "url"),
    [
        (
            "alibaba",
            "ecs.instance",
            "ap-southeast-1",
            "i-t4n0example",
            "https://ecs.console.aliyun.com/server/i-t4n0example/detail?regionId=ap-southeast-1",
        ),
        (
            "alibaba",
            "rds.instance",
            "cn-hangzhou",
            "rm-bp1example",
            "https://rdsnext.console.aliyun.com/detail/rm-bp1example/basicInfo?region=cn-hangzhou",
        ),
        (
            "aws",
            "ec2.instance",
            "us-east-1",
            "i-0123456789abcdef0",
            "https://us-east-1.console.aws.amazon.com/ec2/home?region=us-east-1"
            "#InstanceDetails:instanceId=i-0123456789abcdef0",
        ),
        (
            "aws",
            "rds.instance",
            "eu-west-2",
            "orders-db",
            "https://eu-west-2.console.aws.amazon.com/rds/home?region=eu-west-2"
            "#database:id=orders-db;is-cluster=false",
        ),
        (
            "aws",
            "ec2.instance",
            "us-gov-west-1",
            "i-0123abcd",
            "https://console.amazonaws-us-gov.com/ec2/home?region=us-gov-west-1"
            "#InstanceDetails:instanceId=i-0123abcd",
        ),
        (
            "aws",
            "ec2.instance",
            "cn-north-1",
            "i-0123abcd",
            "https://cn-north-1.console.amazonaws.cn/ec2/home?region=cn-north-1"
            "#InstanceDetails:instanceId=i-0123abcd",
        ),
    ],
)
def test_each_provider_links_to_its_console(
    provider: str, rtype: str, region: str, rid: str, url: str
) -> None:
    assert console_url(provider, rtype, region, rid) == url


@pytest.mark.parametrize(
    ("provider", "rtype", "region", "rid"),
    [
        ("aws", "ec2.instance", "us-east-1", "i-1/../../evil"),
        ("aws", "ec2.instance", "us-east-1", "i-1#x"),
        ("aws", "ec2.instance", "us-east-1.evil.example", "i-0123abcd"),
        ("aws", "ec2.instance", "us-east-1", "i-0123abcd?next=https://evil.example"),
        ("alibaba", "ecs.instance", "ap-southeast-1", "i-1@evil.example"),
        ("alibaba", "ecs.instance", "AP-southeast-1", "i-t4n0example"),
        ("aws", "ec2.instance", "us-isob-east-1", "i-0123abcd"),  # no public console
        ("aws", "ecs.instance", "us-east-1", "i-0123abcd"),  # a type AWS does not have
        ("gcp", "ec2.instance", "us-east-1", "i-0123abcd"),
    ],
)
def test_a_forged_or_unknown_value_gets_no_link(
    provider: str, rtype: str, region: str, rid: str
) -> None:
    assert console_url(provider, rtype, region, rid) is None


def test_names_and_kinds() -> None:
    assert provider_name("aws") == "AWS"
    assert provider_name("alibaba") == "Alibaba Cloud"
    assert provider_name("other") == "other"
    assert resource_kind("aws", "ec2.instance") == "EC2 instance"
    assert resource_kind("aws", "rds.instance") == "RDS DB instance"
    assert resource_kind("alibaba", "ecs.instance") == "ECS instance"
    assert resource_kind("alibaba", "rds.instance") == "RDS database instance"


def test_a_delete_is_named_as_its_provider_names_it() -> None:
    assert delete_words("aws")[0] == "terminate"
    assert delete_words("alibaba") == ("delete", "the instance and its system disk are released")
