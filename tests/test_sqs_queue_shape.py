"""A queue created over SQS: tiny by default (``[sqs] queue_shards`` x ``queue_buckets``), and its shape,
growth cap and idle expiry asked for at CreateQueue as ``casque.*`` attributes or ``casque:*`` tags
(daemon/http/sqs/queue_shape.py), against a real ``casque serve`` with boto3. Bad values get SQS's
error and create nothing; a CreateQueue of an existing queue compares the shape it was created with."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

from daemon.base.config import load_settings
from daemon.base.errors import ConfigError, QueueNotFound
from daemon.engine.client import Casque
from daemon.engine.operations.reshard import reshard
from daemon.testing import sqsserver
from tests.support import sdkbuild
from tests.support.sqsfixtures import make_client

from .conftest import TEST_KEYSPACE


def _name(prefix: str = "shape") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def _shape(cq: Casque, name: str) -> tuple[int, int, int, int]:
    qs = await cq.queue_settings(name, fresh=True)
    return qs.shards, qs.buckets, qs.bucket_seconds, qs.expire_after_s


async def _hidden(cq: Casque, name: str) -> dict[str, str]:
    attrs = (await cq.extras.get(name, fresh=True)).attributes
    return {k: v for k, v in attrs.items() if k.startswith("casque.") and k != "casque.dead_letter"}


async def test_a_queue_created_over_sqs_is_tiny_by_default(sqs: Any, cq: Casque) -> None:
    name = _name()
    sqs.create_queue(QueueName=name)
    assert await _shape(cq, name) == (1, 1, 300, 0)
    assert await _hidden(cq, name) == {
        "casque.shards": "1",
        "casque.buckets": "1",
        "casque.bucket_seconds": "300",
        "casque.max_shards": "16",
        "casque.expire_after": "0",
    }
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    listed = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert not [k for k in listed if k.startswith("casque")]  # the hidden ones are casque's, not SQS's
    sqs.send_message(QueueUrl=url, MessageBody="one row")
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
    assert [m["Body"] for m in got] == ["one row"]


async def test_shape_and_expiry_asked_by_attributes(sqs: Any, cq: Casque) -> None:
    name = _name()
    attrs = {
        "casque.shards": "4",
        "casque.buckets": "2",
        "casque.bucket_seconds": "60",
        "casque.expire_after": "3600",
        "casque.max_shards": "8",
        "VisibilityTimeout": "45",
    }
    sqs.create_queue(QueueName=name, Attributes=attrs)
    assert await _shape(cq, name) == (4, 2, 60, 3600)
    assert (await _hidden(cq, name))["casque.max_shards"] == "8"
    rows = await cq.db.run(
        cq.db.prepare(f"SELECT expire_after_s FROM {TEST_KEYSPACE}.queue_expiry WHERE name = ?"), [name]
    )
    assert [r.expire_after_s for r in rows] == [3600]  # the idle reaper will see it
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])["Attributes"] == {
        "VisibilityTimeout": "45"
    }
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "50", "DelaySeconds": "5"})
    assert (await _hidden(cq, name))["casque.max_shards"] == "8"  # SQS's own attributes leave casque's alone
    with pytest.raises(sqs.exceptions.InvalidAttributeName):  # a shape is asked for at CreateQueue only
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"casque.shards": "8"})
    assert await _shape(cq, name) == (4, 2, 60, 3600)


async def test_shape_and_expiry_asked_by_tags(sqs: Any, cq: Casque) -> None:
    name = _name()
    tags = {"casque:shards": "3", "casque:max-shards": "0", "casque:expire-after": "1d", "team": "a"}
    sqs.create_queue(QueueName=name, tags=tags)
    assert await _shape(cq, name) == (3, 1, 300, 86400)
    assert (await _hidden(cq, name))["casque.max_shards"] == "0"
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == tags  # kept as tags, as given


BAD = [
    ({"Attributes": {"casque.shards": "0"}}, "InvalidAttributeValue"),
    ({"Attributes": {"casque.shards": "two"}}, "InvalidAttributeValue"),
    ({"Attributes": {"casque.shards": "²"}}, "InvalidAttributeValue"),
    ({"Attributes": {"casque.buckets": "2000"}}, "InvalidAttributeValue"),
    ({"Attributes": {"casque.bucket_seconds": "-5"}}, "InvalidAttributeValue"),
    ({"Attributes": {"casque.expire_after": "30"}}, "InvalidAttributeValue"),
    ({"Attributes": {"casque.max_shards": "5000"}}, "InvalidAttributeValue"),
    ({"Attributes": {"casque.colour": "1"}}, "InvalidAttributeName"),
    ({"tags": {"casque:shards": "0"}}, "InvalidParameterValue"),
    ({"tags": {"casque:expire-after": "soon"}}, "InvalidParameterValue"),
    ({"tags": {"casque:size": "big"}}, "InvalidParameterValue"),
    ({"tags": {"casque:shards": "2"}, "Attributes": {"casque.shards": "3"}}, "InvalidParameterValue"),
]


@pytest.mark.parametrize(("request_args", "code"), BAD)
def test_a_bad_shape_gets_sqs_error_and_creates_nothing(sqs: Any, request_args: dict[str, Any], code: str) -> None:
    name = _name("bad")
    with pytest.raises(ClientError) as err:
        sqs.create_queue(QueueName=name, **request_args)
    assert err.value.response["Error"]["Code"] == code
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName=name)


@pytest.mark.parametrize(
    "attrs",
    [{"casque.buckets": "2"}, {"casque.max_shards": "4"}],
)
def test_a_fifo_queue_refuses_buckets_and_growth(sqs: Any, attrs: dict[str, str]) -> None:
    name = _name("bad") + ".fifo"
    with pytest.raises(ClientError) as err:
        sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true", **attrs})
    assert err.value.response["Error"]["Code"] == "InvalidAttributeValue"
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName=name)


async def test_fifo_queues_keep_their_placement_rules(sqs: Any, cq: Casque) -> None:
    plain, wide, asked = (_name("f") + ".fifo" for _ in range(3))
    sqs.create_queue(QueueName=plain, Attributes={"FifoQueue": "true"})
    high = {"DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"}
    sqs.create_queue(QueueName=wide, Attributes={"FifoQueue": "true", **high})
    sqs.create_queue(QueueName=asked, Attributes={"FifoQueue": "true", "casque.shards": "4"})
    assert (await _shape(cq, plain))[:2] == (1, 1)
    assert (await _shape(cq, wide))[:2] == (16, 1)  # high throughput spreads groups over 16 rows
    assert (await _shape(cq, asked))[:2] == (4, 1)
    for q in (plain, wide, asked):
        assert (await _hidden(cq, q))["casque.max_shards"] == "0"  # never resharded: a group stays in one row
    url = sqs.get_queue_url(QueueName=wide)["QueueUrl"]
    for g in range(8):
        sqs.send_message(QueueUrl=url, MessageBody=f"g{g}", MessageGroupId=f"g{g}", MessageDeduplicationId=f"d{g}")
    seen: set[str] = set()
    while len(seen) < 8:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=5).get("Messages", [])
        assert got, f"only {sorted(seen)} received"
        seen |= {m["Body"] for m in got}
        sqs.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
        )


async def test_create_again_compares_the_shape_it_was_created_with(sqs: Any, cq: Casque) -> None:
    name = _name()
    attrs = {"casque.shards": "2", "VisibilityTimeout": "40"}
    url = sqs.create_queue(QueueName=name, Attributes=attrs, tags={"casque:max-shards": "8"})["QueueUrl"]
    assert sqs.create_queue(QueueName=name, Attributes=attrs, tags={"casque:max-shards": "8"})["QueueUrl"] == url
    assert sqs.create_queue(QueueName=name)["QueueUrl"] == url  # nothing asked: nothing to differ
    for other in ({"Attributes": {"casque.shards": "4"}}, {"tags": {"casque:max-shards": "2"}}):
        with pytest.raises(sqs.exceptions.QueueNameExists) as err:
            sqs.create_queue(QueueName=name, **other)
        assert err.value.response["Error"]["Code"] == "QueueAlreadyExists"
    await reshard(cq.stores, name, shards=4)  # grown since: the same request still names the same queue
    assert sqs.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"] == url
    assert await _shape(cq, name) == (4, 1, 300, 0)


async def test_the_default_shape_comes_from_config(settings: Any, cq: Casque) -> None:
    env = {"CASQUE_SQS__QUEUE_SHARDS": "2", "CASQUE_SQS__QUEUE_BUCKETS": "3", "CASQUE_SQS__QUEUE_MAX_SHARDS": "0"}
    srv = sqsserver.start(settings.cassandra.keyspace, env=env)
    try:
        name = _name()
        make_client(srv.url).create_queue(QueueName=name)
        assert await _shape(cq, name) == (2, 3, 300, 0)
        assert (await _hidden(cq, name))["casque.max_shards"] == "0"
    finally:
        srv.stop()


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        (
            "QUEUE_SHARDS",
            "0",
            "sqs.queue_shards in environment variable CASQUE_SQS__QUEUE_SHARDS must be between 1 and 4096, got 0",
        ),
        (
            "QUEUE_BUCKETS",
            "1025",
            "sqs.queue_buckets in environment variable CASQUE_SQS__QUEUE_BUCKETS must be between 1 and 1024",
        ),
        (
            "QUEUE_MAX_SHARDS",
            "-1",
            "sqs.queue_max_shards in environment variable CASQUE_SQS__QUEUE_MAX_SHARDS must not be negative",
        ),
        ("GROW_RATE", "fast", "sqs.grow_rate in environment variable CASQUE_SQS__GROW_RATE must be a number"),
        ("GROW_WINDOW", "soon", "sqs.grow_window in environment variable CASQUE_SQS__GROW_WINDOW must be a duration"),
    ],
)
def test_a_bad_setting_is_one_clear_line(key: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError, match="^" + says.replace("(", r"\(")):
        load_settings(env={f"CASQUE_SQS__{key}": value})
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "serve", "--port", "0"],
        env={"PATH": "/usr/bin:/bin", f"CASQUE_SQS__{key}": value, "CASQUE_CONFIG": "config/casque.toml"},
        cwd=sqsserver.ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1 and says in done.stderr


async def test_nothing_is_left_of_a_refused_create(sqs: Any, cq: Casque) -> None:
    name = _name("bad")
    with pytest.raises(ClientError):
        sqs.create_queue(QueueName=name, Attributes={"casque.shards": "2", "casque.buckets": "0"})
    with pytest.raises(QueueNotFound):
        await cq.queue_settings(name, fresh=True)


async def test_go_sdk_asks_for_a_shape(server: sqsserver.SqsServer, cq: Casque) -> None:
    """The AWS SDK for Go v2 (tests/go/shape.go, built as tests/test_sqs_sdks.py builds it) sends casque.*
    attributes and casque:* tags as they are, and reads the errors as SQS's."""
    name = _name("go")
    done = subprocess.run(
        [*sdkbuild.go_command(), server.url, name, "shape"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "again_same_url": True,
        "different_shape": "QueueAlreadyExists",
        "bad_attribute": "InvalidAttributeValue",
        "bad_tag": "InvalidParameterValue",
    }
    assert await _shape(cq, name) == (2, 1, 300, 3600)
    assert (await _hidden(cq, name))["casque.max_shards"] == "0"
    with pytest.raises(QueueNotFound):
        await cq.queue_settings(name + "-bad", fresh=True)
