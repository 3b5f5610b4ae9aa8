"""Dead-letter queues: where a message goes when it fails for good.

By default that is the queue's poison table (engine/delivery/poison.py). A queue whose attributes name a
dead-letter queue (``casque.dead_letter``, set by the SQS endpoint from a RedrivePolicy) sends such
messages to that *real second queue* instead, as new messages (due now, attempt 0) with the same
task, payload, priority, headers and send time (``enqueued_at``: SQS keeps a dead letter's enqueue
timestamp), plus ``casque.dead_letter_from`` (the source queue), ``casque.original_id`` (the id it was
sent with, kept through a chain of dead-letter queues) and ``casque.receives`` (its receives before,
summed along the chain): the SQS face answers those as the dead letter's MessageId and adds them to its
ApproximateReceiveCount, as SQS keeps both. Anything that consumes the dead-letter queue (an SQS client,
a handler daemon) gets them, and a redrive moves them back to their source.

The write to the dead-letter queue comes first and the removal from the source after it (in the
take batch), so a crash in between leaves a copy in both: a duplicate, never a loss. A message
whose stored payload can't be decoded can't be re-sent and goes to the poison table as before.
"""

from __future__ import annotations

from collections.abc import Callable

from daemon.base.errors import QueueNotFound
from daemon.base.logs import get_logger
from daemon.base.model import DEDUP_HEADER, GROUP_HEADER, Message
from daemon.engine.delivery.poison import PoisonStore
from daemon.engine.queues.attributes import DEAD_LETTER, QueueAttributes
from daemon.engine.queues.store import QueueStore
from daemon.engine.send.fifo_send import FifoSender
from daemon.engine.send.producer import Job, build_message
from daemon.engine.storage.db import Database
from daemon.engine.storage.received import RECEIVED_HEADER
from daemon.engine.storage.table import MessageTable

__all__ = ["DEAD_LETTER", "FROM_HEADER", "ID_HEADER", "RECEIVES_HEADER", "PoisonRouter"]
FROM_HEADER = "casque.dead_letter_from"
ID_HEADER = "casque.original_id"
RECEIVES_HEADER = "casque.receives"
log = get_logger("casque.deadletter")


class PoisonRouter:
    """Has PoisonStore's ``add``: consumers and ackers poison through it."""

    def __init__(
        self,
        db: Database,
        queues: QueueStore,
        table: MessageTable,
        attributes: QueueAttributes,
        poison: PoisonStore,
        notify: Callable[[str, int], None],
        fifo: FifoSender | None = None,
    ) -> None:
        self.fifo = fifo
        self.db = db
        self.queues = queues
        self.table = table
        self.attributes = attributes
        self.store = poison
        self.notify = notify

    async def add(
        self, m: Message, reason: str, error_type: str, error: str, tb: str, now_ms: int, retention_s: int
    ) -> None:
        target = (await self.attributes.get(m.queue)).attributes.get(DEAD_LETTER)
        if target and not m.corrupt and await self._send(target, m, reason, now_ms):
            return
        await self.store.add(m, reason, error_type, error, tb, now_ms, retention_s)

    async def _send(self, target: str, m: Message, reason: str, now_ms: int) -> bool:
        try:
            qs = await self.queues.get(target)
        except QueueNotFound:
            log.error(
                "dead_letter_queue_missing", queue=m.queue, target=target, fix="create it or change the RedrivePolicy"
            )
            return False
        headers = {k: v for k, v in m.headers.items() if k not in (RECEIVED_HEADER, GROUP_HEADER, DEDUP_HEADER)}
        before = int(m.headers.get(RECEIVES_HEADER, "0"))
        headers |= {
            FROM_HEADER: m.queue,
            ID_HEADER: m.headers.get(ID_HEADER, str(m.id)),
            RECEIVES_HEADER: str(before + m.attempt),
        }
        # A new message there: never received, and (max_attempts 0) under the dead-letter queue's own policy.
        # Into a FIFO dead-letter queue (a FIFO source's, as SQS requires): in its group, deduplicated
        # by the original id, so a crash between this write and the removal from the source can't
        # put it there twice.
        fifo = qs.fifo and self.fifo is not None
        job = Job(
            m.task,
            m.payload,
            priority=0 if fifo else m.priority,
            headers=headers,
            max_attempts=0,
            group=m.group or (m.queue if fifo else None),
            dedup_id=str(m.id) if fifo else None,
        )
        copy = build_message(qs, job, now_ms)
        copy.enqueued_at = m.enqueued_at
        if fifo:
            assert self.fifo is not None
            await self.fifo.send(qs, copy)
        else:
            qs = await self.queues.add_priority(qs, copy.priority)
            await self.db.run(self.table.insert_message(copy, now_ms, qs.retention_s))
        self.notify(target, now_ms)
        log.warning(
            "message_dead_lettered", queue=m.queue, target=target, id=str(m.id), new_id=str(copy.id), reason=reason
        )
        return True
