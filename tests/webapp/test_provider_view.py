"""The web app names each proposal's provider and links to the resource in its console."""

from __future__ import annotations

import html as _html
from typing import Any

from .conftest import Site
from .fakes import action_value


def _aws(action: dict[str, Any], *, rtype: str, rid: str) -> dict[str, Any]:
    action.update(provider="aws", account="123456789012", region="us-east-1")
    action["resource"] = {"type": rtype, "id": rid}
    if action["operation"] == "stop":
        action["params"] = {}
        action["precondition"]["status"] = "Running"
    else:
        action["precondition"]["status"] = "Stopped"
    return action


def test_an_alibaba_proposal_names_alibaba_and_links_to_the_ecs_console(site: Site) -> None:
    site.sign_in()
    site.fake.add(action_value())
    page = _html.unescape(site.client.get("/proposals/prop_fake000001").text)
    assert 'data-provider="alibaba">Alibaba Cloud ap-southeast-1, account 5123456789012345' in page
    assert (
        'id="console-link" href="https://ecs.console.aliyun.com/server/i-t4n0example/detail'
        '?regionId=ap-southeast-1"' in page
    )
    assert "open in the Alibaba Cloud console" in page
    assert "Stop the ECS instance i-t4n0example in Alibaba Cloud ap-southeast-1" in page
    queue = site.client.get("/").text
    assert '<span class="provider" data-provider="alibaba">Alibaba Cloud</span>' in queue


def test_an_aws_terminate_names_aws_and_links_to_the_ec2_console(site: Site) -> None:
    site.sign_in()
    action = _aws(
        action_value(operation="delete", resource_id="i-0123456789abcdef0"),
        rtype="ec2.instance",
        rid="i-0123456789abcdef0",
    )
    site.fake.add(action)
    page = _html.unescape(site.client.get("/proposals/prop_fake000001").text)
    assert 'id="signed-mismatch"' not in page, "the AWS action is a valid signed action"
    assert 'data-provider="aws">AWS us-east-1, account 123456789012' in page
    assert (
        'href="https://us-east-1.console.aws.amazon.com/ec2/home?region=us-east-1'
        '#InstanceDetails:instanceId=i-0123456789abcdef0"' in page
    )
    assert "Permanently terminate the EC2 instance i-0123456789abcdef0 in AWS us-east-1" in page
    queue = site.client.get("/").text
    assert '<span class="provider" data-provider="aws">AWS</span>' in queue


def test_an_aws_rds_stop_links_to_the_rds_console(site: Site) -> None:
    site.sign_in()
    site.fake.add(_aws(action_value(), rtype="rds.instance", rid="orders-db"))
    page = _html.unescape(site.client.get("/proposals/prop_fake000001").text)
    assert "Stop the RDS DB instance orders-db in AWS us-east-1" in page
    assert (
        'href="https://us-east-1.console.aws.amazon.com/rds/home?region=us-east-1'
        '#database:id=orders-db;is-cluster=false"' in page
    )
