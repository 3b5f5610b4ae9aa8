"""What an SQS access key may do: the actions it may call and the queues it may call them on.

A grant is the identity-policy half of AWS's evaluation (the queue ``Policy`` is the other half,
daemon/http/sqs/policy.py): ``casque sqs-keys create --actions ReceiveMessage,DeleteMessage
--queues user-42`` makes a key that can only receive and delete on ``user-42``. A key made without
one has full access (the keys made before grants existed), which ``FULL`` stands for.

Action names are SQS's IAM actions, with or without ``sqs:``, matched without regard to case and
with IAM's wildcards (``*``, ``sqs:*``, ``sqs:Receive*``). The batch actions are authorized as
their single form, as in IAM (SendMessageBatch needs ``sqs:SendMessage``). Queue patterns are
names or ``*``/``?`` globs (``user-*``), matched with case, as queue names are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from daemon.base.errors import UsageError

#: SQS's IAM actions (the API actions that have one; the batch forms map onto these).
ACTIONS: tuple[str, ...] = (
    "AddPermission",
    "CancelMessageMoveTask",
    "ChangeMessageVisibility",
    "CreateQueue",
    "DeleteMessage",
    "DeleteQueue",
    "GetQueueAttributes",
    "GetQueueUrl",
    "ListDeadLetterSourceQueues",
    "ListMessageMoveTasks",
    "ListQueueTags",
    "ListQueues",
    "PurgeQueue",
    "ReceiveMessage",
    "RemovePermission",
    "SendMessage",
    "SetQueueAttributes",
    "StartMessageMoveTask",
    "TagQueue",
    "UntagQueue",
)
#: API actions authorized as another IAM action.
BATCH: dict[str, str] = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}
_BY_LOWER = {a.lower(): a for a in ACTIONS} | {b.lower(): a for b, a in BATCH.items()}
_QUEUE_PATTERN = re.compile(r"^[A-Za-z0-9_*?-]{1,80}$")


def iam_action(api_action: str) -> str:
    """The IAM action an API action is authorized as."""
    return BATCH.get(api_action, api_action)


@lru_cache(maxsize=4096)
def wildcard(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    """IAM's glob: ``*`` any run of characters, ``?`` one; everything else literal."""
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(f"^{body}$", re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL)


def normalize_action(name: str) -> str | None:
    """``sqs:receive*`` -> ``Receive*``-like canonical text; None if it names no SQS action.
    Exact names come back in SQS's spelling; a wildcard must match at least one action."""
    text = name.strip()
    if text.lower().startswith("sqs:"):
        text = text[4:]
    if not text or ":" in text:
        return None
    if "*" in text or "?" in text:
        rx = wildcard(text, True)
        return text if any(rx.match(a) for a in ACTIONS) else None
    return _BY_LOWER.get(text.lower())


def action_matches(pattern: str, action: str) -> bool:
    """Whether a normalized action pattern covers an IAM action."""
    return bool(wildcard(pattern, True).match(action))


@dataclass(frozen=True)
class Grant:
    """Action patterns x queue patterns: the key may call any of ``actions`` on any of ``queues``."""

    actions: tuple[str, ...]
    queues: tuple[str, ...]

    @classmethod
    def parse(cls, actions: list[str] | None, queues: list[str] | None) -> Grant:
        """A grant from user input (the CLI's comma lists, the Python API): an unknown action or a
        malformed queue pattern is a UsageError naming it. A side left out means everything."""
        acts = [a for a in (actions if actions is not None else ["*"]) if a.strip()]
        qs = [q.strip() for q in (queues if queues is not None else ["*"]) if q.strip()]
        if not acts:
            raise UsageError(
                "--actions needs at least one SQS action (e.g. ReceiveMessage,DeleteMessage, sqs:Receive* or *)"
            )
        if not qs:
            raise UsageError("--queues needs at least one queue name or glob (e.g. user-42 or user-*)")
        out = []
        for a in acts:
            norm = normalize_action(a)
            if norm is None:
                raise UsageError(
                    f"unknown SQS action {a.strip()!r}: use an SQS action name (ReceiveMessage, sqs:SendMessage), "
                    "a wildcard (sqs:Receive*) or *"
                )
            out.append(norm)
        for q in qs:
            if not _QUEUE_PATTERN.match(q):
                raise UsageError(
                    f"invalid queue pattern {q!r}: use a queue name (1-80 of A-Za-z0-9_-) or a glob with * and ?"
                )
        return cls(tuple(dict.fromkeys(out)), tuple(dict.fromkeys(qs)))

    def allows(self, action: str, queue: str | None) -> bool:
        """Whether the key may call ``action`` (an IAM action) on ``queue``; ``None`` (an action
        with no queue of its own) needs the action on every queue (a ``*`` queue pattern)."""
        if not any(action_matches(p, action) for p in self.actions):
            return False
        if queue is None:
            return "*" in self.queues
        return any(wildcard(q, False).match(queue) for q in self.queues)

    def describe(self) -> str:
        return f"{','.join(self.actions)} on {','.join(self.queues)}"


#: A key without a grant: every action on every queue.
FULL = Grant(("*",), ("*",))
