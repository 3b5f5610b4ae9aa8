"""SQS permissions, attacked through real clients: keys with grants (``casque sqs-keys create
--actions ... --queues ...``), queue Policies and AddPermission/RemovePermission, against a real
``casque serve --auth sigv4`` process and boto3. Every refusal is SQS's (AccessDenied, 403) and is
checked to have changed nothing, through a full-access key."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from daemon.testing import sqsserver
from tests.conftest import TEST_KEYSPACE
from tests.test_sqs_auth import casque, client
from tests.test_sqs_query import query, text

ACCOUNT = "000000000000"


def make_key(*args: str) -> dict[str, str]:
    out = casque("sqs-keys", "create", "--description", "perm-test", "--json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def rid() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def keys(settings: Any, rid: str) -> Iterator[dict[str, dict[str, str]]]:
    made = {
        "admin": make_key(),
        "user42": make_key("--actions", "ReceiveMessage,DeleteMessage", "--queues", f"user-42-{rid}"),
        "glob": make_key("--actions", "sqs:Send*,GetQueueUrl,ListQueues", "--queues", f"g{rid}-*"),
        "other": make_key("--actions", "SendMessage", "--queues", f"elsewhere-{rid}"),
        "third": make_key("--actions", "SendMessage", "--queues", f"elsewhere-{rid}"),
    }
    yield made
    for k in made.values():
        casque("sqs-keys", "delete", k["access_key_id"])


@pytest.fixture(scope="module")
def server(keys: dict[str, dict[str, str]]) -> Iterator[sqsserver.SqsServer]:
    srv = sqsserver.start(TEST_KEYSPACE, "--auth", "sigv4")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def as_key(server: sqsserver.SqsServer, keys: dict[str, dict[str, str]]) -> Callable[[str], Any]:
    return lambda who: client(server.url, keys[who]["access_key_id"], keys[who]["secret_access_key"])


def arn(queue: str) -> str:
    return f"arn:aws:sqs:us-east-1:{ACCOUNT}:{queue}"


def user_arn(key: dict[str, str]) -> str:
    return f"arn:aws:iam::{ACCOUNT}:user/{key['access_key_id']}"


def refused(call: Callable[..., Any], **kwargs: Any) -> ClientError:
    """Run a call that must be refused with AccessDenied (HTTP 403); return the error."""
    with pytest.raises(ClientError) as err:
        call(**kwargs)
    assert err.value.response["Error"]["Code"] == "AccessDenied", err.value.response
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    return err.value


def invalid_attribute(call: Callable[..., Any], **kwargs: Any) -> str:
    with pytest.raises(ClientError) as err:
        call(**kwargs)
    assert err.value.response["Error"]["Code"] == "InvalidAttributeValue", err.value.response
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    return str(err.value.response["Error"]["Message"])


def snapshot(admin: Any, url: str) -> dict[str, str]:
    """Everything about a queue a refused call could have changed: its settings, policy and counts."""
    attrs = admin.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    attrs.pop("LastModifiedTimestamp")  # compared separately where it matters; seconds resolution
    return attrs


def policy_of(admin: Any, url: str) -> str | None:
    return admin.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"]).get("Attributes", {}).get("Policy")


def policy(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def test_scoped_key_receives_and_deletes_on_its_queue_and_nothing_else(
    as_key: Callable[[str], Any], keys: dict[str, dict[str, str]], rid: str
) -> None:
    admin, user = as_key("admin"), as_key("user42")
    mine = admin.create_queue(QueueName=f"user-42-{rid}")["QueueUrl"]
    theirs = admin.create_queue(QueueName=f"user-43-{rid}")["QueueUrl"]
    for url in (mine, theirs):
        admin.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(3)])
    (m,) = user.receive_message(QueueUrl=mine, WaitTimeSeconds=5)["Messages"]
    user.delete_message(QueueUrl=mine, ReceiptHandle=m["ReceiptHandle"])
    (foreign,) = admin.receive_message(QueueUrl=theirs, WaitTimeSeconds=5, VisibilityTimeout=600)["Messages"]
    with pytest.raises(
        ClientError
    ) as bad:  # user-43's receipt through user-42's URL (where the key may delete): nothing deleted
        user.delete_message(QueueUrl=mine, ReceiptHandle=foreign["ReceiptHandle"])
    assert bad.value.response["Error"]["Code"] == "ReceiptHandleIsInvalid"
    before = {url: snapshot(admin, url) for url in (mine, theirs)}
    assert (
        before[mine]["ApproximateNumberOfMessages"] == "2"
        and before[theirs]["ApproximateNumberOfMessagesNotVisible"] == "1"
    )
    err = refused(user.send_message, QueueUrl=mine, MessageBody="not allowed")
    assert err.response["Error"]["Message"] == (
        f"User: {user_arn(keys['user42'])} is not authorized to perform: sqs:SendMessage on resource: "
        f"{arn(f'user-42-{rid}')} because no identity-based policy allows the sqs:SendMessage action"
    )
    refused(user.purge_queue, QueueUrl=mine)
    refused(user.delete_queue, QueueUrl=mine)
    open_to_all = policy({"Effect": "Allow", "Principal": "*", "Action": "*", "Resource": "*"})
    refused(user.set_queue_attributes, QueueUrl=mine, Attributes={"Policy": open_to_all, "VisibilityTimeout": "1"})
    refused(user.add_permission, QueueUrl=mine, Label="me", AWSAccountIds=[ACCOUNT], Actions=["*"])
    refused(user.get_queue_attributes, QueueUrl=mine, AttributeNames=["All"])
    refused(user.receive_message, QueueUrl=theirs, WaitTimeSeconds=0)
    refused(user.send_message, QueueUrl=theirs, MessageBody="not allowed")
    refused(user.delete_message, QueueUrl=theirs, ReceiptHandle=foreign["ReceiptHandle"])
    refused(user.purge_queue, QueueUrl=theirs)
    refused(user.delete_queue, QueueUrl=theirs)
    refused(user.create_queue, QueueName=f"user-44-{rid}")
    refused(user.get_queue_url, QueueName=f"user-43-{rid}")
    refused(user.list_queues)
    refused(user.receive_message, QueueUrl=mine.replace(f"user-42-{rid}", f"nosuch-{rid}"))  # no existence leak either
    assert {url: snapshot(admin, url) for url in (mine, theirs)} == before, "a refused call changed a queue"
    assert policy_of(admin, mine) is None
    assert "QueueUrls" not in admin.list_queues(QueueNamePrefix=f"user-44-{rid}")


def test_a_glob_grant_covers_matching_queues_and_batches_as_their_single_action(
    as_key: Callable[[str], Any], rid: str
) -> None:
    admin, glob = as_key("admin"), as_key("glob")
    a, b = (admin.create_queue(QueueName=f"g{rid}-{n}")["QueueUrl"] for n in ("a", "b"))
    outside = admin.create_queue(QueueName=f"h{rid}-a")["QueueUrl"]
    assert glob.get_queue_url(QueueName=f"g{rid}-b")["QueueUrl"] == b
    glob.send_message(QueueUrl=a, MessageBody="one")
    result = glob.send_message_batch(
        QueueUrl=b, Entries=[{"Id": "x", "MessageBody": "two"}, {"Id": "y", "MessageBody": "three"}]
    )
    assert len(result["Successful"]) == 2
    refused(glob.send_message, QueueUrl=outside, MessageBody="no")
    refused(glob.receive_message, QueueUrl=a)
    counts = [
        admin.get_queue_attributes(QueueUrl=u, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"][
            "ApproximateNumberOfMessages"
        ]
        for u in (a, b, outside)
    ]
    assert counts == ["1", "2", "0"]


def test_list_queues_shows_a_scoped_key_only_its_queues(as_key: Callable[[str], Any], rid: str) -> None:
    admin, glob = as_key("admin"), as_key("glob")
    for n in ("l1", "l2"):
        admin.create_queue(QueueName=f"g{rid}-{n}")
    admin.create_queue(QueueName=f"gx{rid}-l3")
    seen = glob.list_queues(QueueNamePrefix="g")["QueueUrls"]
    assert all(u.rsplit("/", 1)[-1].startswith(f"g{rid}-") for u in seen)
    assert {f"g{rid}-l1", f"g{rid}-l2"} <= {u.rsplit("/", 1)[-1] for u in seen}
    assert f"gx{rid}-l3" in {u.rsplit("/", 1)[-1] for u in admin.list_queues(QueueNamePrefix=f"gx{rid}")["QueueUrls"]}
    refused(as_key("user42").list_queues)


def test_a_deny_all_policy_refuses_even_a_full_key(as_key: Callable[[str], Any], rid: str) -> None:
    admin = as_key("admin")
    url = admin.create_queue(QueueName=f"deny-{rid}")["QueueUrl"]
    deny = policy(
        {
            "Sid": "no-sends",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "sqs:SendMessage",
            "Resource": arn(f"deny-{rid}"),
        }
    )
    admin.set_queue_attributes(QueueUrl=url, Attributes={"Policy": deny})
    assert json.loads(policy_of(admin, url) or "{}") == json.loads(deny)
    err = refused(admin.send_message, QueueUrl=url, MessageBody="denied")
    assert "explicit deny" in err.response["Error"]["Message"]
    refused(admin.send_message_batch, QueueUrl=url, Entries=[{"Id": "1", "MessageBody": "denied"}])
    assert admin.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"] == {
        "ApproximateNumberOfMessages": "0"
    }
    admin.set_queue_attributes(QueueUrl=url, Attributes={"Policy": ""})
    admin.send_message(QueueUrl=url, MessageBody="allowed again")


def test_under_auth_none_deny_statements_for_everyone_still_apply(settings: Any, rid: str) -> None:
    srv = sqsserver.start(TEST_KEYSPACE, "--auth", "none")
    try:
        anon = client(srv.url, "anything", "anything")
        url = anon.create_queue(QueueName=f"anon-{rid}")["QueueUrl"]
        for_account = policy({"Effect": "Deny", "Principal": {"AWS": ACCOUNT}, "Action": "sqs:*", "Resource": "*"})
        anon.set_queue_attributes(QueueUrl=url, Attributes={"Policy": for_account})
        anon.send_message(QueueUrl=url, MessageBody="the anonymous caller is no account's key")
        everyone = policy({"Effect": "Deny", "Principal": "*", "Action": "sqs:SendMessage", "Resource": "*"})
        anon.set_queue_attributes(QueueUrl=url, Attributes={"Policy": everyone})
        err = refused(anon.send_message, QueueUrl=url, MessageBody="denied")
        assert "anonymous" in err.response["Error"]["Message"]
        counts = anon.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
        assert counts == {"ApproximateNumberOfMessages": "1"}
    finally:
        srv.stop()


def test_an_allow_policy_for_one_principal_lets_that_key_act(
    as_key: Callable[[str], Any], keys: dict[str, dict[str, str]], rid: str
) -> None:
    admin, other, third = as_key("admin"), as_key("other"), as_key("third")
    url = admin.create_queue(QueueName=f"allow-{rid}")["QueueUrl"]
    refused(other.send_message, QueueUrl=url, MessageBody="not yet")
    allow = policy(
        {
            "Sid": "other-sends",
            "Effect": "Allow",
            "Principal": {"AWS": [user_arn(keys["other"])]},
            "Action": ["sqs:SendMessage", "sqs:GetQueueAttributes"],
            "Resource": arn(f"allow-{rid}"),
        }
    )
    admin.set_queue_attributes(QueueUrl=url, Attributes={"Policy": allow})
    other.send_message(QueueUrl=url, MessageBody="allowed by the queue's policy")
    assert other.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"] == {
        "ApproximateNumberOfMessages": "1"
    }
    refused(other.purge_queue, QueueUrl=url)  # the policy allows only what it names
    refused(third.send_message, QueueUrl=url, MessageBody="another key: not named")
    assert admin.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"] == {
        "ApproximateNumberOfMessages": "1"
    }


@pytest.mark.parametrize("network, allowed", [("127.0.0.0/8", True), ("10.0.0.0/8", False)])
def test_a_source_ip_condition_allows_and_refuses(
    as_key: Callable[[str], Any], keys: dict[str, dict[str, str]], rid: str, network: str, allowed: bool
) -> None:
    admin, other = as_key("admin"), as_key("other")
    name = f"ip-{rid}-{network.split('.')[0]}"
    url = admin.create_queue(QueueName=name)["QueueUrl"]
    admin.set_queue_attributes(
        QueueUrl=url,
        Attributes={
            "Policy": policy(
                {
                    "Effect": "Allow",
                    "Principal": {"AWS": user_arn(keys["other"])},
                    "Action": "sqs:SendMessage",
                    "Resource": arn(name),
                    "Condition": {"IpAddress": {"aws:SourceIp": network}},
                }
            )
        },
    )
    if allowed:
        other.send_message(QueueUrl=url, MessageBody="from 127.0.0.1")
    else:
        refused(other.send_message, QueueUrl=url, MessageBody="from 127.0.0.1, not 10/8")
    # and a Deny for every request not from the network: refuses the full key exactly when the Allow didn't
    admin.set_queue_attributes(
        QueueUrl=url,
        Attributes={
            "Policy": policy(
                {
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "sqs:SendMessage",
                    "Resource": "*",
                    "Condition": {"NotIpAddress": {"aws:SourceIp": [network]}},
                }
            )
        },
    )
    if allowed:
        admin.send_message(QueueUrl=url, MessageBody="from inside")
    else:
        refused(admin.send_message, QueueUrl=url, MessageBody="from outside")
    count = admin.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    assert count == {"ApproximateNumberOfMessages": "2" if allowed else "0"}


@pytest.mark.parametrize("operator, allowed", [("DateGreaterThan", True), ("DateLessThan", False)])
def test_a_current_time_condition_allows_and_refuses(
    as_key: Callable[[str], Any], keys: dict[str, dict[str, str]], rid: str, operator: str, allowed: bool
) -> None:
    admin, other = as_key("admin"), as_key("other")
    name = f"time-{rid}-{operator[4:8].lower()}"
    url = admin.create_queue(QueueName=name)["QueueUrl"]
    yesterday = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    admin.set_queue_attributes(
        QueueUrl=url,
        Attributes={
            "Policy": policy(
                {
                    "Effect": "Allow",
                    "Principal": {"AWS": ACCOUNT},
                    "Action": "sqs:SendMessage",
                    "Resource": arn(name),
                    "Condition": {operator: {"aws:CurrentTime": yesterday}},
                }
            )
        },
    )
    if allowed:
        other.send_message(QueueUrl=url, MessageBody="after yesterday")
    else:
        refused(other.send_message, QueueUrl=url, MessageBody="before yesterday: never")
    count = admin.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    assert count == {"ApproximateNumberOfMessages": "1" if allowed else "0"}


BAD_POLICIES = {
    "not JSON": "{nope",
    "no statement": json.dumps({"Version": "2012-10-17"}),
    "NotPrincipal": policy({"Effect": "Deny", "NotPrincipal": {"AWS": ACCOUNT}, "Action": "sqs:*", "Resource": "*"}),
    "service principal": policy(
        {"Effect": "Allow", "Principal": {"Service": "sns.amazonaws.com"}, "Action": "sqs:SendMessage", "Resource": "*"}
    ),
    "role principal": policy(
        {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:role/r"}, "Action": "sqs:*", "Resource": "*"}
    ),
    "unknown action": policy({"Effect": "Allow", "Principal": "*", "Action": "sqs:Fly", "Resource": "*"}),
    "another service's action": policy({"Effect": "Allow", "Principal": "*", "Action": "sns:Publish", "Resource": "*"}),
    "bad effect": policy({"Effect": "Maybe", "Principal": "*", "Action": "sqs:*", "Resource": "*"}),
    "no resource": policy({"Effect": "Allow", "Principal": "*", "Action": "sqs:*"}),
    "absent key": policy(
        {
            "Effect": "Allow",
            "Principal": "*",
            "Action": "sqs:*",
            "Resource": "*",
            "Condition": {"ArnEquals": {"aws:SourceArn": "arn:aws:sns:us-east-1:000000000000:t"}},
        }
    ),
    "unknown key": policy(
        {
            "Effect": "Allow",
            "Principal": "*",
            "Action": "sqs:*",
            "Resource": "*",
            "Condition": {"StringEquals": {"aws:RequestTag/x": "y"}},
        }
    ),
    "unknown operator": policy(
        {
            "Effect": "Allow",
            "Principal": "*",
            "Action": "sqs:*",
            "Resource": "*",
            "Condition": {"StringRoughly": {"aws:username": "y"}},
        }
    ),
    "bad ip": policy(
        {
            "Effect": "Allow",
            "Principal": "*",
            "Action": "sqs:*",
            "Resource": "*",
            "Condition": {"IpAddress": {"aws:SourceIp": "300.1.2.3/8"}},
        }
    ),
    "bad date": policy(
        {
            "Effect": "Allow",
            "Principal": "*",
            "Action": "sqs:*",
            "Resource": "*",
            "Condition": {"DateLessThan": {"aws:CurrentTime": "next tuesday"}},
        }
    ),
    "multi-valued operator": policy(
        {
            "Effect": "Allow",
            "Principal": "*",
            "Action": "sqs:*",
            "Resource": "*",
            "Condition": {"ForAnyValue:StringEquals": {"aws:username": "y"}},
        }
    ),
    "too long": policy(
        *[
            {"Sid": f"s{i}", "Effect": "Allow", "Principal": "*", "Action": "sqs:SendMessage", "Resource": "*" * 500}
            for i in range(18)
        ]
    ),
}


def test_malformed_or_unenforceable_policies_are_refused_and_the_old_one_kept(
    as_key: Callable[[str], Any], rid: str
) -> None:
    admin = as_key("admin")
    url = admin.create_queue(QueueName=f"bad-{rid}")["QueueUrl"]
    good = policy({"Sid": "keep", "Effect": "Deny", "Principal": "*", "Action": "sqs:PurgeQueue", "Resource": "*"})
    admin.set_queue_attributes(QueueUrl=url, Attributes={"Policy": good})
    reasons = {}
    for what, doc in BAD_POLICIES.items():
        reasons[what] = invalid_attribute(
            admin.set_queue_attributes, QueueUrl=url, Attributes={"Policy": doc, "DelaySeconds": "7"}
        )
        assert policy_of(admin, url) == good, f"{what}: the old policy was not kept"
    assert all("Reason:" in r for r in reasons.values()), reasons
    assert "NotPrincipal" in reasons["NotPrincipal"] and "aws:SourceArn" in reasons["absent key"]
    assert (
        admin.get_queue_attributes(QueueUrl=url, AttributeNames=["DelaySeconds"])["Attributes"]["DelaySeconds"] == "0"
    )
    invalid_attribute(
        admin.create_queue, QueueName=f"bad-new-{rid}", Attributes={"Policy": BAD_POLICIES["NotPrincipal"]}
    )
    assert "QueueUrls" not in admin.list_queues(QueueNamePrefix=f"bad-new-{rid}"), (
        "a refused CreateQueue made the queue"
    )


def test_a_policy_naming_other_resources_is_stored_as_given_and_grants_nothing_here(
    as_key: Callable[[str], Any], rid: str
) -> None:
    """AWS stores a Policy whose statements name other resources (LocalStack's aws-validated
    test_set_queue_policy: Resource "'$sqs_queue_arn'", a condition on aws:SourceArn). So does casque,
    as given; those statements never apply to this queue, in AWS as here: an Allow for everyone grants
    the scoped key nothing, a Deny for everyone refuses the admin nothing. The same statements naming
    this queue are still refused (casque can't enforce them), and the old policy kept."""
    admin, other = as_key("admin"), as_key("other")
    name = f"foreign-{rid}"
    url = admin.create_queue(QueueName=name)["QueueUrl"]
    stored = json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"AWS": "*"},
                    "Action": "sqs:SendMessage",
                    "Resource": "'$sqs_queue_arn'",
                    "Condition": {"ArnEquals": {"aws:SourceArn": "'$sns_topic_arn'"}},
                },
                {"Effect": "Allow", "Principal": "*", "Action": "sqs:*", "Resource": arn(f"elsewhere-{rid}")},
                {"Effect": "Deny", "Principal": "*", "Action": "sqs:*", "Resource": [arn("x"), "arn:aws:sns:*:*:t"]},
                {
                    "Effect": "Allow",
                    "Principal": {"Service": "sns.amazonaws.com"},
                    "Action": "sqs:SendMessage",
                    "Resource": arn(f"elsewhere-{rid}"),
                },
            ],
        },
        indent=2,
    )
    admin.set_queue_attributes(QueueUrl=url, Attributes={"Policy": stored})
    assert policy_of(admin, url) == stored, "not returned as given"
    refused(other.send_message, QueueUrl=url, MessageBody="an Allow on another resource grants nothing here")
    refused(other.receive_message, QueueUrl=url)
    admin.send_message(QueueUrl=url, MessageBody="a Deny on another resource refuses nothing here")
    assert admin.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"][0]["Body"].startswith("a Deny")
    for resource in ("*", arn(name), f"arn:aws:sqs:*:{ACCOUNT}:foreign-*"):
        here = json.loads(stored)
        here["Statement"][0]["Resource"] = resource
        reason = invalid_attribute(admin.set_queue_attributes, QueueUrl=url, Attributes={"Policy": json.dumps(here)})
        assert "aws:SourceArn" in reason, resource
    assert policy_of(admin, url) == stored, "a refused policy replaced the stored one"
    created = admin.create_queue(QueueName=f"foreign2-{rid}", Attributes={"Policy": stored})["QueueUrl"]
    assert policy_of(admin, created) == stored
    refused(other.send_message, QueueUrl=created, MessageBody="nor at CreateQueue")


