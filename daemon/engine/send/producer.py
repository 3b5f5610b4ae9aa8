"""The producer: validate, place and write messages (``send`` and ``send_many``).

Sending needs no lock: a message is one INSERT into its row. ``send`` returns only after the write
reached the configured consistency level, which is the moment the "never lost" promise starts.
``send_many`` groups messages by partition, one unlogged batch per row (single-partition batches
are atomic and cheap; multi-partition ones are not).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Any, Literal

from daemon.base import metrics
from daemon.base.clock import Clock
from daemon.base.crashpoints import crash_point
from daemon.base.durations import parse_duration
from daemon.base.errors import KeyConflict, StorageUnavailable, UsageError
from daemon.base.model import (
    DEDUP_HEADER,
    GROUP_HEADER,
    MIN_PRIORITY,
    Message,
    QueueSettings,
    check_group,
    check_headers,
    check_key,
    check_priority,
    check_task_name,
    decode_payload,
    encode_payload,
    sequence_number,
)
from daemon.base.turns import TurnGroups
from daemon.engine.queues.store import QueueStore
from daemon.engine.schedules.triggers import Trigger, first, start
from daemon.engine.send.chain import same_schedule
from daemon.engine.send.fairness import NoisyGroups
from daemon.engine.send.fifo_send import FifoSender, content_dedup_id
from daemon.engine.send.keys import KeyEntry, KeyStore
from daemon.engine.send.lookup import Lookup
from daemon.engine.storage.db import Database
from daemon.engine.storage.in_flight import into_flight
from daemon.engine.storage.placement import new_id, placements, row_of
from daemon.engine.storage.table import STATE_WAITING, MessageTable
from daemon.engine.wake.catch import Catch

OnConflict = Literal["replace", "keep", "error"]
STALE_KEY_MS = 30_000
BATCH_ROWS = 100
BATCH_BYTES = 1 << 20
#: How many consecutive messages of one ``send_many`` call share a row (``placement.placements``).
SENT_PER_ROW = 32


@dataclass
class Job:
    """What to send. ``delay`` (seconds or '10s') and ``at`` (epoch seconds) are mutually exclusive."""

    task: str
    payload: Any = None
    delay: float | str | None = None
    at: float | None = None
    priority: int = 0
    timeout: float | str | None = None
    max_attempts: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    key: str | None = None
    on_conflict: OnConflict = "replace"
    schedule: Trigger | None = None
    seed: bytes | None = None
    #: The message group (SQS MessageGroupId): required on a FIFO queue, a fair-queue tenant on a
    #: standard one. ``dedup_id``: a FIFO send's deduplication id (MessageDeduplicationId).
    group: str | None = None
    dedup_id: str | None = None
    #: A FIFO queue's own delay (SQS DelaySeconds): per-message delays are refused on FIFO queues.
    queue_delay: float | None = None


class Sent(str):
    """A sent message's id (a plain ``str`` everywhere), carrying a schedule's next fire times, a
    FIFO message's ``sequence``, whether the send was a ``duplicate`` within the dedup window and
    whether a parked poll ``caught`` it."""

    next_fires: list[datetime]
    sequence: str | None
    duplicate: bool
    caught: bool  # written in flight for a parked poll of this process (engine/wake/catch.py): nothing to announce

    def __new__(
        cls,
        mid: str,
        next_fires: list[datetime] | None = None,
        sequence: str | None = None,
        duplicate: bool = False,
        caught: bool = False,
    ) -> Sent:
        sent = super().__new__(cls, mid)
        sent.next_fires = next_fires or []
        sent.sequence = sequence
        sent.duplicate = duplicate
        sent.caught = caught
        return sent


class Producer:
    def __init__(
        self,
        db: Database,
        queues: QueueStore,
        table: MessageTable,
        keys: KeyStore,
        lookup: Lookup,
        clock: Clock,
        tolerance_ms: int = 5000,
        fifo: FifoSender | None = None,
    ) -> None:
        self.db = db
        self.fifo = fifo
        self.noisy = NoisyGroups(clock)
        #: A message is written at the due time it was built with only while that is at most this
        #: old; later (a long send_many, a keyed send waiting on its LWTs) it is written at now.
        self.late_ms = tolerance_ms // 4
        self.queues = queues
        self.table = table
        self.keys = keys
        self.lookup = lookup
        self.clock = clock
        #: A parked poll of the queue in this process that catches what is sent (engine/wake/catch.py), if any.
        self.catcher: Callable[[str], Catch | None] = lambda queue: None
        self.rows: TurnGroups[Message, None] = TurnGroups()  # a row's sends of one turn: one write
        self._turns: dict[str, tuple[int, int]] = {}  # each queue's placement draw of this turn, and its messages

    async def send(self, queue: str, job: Job) -> Sent:
        """Write one message and return its id (for a keyed 'keep' conflict, the existing id)."""
        return (await self.send_many(queue, [job]))[0]

    @staticmethod
    def _catchable(qs: QueueSettings, m: Message, now: int) -> bool:
        """Due now, no key, no schedule, a standard queue: what a parked poll would have taken first."""
        return not qs.fifo and m.key is None and m.trigger is None and m.due_ms <= now

    async def _hand_many(self, qs: QueueSettings, messages: list[Message], now: int) -> set[uuid.UUID]:
        """Hand the messages parked polls may catch to as many as are parked, each up to its limit, in send order;
        the ids handed over."""
        left = [m for m in messages if self._catchable(qs, m, now)]
        hands: list[tuple[Catch, list[Message]]] = []
        while left and (catch := self.catcher(qs.name)) is not None:
            hands.append((catch, left[: catch.limit]))
            left = left[catch.limit :]
        try:
            await asyncio.gather(*(self._hand(qs, catch, part) for catch, part in hands))
        finally:  # a hand cancelled before it ran must not leave its poll waiting: it looks again
            for catch, _ in hands:
                catch.deliver(None)  # a no-op for those handed over
        return {m.id for _, part in hands for m in part}

    async def _hand(self, qs: QueueSettings, catch: Catch, messages: list[Message]) -> None:
        """Write ``messages`` in flight for a parked poll, in the rows the send would have used (one request per
        row), and hand them over. A failed write fails the send, and the poll looks again (engine/wake/catch.py)."""
        now = self.clock.now_ms()
        rows: dict[tuple[int, int], list[Message]] = defaultdict(list)
        for m in messages:
            m.payload = decode_payload(m.raw_payload)  # as a take reads it back: JSON's types, not the sender's
            into_flight(m, now, now + catch.visibility_ms, pulled=True)
            rows[(m.bucket, m.shard)].append(m)
        ts = self.db.next_timestamp()
        try:
            await asyncio.gather(*(self._write_batch(qs, ms, timestamp=ts) for ms in rows.values()))
        except BaseException:
            metrics.CATCH_WRITES_FAILED.inc()
            catch.deliver(None)
            raise
        crash_point("catch.written")  # written in flight, not handed over: tests/test_catch_faults.py
        for m in messages:
            m.write_ts = ts
        metrics.SENDS_CAUGHT.inc(len(messages))
        catch.deliver(messages)

    def _fair(self, qs: QueueSettings, m: Message) -> None:
        """A noisy tenant's message goes one lane down (engine/send/fairness.py)."""
        if m.group is not None and m.priority > MIN_PRIORITY and self.noisy.observe(qs.name, m.group):
            m.priority -= 1

    async def _send_many_fifo(self, qs: QueueSettings, messages: list[Message]) -> list[Sent]:
        """A FIFO batch: each group's messages one after another, in the batch's order (each
        reads its group's tail after the one before it was written), the groups concurrently
        (nothing orders two groups): a batch of 10 groups costs one send's round trips, not 10."""
        out: list[Sent | None] = [None] * len(messages)
        by_group: dict[str | None, list[int]] = defaultdict(list)
        for i, m in enumerate(messages):
            by_group[m.group].append(i)

        async def one_group(indexes: list[int]) -> None:
            for i in indexes:
                out[i] = await self._send_fifo(qs, messages[i])

        if len(by_group) == 1:  # one group (every single send): no task for the gather
            await one_group(next(iter(by_group.values())))
        else:
            await asyncio.gather(*(one_group(ix) for ix in by_group.values()))
        return [s for s in out if s is not None]

    async def _send_fifo(self, qs: QueueSettings, m: Message) -> Sent:
        if self.fifo is None:
            raise UsageError(f"queue {qs.name} is a FIFO queue: this producer was built without FIFO support")
        stored, duplicate = await self.fifo.send(qs, m)
        if not duplicate:
            metrics.SENT.labels(qs.name, m.task).inc()
        return Sent(str(stored.id), sequence=sequence_number(stored.due_ms, stored.id), duplicate=duplicate)

    async def send_many(self, queue: str, jobs: Iterable[Job]) -> list[Sent]:
        """Write many messages: keyed ones one by one (they need their LWT), the rest in per-row
        batches. On a FIFO queue one by one, in order (each reads its group's tail)."""
        qs = await self.queues.get(queue)
        now = self.clock.now_ms()
        if qs.fifo:
            return await self._send_many_fifo(qs, [build_message(qs, job, now) for job in jobs])
        jobs = list(jobs)
        rows_of = self._placements(qs.name, len(jobs))
        built = [(job, build_message(qs, job, now, placement)) for job, placement in zip(jobs, rows_of)]
        for _, m in built:
            self._fair(qs, m)
        for p in sorted({m.priority for _, m in built}):
            qs = await self.queues.add_priority(qs, p)
        handed = await self._hand_many(qs, [m for _, m in built], now)
        ids: list[Sent] = [Sent(str(m.id), caught=m.id in handed) for _, m in built]
        rows: dict[tuple[int, int], list[Message]] = defaultdict(list)
        keyed: list[tuple[int, Job, Message]] = []
        for i, (job, m) in enumerate(built):
            if m.id in handed:
                continue
            if m.key is None:
                rows[(m.bucket, m.shard)].append(m)
            else:
                keyed.append((i, job, m))
        if len(rows) == 1:  # most calls (every single send): no task for the gather
            await self._write_row(qs, next(iter(rows.values())))
        elif rows:
            await asyncio.gather(*(self._write_row(qs, ms) for ms in rows.values()))
        for i, job, m in keyed:
            ids[i] = Sent(str(await self._send_keyed(qs, m, job.on_conflict, now)))
        for _, m in built:
            metrics.SENT.labels(qs.name, m.task).inc()
        return ids

    async def _write_row(self, qs: QueueSettings, messages: list[Message]) -> None:
        """One row's messages, with those sent for it in this turn (base/turns.py): one write."""
        await self.rows.join((qs.name, messages[0].bucket, messages[0].shard), messages, partial(self._write_batch, qs))

    def _placements(self, queue: str, count: int) -> list[int]:
        """Placement bits for a call's ``count`` messages. ``SENT_PER_ROW`` consecutive ones share a row, and so do
        the first runs of the calls made in one turn of the loop, while they fit in ``SENT_PER_ROW``: a row's messages
        of one turn are written in one request (``_write_row``) and taken in one take."""
        turn = self._turns.get(queue)
        if turn is None:
            asyncio.get_running_loop().call_soon(self._turns.pop, queue, None)
        first = min(count, SENT_PER_ROW)
        if turn is None or turn[1] + first > SENT_PER_ROW:  # a call's first run is never split over two rows
            turn = (placements(1, 1)[0], 0)
        self._turns[queue] = (turn[0], turn[1] + first)
        return [turn[0]] * first + placements(count - first, SENT_PER_ROW)

    def _insert(self, qs: QueueSettings, m: Message) -> Any:
        """The INSERT of ``m``, bound right before it is sent. Each write checks its own time: a
        message built more than ``late_ms`` ago (due now, but the send took that long to reach
        this write) is written at now instead, in the same row (its id does not change), so it
        can't land behind a cursor that moved meanwhile (docs/design.md, "Cursors")."""
        now = self.clock.now_ms()
        if now - m.due_ms > self.late_ms:
            m.due_ms = now
        return self.table.insert_message(m, now, qs.retention_s)

    async def _write_batch(self, qs: QueueSettings, messages: list[Message], timestamp: int | None = None) -> None:
        """One row's messages in batches bounded by rows and bytes; ``timestamp``: their write time (us)."""
        if len(messages) == 1 and messages[0].visible_at is None:  # a lone INSERT needs no batch around it
            await self.db.run(self._insert(qs, messages[0]), timestamp=timestamp)
            return
        chunk, size = self.db.batch(), 0
        for m in messages:
            if len(chunk) and (len(chunk) >= BATCH_ROWS or size + len(m.raw_payload or b"") > BATCH_BYTES):
                await self.db.run(chunk, timestamp=timestamp)
                chunk, size = self.db.batch(), 0
            chunk.add(self._insert(qs, m))
            if m.visible_at is not None:  # caught in flight: its check entry, atomically
                m.copy_due_ms = m.due_ms  # (``_insert`` may have moved a late one to now)
                now = self.clock.now_ms()
                chunk.add(self.table.insert_escape(m, m.rank, m.due_ms, m.id, m.visible_at, now, qs.retention_s))
            size += len(m.raw_payload or b"")
        if len(chunk):
            await self.db.run(chunk, timestamp=timestamp)

    async def _send_keyed(self, qs: QueueSettings, m: Message, policy: OnConflict, now: int) -> uuid.UUID:
        """Claim the key (LWT), then write the message. Conflicts follow ``policy``."""
        assert m.key is not None
        entry = KeyEntry(qs.name, m.key, m.id, m.bucket, m.shard, m.task, m.trigger, now)
        for _ in range(5):
            holder = await self.keys.claim(entry)
            if holder is None:
                await self.db.run(self._insert(qs, m))
                return m.id
            stale = await self._is_stale(qs, holder, now)
            if not stale and policy == "keep":
                return holder.id
            if not stale and policy == "error":
                raise KeyConflict(
                    f"key '{m.key}' in queue '{qs.name}' already names message {holder.id}: use "
                    "on_conflict='replace' or 'keep', or cancel it first"
                )
            if same_schedule(holder, m.trigger):  # the same schedule sent again: it updates itself in place
                await self._resend_same(qs, m, holder, now)
                return m.id
            if await self.keys.repoint(entry, holder.id):
                await self.db.run(self._insert(qs, m))
                if not stale:
                    await self._cancel_quietly(qs.name, holder.id)
                return m.id
        raise StorageUnavailable(
            f"key '{m.key}' in queue '{qs.name}' is being changed concurrently by other senders: retry the send"
        )

    async def _resend_same(self, qs: QueueSettings, m: Message, holder: KeyEntry, now: int) -> None:
        """A keyed schedule sent again with the same first fire time has the same deterministic
        origin id as the schedule its key names (every deploy re-sends its schedules). Replacing it
        would cancel the schedule's current occurrence and restart it, or cancel the new send
        itself, so the current occurrence is updated in place instead (payload, headers, task,
        limits, trigger settings; its number and fire time stay). The rewrite is timestamped just
        after the stored row, so it can never win over a take's delete of that row (a take writes
        later, and a delete wins a tie): an occurrence being taken is left to run as it was. The
        first occurrence of a send that died before its INSERT is written now."""
        stored = await self.lookup.find(qs, holder.id)
        if stored is None:
            if holder.id == m.id:
                await self.db.run(self._insert(qs, m))
            return
        if stored.state != STATE_WAITING or stored.priority != m.priority or not stored.trigger:
            return
        trigger = {**(m.trigger or {}), "n": stored.trigger["n"], "fire_ms": stored.trigger["fire_ms"]}
        updated = replace(
            stored,
            task=m.task,
            payload=m.payload,
            raw_payload=m.raw_payload,
            headers=m.headers,
            timeout_ms=m.timeout_ms,
            max_attempts=m.max_attempts,
            trigger=trigger,
        )
        await self.db.run(self.table.insert_message(updated, now, qs.retention_s), timestamp=stored.write_ts + 1)

    async def _is_stale(self, qs: QueueSettings, holder: KeyEntry, now: int) -> bool:
        """A key whose message is gone (a crash between ack and key release) may be taken over;
        a young key may belong to a send still in progress, so it is never stale."""
        if now - holder.created_at < STALE_KEY_MS:
            return False
        return await self.lookup.find(qs, holder.id) is None

    async def _cancel_quietly(self, queue: str, message_id: uuid.UUID) -> None:
        try:
            await self.lookup.cancel_id(queue, message_id)
        except Exception:  # already finished or gone: replacing it is then already done
            pass


