"""The pull API: receive messages with a visibility timeout, then delete them or change it.

    deliveries = await cq.receive("jobs", max=10, wait=20, visibility=30)
    for d in deliveries:
        ...                                   # d.message.payload, d.message.attempt
        await cq.delete(d.receipt)            # or: await cq.change_visibility(d.receipt, 0)

A receive is the engine's take (engine/consume/consumer.py) with the visibility ending at
``now + visibility``: a pulled message that is not deleted comes back exactly like a handler's that
timed out, with its attempt (= SQS's ApproximateReceiveCount) counted up, and goes to the poison
queue after the queue's ``max_attempts`` deliveries.

Delete and change-visibility (engine/delivery/settle.py) locate the delivery from its receipt with one
point read, and refuse a receipt whose visibility expired.

Long polls: see engine/wake/wakeups.py. Within a process a poll returns as soon as a message is sent,
falls due or is made visible again, or a wake hint from another process arrives (``Wakeups.notify``);
while it waits it reads nothing from Cassandra and arms no timer of its own. A message whose hint was
lost, or made visible again by another process, is told by the due feed (engine/wake/due_feed.py: one
read a second per process while polls are parked, whatever their number; a receive enters the
visibility end of what it took).

Cost of a receive on an idle queue: the first in a process (cold) reads the queue's settings and
the cursors of all its rows in one request per shard; if no row has a partition that was the look,
else one request looks at the current bucket's rows and the rows that exist (engine/delivery/
idle_look.py). Later ones (warm) answer from the last empty look while nothing was said since and
it is younger than its window (``known_empty``: no read; a minute while the due feed covers it), else
make that one look. Requests per idle
receive (tests/test_many_queues.py counts them; docs/design.md "Many queues"): 1 x 1 2 cold / 0 warm
(3 / 0 if it held messages once); 4 x 4 5 / 0.

A message available now wakes one parked poll of its queue (engine/wake/wakeups.py ``QueueWaiter.wake``);
a poll that took a full batch wakes the next, as does a woken poll that leaves without looking.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from daemon.base.clock import Clock
from daemon.base.model import Message, QueueSettings
from daemon.engine.access.secrets import RECEIPT_KEY, SecretStore
from daemon.engine.consume.consumer import Consumer
from daemon.engine.delivery.idle_look import EMPTY_TRUST_MS, IdleLook
from daemon.engine.delivery.joint_take import MAX_PARALLEL, JointTakes
from daemon.engine.delivery.pulled_consumers import PulledConsumers
from daemon.engine.delivery.receipts import InvalidReceipt, Receipt, ReceiptSigner
from daemon.engine.delivery.receive_attempts import ReceiveAttempts
from daemon.engine.delivery.settle import MAX_VISIBILITY_S, NotInFlight, Settler, VisibilityTooLong, check_number
from daemon.engine.queues.store import QueueStore
from daemon.engine.send.keys import KeyStore
from daemon.engine.storage.db import Database
from daemon.engine.storage.table import MessageTable
from daemon.engine.take.holds import LINGER_MS
from daemon.engine.wake.catch import Catch
from daemon.engine.wake.due_feed import DueFeed
from daemon.engine.wake.wakeups import Wakeups

MAX_CONSUMERS = 1024  # idle queues' consumers kept, besides those of the owners online (pulled_consumers.py)
FILL_ROUNDS = 3
PARK_SLACK_S = 0.05
#: How long a receive's look uses the settings the receive began with (SQS's longest poll).
SETTINGS_REUSE_S = 20.0


@dataclass
class Delivery:
    """A received message and the receipt handle that deletes it or changes its visibility."""

    message: Message
    receipt: str
    received_ms: int


class Receiver:
    def __init__(
        self,
        db: Database,
        table: MessageTable,
        queues: QueueStore,
        keys: KeyStore,
        secrets: SecretStore,
        wakeups: Wakeups,
        clock: Clock,
        consumer_of: Callable[[str], Consumer],
        feed: DueFeed,
        max_consumers: int = MAX_CONSUMERS,
        touch: Callable[[str], None] | None = None,
        attempts: ReceiveAttempts | None = None,
        unblocked: Callable[[str, int, int], None] | None = None,
    ) -> None:
        self.db = db
        self.table = table
        self.queues = queues
        self.keys = keys
        self.secrets = secrets
        self.wakeups = wakeups
        self.clock = clock
        self.feed = feed
        self.touch = touch  # records activity for idle expiry (engine/operations/reaper.py)
        self.attempts = attempts
        self._signer: ReceiptSigner | None = None
        self._slots = itertools.count()
        self.look = IdleLook(db, table, clock)
        self.pulled = PulledConsumers(db, table, clock, wakeups, self.look, consumer_of, max_consumers)
        self.joint: JointTakes[Message] = JointTakes()  # concurrent receives of a queue share a take
        self._active: dict[str, int] = {}  # receives of each queue under way in this process, not parked
        #: The deliveries' other half: delete, change visibility (engine/delivery/settle.py).
        self.settler = Settler(db, table, queues, keys, wakeups, clock, self.signer, self.pulled.get, unblocked)

    async def signer(self) -> ReceiptSigner:
        if self._signer is None:
            self._signer = ReceiptSigner(await self.secrets.get_or_create(RECEIPT_KEY))
        return self._signer

    # ---- receive ------------------------------------------------------------------------------
    async def receive(
        self,
        queue: str,
        limit: int = 10,
        wait_s: float = 20.0,
        visibility_s: float = 30.0,
        attempt_id: str | None = None,
    ) -> list[Delivery]:
        """Up to ``limit`` messages, waiting up to ``wait_s`` for the first one. ``attempt_id``
        (FIFO queues): a retry with the same id within 5 minutes returns the same deliveries
        while they are in flight (engine/delivery/receive_attempts.py)."""
        check_number("max", limit, 1, 10_000, int)
        check_number("wait", wait_s, 0, 3600)
        check_number("visibility", visibility_s, 0, MAX_VISIBILITY_S)
        qs = await self.queues.mark_pulled(await self.queues.get(queue))  # QueueNotFound before any waiting
        if self.touch is not None:
            self.touch(queue)
        if attempt_id is not None and qs.fifo and self.attempts is not None:
            again = await self._attempted(queue, attempt_id)
            if again:
                return again
            got = await self._receive(queue, qs, limit, wait_s, visibility_s)
            if got:
                await self.attempts.put(queue, attempt_id, [d.receipt for d in got])
            return got
        return await self._receive(queue, qs, limit, wait_s, visibility_s)

    async def _attempted(self, queue: str, attempt_id: str) -> list[Delivery]:
        """The deliveries an earlier receive with this attempt id returned, those still in flight."""
        assert self.attempts is not None
        receipts = await self.attempts.get(queue, attempt_id)
        if not receipts:
            return []
        signer = await self.signer()
        out = []
        for handle in receipts:
            m, _, _ = await self.settler.locate(signer.open(handle, queue))
            if m is not None:
                out.append(Delivery(m, handle, self.clock.now_ms()))
        return out

    async def _receive(
        self, queue: str, qs: QueueSettings, limit: int, wait_s: float, visibility_s: float
    ) -> list[Delivery]:
        signer = await self.signer()
        consumer = self.pulled.get(queue)
        if not consumer.rows:
            await self.pulled.warm(consumer, qs)
        waiter = self.wakeups.enter(queue)
        self._taking(queue, 1)
        deadline = time.monotonic() + wait_s
        settings_until = time.monotonic() + SETTINGS_REUSE_S
        slot = next(self._slots) % 64
        visibility_ms = int(visibility_s * 1000)
        joint = None if qs.fifo else (queue, visibility_ms)  # receives that may share a take (joint_take.py)
        # A client that receives again at once (receive, delete, receive) after a full answer finds the lock its last
        # take kept (one that answered short drained what it saw: its lock would cost the next empty poll two requests)
        looping = time.monotonic() - consumer.receive_ended < LINGER_MS / 1000
        full = False
        parallel = min(qs.span()[0], MAX_PARALLEL)  # takes of the queue at once: one per shard at most
        # The first look may be answered by this process's last empty look of the queue, if nothing was
        # said since (engine/delivery/idle_look.py ``known_empty``) and it is younger than the longer of
        # 1 s and this receive's own wait: back-to-back 1 s polls still read once a second.
        trust_ms = int(max(EMPTY_TRUST_MS, wait_s * 1000))
        looked_at: int | None = self.look.known_empty(consumer, qs, trust_ms, self.feed.covered_since())
        owed = False
        try:
            while True:
                generation = waiter.generation
                began = self.clock.now_ms()
                # One request tells an idle queue from one with work (engine/delivery/idle_look.py);
                # only work, or a look it can't make, costs the fetch's round of shards.
                # The settings this receive began with, for as long as an SQS long poll lasts: a look after a
                # wake-up costs no settings read (a fetch, on work, reads them as it always does).
                look_qs = qs if time.monotonic() < settings_until else await self.queues.get(queue)
                due: list[tuple[int, int]] | None
                if looked_at is None and joint is not None and self.joint.busy(joint, parallel):
                    due, looked_at = None, self.clock.now_ms()  # join the take under way: its leader looked
                elif looked_at is None and joint is not None and consumer.holds.rows():
                    due, looked_at = None, self.clock.now_ms()  # a kept lock's take reads the row: that is the look
                elif looked_at is None:
                    due = await self.look.due_rows(consumer, look_qs)
                    looked_at = self.clock.now_ms()
                else:
                    due = []  # the remembered look: no read
                taken = (
                    []
                    if due == []
                    else await self._take(consumer, joint, parallel, limit, slot, visibility_ms, due, looping)
                )
                if not taken and due is None and not qs.fifo:
                    # Joined a take, or took under a kept lock, without a look of its own, and got nothing: look
                    # before parking (the look reads from the cursors when a frontier hid nothing, idle_look.py).
                    due = await self.look.due_rows(consumer, look_qs)
                    looked_at = self.clock.now_ms()
                    if due:
                        taken = await self._take(consumer, joint, parallel, limit, slot, visibility_ms, due, looping)
                owed = False
                if taken:
                    if len(taken) >= limit:  # there may be more: the next parked poll looks too
                        waiter.handoff()
                        full = True
                    return self._deliveries(queue, consumer, signer, taken)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                coming = consumer.names.next_due()
                looked_at = None  # woken: the next look reads
                if coming is not None and coming > self.clock.now_ms():
                    waiter.at(coming)
                elif coming is not None and coming > began:
                    # Came due while this poll looked and took (a visibility end its take's scan left for later):
                    # no timer would ever say so, so look again now, not park. One that came before the look was
                    # seen by it (a stale name): parking is right.
                    continue
                catch = None if qs.fifo else Catch(limit, visibility_ms)  # a send may hand it messages
                self._taking(queue, -1)  # parked: no take of this receive is coming soon
                self.feed.watch(self.wakeups.notify, lambda: self.wakeups.watched() > 0)  # finds a lost hint's message
                try:
                    await waiter.park(generation, remaining, catch)
                finally:
                    self._taking(queue, 1)
                if catch is not None and catch.claimed:  # written in flight for this poll (wake/catch.py)
                    caught = await catch.messages
                    if caught:
                        consumer.stats.taken += len(caught)  # counted as a take's are
                        return self._deliveries(queue, consumer, signer, caught, escaped=True)
                owed = waiter.generation != generation  # woken: this poll owes the queue a look
                # Timed out, never woken: nothing new to read. (The loop's timers may fire up to its clock
                # resolution early: a poll woken that close to its end looked again for nothing.)
                if waiter.generation == generation and time.monotonic() >= deadline - PARK_SLACK_S:
                    return []
        finally:
            if owed:  # woken, and leaving without the look: the next parked poll looks for what woke us
                waiter.handoff()
            self.wakeups.leave(queue, waiter)
            self._taking(queue, -1)
            consumer.receive_ended = time.monotonic() if full else float("-inf")

    async def _take(
        self,
        consumer: Consumer,
        joint: tuple[str, int] | None,
        parallel: int,
        limit: int,
        slot: int,
        visibility_ms: int,
        rows: list[tuple[int, int]] | None,
        looping: bool,
    ) -> list[Message]:
        """This receive's messages: its share of a joint take (standard queues), or its own take."""
        if joint is None:
            return await self._fill(consumer, limit, slot, visibility_ms, rows)
        # other receives under way, or a client looping: the row's lock is kept for the next take
        waiting = partial(self._others, joint, looping)
        return await self.joint.take(
            joint, limit, lambda n: self._fill(consumer, n, slot, visibility_ms, rows, waiting), parallel
        )

    def _taking(self, queue: str, step: int) -> None:
        """Count the receives of ``queue`` under way and not parked (``_others``); none: no entry."""
        n = self._active.get(queue, 0) + step
        if n > 0:
            self._active[queue] = n
        else:
            self._active.pop(queue, None)

    def _others(self, joint: tuple[str, int], looping: bool) -> bool:
        """Whether receives of this queue other than the one taking are under way in this process, waiting for
        this take (joint_take.py) or about to take, or this receive's client receives in a loop (it came within
        ``LINGER_MS`` of the last receive's end): a take keeps its row's lock for them (engine/take/holds.py)."""
        return looping or self.joint.waiting(joint) or self._active.get(joint[0], 0) > 1

    @staticmethod
    async def _fill(
        consumer: Consumer,
        limit: int,
        slot: int,
        visibility_ms: int,
        rows: list[tuple[int, int]] | None = None,
        linger: Callable[[], bool] | None = None,
    ) -> list[Message]:
        """A take from one row, topped up from the next rows while they yield (a few more takes at
        most): a client asking for 10 gets the 3 + 4 + 3 spread over three shards in one answer.
        ``rows``: where the look found work (the first take goes there, without a peek). With visibility 0
        there is no top-up: what the first take took is visible again at once, and a second take would take
        it again (one receive answering a message twice, its receive count up by two)."""
        taken = await consumer.fetch(limit, slot, visibility_ms=visibility_ms, rows=rows, linger=linger)
        for _ in range(FILL_ROUNDS if visibility_ms > 0 else 0):
            if not taken or len(taken) >= limit:
                break
            more = await consumer.fetch(limit - len(taken), slot, visibility_ms=visibility_ms, linger=linger)
            at = {m.id: i for i, m in enumerate(taken)}
            for m in more:  # taken again (its visibility ended while we filled): the newer delivery is the one
                if m.id in at:
                    taken[at[m.id]] = m
                else:
                    taken.append(m)
            if not more or len(at) + len(more) > len(taken):
                break
        return taken

    def _deliveries(
        self, queue: str, consumer: Consumer, signer: ReceiptSigner, taken: list[Message], escaped: bool = False
    ) -> list[Delivery]:
        """The receipts of ``taken``; ``escaped``: caught sends, each with an escape entry of its own (receipts.py)."""
        now = self.clock.now_ms()
        out = []
        visibles: set[int] = set()
        for m in taken:
            due = (
                m.copy_due_ms if m.copy_due_ms is not None else m.due_ms
            )  # where the delivery is (a FIFO message's own position)
            visible = m.visible_at if m.visible_at is not None else due
            consumer.names.expect(m.bucket, m.shard, visible)  # visible again then, if not deleted by then
            self.wakeups.notify(queue, visible)
            visibles.add(visible)
            r = Receipt(
                queue,
                m.id,
                m.bucket,
                m.shard,
                m.rank,
                due,
                m.attempt,
                m.write_ts,
                bool(m.key),
                m.visible_at is not None,
                escaped,
            )
            out.append(Delivery(m, signer.issue(r), now))
        self.feed.add(queue, visibles)  # other processes' polls learn when these are visible again
        return out

    def consumers_cached(self) -> int:
        return len(self.pulled)

    def consumers(self) -> list[Consumer]:
        """The consumers of the queues pulled from lately (what ``casque serve`` sweeps)."""
        return self.pulled.values()


__all__ = ["Delivery", "InvalidReceipt", "MAX_VISIBILITY_S", "NotInFlight", "Receiver", "VisibilityTooLong"]
