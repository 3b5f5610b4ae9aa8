"""The ``Condition`` block of a queue Policy statement: IAM's operators over the request's keys.

Checked when the policy is set (``compile_block`` refuses unknown operators, unknown keys and
values of the wrong kind, so nothing is stored that casque would ignore), evaluated per request
(``Block.holds``). IAM's rules: every operator of a block must hold, every key of an operator
must hold, and a key holds if its value matches any of the listed values (for a negated operator:
none of them). A key the request lacks fails a positive operator and satisfies a negated one;
the ``...IfExists`` forms hold when it is missing; ``Null`` tests presence.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from daemon.engine.access.grants import wildcard
from daemon.http.sqs.errors import SqsError

#: The request keys casque knows (lower case, as IAM compares key names without case).
KEYS = {
    "aws:sourceip",
    "aws:securetransport",
    "aws:currenttime",
    "aws:epochtime",
    "aws:principalarn",
    "aws:principalaccount",
    "aws:principaltype",
    "aws:username",
    "aws:userid",
}
#: Keys AWS sets that casque never has: a condition on them could never be what the author meant.
ABSENT = {
    "aws:sourcearn": "no AWS service sends on anyone's behalf in casque",
    "aws:sourceaccount": "no AWS service sends on anyone's behalf in casque",
    "aws:sourcevpc": "casque has no VPC endpoints",
    "aws:sourcevpce": "casque has no VPC endpoints",
}
MAX_CONDITIONS = 10  # SQS's limit per policy


def _text(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _date(v: Any) -> float:
    """An IAM date: epoch seconds or ISO 8601 (a date alone, or with a time and zone)."""
    text = _text(v).strip()
    try:
        return float(text)
    except ValueError:
        pass
    when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()


def _number(v: Any) -> float:
    return float(_text(v))


def _network(v: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(_text(v).strip(), strict=False)


def _bool(v: Any) -> str:
    text = _text(v).lower()
    if text not in ("true", "false"):
        raise ValueError(text)
    return text


def _in_network(actual: str, net: Any) -> bool:
    try:
        return ipaddress.ip_address(actual) in net
    except ValueError:
        return False


# operator family -> (value parser, test(actual text, parsed value) -> bool)
_FAMILIES: dict[str, tuple[Callable[[Any], Any], Callable[[str, Any], bool]]] = {
    "StringEquals": (_text, lambda a, v: a == v),
    "StringEqualsIgnoreCase": (_text, lambda a, v: a.lower() == v.lower()),
    "StringLike": (_text, lambda a, v: bool(wildcard(v, False).match(a))),
    "ArnEquals": (_text, lambda a, v: a == v),
    "ArnLike": (_text, lambda a, v: bool(wildcard(v, False).match(a))),
    "NumericEquals": (_number, lambda a, v: _number(a) == v),
    "NumericLessThan": (_number, lambda a, v: _number(a) < v),
    "NumericLessThanEquals": (_number, lambda a, v: _number(a) <= v),
    "NumericGreaterThan": (_number, lambda a, v: _number(a) > v),
    "NumericGreaterThanEquals": (_number, lambda a, v: _number(a) >= v),
    "DateEquals": (_date, lambda a, v: _date(a) == v),
    "DateLessThan": (_date, lambda a, v: _date(a) < v),
    "DateLessThanEquals": (_date, lambda a, v: _date(a) <= v),
    "DateGreaterThan": (_date, lambda a, v: _date(a) > v),
    "DateGreaterThanEquals": (_date, lambda a, v: _date(a) >= v),
    "IpAddress": (_network, _in_network),
    "Bool": (_bool, lambda a, v: a.lower() == v),
}
# negated operator -> the positive family it negates
_NEGATED = {
    "StringNotEquals": "StringEquals",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringNotLike": "StringLike",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
    "NumericNotEquals": "NumericEquals",
    "DateNotEquals": "DateEquals",
    "NotIpAddress": "IpAddress",
}


@dataclass(frozen=True)
class Test:
    """One operator on one key: ``values`` parsed, ``negated``, ``if_exists``, or a Null test."""

    operator: str
    key: str
    values: tuple[Any, ...]
    negated: bool = False
    if_exists: bool = False
    null: bool = False

    def holds(self, context: dict[str, str]) -> bool:
        actual = context.get(self.key)
        if self.null:
            return (actual is None) == (self.values[0] == "true")
        if actual is None:
            return self.if_exists or self.negated
        _, test = _FAMILIES[_NEGATED.get(self.operator, self.operator)]
        try:
            hit = any(test(actual, v) for v in self.values)
        except (ValueError, TypeError):
            hit = False  # a request value of the wrong kind matches nothing
        return not hit if self.negated else hit


@dataclass(frozen=True)
class Block:
    tests: tuple[Test, ...] = ()

    def holds(self, context: dict[str, str]) -> bool:
        return all(t.holds(context) for t in self.tests)


def refuse(reason: str) -> SqsError:
    return SqsError("InvalidAttributeValue", f"Invalid value for the parameter Policy. Reason: {reason}")


def compile_block(raw: Any) -> Block:
    """A statement's Condition, checked; anything casque can't evaluate is refused with the reason."""
    if raw is None:
        return Block()
    if not isinstance(raw, dict):
        raise refuse("Condition must be a map of operator to {key: value(s)}.")
    tests: list[Test] = []
    for op, keys in raw.items():
        if not isinstance(keys, dict) or not keys:
            raise refuse(f"Condition operator {op} must map condition keys to values.")
        for key, value in keys.items():
            tests.append(_test(str(op), str(key), value))
    return Block(tuple(tests))


def _test(op: str, key: str, value: Any) -> Test:
    if op.startswith(("ForAnyValue:", "ForAllValues:")):
        raise refuse(f"Condition operator {op} is not supported: casque's condition keys are single-valued.")
    base = op[:-8] if op.endswith("IfExists") else op
    lower = key.lower()
    if lower in ABSENT:
        raise refuse(f"Condition key {key} is not supported: {ABSENT[lower]}, so it is never present.")
    if lower not in KEYS:
        raise refuse(f"Condition key {key} is not supported by casque (supported: {', '.join(sorted(KEYS))}).")
    values = value if isinstance(value, list) else [value]
    if not values or any(isinstance(v, (dict, list)) or v is None for v in values):
        raise refuse(f"Condition {op} {key} needs a value or a list of values.")
    if base == "Null" and op == "Null":
        try:
            return Test(op, lower, (_bool(values[0]),), null=True)
        except ValueError:
            raise refuse(f"Condition Null {key} takes true or false.") from None
    family = _NEGATED.get(base, base)
    if family not in _FAMILIES:
        raise refuse(f"Condition operator {op} is not supported by casque.")
    parse, _ = _FAMILIES[family]
    try:
        parsed = tuple(parse(v) for v in values)
    except (ValueError, TypeError):
        raise refuse(f"Condition {op} {key}: {values!r} is not a valid {family} value.") from None
    return Test(base, lower, parsed, negated=base in _NEGATED, if_exists=op != base)
