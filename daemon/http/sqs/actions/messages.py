"""SQS actions on messages: send (one or a batch), receive, delete, change visibility."""

from __future__ import annotations

from typing import Any

from daemon.engine.delivery.deadletter import ID_HEADER
from daemon.engine.delivery.receive import Delivery, InvalidReceipt, NotInFlight, VisibilityTooLong
from daemon.engine.delivery.settle import ReceiptExpired
from daemon.engine.send.producer import Job
from daemon.http.sqs import attributes as qattr
from daemon.http.sqs import fifo as fifo_rules
from daemon.http.sqs import messages as msg
from daemon.http.sqs import params
from daemon.http.sqs import system_attributes as system_attrs
from daemon.http.sqs.actions.base import ActionGroup, Call
from daemon.http.sqs.errors import SqsError, invalid, missing


def _invalid_handle(handle: str) -> SqsError:
    return SqsError("ReceiptHandleIsInvalid", f'The input receipt handle "{handle}" is not a valid receipt handle.')


def _refused_delete(handle: str, refused: Exception, batch: bool) -> SqsError:
    """A delete's refusal. A FIFO receipt past its visibility: AWS's answers as users recorded them, DeleteMessage
    InvalidParameterValue (aws/aws-sdk-js#1279, aws/aws-sdk-java#2164), a DeleteMessageBatch entry
    ReceiptHandleIsInvalid (smaskalik/sqsmover#54)."""
    if not isinstance(refused, ReceiptExpired):
        return _invalid_handle(handle)
    if batch:
        return SqsError("ReceiptHandleIsInvalid", "The receipt handle has expired")
    return invalid(f"Value {handle} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.")


