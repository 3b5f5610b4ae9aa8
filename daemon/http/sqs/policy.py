"""A queue's ``Policy`` attribute (an IAM resource policy): checked when set, enforced per request.

``compile_policy`` refuses, with SQS's InvalidAttributeValue and the reason, anything malformed or
that casque could not enforce (NotPrincipal, service or role principals, unknown actions,
condition keys casque never has): a policy is either enforced as written or not stored at all.
``Policy.decide`` gives the policy's verdict on one request: "Deny" if a Deny statement applies
(it wins over everything), "Allow" if an Allow statement does, else None (the key's grant
decides; daemon/http/sqs/access.py).

Principals: every key belongs to the server's account (``sqs.account``), and key ``CQ...`` is
``arn:aws:iam::<account>:user/CQ...``; the account id and ``arn:aws:iam::<account>:root`` name
every key of it; ``*`` (or ``{"AWS": "*"}``) names everyone, the anonymous caller of
``sqs.auth = "none"`` too. Another account's id is valid and names no key of this server.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from daemon.base.lru import Lru
from daemon.engine.access.grants import action_matches, normalize_action, wildcard
from daemon.http.sqs.conditions import MAX_CONDITIONS, Block, compile_block, refuse

VERSIONS = ("2012-10-17", "2008-10-17")
MAX_BYTES = 8192  # SQS's policy quotas
MAX_STATEMENTS = 20
MAX_PRINCIPALS = 50
_ACCOUNT = re.compile(r"^[0-9]{12}$")
_IAM = re.compile(r"^arn:aws:iam::([0-9]{12}):(root|user/[A-Za-z0-9+=,.@_-]{1,64})$")
_RESOURCE = re.compile(r"^arn:[^:]*:sqs:[^:]*:[^:]*:.+$")
_STATEMENT_KEYS = {
    "Sid",
    "Effect",
    "Principal",
    "NotPrincipal",
    "Action",
    "NotAction",
    "Resource",
    "NotResource",
    "Condition",
}


@dataclass(frozen=True)
class Caller:
    """Who asks: a key's principal ARN and account, or None for the anonymous caller."""

    arn: str | None
    account: str | None


@dataclass(frozen=True)
class Statement:
    sid: str
    effect: str
    everyone: bool  # Principal "*"
    principals: frozenset[str]  # account ids and principal ARNs
    actions: tuple[str, ...]
    not_action: bool
    resources: tuple[str, ...]
    not_resource: bool
    condition: Block = field(default_factory=Block)

    def applies(self, caller: Caller, action: str, resource: str, context: dict[str, str]) -> bool:
        return self._names(caller) and self._covers(action) and self._on(resource) and self.condition.holds(context)

    def _names(self, caller: Caller) -> bool:
        if self.everyone:
            return True
        if caller.arn is None:
            return False
        return bool({caller.arn, caller.account, f"arn:aws:iam::{caller.account}:root"} & self.principals)

    def _covers(self, action: str) -> bool:
        hit = any(action_matches(p, action) for p in self.actions)
        return not hit if self.not_action else hit

    def _on(self, resource: str) -> bool:
        hit = any(wildcard(r, False).match(resource) for r in self.resources)
        return not hit if self.not_resource else hit


@dataclass(frozen=True)
class Policy:
    statements: tuple[Statement, ...]

    def decide(self, caller: Caller, action: str, resource: str, context: dict[str, str]) -> str | None:
        verdict = None
        for s in self.statements:
            if s.applies(caller, action, resource, context):
                if s.effect == "Deny":
                    return "Deny"
                verdict = "Allow"
        return verdict


def load(text: str) -> dict[str, Any]:
    """The policy document as JSON, or SQS's refusal."""
    if len(text.encode("utf-8")) > MAX_BYTES:
        raise refuse(f"Policy is longer than {MAX_BYTES} bytes.")
    try:
        doc = json.loads(text)
    except ValueError:
        raise refuse("Policy is not valid JSON.") from None
    if not isinstance(doc, dict):
        raise refuse("Policy must be a JSON object.")
    return doc


