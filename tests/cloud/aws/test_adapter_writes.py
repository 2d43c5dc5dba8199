"""AwsWriter against moto's server with IAM enforced, judged by moto's own record."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from airlock.cloud.aws import AwsConfig, map_vendor_error
from airlock.cloud.aws.writer import AwsWriter
from airlock.cloud.ports import (
    CloudWriter,
    DefiniteRefusal,
    Ec2Writer,
    IncorrectState,
    PermissionDenied,
    ResourceNotFound,
    UnknownOutcome,
)
from devstack.moto import MotoHandle
from devstack.ports import free_port

REGION = "us-east-1"


def _status(moto: MotoHandle, iid: str) -> str:
    answer = moto.client("ec2", REGION).describe_instances(InstanceIds=[iid])
    return str(answer["Reservations"][0]["Instances"][0]["State"]["Name"])


def test_writer_implements_the_port(moto: MotoHandle) -> None:
    writer = moto.writer()
    assert isinstance(writer, CloudWriter)
    assert isinstance(writer, Ec2Writer)


def test_the_read_credentials_are_refused_every_write(moto: MotoHandle, rds_name: str) -> None:
    iid, other = moto.seed_ec2(REGION, 2)
    moto.seed_rds(REGION, rds_name)
    moto.reset_record()
    as_reader = moto.writer(key="reader")
    with pytest.raises(PermissionDenied) as stop:
        as_reader.stop_ec2(REGION, iid)
    with pytest.raises(PermissionDenied) as terminate:
        as_reader.terminate_ec2(REGION, other)
    with pytest.raises(PermissionDenied):
        as_reader.stop_rds(REGION, rds_name)
    assert (stop.value.code, terminate.value.code) == ("AccessDenied", "AccessDenied")
    # Each reached moto, which refused it under the reader's IAM policy: nothing changed.
    assert [w.action for w in moto.writes(key="reader")] == [
        "StopInstances",
        "TerminateInstances",
        "StopDBInstance",
    ]
    assert (_status(moto, iid), _status(moto, other)) == ("running", "running")


def test_stop_sends_one_stop_instances_with_hibernate_off(moto: MotoHandle) -> None:
    (iid,) = moto.seed_ec2(REGION, 1)
    moto.reset_record()
    result = moto.writer().stop_ec2(REGION, iid)
    (write,) = moto.writes()
    assert (write.action, write.ids, write.region) == ("StopInstances", (iid,), REGION)
    assert (write.params["Hibernate"], write.params["Force"]) == ("false", "false")
    assert write.access_key_id == moto.keys["writer"].access_key_id
    assert result.request_id
    assert _status(moto, iid) == "stopped"


def test_terminate_sends_one_terminate_instances(moto: MotoHandle) -> None:
    (iid,) = moto.seed_ec2(REGION, 1)
    moto.client("ec2", REGION).stop_instances(InstanceIds=[iid])
    moto.reset_record()
    moto.writer().terminate_ec2(REGION, iid)
    assert [(w.action, w.ids) for w in moto.writes()] == [("TerminateInstances", (iid,))]
    assert moto.reader().get_state(REGION, "ec2.instance", iid) is None


def test_rds_stop_sends_one_stop_db_instance(moto: MotoHandle, rds_name: str) -> None:
    moto.seed_rds(REGION, rds_name)
    moto.reset_record()
    moto.writer().stop_rds(REGION, rds_name)
    assert [(w.action, w.ids) for w in moto.writes()] == [("StopDBInstance", (rds_name,))]
    state = moto.reader().get_state(REGION, "rds.instance", rds_name)
    assert state is not None and state.status == "Stopped"


def test_refusals_map_onto_the_error_tree(moto: MotoHandle, rds_name: str) -> None:
    writer = moto.writer()
    with pytest.raises(ResourceNotFound):
        writer.stop_ec2(REGION, "i-0123456789abcdef0")
    with pytest.raises(ResourceNotFound):
        writer.stop_rds(REGION, "no-such-db")
    moto.seed_rds(REGION, rds_name)
    writer.stop_rds(REGION, rds_name)
    with pytest.raises(IncorrectState):
        writer.stop_rds(REGION, rds_name)


@pytest.mark.parametrize(
    "bad", ["i-0123456789ABCDEF0", "i-t4n0example", "rm-t4n0example", "i-01234567\n"]
)
def test_ids_outside_the_kernel_format_are_refused_before_any_call(bad: str) -> None:
    writer = AwsWriter(AwsConfig("AKIDEXAMPLE", "secret", endpoint_url="http://127.0.0.1:9"))
    with pytest.raises(ValueError, match="not an EC2"):
        writer.stop_ec2(REGION, bad)
    with pytest.raises(ValueError, match="not an EC2"):
        writer.terminate_ec2(REGION, bad)


class _Failing(BaseHTTPRequestHandler):
    hits = 0

    def do_POST(self) -> None:
        type(self).hits += 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(503)
        self.send_header("Content-Type", "text/xml")
        body = (
            b"<Response><Errors><Error><Code>Unavailable</Code><Message>down</Message>"
            b"</Error></Errors><RequestID>r-1</RequestID></Response>"
        )
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def failing_endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_5xx_is_an_unknown_outcome_sent_exactly_once(failing_endpoint: str) -> None:
    _Failing.hits = 0
    writer = AwsWriter(AwsConfig("AKIDEXAMPLE", "secret", endpoint_url=failing_endpoint))
    with pytest.raises(UnknownOutcome):
        writer.stop_ec2(REGION, "i-0123456789abcdef0")
    assert _Failing.hits == 1  # botocore's retries are off: the caller probes instead


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": "m"},
            "ResponseMetadata": {"HTTPStatusCode": status, "RequestId": "r-1"},
        },
        "StopInstances",
    )


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("InvalidInstanceID.NotFound", 400, ResourceNotFound),
        ("DBInstanceNotFound", 404, ResourceNotFound),
        ("UnauthorizedOperation", 403, PermissionDenied),
        ("AuthFailure", 401, PermissionDenied),
        ("IncorrectInstanceState", 400, IncorrectState),
        ("InvalidDBInstanceState", 400, IncorrectState),
        ("OperationNotPermitted", 400, DefiniteRefusal),
        ("InvalidParameterValue", 400, DefiniteRefusal),
        ("RequestLimitExceeded", 503, UnknownOutcome),
        ("Throttling", 400, UnknownOutcome),
        ("InternalError", 500, UnknownOutcome),
        ("SomethingNew", 400, UnknownOutcome),  # unknown codes are probed, never assumed
    ],
)
def test_botocore_errors_map_onto_the_ports(code: str, status: int, kind: type) -> None:
    mapped = map_vendor_error(_client_error(code, status))
    assert type(mapped) is kind
    assert (mapped.code, mapped.request_id) == (code, "r-1")


def test_a_read_timeout_is_an_unknown_outcome() -> None:
    mapped = map_vendor_error(ReadTimeoutError(endpoint_url="http://127.0.0.1:9"))
    assert isinstance(mapped, UnknownOutcome)


def test_config_refuses_half_credentials_and_bad_role_arns() -> None:
    with pytest.raises(ValueError, match="secret"):
        AwsConfig(access_key_id="AKID")
    with pytest.raises(ValueError, match="profile"):
        AwsConfig("AKID", "s", profile="prod")
    with pytest.raises(ValueError, match="role ARN"):
        AwsConfig(role_arn="arn:aws:iam::12345:role/x")
    assert "s3cr3t" not in repr(AwsConfig("AKID", "s3cr3t"))
    with pytest.raises(ValueError, match="http"):
        AwsConfig(endpoint_url="ftp://x")


def test_a_role_arn_makes_every_call_as_the_assumed_role(moto: MotoHandle) -> None:
    iam = moto.client("iam")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                # moto matches the principal literally (an account's root does not stand
                # for its users there), so the trust names the user that assumes it.
                "Principal": {"AWS": "arn:aws:iam::123456789012:user/airlock-admin"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    role = iam.create_role(RoleName="airlock-stopper", AssumeRolePolicyDocument=json.dumps(trust))
    iam.put_role_policy(
        RoleName="airlock-stopper",
        PolicyName="stop",
        PolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "ec2:StopInstances", "Resource": "*"}],
            }
        ),
    )
    (iid,) = moto.seed_ec2(REGION, 1)
    admin = moto.keys["admin"]
    config = AwsConfig(
        admin.access_key_id,
        admin.secret_access_key,
        role_arn=role["Role"]["Arn"],
        endpoint_url=moto.url,
    )
    moto.reset_record()
    AwsWriter(config).stop_ec2(REGION, iid)
    (write,) = moto.writes(action="StopInstances")
    assert write.access_key_id not in {k.access_key_id for k in moto.keys.values()}
    assert _status(moto, iid) == "stopped"
