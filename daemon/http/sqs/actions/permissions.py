"""SQS permission actions: AddPermission and RemovePermission edit the queue's Policy as SQS does.

AddPermission(Label, AWSAccountIds, Actions) appends the statement SQS writes: Sid = Label,
Effect Allow, Principal ``arn:aws:iam::ID:root`` per account, Action ``SQS:X`` per action,
Resource the queue's ARN (creating the policy if the queue has none, as SQS writes it: Version
2008-10-17, Id ``<queue ARN>/SQSDefaultPolicy``). RemovePermission(Label)
removes it (and the policy with its last statement). The result is checked like any Policy
(policy.py) and enforced on the next request (access.py). The read-modify-write of the Policy
is not atomic: two concurrent edits of one queue's permissions can lose one (as concurrent
SetQueueAttributes of a Policy would).
"""

from __future__ import annotations

import json
import re
from typing import Any

from daemon.engine.access.grants import normalize_action
from daemon.http.sqs import policy
from daemon.http.sqs.actions.base import ActionGroup, Call
from daemon.http.sqs.errors import SqsError, invalid, missing

LABEL = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
ACCOUNT = re.compile(r"^[0-9]{12}$")
MAX_ACTIONS = 7  # SQS: "a policy can have a maximum of 7 actions per statement"


class PermissionActions(ActionGroup):
    ACTIONS = ("AddPermission", "RemovePermission")

    async def add_permission(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        label = _label(call.params)
        accounts = _list(call.params, "AWSAccountIds")
        actions = _list(call.params, "Actions")
        for account in accounts:
            if not ACCOUNT.match(account):
                raise invalid(
                    f"Value {account} for parameter AWSAccountIds is invalid. Reason: An AWS account id is 12 digits."
                )
        if len(actions) > MAX_ACTIONS:
            raise SqsError("OverLimit", f"{len(actions)} Actions were found, maximum allowed is {MAX_ACTIONS}.")
        names = [_action(a) for a in actions]
        await self.cq.queue_settings(name, fresh=True)
        doc = await self._document(name)
        statements = doc["Statement"]
        if any(s.get("Sid") == label for s in statements):
            raise invalid(f"Value {label} for parameter Label is invalid. Reason: Already exists.")
        if len(statements) >= policy.MAX_STATEMENTS:
            raise SqsError(
                "OverLimit", f"The queue's policy already has {policy.MAX_STATEMENTS} statements, the most SQS allows."
            )
        principals = [f"arn:aws:iam::{a}:root" for a in accounts]
        statements.append(
            {
                "Sid": label,
                "Effect": "Allow",
                "Principal": {"AWS": _one_or_list(principals)},
                "Action": _one_or_list([f"SQS:{n}" for n in names]),
                "Resource": self.arn(name),
            }
        )
        await self._save(name, doc)
        return {}

    async def remove_permission(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        label = _label(call.params)
        await self.cq.queue_settings(name, fresh=True)
        doc = await self._document(name)
        kept = [s for s in doc["Statement"] if s.get("Sid") != label]
        if len(kept) == len(doc["Statement"]):
            raise invalid(f"Value {label} for parameter Label is invalid. Reason: can't find label.")
        doc["Statement"] = kept
        await self._save(name, doc)
        return {}

    async def _document(self, name: str) -> dict[str, Any]:
        """The queue's current policy (read fresh: this is a read-modify-write), statements as a list."""
        text = (await self.cq.extras.get(name, fresh=True)).attributes.get("Policy")
        if not text:
            # SQS's own document: version 2008-10-17 and this Id (as AWS writes it, recorded by LocalStack's
            # aws-validated test_sqs_permission_lifecycle); a Policy already there keeps its own.
            return {"Version": "2008-10-17", "Id": f"{self.arn(name)}/SQSDefaultPolicy", "Statement": []}
        doc = policy.load(text)
        raw = doc.get("Statement")
        doc["Statement"] = raw if isinstance(raw, list) else [raw] if isinstance(raw, dict) else []
        return doc

    async def _save(self, name: str, doc: dict[str, Any]) -> None:
        now = self.cq.clock.now_ms()
        if not doc["Statement"]:
            await self.cq.extras.set(name, {}, {"Policy"}, now)
            return
        text = json.dumps(doc, separators=(",", ":"))
        policy.compile_policy(text, self.arn(name))  # SetQueueAttributes' check: stored only if enforceable
        await self.cq.extras.set(name, {"Policy": text}, set(), now)


def _label(p: dict[str, Any]) -> str:
    label = p.get("Label")
    if not label:
        raise missing("Label")
    if not isinstance(label, str) or not LABEL.match(label):
        raise invalid(
            f"Value {label} for parameter Label is invalid. Reason: Can only include alphanumeric characters, hyphens, "
            "or underscores. 1 to 80 in length."
        )
    return label


def _list(p: dict[str, Any], key: str) -> list[str]:
    value = p.get(key)
    if not value:
        raise missing(key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid(f"{key} must be a list of strings.")
    return value


def _action(name: str) -> str:
    """An AddPermission ActionName: an SQS action (batch forms granted through their single form,
    as SQS does) or ``*``."""
    if name == "*":
        return "*"
    norm = normalize_action(name) if "*" not in name and "?" not in name else None
    if norm is None:
        raise invalid(
            f"Value {name} for parameter ActionName is invalid. Reason: Please refer to the appropriate WSDL for a "
            "list "
            "of valid actions."
        )
    return norm


def _one_or_list(values: list[str]) -> str | list[str]:
    return values[0] if len(values) == 1 else values