def test_add_and_remove_permission_round_trip(as_key: Callable[[str], Any], rid: str) -> None:
    admin, other = as_key("admin"), as_key("other")
    name = f"perm-{rid}"
    url = admin.create_queue(QueueName=name)["QueueUrl"]
    refused(other.send_message, QueueUrl=url, MessageBody="not yet")
    admin.add_permission(QueueUrl=url, Label="senders", AWSAccountIds=[ACCOUNT], Actions=["SendMessage", "GetQueueUrl"])
    doc = json.loads(policy_of(admin, url) or "{}")
    # the document SQS writes (recorded against AWS by LocalStack's aws-validated test_sqs_permission_lifecycle)
    assert (doc["Version"], doc["Id"]) == ("2008-10-17", f"{arn(name)}/SQSDefaultPolicy")
    assert doc["Statement"] == [
        {
            "Sid": "senders",
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
            "Action": ["SQS:SendMessage", "SQS:GetQueueUrl"],
            "Resource": arn(name),
        }
    ]
    assert other.get_queue_url(QueueName=name)["QueueUrl"] == url
    other.send_message(QueueUrl=url, MessageBody="granted by AddPermission")
    other.send_message_batch(QueueUrl=url, Entries=[{"Id": "1", "MessageBody": "batches too"}])
    with pytest.raises(ClientError) as err:
        admin.add_permission(QueueUrl=url, Label="senders", AWSAccountIds=[ACCOUNT], Actions=["ReceiveMessage"])
    assert err.value.response["Error"]["Code"] == "InvalidParameterValue"
    with pytest.raises(ClientError) as err:
        admin.add_permission(QueueUrl=url, Label="many", AWSAccountIds=[ACCOUNT], Actions=["SendMessage"] * 8)
    assert err.value.response["Error"]["Code"] == "OverLimit"
    with pytest.raises(ClientError) as err:
        admin.add_permission(QueueUrl=url, Label="odd", AWSAccountIds=[ACCOUNT], Actions=["Fly"])
    assert err.value.response["Error"]["Code"] == "InvalidParameterValue"
    with pytest.raises(ClientError) as err:
        admin.add_permission(QueueUrl=url, Label="odd", AWSAccountIds=["me"], Actions=["SendMessage"])
    assert err.value.response["Error"]["Code"] == "InvalidParameterValue"
    admin.add_permission(QueueUrl=url, Label="foreign", AWSAccountIds=["111122223333", "444455556666"], Actions=["*"])
    assert [s["Sid"] for s in json.loads(policy_of(admin, url) or "{}")["Statement"]] == ["senders", "foreign"]
    refused(other.purge_queue, QueueUrl=url)  # another account's grant names no key of this one
    admin.remove_permission(QueueUrl=url, Label="senders")
    refused(other.send_message, QueueUrl=url, MessageBody="revoked")
    with pytest.raises(ClientError) as err:
        admin.remove_permission(QueueUrl=url, Label="senders")
    assert err.value.response["Error"]["Code"] == "InvalidParameterValue"
    admin.remove_permission(QueueUrl=url, Label="foreign")
    assert policy_of(admin, url) is None
    count = admin.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    assert count == {"ApproximateNumberOfMessages": "2"}


