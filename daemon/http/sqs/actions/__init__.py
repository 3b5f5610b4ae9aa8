"""The SQS actions on a connected ``Casque``, grouped by what they act on (moto's models /
responses split, ElasticMQ's file per action): queues.py, messages.py, move_tasks.py,
permissions.py. Each takes the request in the JSON protocol's shape and returns the result in that
shape (wire.py renders either protocol).

Queues are ordinary casque queues (a handler daemon can consume them; ``casque stats``/``poison``
see them); messages go through the engine's send and pull API (engine/delivery/receive.py).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from daemon.base.config import SqsSettings
from daemon.base.errors import QueueNotFound
from daemon.engine.client import Casque
from daemon.http.sqs.access import AccessControl
from daemon.http.sqs.actions.base import ActionGroup, Call
from daemon.http.sqs.actions.messages import MessageActions
from daemon.http.sqs.actions.move_tasks import MoveTaskActions
from daemon.http.sqs.actions.permissions import PermissionActions
from daemon.http.sqs.actions.queues import QueueActions
from daemon.http.sqs.errors import SqsError

__all__ = ["ActionGroup", "Call", "SqsService"]
NOT_AT_QUEUE_URL = {"CreateQueue", "ListQueues"}
GROUPS: tuple[type[ActionGroup], ...] = (QueueActions, MessageActions, MoveTaskActions, PermissionActions)


class SqsService:
    """Routes an action name to the group method that runs it, once the caller is authorized for it
    (access.py: the one place permissions are checked)."""

    def __init__(self, cq: Casque, settings: SqsSettings) -> None:
        self.cq = cq
        self.settings = settings
        self.access = AccessControl(cq, settings)
        self.groups = [group(cq, settings) for group in GROUPS]
        self.actions: dict[str, Callable[[Call], Awaitable[dict[str, Any]]]] = {
            name: getattr(g, _snake(name)) for g in self.groups for name in g.ACTIONS
        }

    async def run(self, action: str, call: Call) -> dict[str, Any]:
        fn = self.actions.get(action)
        if fn is None or (call.path_queue and action in NOT_AT_QUEUE_URL):  # as SQS: these only at the service URL
            raise SqsError("InvalidAction", f"The action {action} is not valid for this endpoint.")
        await self.access.authorize(action, call)
        try:
            return self.access.filter(action, call, await fn(call))
        except QueueNotFound:
            raise SqsError("QueueDoesNotExist", "The specified queue does not exist.") from None


def _snake(action: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", action).lower()
