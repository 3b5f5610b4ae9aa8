"""The Policy evaluator and grants on their own (pure functions, no server): IAM's rules for
conditions on missing keys, ``...IfExists``, Null, NotAction/NotResource, Deny over Allow, the
principal forms, and grant wildcards. The served behaviour is in tests/test_sqs_permissions.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from daemon.base.errors import UsageError
from daemon.engine.access.grants import Grant
from daemon.http.sqs.errors import SqsError
from daemon.http.sqs.policy import Caller, compile_policy

ACCOUNT = "000000000000"
KEY = Caller(f"arn:aws:iam::{ACCOUNT}:user/CQKEY", ACCOUNT)
ANON = Caller(None, None)
Q = f"arn:aws:sqs:us-east-1:{ACCOUNT}:q1"
CTX = {
    "aws:sourceip": "127.0.0.1",
    "aws:securetransport": "false",
    "aws:currenttime": "2026-11-24T12:00:00Z",
    "aws:epochtime": "1795521600",
}


def decide(
    statement: dict[str, Any],
    caller: Caller = KEY,
    action: str = "SendMessage",
    resource: str = Q,
    context: dict[str, str] | None = None,
) -> str | None:
    base = {"Effect": "Allow", "Principal": "*", "Action": "sqs:*", "Resource": "*"}
    return compile_policy(json.dumps({"Statement": base | statement})).decide(
        caller, action, resource, CTX if context is None else context
    )


@pytest.mark.parametrize(
    "condition, verdict",
    [
        ({"StringEquals": {"aws:username": "CQKEY"}}, None),  # the key is missing from CTX: a positive operator fails
        ({"StringNotEquals": {"aws:username": "CQKEY"}}, "Allow"),  # ... and a negated one holds
        ({"StringEqualsIfExists": {"aws:username": "CQKEY"}}, "Allow"),
        ({"Null": {"aws:username": "true"}}, "Allow"),
        ({"Null": {"aws:sourceip": "true"}}, None),
        ({"IpAddress": {"aws:SourceIp": ["10.0.0.0/8", "127.0.0.1/32"]}}, "Allow"),  # any listed value
        ({"NotIpAddress": {"aws:SourceIp": ["10.0.0.0/8", "127.0.0.1/32"]}}, None),  # none of them
        ({"Bool": {"aws:SecureTransport": False}}, "Allow"),
        ({"NumericGreaterThan": {"aws:EpochTime": 1795521599}}, "Allow"),
        ({"DateLessThanEquals": {"aws:CurrentTime": "2026-11-24"}}, None),
        ({"DateGreaterThanEquals": {"aws:EpochTime": "2026-11-24T12:00:00Z"}}, "Allow"),
        (
            {"StringLike": {"aws:SourceIp": "127.*"}, "Bool": {"aws:SecureTransport": "true"}},
            None,
        ),  # every operator must hold
    ],
)
def test_conditions_follow_iams_rules(condition: dict[str, Any], verdict: str | None) -> None:
    assert decide({"Condition": condition}) == verdict


def test_deny_wins_and_not_elements_invert() -> None:
    both = {
        "Statement": [
            {"Effect": "Allow", "Principal": "*", "Action": "*", "Resource": "*"},
            {"Effect": "Deny", "Principal": {"AWS": ACCOUNT}, "Action": "sqs:Send*", "Resource": Q},
        ]
    }
    policy = compile_policy(json.dumps(both))
    assert policy.decide(KEY, "SendMessage", Q, CTX) == "Deny"
    assert policy.decide(ANON, "SendMessage", Q, CTX) == "Allow"  # the account names keys, not the anonymous caller
    assert policy.decide(KEY, "ReceiveMessage", Q, CTX) == "Allow"
    not_purge = compile_policy(
        json.dumps(
            {
                "Statement": {
                    "Effect": "Allow",
                    "Principal": "*",
                    "NotAction": "sqs:PurgeQueue",
                    "NotResource": "arn:aws:sqs:*:*:secret-*",
                }
            }
        )
    )
    assert not_purge.decide(KEY, "SendMessage", Q, CTX) == "Allow"
    assert not_purge.decide(KEY, "PurgeQueue", Q, CTX) is None
    assert not_purge.decide(KEY, "SendMessage", f"arn:aws:sqs:us-east-1:{ACCOUNT}:secret-1", CTX) is None


@pytest.mark.parametrize(
    "principal, named",
    [
        ({"AWS": ACCOUNT}, True),
        ({"AWS": f"arn:aws:iam::{ACCOUNT}:root"}, True),
        ({"AWS": KEY.arn}, True),
        ({"AWS": f"arn:aws:iam::{ACCOUNT}:user/CQOTHER"}, False),
        ({"AWS": "111122223333"}, False),
        ({"AWS": ["111122223333", ACCOUNT]}, True),
        ({"AWS": "*"}, True),
        ("*", True),
    ],
)
def test_principal_forms(principal: Any, named: bool) -> None:
    assert decide({"Principal": principal}) == ("Allow" if named else None)


def test_unenforceable_policies_name_the_reason() -> None:
    with pytest.raises(SqsError) as err:
        compile_policy(
            json.dumps(
                {
                    "Statement": {
                        "Effect": "Allow",
                        "Principal": "*",
                        "Action": "sqs:*",
                        "Resource": "*",
                        "Condition": {"StringEquals": {"aws:SourceAccount": ACCOUNT}},
                    }
                }
            )
        )
    assert err.value.shape == "InvalidAttributeValue" and "aws:SourceAccount" in err.value.message


def test_grants_match_iam_wildcards_and_queue_globs() -> None:
    g = Grant.parse(["sqs:receive*", "DeleteMessageBatch"], ["user-*", "shared"])
    assert g.actions == ("receive*", "DeleteMessage")
    assert g.allows("ReceiveMessage", "user-42") and g.allows("DeleteMessage", "shared")
    assert (
        not g.allows("SendMessage", "user-42")
        and not g.allows("ReceiveMessage", "other")
        and not g.allows("ReceiveMessage", "User-42")
    )
    assert not g.allows("ReceiveMessage", None), "an action with no queue needs the grant on every queue"
    with pytest.raises(UsageError, match="'sqs:Fly'"):
        Grant.parse(["sqs:Fly"], None)


#: A statement AWS stored as written (LocalStack's aws-validated test_set_queue_policy): its Resource is
#: no ARN at all, its condition on a key casque never has.
AWS_STORED = {
    "Effect": "Allow",
    "Principal": {"AWS": "*"},
    "Action": "sqs:SendMessage",
    "Resource": "'$sqs_queue_arn'",
    "Condition": {"ArnEquals": {"aws:SourceArn": "'$sns_topic_arn'"}},
}


@pytest.mark.parametrize(
    "statement",
    [
        AWS_STORED,
        AWS_STORED | {"Resource": "arn:aws:sqs:us-east-1:000000000000:q2", "Effect": "Deny"},
        {"Effect": "Allow", "Principal": {"Service": "sns.amazonaws.com"}, "Action": "sqs:*", "Resource": "arn:x"},
        {"Effect": "Allow", "NotPrincipal": {"AWS": ACCOUNT}, "Action": "sns:Publish", "Resource": ["q1", "q1*"]},
    ],
)
def test_a_statement_naming_another_resource_is_stored_and_never_applies_here(statement: dict[str, Any]) -> None:
    """What a statement can't name the queue with, AWS stores and never applies to it; casque keeps it
    unchecked but for its form, and it decides nothing: a Deny refuses nothing, an Allow grants nothing."""
    text = json.dumps({"Version": "2012-10-17", "Statement": [statement]})
    policy = compile_policy(text, Q)
    assert policy.statements == ()
    for caller in (KEY, ANON):
        assert policy.decide(caller, "SendMessage", Q, CTX) is None
    with pytest.raises(SqsError):  # the same statement naming every queue is checked, and refused
        compile_policy(json.dumps({"Statement": [statement | {"Resource": "*"}]}), Q)


@pytest.mark.parametrize(
    "resource",
    ["*", Q, "arn:aws:sqs:*:*:q?", ["arn:aws:sqs:us-east-1:000000000000:other", "arn:aws:sqs:*:000000000000:*"]],
)
def test_a_statement_that_can_name_the_queue_is_checked_in_full(resource: Any) -> None:
    with pytest.raises(SqsError) as err:
        compile_policy(json.dumps({"Statement": [AWS_STORED | {"Resource": resource}]}), Q)
    assert "aws:SourceArn" in err.value.message
    unnamed = {"Effect": "Deny", "Principal": "*", "Action": "sqs:*", "NotResource": "arn:aws:sqs:*:*:other"}
    with pytest.raises(SqsError):  # NotResource naming another queue applies here: checked too
        compile_policy(json.dumps({"Statement": [unnamed | {"NotPrincipal": {"AWS": ACCOUNT}}]}), Q)
    assert compile_policy(json.dumps({"Statement": [unnamed]}), Q).decide(KEY, "SendMessage", Q, CTX) == "Deny"


def test_statements_on_other_resources_sit_beside_those_on_the_queue() -> None:
    doc = {
        "Statement": [
            AWS_STORED | {"Sid": "elsewhere"},
            {"Sid": "here", "Effect": "Allow", "Principal": {"AWS": ACCOUNT}, "Action": "sqs:Send*", "Resource": Q},
        ]
    }
    policy = compile_policy(json.dumps(doc), Q)
    assert [s.sid for s in policy.statements] == ["here"]
    assert policy.decide(KEY, "SendMessage", Q, CTX) == "Allow" and policy.decide(ANON, "SendMessage", Q, CTX) is None
    doc["Statement"][1]["Sid"] = "elsewhere"
    with pytest.raises(SqsError, match="unique"):  # the form of every statement still counts
        compile_policy(json.dumps(doc), Q)