def test_a_policy_change_is_honoured_by_another_server_within_the_cache_time(
    as_key: Callable[[str], Any], keys: dict[str, dict[str, str]], rid: str
) -> None:
    admin = as_key("admin")
    url = admin.create_queue(QueueName=f"spread-{rid}")["QueueUrl"]
    second = sqsserver.start(TEST_KEYSPACE, "--auth", "sigv4")
    try:
        there = client(second.url, keys["admin"]["access_key_id"], keys["admin"]["secret_access_key"])
        there_url = url.replace(url.split("/")[2], second.url.split("/")[2])
        there.send_message(
            QueueUrl=there_url, MessageBody="before"
        )  # the second server now caches the queue's attributes
        admin.set_queue_attributes(
            QueueUrl=url,
            Attributes={
                "Policy": policy({"Effect": "Deny", "Principal": "*", "Action": "sqs:SendMessage", "Resource": "*"})
            },
        )
        changed, deadline, sent = (
            time.monotonic(),
            time.monotonic() + 5.0 + 10.0,
            1,
        )  # cache time 5 s, plus slack for a loaded box
        while True:
            try:
                there.send_message(QueueUrl=there_url, MessageBody="during")
                sent += 1
            except ClientError as err:
                assert err.response["Error"]["Code"] == "AccessDenied"
                break
            assert time.monotonic() < deadline, "the second server never honoured the new policy"
            time.sleep(0.2)  # a probe's pace, not a wait for the result: the loop polls until the deadline
        took = time.monotonic() - changed
        print(f"policy honoured by the second server after {took:.2f} s ({sent} sends went through)")
        assert took < 5.0 + 10.0
    finally:
        second.stop()


