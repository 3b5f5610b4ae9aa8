"""SQS message move tasks: redrive a dead-letter queue's messages to their source or elsewhere.

StartMessageMoveTask only records the task (engine/cluster/move_tasks.py) and returns its handle: every
``casque serve`` runs tasks in the background, one runner per task under a lease
(engine/operations/mover.py), so a task outlives the request, the server that started it, and a restart.
ListMessageMoveTasks reads the stored tasks, so any server answers for any task.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from typing import Any

from daemon.base.errors import QueueNotFound
from daemon.engine.cluster.move_tasks import RUNNING, MoveTask
from daemon.engine.operations.mover import wake_local
from daemon.http.sqs import attributes as qattr
from daemon.http.sqs import params
from daemon.http.sqs.actions.base import ActionGroup, Call
from daemon.http.sqs.errors import SqsError, invalid, missing

ACTIVE = "There is already a task running. Only one active task is allowed for a source queue arn at a given time."


class MoveTaskActions(ActionGroup):
    ACTIONS = ("StartMessageMoveTask", "ListMessageMoveTasks", "CancelMessageMoveTask")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.store = self.cq.stores.move_tasks
        self.depth = self.cq.stores.depth_estimator()

    async def start_message_move_task(self, call: Call) -> dict[str, Any]:
        """Checks as SQS does (source exists and is some queue's dead-letter queue, destination
        exists, rate 1-500, no active task on the source), then stores the task RUNNING."""
        source = await self._existing(call.params.get("SourceArn"), "SourceArn")
        rate = None
        if call.params.get("MaxNumberOfMessagesPerSecond") is not None:
            rate = params.integer(
                call.params,
                "MaxNumberOfMessagesPerSecond",
                0,
                1,
                500,
                "Value {v} for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: Must be between 1 and 500.",
            )
        if not await self.cq.extras.is_dead_letter_target(source):
            raise invalid("Source queue must be configured as a Dead Letter Queue.")
        dest_arn = call.params.get("DestinationArn")
        dest = await self._existing(dest_arn, "DestinationArn") if dest_arn else None
        if dest == source:
            raise invalid("Source queue arn and destination queue arn cannot be the same.")
        now = self.cq.clock.now_ms()
        est = await self.depth.estimate(await self.cq.queue_settings(source, fresh=True), now)
        task = MoveTask(
            source,
            now,
            uuid.uuid4(),
            dest,
            rate,
            RUNNING,
            0,
            round(est.waiting + est.in_flight + est.delayed),
            None,
            now,
        )
        if not await self.store.claim(task):
            raise invalid(ACTIVE)
        wake_local()
        return {"TaskHandle": self._handle(task)}

    async def list_message_move_tasks(self, call: Call) -> dict[str, Any]:
        source = await self._existing(call.params.get("SourceArn"), "SourceArn")
        limit = params.integer(
            call.params,
            "MaxResults",
            1,
            1,
            10,
            "Value {v} for parameter MaxResults is invalid. Reason: Must be between 1 and 10.",
        )
        return {"Results": [self._describe(t) for t in await self.store.newest(source, limit)]}

    async def cancel_message_move_task(self, call: Call) -> dict[str, Any]:
        """Ask the task's runner to stop (it ends the task CANCELLED within about a second; what
        was not moved yet stays in the dead-letter queue). Only a running task can be cancelled."""
        raw = call.params.get("TaskHandle")
        if not raw:
            raise missing("TaskHandle")
        source, started_at, task_id = self._parse_handle(str(raw))
        try:
            await self.cq.queue_settings(source)
        except QueueNotFound:
            raise SqsError(
                "ResourceNotFoundException",
                "The resource that you specified for the SourceArn parameter doesn't exist.",
            ) from None
        task = await self.store.get(source, started_at, task_id)
        if task is None or task.status != RUNNING:
            raise SqsError("ResourceNotFoundException", "Task does not exist.")
        await self.store.request_cancel(task, self.cq.clock.now_ms())
        return {"ApproximateNumberOfMessagesMoved": task.moved}

    async def _existing(self, arn: Any, param: str) -> str:
        if not arn:
            raise missing(param)
        name = qattr.queue_of_arn(arn)
        if name is None:
            raise invalid(
                f"You must use this format to specify the {param}: "
                "arn:<partition>:<service>:<region>:<account-id>:<resource-id>"
            )
        try:
            await self.cq.queue_settings(name)
        except QueueNotFound:
            raise SqsError(
                "ResourceNotFoundException", f"The resource that you specified for the {param} parameter doesn't exist."
            ) from None
        return name

    def _handle(self, task: MoveTask) -> str:
        """SQS's handle is base64 JSON of taskId and sourceArn; casque adds the start time (the
        row's clustering key), so a cancel reads one row."""
        doc = {"taskId": str(task.task_id), "sourceArn": self.arn(task.source), "startedAt": task.started_at}
        return base64.b64encode(json.dumps(doc, separators=(",", ":")).encode()).decode()

    def _parse_handle(self, raw: str) -> tuple[str, int, uuid.UUID]:
        try:
            doc = json.loads(base64.b64decode(raw, validate=True))
            source = qattr.queue_of_arn(doc["sourceArn"])
            started_at, task_id = int(doc["startedAt"]), uuid.UUID(str(doc["taskId"]))
        except (binascii.Error, ValueError, TypeError, KeyError, UnicodeDecodeError):
            source = None
        if source is None:
            raise invalid("Value for parameter TaskHandle is invalid.")
        return source, started_at, task_id

    def _describe(self, t: MoveTask) -> dict[str, Any]:
        out: dict[str, Any] = {
            "Status": t.shown_status,
            "SourceArn": self.arn(t.source),
            "ApproximateNumberOfMessagesMoved": t.moved,
            "ApproximateNumberOfMessagesToMove": t.to_move,
            "StartedTimestamp": t.started_at,
        }
        if t.shown_status == RUNNING:
            out["TaskHandle"] = self._handle(t)
        if t.destination:
            out["DestinationArn"] = self.arn(t.destination)
        if t.rate is not None:
            out["MaxNumberOfMessagesPerSecond"] = t.rate
        if t.failure:
            out["FailureReason"] = t.failure
        return out
