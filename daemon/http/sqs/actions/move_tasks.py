"""SQS message move tasks: redrive a dead-letter queue's messages to their source or elsewhere."""

from __future__ import annotations

import base64
import json
from typing import Any

from daemon.engine.client import Casque
from daemon.engine.deadletter import FROM_HEADER, ID_HEADER
from daemon.http.sqs import attributes as qattr
from daemon.http.sqs import params
from daemon.http.sqs.actions.base import ActionGroup, Call
from daemon.http.sqs.errors import invalid


class MoveTaskActions(ActionGroup):
    ACTIONS = ("StartMessageMoveTask", "ListMessageMoveTasks")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.moves: dict[str, list[dict[str, Any]]] = {}

    async def start_message_move_task(self, call: Call) -> dict[str, Any]:
        """Redrive: move every message of a dead-letter queue back to its source queue (or to
        DestinationArn), now, within this request (SQS runs it in the background; casque's move
        is complete when the call returns, and ListMessageMoveTasks reports it)."""
        source = qattr.queue_of_arn(call.params.get("SourceArn"))
        if source is None:
            raise invalid("SourceArn must be the ARN of a dead-letter queue.")
        dest_arn = call.params.get("DestinationArn")
        dest = qattr.queue_of_arn(dest_arn) if dest_arn else None
        if dest_arn and dest is None:
            raise invalid("DestinationArn must be a queue ARN.")
        await self.cq.queues.get(source)
        if dest:
            await self.cq.queues.get(dest)
        started = self.cq.clock.now_ms()
        moved = await redrive(self.cq, source, dest)
        handle = base64.urlsafe_b64encode(json.dumps([source, started]).encode()).decode()
        task = {"TaskHandle": handle, "Status": "COMPLETED", "SourceArn": self.arn(source), "ApproximateNumberOfMessagesMoved": moved,
                "ApproximateNumberOfMessagesToMove": moved, "StartedTimestamp": started}
        if dest:
            task["DestinationArn"] = self.arn(dest)
        self.moves[source] = ([task] + self.moves.get(source, []))[:10]
        return {"TaskHandle": handle}

    async def list_message_move_tasks(self, call: Call) -> dict[str, Any]:
        source = qattr.queue_of_arn(call.params.get("SourceArn"))
        if source is None:
            raise invalid("SourceArn must be the ARN of a dead-letter queue.")
        limit = params.integer(call.params, "MaxResults", 1, 1, 10)
        return {"Results": self.moves.get(source, [])[:limit]}

async def redrive(cq: Casque, source: str, dest: str | None, limit: int = 100_000) -> int:
    """Move messages out of a dead-letter queue: each is sent to ``dest`` (or back to the queue it
    came from), then deleted from the dead-letter queue; at-least-once, like any consumer."""
    moved, empty, kept = 0, 0, []
    while moved < limit and empty < 2:
        batch = await cq.receive(source, max=10, wait=0, visibility=300)
        empty = 0 if batch else empty + 1
        for d in batch:
            m = d.message
            target = dest or m.headers.get(FROM_HEADER)
            if not target:  # not a dead letter (sent straight to this queue): it stays
                kept.append(d.receipt)
                continue
            headers = {k: v for k, v in m.headers.items() if k not in (FROM_HEADER, ID_HEADER)}
            await cq.send(target, m.task, m.payload, priority=m.priority, headers=headers)
            await cq.delete(d.receipt)
            moved += 1
    await cq.change_visibility_many((r, 0) for r in kept)
    return moved
