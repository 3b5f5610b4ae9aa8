"""The SQS fixtures most SQS test modules share: one real ``casque serve`` per module (no auth, on
the test keyspace) and a boto3 client for it. A module that needs another server (sigv4, a second
process, its own launcher) defines its own ``server`` fixture, which takes precedence."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from daemon.testing import sqsserver


def make_client(url: str, **kw: Any) -> Any:
    """boto3 against a casque serve: one attempt (a retry would hide an error), long polls fit."""
    cfg = Config(retries={"max_attempts": 1}, read_timeout=40, **kw)
    return boto3.client(
        "sqs", endpoint_url=url, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s", config=cfg
    )


@pytest.fixture(scope="module")
def server(settings: Any) -> Iterator[sqsserver.SqsServer]:
    srv = sqsserver.start(settings.cassandra.keyspace)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def sqs(server: sqsserver.SqsServer) -> Any:
    return make_client(server.url)
