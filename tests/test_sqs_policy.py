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
