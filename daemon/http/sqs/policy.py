"""A queue's ``Policy`` attribute (an IAM resource policy): checked when set, enforced per request.

``compile_policy`` refuses, with SQS's InvalidAttributeValue and the reason, anything malformed or
that casque could not enforce (NotPrincipal, service or role principals, unknown actions,
condition keys casque never has): a policy is either enforced as written or not stored at all.
``Policy.decide`` gives the policy's verdict on one request: "Deny" if a Deny statement applies
(it wins over everything), "Allow" if an Allow statement does, else None (the key's grant
decides; daemon/http/sqs/access.py).

A statement whose ``Resource`` can't name the queue the policy is on (another queue's ARN, or any
text, as AWS stores it: ``"'$sqs_queue_arn'"`` in a policy AWS accepted) never applies to a request
on that queue, in AWS as here: it grants nothing and refuses nothing. Such a statement is kept as
written but only its form is checked (an object, Allow or Deny, known elements): what casque could
not enforce in it can't matter, as it is never evaluated. Whether a statement names the queue is
decided against the queue's ARN (``queue_arn``) each time the policy is compiled, also when it is
enforced: a statement that comes to name the queue (``sqs.region`` or ``sqs.account`` changed) is
checked then, and a policy casque then can't enforce is ignored and logged (access.py), so no more
than the key's own grant applies.

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


def compile_policy(text: str, queue_arn: str | None = None) -> Policy:
    """The policy as casque enforces it on the queue ``queue_arn`` (None: every statement is taken
    as naming the queue, so every one is checked)."""
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
    sids = [_form(s, i) for i, s in enumerate(raws)]
    if len(set(sid for sid in sids if sid)) != len([sid for sid in sids if sid]):
        raise refuse("Statement ids (Sid) must be unique within a policy.")
    statements = tuple(_statement(s, i) for i, s in enumerate(raws) if _names_queue(s, queue_arn))
    if sum(len(s.condition.tests) for s in statements) > MAX_CONDITIONS:
        raise refuse(f"Policy has more than {MAX_CONDITIONS} conditions.")
    if sum(len(s.principals) for s in statements) > MAX_PRINCIPALS:
        raise refuse(f"Policy names more than {MAX_PRINCIPALS} principals.")
    return Policy(statements)


def _form(raw: Any, index: int) -> str:
    """What every statement must be, whatever it names: an object of known elements with a string
    Sid and an Effect of Allow or Deny. Returns its Sid."""
    if not isinstance(raw, dict):
        raise refuse(f"Statement {index} must be an object.")
    unknown = set(raw) - _STATEMENT_KEYS
    if unknown:
        raise refuse(f"Unknown statement element {sorted(unknown)[0]}.")
    sid = raw.get("Sid", "")
    if not isinstance(sid, str):
        raise refuse("Sid must be a string.")
    if raw.get("Effect") not in ("Allow", "Deny"):
        raise refuse(f"Statement {sid or index}: Effect must be Allow or Deny.")
    return sid


def _names_queue(raw: dict[str, Any], queue_arn: str | None) -> bool:
    """Whether a statement can apply to a request on the queue ``queue_arn``: not when its Resource
    names only other things (another queue, or text that is no ARN), which no request here matches.
    A NotResource statement, or one without Resource (refused by ``_statement``), is checked."""
    if queue_arn is None or "Resource" not in raw or "NotResource" in raw:
        return True
    values = raw["Resource"] if isinstance(raw["Resource"], list) else [raw["Resource"]]
    if not values or not all(isinstance(v, str) for v in values):
        return True  # malformed: _statement refuses it
    return any(wildcard(v, False).match(queue_arn) for v in values)


def _statement(raw: Any, index: int) -> Statement:
    if "NotPrincipal" in raw:
        raise refuse(
            "NotPrincipal is not supported by casque: name the principals in Principal (and use Deny for exceptions)."
        )
    sid = raw.get("Sid", "")
    effect = raw["Effect"]
    everyone, principals = _principals(raw.get("Principal"))
    actions, not_action = _pick(raw, "Action", "NotAction", _action)
    resources, not_resource = _pick(raw, "Resource", "NotResource", str)
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
    """Compiled policies by their text and queue: compiling is done once per distinct policy, not per
    request (the text itself comes with the queue's cached attributes, engine/queues/attributes.py)."""

    def __init__(self, limit: int = 10_000) -> None:
        self._lru: Lru[tuple[str, str], Policy] = Lru(limit)

    def get(self, text: str, queue_arn: str) -> Policy:
        hit = self._lru.get((text, queue_arn))
        if hit is None:
            hit = compile_policy(text, queue_arn)
            self._lru.put((text, queue_arn), hit)
        return hit