def test_sqs_keys_cli_refuses_bad_grants_in_one_line_and_lists_grants(
    settings: Any, keys: dict[str, dict[str, str]], rid: str
) -> None:
    for args, named in (
        (["--actions", "ReceiveMessage,Fly"], "'Fly'"),
        (["--actions", "sqs:Zap*"], "'sqs:Zap*'"),
        (["--queues", "user 42"], "'user 42'"),
        (["--actions", ""], "--actions"),
    ):
        out = casque("sqs-keys", "create", "--description", f"bad-{rid}", *args)
        assert out.returncode == 2, out
        assert out.stderr.count("\n") == 1 and out.stderr.startswith("casque: ") and named in out.stderr, out.stderr
        assert "aws_access_key_id" not in out.stdout
    listed = json.loads(casque("sqs-keys", "list", "--json").stdout)
    assert not [k for k in listed if k["description"] == f"bad-{rid}"], "a refused create stored a key"
    mine = {k["access_key_id"]: k["grant"] for k in listed}
    assert mine[keys["user42"]["access_key_id"]] == {
        "actions": ["ReceiveMessage", "DeleteMessage"],
        "queues": [f"user-42-{rid}"],
        "full_access": False,
    }
    assert mine[keys["admin"]["access_key_id"]]["full_access"] is True
    table = casque("sqs-keys", "list").stdout
    assert f"ReceiveMessage,DeleteMessage on user-42-{rid}" in table