def compile_policy(text: str) -> Policy:
    doc = load(text)
    unknown = set(doc) - {"Version", "Id", "Statement"}
    if unknown:
        raise refuse(f"Unknown policy element {sorted(unknown)[0]}.")
    if "Version" in doc and doc["Version"] not in VERSIONS:
        raise refuse(f"Version must be one of {', '.join(VERSIONS)}.")
    if "Id" in doc and not isinstance(doc["Id"], str):
        raise refuse("Id must be a string.")
    raw = doc.get("Statement")
    raws = raw if isinstance(raw, list) else [raw] if isinstance(raw, dict) else None
    if not raws:
        raise refuse("Policy needs a Statement (an object or a non-empty list of them).")
    if len(raws) > MAX_STATEMENTS:
        raise refuse(f"Policy has {len(raws)} statements: at most {MAX_STATEMENTS}.")
    statements = tuple(_statement(s, i) for i, s in enumerate(raws))
    sids = [s.sid for s in statements if s.sid]
    if len(set(sids)) != len(sids):
        raise refuse("Statement ids (Sid) must be unique within a policy.")
    if sum(len(s.condition.tests) for s in statements) > MAX_CONDITIONS:
        raise refuse(f"Policy has more than {MAX_CONDITIONS} conditions.")
    if sum(len(s.principals) for s in statements) > MAX_PRINCIPALS:
        raise refuse(f"Policy names more than {MAX_PRINCIPALS} principals.")
    return Policy(statements)


def _statement(raw: Any, index: int) -> Statement:
    if not isinstance(raw, dict):
        raise refuse(f"Statement {index} must be an object.")
    unknown = set(raw) - _STATEMENT_KEYS
    if unknown:
        raise refuse(f"Unknown statement element {sorted(unknown)[0]}.")
    if "NotPrincipal" in raw:
        raise refuse(
            "NotPrincipal is not supported by casque: name the principals in Principal (and use Deny for exceptions)."
        )
    sid = raw.get("Sid", "")
    if not isinstance(sid, str):
        raise refuse("Sid must be a string.")
    effect = raw.get("Effect")
    if effect not in ("Allow", "Deny"):
        raise refuse(f"Statement {sid or index}: Effect must be Allow or Deny.")
    everyone, principals = _principals(raw.get("Principal"))
    actions, not_action = _pick(raw, "Action", "NotAction", _action)
    resources, not_resource = _pick(raw, "Resource", "NotResource", _resource)
    return Statement(
        sid,
        effect,
        everyone,
        principals,
        actions,
        not_action,
        resources,
        not_resource,
        compile_block(raw.get("Condition")),
    )


def _strings(value: Any, what: str) -> list[str]:
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, str) for v in values):
        raise refuse(f"{what} must be a string or a list of strings.")
    return values


def _pick(raw: dict[str, Any], name: str, negated: str, check: Any) -> tuple[tuple[str, ...], bool]:
    if (name in raw) == (negated in raw):
        raise refuse(f"A statement needs exactly one of {name} and {negated}.")
    key = name if name in raw else negated
    return tuple(check(v) for v in _strings(raw[key], key)), key == negated


def _action(value: str) -> str:
    norm = "*" if value == "*" else normalize_action(value) if value.lower().startswith("sqs:") else None
    if norm is None:
        raise refuse(f"Action {value} is not an SQS action (use sqs:SendMessage, sqs:Receive*, sqs:* or *).")
    return norm


def _resource(value: str) -> str:
    if value != "*" and not _RESOURCE.match(value):
        raise refuse(f"Resource {value} is not a queue ARN (arn:aws:sqs:REGION:ACCOUNT:QUEUE, wildcards allowed) or *.")
    return value


def _principals(raw: Any) -> tuple[bool, frozenset[str]]:
    if raw == "*":
        return True, frozenset()
    if not isinstance(raw, dict) or not raw:
        raise refuse('Principal must be "*" or {"AWS": ...} naming accounts or users.')
    other = set(raw) - {"AWS"}
    if other:
        raise refuse(
            f"Principal type {sorted(other)[0]} is not supported by casque: only AWS account and user principals exist "
            "here."
        )
    names = _strings(raw["AWS"], "Principal AWS")
    if "*" in names:
        return True, frozenset()
    for n in names:
        m = _IAM.match(n)
        if not (_ACCOUNT.match(n) or m):
            raise refuse(
                f"Principal {n} is not supported by casque: use an account id, arn:aws:iam::ACCOUNT:root "
                "or arn:aws:iam::ACCOUNT:user/ACCESS_KEY_ID."
            )
    return False, frozenset(names)


class PolicyCache:
    """Compiled policies by their text: compiling is done once per distinct policy, not per request
    (the text itself comes with the queue's cached attributes, engine/queues/attributes.py)."""

    def __init__(self, limit: int = 10_000) -> None:
        self._lru: Lru[str, Policy] = Lru(limit)

    def get(self, text: str) -> Policy:
        hit = self._lru.get(text)
        if hit is None:
            hit = compile_policy(text)
            self._lru.put(text, hit)
        return hit
