"""SigV4 on the SQS endpoint: keys created with ``casque sqs-keys create`` (stored in Cassandra),
a server started with ``--auth sigv4``, and real signing clients (boto3; botocore's signer for a
query-protocol form post). Wrong keys, secrets and unsigned requests get SQS's auth errors and
change nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from daemon.testing import sqsserver
from tests.conftest import ROOT, TEST_KEYSPACE
from tests.test_sqs import raw_post
from tests.test_sqs_query import query, text

ENV = dict(os.environ, CASQUE_CASSANDRA__KEYSPACE=TEST_KEYSPACE)


def casque(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", *args], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def key(settings: Any) -> Iterator[dict[str, str]]:
    out = casque("sqs-keys", "create", "--description", "test", "--json")
    assert out.returncode == 0, out.stderr
    created = json.loads(out.stdout)
    yield created
    casque("sqs-keys", "delete", created["access_key_id"])


@pytest.fixture(scope="module")
def server(key: dict[str, str]) -> Iterator[sqsserver.SqsServer]:
    srv = sqsserver.start(TEST_KEYSPACE, "--auth", "sigv4")
    yield srv
    srv.stop()


def client(url: str, key_id: str, secret: str) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1}),
    )


def test_signed_requests_with_a_stored_key_work(server: sqsserver.SqsServer, key: dict[str, str]) -> None:
    c = client(server.url, key["access_key_id"], key["secret_access_key"])
    name = f"auth-{uuid.uuid4().hex[:8]}"
    url = c.create_queue(QueueName=name)["QueueUrl"]
    c.send_message(QueueUrl=url, MessageBody="signed")
    (m,) = c.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
    c.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    status, root = query(
        url,
        "GetQueueAttributes",
        {"AttributeName.1": "QueueArn"},
        creds=Credentials(key["access_key_id"], key["secret_access_key"]),
    )
    assert status == 200 and text(root, "q:GetQueueAttributesResult/q:Attribute/q:Value").endswith(name)
    listed = casque("sqs-keys", "list", "--json")
    assert key["access_key_id"] in listed.stdout and key["secret_access_key"] not in listed.stdout, (
        "list must never show secrets"
    )


def test_bad_credentials_are_refused_with_sqs_auth_errors(server: sqsserver.SqsServer, key: dict[str, str]) -> None:
    name = f"auth-{uuid.uuid4().hex[:8]}"
    for key_id, secret, expected in (
        (key["access_key_id"], "wrong-secret", "SignatureDoesNotMatch"),
        ("CQNOSUCHKEY00000000", key["secret_access_key"], "InvalidClientTokenId"),
    ):
        with pytest.raises(ClientError) as err:
            client(server.url, key_id, secret).create_queue(QueueName=name)
        assert err.value.response["Error"]["Code"] == expected
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    status, headers, body = raw_post(
        server.url,
        b'{"QueueName": "%s"}' % name.encode(),
        {"content-type": "application/x-amz-json-1.0", "x-amz-target": "AmazonSQS.CreateQueue"},
    )
    assert status == 403 and json.loads(body)["__type"].endswith("MissingAuthenticationToken")
    status, root = query(
        server.url, "CreateQueue", {"QueueName": name}, creds=Credentials(key["access_key_id"], "nope")
    )
    assert status == 403 and text(root, "q:Error/q:Code") == "SignatureDoesNotMatch"
    good = client(server.url, key["access_key_id"], key["secret_access_key"])
    assert "QueueUrls" not in good.list_queues(QueueNamePrefix=name), "a refused request created something"


def test_serve_refuses_to_listen_beyond_loopback_without_auth() -> None:
    out = casque("serve", "--host", "0.0.0.0", "--port", "0")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "--auth sigv4" in out.stderr