def due_time(job: Job, now_ms: int) -> int:
    """The due time in ms: never in the past (a past ``at`` means 'now')."""
    if job.delay is not None and job.at is not None:
        raise UsageError("give either a delay or an absolute time, not both")
    if job.at is not None:
        if isinstance(job.at, bool) or not isinstance(job.at, (int, float)):
            raise UsageError(
                f"invalid time {job.at!r}: give seconds since the epoch (or an ISO time on the command line)"
            )
        return max(now_ms, int(job.at * 1000))
    delay = parse_duration(job.delay, "delay") if job.delay is not None else 0.0
    return now_ms + int(delay * 1000)


def first_due(job: Job, now_ms: int) -> int:
    """When a job first runs: its delay or time, or for a schedule its first fire time."""
    due = due_time(job, now_ms)
    if job.schedule is None:
        return due
    return first(job.schedule, due if (job.delay is not None or job.at is not None) else 0, now_ms)


def _check_fifo(qs: QueueSettings, job: Job) -> None:
    """What a FIFO queue refuses (as SQS does), and what only a FIFO queue accepts."""
    if not qs.fifo:
        if job.dedup_id is not None:
            raise UsageError(f"queue {qs.name} is not a FIFO queue: a deduplication id applies to FIFO queues only")
        return
    if job.group is None:
        raise UsageError(f"queue {qs.name} is a FIFO queue: give every message a group (group=..., MessageGroupId)")
    if job.dedup_id is None and not qs.content_dedup:
        raise UsageError(
            f"queue {qs.name} is a FIFO queue without content-based deduplication: give a dedup_id "
            "(MessageDeduplicationId), or turn content_dedup on"
        )
    if job.delay is not None or job.at is not None:
        raise UsageError(
            f"queue {qs.name} is a FIFO queue: a message can't have its own delay; set the queue's delay instead"
        )
    if job.schedule is not None or job.key is not None or job.priority:
        raise UsageError(
            f"queue {qs.name} is a FIFO queue: schedules, lookup keys and priorities apply to standard queues only"
        )


