"""The SQS actions on a connected ``Casque``: each takes the request in the JSON protocol's shape
and returns the result in that shape (wire.py renders either protocol).

Queues are ordinary casque queues (a handler daemon can consume them; ``casque stats``/``poison``
see them); messages go through the engine's send and pull API (engine/receive.py).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from daemon.base.config import SqsSettings
from daemon.base.errors import QueueNotFound, UsageError
from daemon.engine import admin
from daemon.engine.client import Casque
from daemon.engine.deadletter import FROM_HEADER, ID_HEADER
from daemon.engine.producer import Job
from daemon.engine.queues import MAX_PAYLOAD_BYTES, settings_from_defaults
from daemon.engine.receive import Delivery, InvalidReceipt, NotInFlight
from daemon.engine.stats import queue_stats
from daemon.http.sqs import attributes as qattr
from daemon.http.sqs import messages as msg
from daemon.http.sqs.errors import SqsError, invalid, missing

MAX_BATCH = 10
MAX_TAGS = 50
LIST_PAGE = 1000
#: Names one ListQueues request reads at most (10 pages): with a prefix that matches few of a million
#: queues, the answer is what matched so far plus a NextToken (given MaxResults), like SQS may.
LIST_SCAN = 10_000
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
_ENTRY_ID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
SYSTEM_ATTRIBUTES = ("SenderId", "SentTimestamp", "ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp")


@dataclass
class Call:
    """One request: its parameters and the base URL queue URLs are built on."""

    params: dict[str, Any]
    base_url: str
    path_queue: str | None = None


class SqsService:
    def __init__(self, cq: Casque, settings: SqsSettings) -> None:
        self.cq = cq
        self.settings = settings
        self.actions: dict[str, Callable[[Call], Awaitable[dict[str, Any]]]] = {
            name: getattr(self, _snake(name)) for name in (
                "CreateQueue", "GetQueueUrl", "ListQueues", "DeleteQueue", "GetQueueAttributes", "SetQueueAttributes", "PurgeQueue",
                "SendMessage", "SendMessageBatch", "ReceiveMessage", "DeleteMessage", "DeleteMessageBatch", "ChangeMessageVisibility",
                "ChangeMessageVisibilityBatch", "ListDeadLetterSourceQueues", "TagQueue", "UntagQueue", "ListQueueTags",
                "StartMessageMoveTask", "ListMessageMoveTasks",
            )
        }
        self.moves: dict[str, list[dict[str, Any]]] = {}

    async def run(self, action: str, call: Call) -> dict[str, Any]:
        fn = self.actions.get(action)
        if fn is None:
            unsupported = {"AddPermission", "RemovePermission", "CancelMessageMoveTask"}
            if action in unsupported:
                raise SqsError("UnsupportedOperation", f"{action} is not supported by casque.")
            raise SqsError("InvalidAction", f"The action {action} is not valid for this endpoint.")
        try:
            return await fn(call)
        except QueueNotFound:
            raise SqsError("QueueDoesNotExist", "The specified queue does not exist.") from None

    # ---- queues -----------------------------------------------------------------------------
    def url(self, call: Call, queue: str) -> str:
        return f"{call.base_url}/{self.settings.account}/{queue}"

    def arn(self, queue: str) -> str:
        return qattr.arn(self.settings.region, self.settings.account, queue)

    def queue_of(self, call: Call) -> str:
        url = call.params.get("QueueUrl") or call.path_queue
        if not url:
            raise missing("QueueUrl")
        name = str(url).rstrip("/").rsplit("/", 1)[-1]
        if not _QUEUE_NAME.match(name):
            raise SqsError("QueueDoesNotExist", "The specified queue does not exist.")
        return name

    async def create_queue(self, call: Call) -> dict[str, Any]:
        name = call.params.get("QueueName")
        if not name:
            raise missing("QueueName")
        if str(name).endswith(".fifo"):
            raise SqsError("UnsupportedOperation", "FIFO queues are not supported by casque (order holds only within a shard row): use a standard queue.")
        if not _QUEUE_NAME.match(str(name)):
            raise invalid("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
        attrs = qattr.check(call.params.get("Attributes"), creating=True)
        tags = _tags(call.params.get("tags") or call.params.get("Tags"))
        await self._check_redrive_target(attrs)
        options = {"max_attempts": qattr.NO_REDRIVE_ATTEMPTS, "timeout": qattr.DEFAULT_VISIBILITY, "retention": qattr.DEFAULT_RETENTION,
                   "max_payload_bytes": MAX_PAYLOAD_BYTES} | qattr.casque_options(attrs)
        try:
            created = await self.cq.queues.create(settings_from_defaults(name, self.cq.settings.queue_defaults, **options), if_missing=True)
        except UsageError as exc:
            raise invalid(str(exc)) from None
        if not created:
            await self._same_attributes(name, attrs)
        else:
            extra, _ = qattr.internal(attrs)
            await self.cq.attributes.set(name, attrs | extra, set(), self.cq.clock.now_ms())
            await self.cq.attributes.tag(name, tags, set())
        return {"QueueUrl": self.url(call, name)}

    async def _same_attributes(self, name: str, attrs: dict[str, str]) -> None:
        """CreateQueue of an existing queue succeeds only if the given attributes match."""
        qs = await self.cq.queues.get(name, fresh=True)
        current = qattr.describe(qs, await self.cq.attributes.get(name, fresh=True), self.arn(name))
        for key, value in attrs.items():
            if current.get(key, qattr.DEFAULTS.get(key, "")) != value:
                raise SqsError("QueueNameExists", f"A queue already exists with the same name and a different value for attribute {key}")

    async def get_queue_url(self, call: Call) -> dict[str, Any]:
        name = call.params.get("QueueName")
        if not name:
            raise missing("QueueName")
        if not _QUEUE_NAME.match(str(name)):
            raise SqsError("QueueDoesNotExist", "The specified queue does not exist.")
        await self.cq.queues.get(name)
        return {"QueueUrl": self.url(call, name)}

    async def list_queues(self, call: Call) -> dict[str, Any]:
        prefix = str(call.params.get("QueueNamePrefix") or "")
        limit_given = call.params.get("MaxResults") is not None
        limit = _int(call.params, "MaxResults", 1000, 1, 1000)
        after = _decode_token(call.params.get("NextToken"))
        names: list[str] = []
        more = False
        scanned = 0
        while True:
            page = await self.cq.attributes.names_page(after, LIST_PAGE)
            for name in page:
                after, scanned = name, scanned + 1
                if name.startswith(prefix):
                    names.append(name)
                    if len(names) == limit:
                        break
            if len(names) == limit:
                more = bool(await self.cq.attributes.names_page(after, 1))
                break
            if len(page) < LIST_PAGE:
                break
            if scanned >= LIST_SCAN:  # a prefix matching few of many queues: never the whole table in one request
                more = True
                break
        out: dict[str, Any] = {"QueueUrls": [self.url(call, n) for n in names]} if names else {}
        if more and limit_given and after is not None:
            out["NextToken"] = base64.urlsafe_b64encode(after.encode()).decode()
        return out

    async def delete_queue(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        await self.cq.queues.get(name, fresh=True)
        await admin.delete_queue(self.cq, name)
        self.cq.attributes.forget(name)
        return {}

    async def purge_queue(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        await self.cq.queues.get(name, fresh=True)
        await admin.purge(self.cq, name)
        return {}

    async def get_queue_attributes(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        wanted = call.params.get("AttributeNames") or []
        if not isinstance(wanted, list):
            raise invalid("AttributeNames must be a list.")
        known = qattr.SETTABLE | qattr.READ_ONLY | {"All"} | qattr.FIFO_ONLY
        for w in wanted:
            if w not in known:
                raise SqsError("InvalidAttributeName", f"Unknown Attribute {w}.")
        qs = await self.cq.queues.get(name, fresh=True)
        everything = qattr.describe(qs, await self.cq.attributes.get(name), self.arn(name))
        every = "All" in wanted
        if every or set(wanted) & qattr.COUNTS:
            st = await queue_stats(self.cq, name)
            everything |= {"ApproximateNumberOfMessages": str(st.waiting_due), "ApproximateNumberOfMessagesNotVisible": str(st.in_flight),
                           "ApproximateNumberOfMessagesDelayed": str(st.scheduled)}
        chosen = everything if every else {k: v for k, v in everything.items() if k in wanted}
        return {"Attributes": chosen} if chosen else {}

    async def set_queue_attributes(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        await self.cq.queues.get(name, fresh=True)
        attrs = qattr.check(call.params.get("Attributes") or {}, creating=False)
        await self._check_redrive_target(attrs)
        options = qattr.casque_options(attrs)
        if options:
            await self.cq.queues.update(name, **options)
        extra, dropped = qattr.internal(attrs)
        keep = {k: v for k, v in attrs.items() if v != ""} | extra
        await self.cq.attributes.set(name, keep, {k for k, v in attrs.items() if v == ""} | dropped, self.cq.clock.now_ms())
        return {}

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
        limit = _int(call.params, "MaxResults", 1, 1, 10)
        return {"Results": self.moves.get(source, [])[:limit]}

    async def _check_redrive_target(self, attrs: dict[str, str]) -> None:
        if attrs.get("RedrivePolicy"):
            target = qattr.queue_of_arn(json.loads(attrs["RedrivePolicy"])["deadLetterTargetArn"])
            try:
                await self.cq.queues.get(str(target))
            except QueueNotFound:
                raise SqsError("InvalidAttributeValue", "Value for parameter RedrivePolicy is invalid. Reason: Dead-letter target does not exist.") from None

    async def list_dead_letter_source_queues(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        await self.cq.queues.get(name)
        sources, after = [], None
        while True:
            page = await self.cq.attributes.names_page(after, LIST_PAGE)
            for queue in page:
                if qattr.redrive_target(await self.cq.attributes.get(queue)) == name:
                    sources.append(self.url(call, queue))
            if len(page) < LIST_PAGE:
                break
            after = page[-1]
        return {"queueUrls": sources}

    async def tag_queue(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        await self.cq.queues.get(name)
        tags = _tags(call.params.get("Tags"))
        current = (await self.cq.attributes.get(name, fresh=True)).tags
        if len(current | tags) > MAX_TAGS:
            raise invalid(f"Too many tags: a queue can have at most {MAX_TAGS}.")
        await self.cq.attributes.tag(name, tags, set())
        return {}

    async def untag_queue(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        await self.cq.queues.get(name)
        keys = call.params.get("TagKeys") or []
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise invalid("TagKeys must be a list of strings.")
        await self.cq.attributes.tag(name, {}, set(keys))
        return {}

    async def list_queue_tags(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        await self.cq.queues.get(name)
        tags = (await self.cq.attributes.get(name, fresh=True)).tags
        return {"Tags": tags} if tags else {}

    # ---- sending ----------------------------------------------------------------------------
    async def send_message(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        qs = await self.cq.queues.get(name)
        extras = await self.cq.attributes.get(name)
        job, result = self._job(call.params, qs, extras)
        result["MessageId"] = await self.cq.send(name, job.task, job.payload, delay=job.delay, headers=job.headers)
        return result

    async def send_message_batch(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        entries = _entries(call.params)
        qs = await self.cq.queues.get(name)
        extras = await self.cq.attributes.get(name)
        limit = qattr.number(qs, extras, "MaximumMessageSize")
        total = sum(len(str(e.get("MessageBody", "")).encode("utf-8")) + _attrs_size(e.get("MessageAttributes")) for e in entries)
        if total > limit:
            raise SqsError("BatchRequestTooLong", f"Batch requests cannot be longer than {limit} bytes. You have sent {total} bytes.")
        ok: list[tuple[str, Job, dict[str, Any]]] = []
        failed: list[dict[str, Any]] = []
        for e in entries:
            try:
                job, result = self._job(e, qs, extras)
                ok.append((e["Id"], job, result))
            except SqsError as err:
                failed.append({"Id": e["Id"], "SenderFault": True, "Code": err.query_code, "Message": err.message})
        ids = await self.cq.send_many(name, [job for _, job, _ in ok]) if ok else []
        successful = [{"Id": eid, "MessageId": mid, **result} for (eid, _, result), mid in zip(ok, ids)]
        return {"Successful": successful, "Failed": failed}

    def _job(self, p: dict[str, Any], qs: Any, extras: Any) -> tuple[Job, dict[str, Any]]:
        body = msg.check_body(p.get("MessageBody"))
        attrs = msg.check_attributes(p.get("MessageAttributes"))
        if p.get("MessageDeduplicationId") is not None:
            raise invalid("The request include parameter MessageDeduplicationId that is not valid for this queue type")
        limit = qattr.number(qs, extras, "MaximumMessageSize")
        size = len(body.encode("utf-8")) + msg.attributes_size(attrs)
        if size > limit:
            raise invalid(f"One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes.")
        delay = _int(p, "DelaySeconds", qattr.number(qs, extras, "DelaySeconds"), 0, 900)
        job = Job(msg.task_of(attrs, self.settings.task), body, delay=delay or None, headers=msg.to_headers(attrs))
        result = {"MD5OfMessageBody": msg.md5_hex(body.encode("utf-8"))}
        digest = msg.md5_of_attributes(attrs)
        if digest:
            result["MD5OfMessageAttributes"] = digest
        return job, result

    # ---- receiving --------------------------------------------------------------------------
    async def receive_message(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        p = call.params
        qs = await self.cq.queues.get(name)
        extras = await self.cq.attributes.get(name)
        limit = _int(p, "MaxNumberOfMessages", 1, 1, 10, "Value {v} for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided.")
        wait = _int(p, "WaitTimeSeconds", qattr.number(qs, extras, "ReceiveMessageWaitTimeSeconds"), 0, 20,
                    "Value {v} for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided.")
        visibility = _int(p, "VisibilityTimeout", qattr.number(qs, extras, "VisibilityTimeout"), 0, 43_200,
                          "Value {v} for parameter VisibilityTimeout is invalid. Reason: Must be >= 0 and <= 43200, if provided.")
        system = _names(p.get("MessageSystemAttributeNames")) + _names(p.get("AttributeNames"))
        wanted = _names(p.get("MessageAttributeNames"))
        deliveries = await self.cq.receive(name, max=limit, wait=wait, visibility=visibility)
        return {"Messages": [self._message(d, system, wanted) for d in deliveries]} if deliveries else {}

    def _message(self, d: Delivery, system: list[str], wanted: list[str]) -> dict[str, Any]:
        m = d.message
        body = msg.body_of(m)
        out: dict[str, Any] = {"MessageId": str(m.id), "ReceiptHandle": d.receipt, "MD5OfBody": msg.md5_hex(body.encode("utf-8")), "Body": body}
        every = "All" in system
        values = {"SenderId": self.settings.account, "SentTimestamp": str(m.enqueued_at), "ApproximateReceiveCount": str(m.attempt)}
        if m.attempt == 1:
            values["ApproximateFirstReceiveTimestamp"] = str(d.received_ms)
        chosen = {k: v for k, v in values.items() if every or k in system}
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
        await self.cq.queues.get(name)
        await self._delete(name, str(handle))
        return {}

    async def _delete(self, queue: str, handle: str) -> None:
        try:
            await self.cq.receiver.delete(handle, queue)
        except InvalidReceipt:
            raise SqsError("ReceiptHandleIsInvalid", f'The input receipt handle "{handle}" is not a valid receipt handle.') from None

    async def delete_message_batch(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        entries = _entries(call.params)
        await self.cq.queues.get(name)
        return await _batch(entries, lambda e: self._delete(name, str(e.get("ReceiptHandle") or "")))

    async def change_message_visibility(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        if not call.params.get("ReceiptHandle"):
            raise missing("ReceiptHandle")
        await self.cq.queues.get(name)
        await self._change(name, call.params)
        return {}

    async def _change(self, queue: str, p: dict[str, Any]) -> None:
        if p.get("VisibilityTimeout") is None:
            raise missing("VisibilityTimeout")
        seconds = _int(p, "VisibilityTimeout", 0, 0, 43_200, "Value {v} for parameter VisibilityTimeout is invalid. Reason: Must be >= 0 and <= 43200.")
        handle = str(p.get("ReceiptHandle") or "")
        try:
            await self.cq.receiver.change_visibility(handle, seconds, queue)
        except InvalidReceipt:
            raise SqsError("ReceiptHandleIsInvalid", f'The input receipt handle "{handle}" is not a valid receipt handle.') from None
        except NotInFlight:
            raise SqsError("MessageNotInflight", "The message referred to isn't in flight.") from None

    async def change_message_visibility_batch(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        entries = _entries(call.params)
        await self.cq.queues.get(name)
        return await _batch(entries, lambda e: self._change(name, e))


# ---- helpers ---------------------------------------------------------------------------------
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

def _snake(action: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", action).lower()


def _int(p: dict[str, Any], key: str, default: int, lo: int, hi: int, message: str | None = None) -> int:
    raw = p.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw) if not isinstance(raw, bool) and str(raw).lstrip("-").isdigit() else None
    except (TypeError, ValueError):
        value = None
    if value is None or not lo <= value <= hi:
        raise invalid(message.format(v=raw) if message else f"Value {raw} for parameter {key} is invalid. Reason: Must be between {lo} and {hi}.")
    return value


def _names(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid("Attribute name lists must be lists of strings.")
    return value


def _tags(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise invalid("Tags must be a map of string keys to string values.")
    if len(value) > MAX_TAGS:
        raise invalid(f"Too many tags: a queue can have at most {MAX_TAGS}.")
    return dict(value)


def _entries(p: dict[str, Any]) -> list[dict[str, Any]]:
    entries = p.get("Entries")
    if not entries:
        raise SqsError("EmptyBatchRequest", "There should be at least one SendMessageBatchRequestEntry in the request.")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise invalid("Entries must be a list of entries.")
    if len(entries) > MAX_BATCH:
        raise SqsError("TooManyEntriesInBatchRequest", f"Maximum number of entries per request are {MAX_BATCH}. You have sent {len(entries)}.")
    ids = [e.get("Id") for e in entries]
    for eid in ids:
        if not isinstance(eid, str) or not _ENTRY_ID.match(eid):
            raise SqsError("InvalidBatchEntryId", "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long.")
    if len(set(ids)) != len(ids):
        raise SqsError("BatchEntryIdsNotDistinct", f"Id {next(i for i in ids if ids.count(i) > 1)} repeated.")
    return entries


def _attrs_size(attrs: Any) -> int:
    try:
        return msg.attributes_size(msg.check_attributes(attrs))
    except SqsError:
        return 0


async def _batch(entries: list[dict[str, Any]], one: Callable[[dict[str, Any]], Awaitable[None]]) -> dict[str, Any]:
    results = await asyncio.gather(*(one(e) for e in entries), return_exceptions=True)
    ok, failed = [], []
    for e, res in zip(entries, results):
        if isinstance(res, SqsError):
            failed.append({"Id": e["Id"], "SenderFault": True, "Code": res.query_code, "Message": res.message})
        elif isinstance(res, BaseException):
            raise res
        else:
            ok.append({"Id": e["Id"]})
    return {"Successful": ok, "Failed": failed}


def _decode_token(token: Any) -> str | None:
    if not token:
        return None
    try:
        name = base64.urlsafe_b64decode(str(token)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        name = ""
    if not _QUEUE_NAME.match(name):
        raise invalid("Invalid NextToken value.")
    return name