def test_query_protocol_add_permission_and_access_denied(
    as_key: Callable[[str], Any], keys: dict[str, dict[str, str]], rid: str
) -> None:
    admin = as_key("admin")
    name = f"qperm-{rid}"
    url = admin.create_queue(QueueName=name)["QueueUrl"]
    other = Credentials(keys["other"]["access_key_id"], keys["other"]["secret_access_key"])
    status, root = query(url, "SendMessage", {"MessageBody": "no"}, creds=other)
    assert status == 403 and text(root, "q:Error/q:Code") == "AccessDenied"
    boss = Credentials(keys["admin"]["access_key_id"], keys["admin"]["secret_access_key"])
    status, _ = query(
        url, "AddPermission", {"Label": "q", "AWSAccountId.1": ACCOUNT, "ActionName.1": "SendMessage"}, creds=boss
    )
    assert status == 200
    assert json.loads(policy_of(admin, url) or "{}")["Statement"][0]["Action"] == "SQS:SendMessage"
    status, _ = query(url, "SendMessage", {"MessageBody": "yes"}, creds=other)
    assert status == 200
    status, _ = query(url, "RemovePermission", {"Label": "q"}, creds=boss)
    assert status == 200 and policy_of(admin, url) is None


def test_a_forged_forwarded_for_header_does_not_change_the_source_ip(keys: dict[str, dict[str, str]], rid: str) -> None:
    """X-Forwarded-For is believed only from a proxy on 127.0.0.1 (uvicorn's default): a client
    reaching the server on another address can't claim to be 127.0.0.1 to pass an IP condition."""
    host = (
        next((a for a in socket.gethostbyname_ex(socket.gethostname())[2] if not a.startswith("127.")), None)
        or _outward_address()
    )
    srv = sqsserver.start(TEST_KEYSPACE, "--auth", "sigv4", "--host", host)
    try:
        admin = client(srv.url, keys["admin"]["access_key_id"], keys["admin"]["secret_access_key"])
        name = f"xff-{rid}"
        url = admin.create_queue(QueueName=name)["QueueUrl"]
        admin.set_queue_attributes(
            QueueUrl=url,
            Attributes={
                "Policy": policy(
                    {
                        "Effect": "Deny",
                        "Principal": "*",
                        "Action": "sqs:SendMessage",
                        "Resource": "*",
                        "Condition": {"NotIpAddress": {"aws:SourceIp": "127.0.0.1/32"}},
                    }
                )
            },
        )
        admin.meta.events.register(
            "before-send.sqs.*", lambda request, **_: request.headers.__setitem__("X-Forwarded-For", "127.0.0.1")
        )
        refused(admin.send_message, QueueUrl=url, MessageBody=f"from {host}, claiming 127.0.0.1")
        assert admin.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])[
            "Attributes"
        ] == {"ApproximateNumberOfMessages": "0"}
    finally:
        srv.stop()


def _outward_address() -> str:
    """This host's address on its default route (no packet is sent: a UDP connect only picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))
        return str(s.getsockname()[0])