def build_message(qs: QueueSettings, job: Job, now_ms: int, placement: int | None = None) -> Message:
    """Validate a job and turn it into a placed Message (pure: no I/O). A scheduled job becomes the
    schedule's first occurrence; a keyed schedule's id is deterministic (queue, key, first fire), so
    two processes scheduling the same key at once write one cell. A FIFO message is placed by its
    group and given its position when it is written (engine/send/fifo_send.py). ``placement``: the
    placement bits of a plain message (no seed, no schedule), to share a row with others sent with it."""
    _check_fifo(qs, job)
    due = first_due(job, now_ms) + (int(float(job.queue_delay) * 1000) if job.queue_delay else 0)
    trigger: dict[str, Any] | None = None
    if job.schedule is not None:
        if job.schedule.until_ms is not None and due > job.schedule.until_ms:
            raise UsageError("the schedule ends (--until) before its first fire time: move --until later")
        seed = f"{qs.name}|{job.key}|{due}".encode() if job.key else job.seed
        sched, mid = start(job.schedule, due, seed)
        trigger = sched.to_json()
    else:
        mid = new_id(due, job.seed, None if job.seed is not None else placement)
    bucket, shard = row_of(mid, qs.bucket_ms, qs.buckets, qs.shards)
    timeout_ms = int(parse_duration(job.timeout, "timeout") * 1000) if job.timeout is not None else qs.timeout_ms
    max_attempts = job.max_attempts if job.max_attempts is not None else qs.max_attempts
    # 0: the message follows its queue's max_attempts as it is at each delivery (SQS's redrive
    # policy applies to messages already sent); a queue's 0 is no limit (engine/consume/consumer.py).
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 0:
        raise UsageError(
            f"invalid max_attempts {max_attempts!r}: use an integer of at least 1 (0: follow the queue's setting)"
        )
    if timeout_ms < 100:
        raise UsageError(f"invalid timeout {job.timeout!r}: a message timeout must be at least 100ms")
    raw = encode_payload(job.payload, qs.max_payload_bytes)
    headers = check_headers(job.headers)
    if any(k in headers for k in (GROUP_HEADER, DEDUP_HEADER)):
        raise UsageError(f"headers {GROUP_HEADER!r} and {DEDUP_HEADER!r} are reserved: use group= and dedup_id=")
    if job.group is not None:
        headers[GROUP_HEADER] = check_group("message group", job.group)
    if qs.fifo:
        headers[DEDUP_HEADER] = (
            check_group("deduplication id", job.dedup_id) if job.dedup_id is not None else content_dedup_id(raw)
        )
    return Message(
        queue=qs.name,
        id=mid,
        task=check_task_name(job.task),
        payload=job.payload,
        bucket=bucket,
        shard=shard,
        priority=check_priority(job.priority),
        due_ms=due,
        attempt=0,
        max_attempts=max_attempts,
        timeout_ms=timeout_ms,
        headers=headers,
        key=check_key(job.key),
        trigger=trigger,
        enqueued_at=now_ms,
        state=STATE_WAITING,
        raw_payload=raw,
    )
