"""airlock approvals names each proposal's provider and links to the resource's console."""

from __future__ import annotations

import json

from tests.checkpoint.builders import action_value

from .conftest import Served


def _submit_aws(served: Served) -> dict[str, object]:
    value = action_value(proposal_id="prop_aws00000001", operation="delete")
    value.update(provider="aws", account="123456789012", region="eu-west-2")
    value["resource"] = {"type": "ec2.instance", "id": "i-0123456789abcdef0"}
    value["precondition"]["status"] = "Stopped"
    world = served.world
    response = world.client.post(
        "/v1/proposals",
        content=json.dumps(value).encode(),
        headers={**world.auth("agent"), "Content-Type": "application/json"},
    )
    assert response.status_code == 201, response.text
    body: dict[str, object] = response.json()
    return body


def test_show_and_list_name_the_provider_and_link_to_its_console(served: Served) -> None:
    alibaba = served.submit(proposal_id="prop_ali00000001")
    aws = _submit_aws(served)
    served.login("alice")
    shown = served.run("approvals", "show", alibaba["id"])
    assert shown.exit_code == 0, shown.output
    assert "STOP the ECS instance i-t4n0example in Alibaba Cloud ap-southeast-1" in shown.stdout
    assert (
        "where      Alibaba Cloud ap-southeast-1, account 5123456789012345; console "
        "https://ecs.console.aliyun.com/server/i-t4n0example/detail?regionId=ap-southeast-1"
    ) in shown.stdout
    shown = served.run("approvals", "show", str(aws["id"]))
    assert shown.exit_code == 0, shown.output
    assert "PERMANENTLY TERMINATE the EC2 instance i-0123456789abcdef0 in AWS eu-west-2" in (
        shown.stdout
    )
    assert (
        "where      AWS eu-west-2, account 123456789012; console https://eu-west-2.console."
        "aws.amazon.com/ec2/home?region=eu-west-2#InstanceDetails:instanceId=i-0123456789abcdef0"
    ) in shown.stdout
    table = served.run("approvals", "list")
    assert table.exit_code == 0, table.output
    assert "PROVIDER" in table.stdout
    rows = {line.split()[0]: line.split() for line in table.stdout.splitlines()[1:] if line}
    assert rows["prop_ali00000001"][4] == "alibaba"
    assert rows["prop_aws00000001"][4] == "aws"