class MessageActions(ActionGroup):
    ACTIONS = (
        "SendMessage",
        "SendMessageBatch",
        "ReceiveMessage",
        "DeleteMessage",
        "DeleteMessageBatch",
        "ChangeMessageVisibility",
        "ChangeMessageVisibilityBatch",
    )

    async def send_message(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        qs = await self.cq.queue_settings(name)
        extras = await self.cq.extras.get(name)
        job, result = self._job(call.params, qs, extras, call.trace_header)
        sent = (await self._send(qs, [job]))[0]
        return self._sent(result, sent, qs)

    async def send_message_batch(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        entries = params.entries(call.params, "SendMessageBatch")
        qs = await self.cq.queue_settings(name)
        fifo_rules.check_batch(entries, qs)
        extras = await self.cq.extras.get(name)
        # The batch is bounded by SQS's own maximum, whatever the queue's MaximumMessageSize (which
        # bounds each message: _job), as the API reference has it and AWS answers.
        total = sum(
            len(str(e.get("MessageBody", "")).encode("utf-8")) + params.attributes_size(e.get("MessageAttributes"))
            for e in entries
        )
        if total > qattr.SERVICE_MAX_SIZE:
            raise SqsError(
                "BatchRequestTooLong",
                f"Batch requests cannot be longer than {qattr.SERVICE_MAX_SIZE} bytes. You have sent {total} bytes.",
            )
        ok: list[tuple[str, Job, dict[str, Any]]] = []
        failed: list[dict[str, Any]] = []
        for e in entries:
            try:
                job, result = self._job(e, qs, extras, call.trace_header, in_batch=True)
                ok.append((e["Id"], job, result))
            except SqsError as err:
                failed.append({"Id": e["Id"], "SenderFault": True, "Code": err.query_code, "Message": err.message})
        sent = await self._send(qs, [job for _, job, _ in ok]) if ok else []
        successful = [{"Id": eid, **self._sent(result, s, qs)} for (eid, _, result), s in zip(ok, sent)]
        return {"Successful": successful, "Failed": failed}

    async def _send(self, qs: Any, jobs: list[Job]) -> list[Any]:
        """The engine's ``send_many`` for one message or a batch; each answer is a ``Sent``
        (the id, and on a FIFO queue its sequence and whether it was a duplicate). A send over SQS
        waits for a pull client, as in SQS: the queue is marked as one they consume, before the write,
        so a daemon serving it leaves the tasks it has no handler for (docs/design.md, "Push and pull
        on one queue")."""
        await self.cq.stores.queues.mark_pulled(qs)  # the request's settings: no second look-up
        return list(await self.cq.send_many(qs.name, jobs))

    @staticmethod
    def _sent(result: dict[str, Any], sent: Any, qs: Any) -> dict[str, Any]:
        """The answer for one sent message: its id (a duplicate within the dedup window: the first
        send's id and sequence, as SQS), and a FIFO message's SequenceNumber."""
        out = {"MessageId": str(sent), **result}
        if qs.fifo and sent.sequence:
            out["SequenceNumber"] = sent.sequence
        return out

    def _job(
        self, p: dict[str, Any], qs: Any, extras: Any, trace: str | None = None, in_batch: bool = False
    ) -> tuple[Job, dict[str, Any]]:
        body = msg.check_body(p.get("MessageBody"))
        attrs = msg.check_attributes(p.get("MessageAttributes"))
        group, dedup = fifo_rules.ids(p, qs, body)
        fifo_rules.check_delay(p, qs)
        system = system_attrs.check(p.get("MessageSystemAttributes"))
        limit = qattr.number(qs, extras, "MaximumMessageSize")
        size = len(body.encode("utf-8")) + msg.attributes_size(attrs)
        if size > limit:  # AWS words it so, a batch entry "cannot be validated" (both recorded against AWS)
            verdict = "cannot be validated" if in_batch else "are invalid"
            raise invalid(f"One or more parameters {verdict}. Reason: Message must be shorter than {limit} bytes.")
        queue_delay = qattr.number(qs, extras, "DelaySeconds")
        headers = msg.to_headers(attrs) | system_attrs.to_headers(system, trace)
        task = msg.task_of(attrs, self.settings.task)
        if qs.fifo:  # the queue's DelaySeconds delays every message of a FIFO queue, a DelaySeconds=0 one too (as SQS)
            job = Job(
                task,
                body,
                headers=headers,
                max_attempts=qattr.FOLLOW_QUEUE,
                group=group,
                dedup_id=dedup,
                queue_delay=float(queue_delay) or None,
            )
        else:
            # AWS's text (the Ballerina connector's and Go SDK users' tests recorded it against AWS)
            delay = params.integer(
                p,
                "DelaySeconds",
                queue_delay,
                0,
                900,
                "Value {v} for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= 900.",
            )
            job = Job(task, body, delay=delay or None, headers=headers, max_attempts=qattr.FOLLOW_QUEUE, group=group)
        result: dict[str, Any] = {"MD5OfMessageBody": msg.md5_hex(body.encode("utf-8"))}
        digest = msg.md5_of_attributes(attrs)
        if digest:
            result["MD5OfMessageAttributes"] = digest
        if system:
            result["MD5OfMessageSystemAttributes"] = msg.md5_of_attributes(system)
        return job, result

    async def receive_message(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        p = call.params
        qs = await self.cq.queue_settings(name)
        extras = await self.cq.extras.get(name)
        limit = params.integer(
            p,
            "MaxNumberOfMessages",
            1,
            1,
            10,
            "Value {v} for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided.",
        )
        wait = params.integer(
            p,
            "WaitTimeSeconds",
            qattr.number(qs, extras, "ReceiveMessageWaitTimeSeconds"),
            0,
            20,
            "Value {v} for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided.",
        )
        visibility = params.integer(
            p,
            "VisibilityTimeout",
            qattr.number(qs, extras, "VisibilityTimeout"),
            0,
            43_200,
            "Value {v} for parameter VisibilityTimeout is invalid. Reason: Must be >= 0 and <= 43200, if provided.",
        )
        # ReceiveRequestAttemptId is FIFO's (a retried receive gets the same messages); SQS ignores it on a standard
        # queue.
        attempt = fifo_rules.check_id(p.get("ReceiveRequestAttemptId"), "ReceiveRequestAttemptId") if qs.fifo else None
        # As SQS: MessageSystemAttributeNames when given, else the older AttributeNames.
        system = params.names(p.get("MessageSystemAttributeNames")) or params.names(p.get("AttributeNames"))
        wanted = params.names(p.get("MessageAttributeNames"))
        if attempt is not None:
            # Scoped to the signing key: another key that learns (or guesses) the id gets nothing of
            # this one's receive, not its receipt handles (with which it could delete the messages).
            scoped = f"{call.principal.access_key_id}:{attempt}" if call.principal is not None else attempt
            deliveries = await self.cq.receive(name, max=limit, wait=wait, visibility=visibility, attempt_id=scoped)
        else:
            deliveries = await self.cq.receive(name, max=limit, wait=wait, visibility=visibility)
        return {"Messages": [self._message(d, system, wanted) for d in deliveries]} if deliveries else {}

    def _message(self, d: Delivery, system: list[str], wanted: list[str]) -> dict[str, Any]:
        m = d.message
        body = msg.body_of(m)
        out: dict[str, Any] = {
            "MessageId": m.headers.get(ID_HEADER, str(m.id)),  # a dead letter keeps the id it was sent with
            "ReceiptHandle": d.receipt,
            "MD5OfBody": msg.md5_hex(body.encode("utf-8")),
            "Body": body,
        }
        chosen = system_attrs.select(system_attrs.values(m, d.received_ms, self.settings.account, self.arn), system)
        if chosen:
            out["Attributes"] = chosen
        attrs = msg.select_attributes(msg.from_headers(m.headers), wanted)
        if attrs:
            out["MessageAttributes"] = attrs
            out["MD5OfMessageAttributes"] = msg.md5_of_attributes(attrs)
        return out

    async def delete_message(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        handle = call.params.get("ReceiptHandle")
        if not handle:
            raise missing("ReceiptHandle")
        await self.cq.queue_settings(name)
        refused = (await self.cq.settler.delete_batch([str(handle)], name))[0]
        if refused is not None:
            raise _refused_delete(str(handle), refused, batch=False)
        return {}

    async def delete_message_batch(self, call: Call) -> dict[str, Any]:
        """Every entry in one blind delete (engine/delivery/settle.py ``delete_batch``: the markers' read
        and one batch of deletes, whatever the number of entries); a handle refused fails its entry."""
        name = self.queue_of(call)
        entries = params.entries(call.params, "DeleteMessageBatch")
        await self.cq.queue_settings(name)
        handles = [str(e.get("ReceiptHandle") or "") for e in entries]
        refused = dict(zip(map(id, entries), await self.cq.settler.delete_batch(handles, name)))

        async def one(e: dict[str, Any]) -> None:
            no = refused[id(e)]
            if no is not None:
                raise _refused_delete(str(e.get("ReceiptHandle") or ""), no, batch=True)

        return await params.batch(entries, one)

    async def change_message_visibility(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        if not call.params.get("ReceiptHandle"):
            raise missing("ReceiptHandle")
        await self.cq.queue_settings(name)
        await self._change(name, call.params)
        return {}

    async def _change(self, queue: str, p: dict[str, Any]) -> None:
        if p.get("VisibilityTimeout") is None:
            raise missing("VisibilityTimeout")
        seconds = params.integer(
            p,
            "VisibilityTimeout",
            0,
            0,
            43_200,
            "Value {v} for parameter VisibilityTimeout is invalid. Reason: Must be >= 0 and <= 43200.",
        )
        handle = str(p.get("ReceiptHandle") or "")
        try:
            await self.cq.change_visibility(handle, seconds, queue)
        except InvalidReceipt:
            raise _invalid_handle(handle) from None
        except NotInFlight as exc:
            if exc.gone:  # deleted (or dead-lettered): SQS's answer for a message that is not there
                raise invalid(
                    f"Value {handle} for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not "
                    "available "
                    "for visibility timeout change."
                ) from None
            raise SqsError("MessageNotInflight", "The message referred to isn't in flight.") from None
        except VisibilityTooLong:
            raise invalid(
                f"Value {seconds} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the "
                "message "
                f"is beyond the limit [43200 seconds]"
            ) from None

    async def change_message_visibility_batch(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        entries = params.entries(call.params, "ChangeMessageVisibilityBatch")
        await self.cq.queue_settings(name)
        return await params.batch(entries, lambda e: self._change(name, e))
