"""SQS actions on queues: create, find, list, delete, purge, attributes, tags, dead-letter sources."""

from __future__ import annotations

import json
from typing import Any

from daemon.base.errors import QueueNotFound, UsageError
from daemon.engine.queues.settings import MAX_PAYLOAD_BYTES
from daemon.http.sqs import attributes as qattr
from daemon.http.sqs import fifo as fifo_rules
from daemon.http.sqs import params, queue_shape
from daemon.http.sqs.actions.base import ActionGroup, Call
from daemon.http.sqs.errors import SqsError, invalid, missing

LIST_PAGE = 1000  # SQS's most URLs per ListQueues / ListDeadLetterSourceQueues answer


#: SQS's 60 s: a second PurgeQueue of a queue, and a CreateQueue of a deleted queue's name, wait this long.
COOLDOWN_S = 60


class QueueActions(ActionGroup):
    ACTIONS = (
        "CreateQueue",
        "GetQueueUrl",
        "ListQueues",
        "DeleteQueue",
        "PurgeQueue",
        "GetQueueAttributes",
        "SetQueueAttributes",
        "ListDeadLetterSourceQueues",
        "TagQueue",
        "UntagQueue",
        "ListQueueTags",
    )

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.cooldowns = self.cq.stores.cooldowns("sqs")
        self.depth = self.cq.stores.depth_estimator()

    async def create_queue(self, call: Call) -> dict[str, Any]:
        name = call.params.get("QueueName")
        if not name:
            raise missing("QueueName")
        name = str(name)
        tags = params.tags(call.params.get("tags") or call.params.get("Tags"), name)
        asked, raw = queue_shape.split(call.params.get("Attributes"), tags)
        fifo = fifo_rules.creates_fifo(name, raw)
        if not params.QUEUE_NAME.match(name):
            raise invalid(fifo_rules.FIFO_NAME if fifo else fifo_rules.STANDARD_NAME)
        attrs = qattr.encryption(qattr.check(raw, fifo=fifo, queue_arn=self.arn(name)), {})
        if fifo:
            fifo_rules.check_throughput(
                attrs.get("DeduplicationScope", "queue"), attrs.get("FifoThroughputLimit", "perQueue")
            )
        shape = queue_shape.settle(asked, fifo, self.settings)
        await self._check_redrive_target(attrs, fifo, raw)
        if await self.cooldowns.active(f"sqs.deleted:{name}"):
            raise SqsError(
                "QueueDeletedRecently",
                "You must wait 60 seconds after deleting a queue before you can create another with the same name.",
            )
        options = (
            {
                "max_attempts": qattr.NO_REDRIVE_ATTEMPTS,
                "timeout": qattr.DEFAULT_VISIBILITY,
                "retention": qattr.DEFAULT_RETENTION,
                "max_payload_bytes": MAX_PAYLOAD_BYTES,
            }
            | qattr.casque_options(attrs)
            | ({"fifo": True} if fifo else {})
            | {"consumers": "pull"}  # its messages wait for SQS receivers; a daemon takes only what it handles
            | queue_shape.options(shape, attrs.get("FifoThroughputLimit", "perQueue"))
        )
        try:
            created = await self.cq.create_queues([name], concurrency=1, **options)
        except UsageError as exc:
            raise invalid(str(exc)) from None
        if not created:
            await self._same_attributes(name, attrs, asked)
        else:
            extra, _ = qattr.internal(attrs)
            kept = qattr.stored(attrs) | extra | queue_shape.hidden(shape)
            await self.cq.extras.set(name, kept, set(), self.cq.clock.now_ms())
            await self.cq.extras.tag(name, tags, set())
        return {"QueueUrl": self.url(call, name)}

    async def _same_attributes(self, name: str, attrs: dict[str, str], asked: dict[str, int]) -> None:
        """CreateQueue of an existing queue succeeds only if the given attributes match, the shape
        asked for (queue_shape.py) included: compared with the shape the queue was created with."""
        qs = await self.cq.queue_settings(name, fresh=True)
        extras = await self.cq.extras.get(name, fresh=True)
        current = qattr.describe(qs, extras, self.arn(name))
        # what describe leaves out (a key's reuse period without a key) is compared as stored
        differs = [
            k for k, v in attrs.items() if current.get(k, extras.attributes.get(k, qattr.DEFAULTS.get(k, ""))) != v
        ]
        other = differs[0] if differs else queue_shape.differs(asked, qs, extras.attributes)
        if other:
            raise SqsError(
                "QueueNameExists",
                f"A queue already exists with the same name and a different value for attribute {other}",
            )

    async def get_queue_url(self, call: Call) -> dict[str, Any]:
        name = call.params.get("QueueName")
        if not name:
            raise missing("QueueName")
        if not params.QUEUE_NAME.match(str(name)):
            raise SqsError("QueueDoesNotExist", "The specified queue does not exist.")
        await self.cq.queue_settings(name)
        return {"QueueUrl": self.url(call, name)}

    async def list_queues(self, call: Call) -> dict[str, Any]:
        """A prefix is answered from the name index (engine/queues/names.py: one bounded read of the
        names that match); no prefix, from the queues table in token order (every name matches, so
        a page is one read). Without MaxResults, as in SQS, at most 1,000 URLs and no token."""
        prefix = str(call.params.get("QueueNamePrefix") or "")
        limit_given = call.params.get("MaxResults") is not None
        limit = params.integer(call.params, "MaxResults", LIST_PAGE, 1, LIST_PAGE)
        after = params.decode_token(call.params.get("NextToken"))
        if prefix:
            names, more = await self.cq.admin.names_matching(prefix, after, limit)
        else:
            names = await self.cq.extras.names_page(after, limit)
            more = len(names) == limit and bool(await self.cq.extras.names_page(names[-1], 1))
        out: dict[str, Any] = {"QueueUrls": [self.url(call, n) for n in names]} if names else {}
        if more and limit_given:
            out["NextToken"] = params.encode_token(names[-1])
        return out

    async def delete_queue(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        await self.cq.queue_settings(name, fresh=True)
        # first: no CreateQueue can slip in after the delete
        await self.cooldowns.start(f"sqs.deleted:{name}", COOLDOWN_S)
        await self.cq.admin.delete(name)
        self.cq.extras.forget(name)
        return {}

    async def purge_queue(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        await self.cq.queue_settings(name, fresh=True)
        started = self.cq.clock.now_ms()
        if not await self.cooldowns.claim(f"sqs.purge:{name}", COOLDOWN_S):
            raise SqsError(
                "PurgeQueueInProgress", f"Only one PurgeQueue operation on {name} is allowed every 60 seconds."
            )
        await self.cq.admin.purge(name, sent_before_ms=started)
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
        qs = await self.cq.queue_settings(name, fresh=True)
        everything = qattr.describe(qs, await self.cq.extras.get(name), self.arn(name))
        every = "All" in wanted
        if (
            every or set(wanted) & qattr.COUNTS
        ):  # a bounded read, whatever the queue holds (engine/observe/depth_estimate.py)
            est = await self.depth.estimate(qs, self.cq.clock.now_ms())
            everything |= {
                "ApproximateNumberOfMessages": str(round(est.waiting)),
                "ApproximateNumberOfMessagesNotVisible": str(round(est.in_flight)),
                "ApproximateNumberOfMessagesDelayed": str(round(est.delayed)),
            }
        chosen = everything if every else {k: v for k, v in everything.items() if k in wanted}
        return {"Attributes": chosen} if chosen else {}

    async def set_queue_attributes(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        qs = await self.cq.queue_settings(name, fresh=True)
        raw = call.params.get("Attributes") or {}
        current = (await self.cq.extras.get(name, fresh=True)).attributes
        attrs = qattr.encryption(qattr.check(raw, fifo=qs.fifo, queue_arn=self.arn(name)), current)
        if qs.fifo:  # the rule holds for the values the queue will have, whichever call set each
            fifo_rules.check_throughput(
                attrs.get("DeduplicationScope", qs.dedup_scope), attrs.get("FifoThroughputLimit", qs.fifo_throughput)
            )
        await self._check_redrive_target(attrs, qs.fifo, raw)
        options = qattr.casque_options(attrs)
        extra, dropped = qattr.internal(attrs)
        keep = {k: v for k, v in qattr.stored(attrs).items() if v != ""} | extra
        # A redrive target is written before the limit that sends messages to it, and a limit is
        # lifted before its target goes: a receive in between never poisons a message instead.
        cleared = {k for k, v in attrs.items() if v == ""} | dropped
        if extra:
            await self.cq.extras.set(name, keep, cleared, self.cq.clock.now_ms())
        if options:
            await self.cq.admin.update(name, **options)
        if not extra:
            await self.cq.extras.set(name, keep, cleared, self.cq.clock.now_ms())
        return {}

    async def _check_redrive_target(self, attrs: dict[str, str], fifo: bool, raw: Any) -> None:
        """The dead-letter queue must exist and be of the source's type (SQS: a FIFO queue's
        dead-letter queue is FIFO, a standard queue's standard)."""
        if not attrs.get("RedrivePolicy"):
            return
        target = qattr.queue_of_arn(json.loads(attrs["RedrivePolicy"])["deadLetterTargetArn"])
        try:
            target_qs = await self.cq.queue_settings(str(target))
        except QueueNotFound:
            raise SqsError(
                "InvalidAttributeValue",
                "Value for parameter RedrivePolicy is invalid. Reason: Dead-letter target does not exist.",
            ) from None
        if target_qs.fifo != fifo:
            given = (
                raw.get("RedrivePolicy", attrs["RedrivePolicy"]) if isinstance(raw, dict) else attrs["RedrivePolicy"]
            )
            raise invalid(
                f"Value {given} for parameter RedrivePolicy is invalid. Reason: Dead-letter queue must be same type of "
                "queue "
                "as the source.."
            )  # AWS's text, its two periods included

    async def list_dead_letter_source_queues(self, call: Call) -> dict[str, Any]:
        """One read of the dead-letter index's partition (engine/queues/dead_letter_sources.py), paged like
        ListQueues: MaxResults 1-1000 with a NextToken; without it, at most 1,000 and no token."""
        name = self.queue_of(call)
        await self.cq.queue_settings(name)
        limit_given = call.params.get("MaxResults") is not None
        limit = params.integer(call.params, "MaxResults", LIST_PAGE, 1, LIST_PAGE)
        after = params.decode_token(call.params.get("NextToken"))
        sources, more = await self.cq.extras.dead_letter_sources(name, after, limit)
        out: dict[str, Any] = {"queueUrls": [self.url(call, q) for q in sources]}
        if more and limit_given:
            out["NextToken"] = params.encode_token(sources[-1])
        return out

    async def tag_queue(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        await self.cq.queue_settings(name)
        if not call.params.get("Tags"):
            raise missing("Tags")
        tags = params.tags(call.params.get("Tags"), name)
        current = (await self.cq.extras.get(name, fresh=True)).tags
        if len(current | tags) > params.MAX_TAGS:
            raise invalid(f"Too many tags added for queue {name}.")
        await self.cq.extras.tag(name, tags, set())
        return {}

    async def untag_queue(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        await self.cq.queue_settings(name)
        keys = params.tag_keys(call.params.get("TagKeys") or [])
        await self.cq.extras.tag(name, {}, set(keys))
        return {}

    async def list_queue_tags(self, call: Call) -> dict[str, Any]:
        name = self.queue_of(call)
        await self.cq.queue_settings(name)
        tags = (await self.cq.extras.get(name, fresh=True)).tags
        return {"Tags": tags} if tags else {}
