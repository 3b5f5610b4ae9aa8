"""``Casque``: the Python API, the front door to the engine over one connection (stores wired in engine/stores.py).

async with await Casque.connect() as cq:
    await cq.create_queue("emails", if_missing=True)
    mid = await cq.send("emails", "send_welcome", {"user": 42}, delay="10s", key="welcome:42")
    print(await cq.get("emails", key="welcome:42"))
    await cq.cancel("emails", key="welcome:42")
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from daemon.base.clock import SYSTEM_CLOCK, Clock
from daemon.base.config import Settings, load_settings
from daemon.base.crashpoints import pause_point
from daemon.base.errors import UsageError
from daemon.base.model import Message, QueueSettings
from daemon.engine.access.access_keys import AccessKeyStore
from daemon.engine.consume.consumer import Consumer
from daemon.engine.delivery.receive import Delivery
from daemon.engine.operations.admin import QueueAdmin
from daemon.engine.operations.extras import Extras
from daemon.engine.operations.observe import Observe
from daemon.engine.operations.pulling import Pulling
from daemon.engine.operations.shard_growth import SendCounts
from daemon.engine.queues.bulk_create import CHUNK, CONCURRENCY, OnExisting
from daemon.engine.queues.settings import settings_from_defaults
from daemon.engine.schedules.triggers import make_trigger, upcoming
from daemon.engine.send.keys import KeyEntry
from daemon.engine.send.producer import Job, OnConflict, Sent, first_due
from daemon.engine.storage.db import Database
from daemon.engine.storage.placement import PLACEMENT_MASK, id_due_ms, parse_id
from daemon.engine.stores import Stores
from daemon.engine.wake.announce import Announcer
from daemon.engine.wake.hints import HintListener, open_listener


class Casque:
    """The front door: messages and queues here; ``admin`` (purge, delete, reshard, poison),
    ``observe`` (stats, history, daemons) and ``extras`` (SQS attributes, tags, dead-letter links)
    group the rest; ``pulling`` builds the consumers and the receiver its pull calls go to, and
    ``announcer`` wakes the waiters of what it writes. The stores are wired once, in ``stores``."""

    def __init__(self, settings: Settings, db: Database, clock: Clock) -> None:
        self.settings = settings
        self.db = db
        self.clock = clock
        self.stores = st = Stores(settings, db, clock)
        self.admin = QueueAdmin(st)
        self.observe = Observe(st)
        self.extras = Extras(st)
        self.hint_listener: HintListener | None = None
        self.announcer = Announcer(st.wakeups, st.hints, st.due_feed, st.queues, settings.hints.send)
        self.pulling = Pulling(st, self.announcer.unblocked)
        self.receiver = self.pulling.receiver
        self.settler = self.pulling.settler
        self.send_counts = SendCounts()  # counted only where a ShardGrowth runs (casque serve)

    @property
    def access_keys(self) -> AccessKeyStore:
        """The SQS endpoint's access keys: create, list, delete (docs/security.md)."""
        return self.stores.access_keys

    @classmethod
    async def connect(cls, settings: Settings | None = None, clock: Clock = SYSTEM_CLOCK) -> Casque:
        """Connect and prepare statements (in a thread: the driver's connect blocks)."""
        settings = settings or load_settings()

        def build() -> Casque:
            db = Database(settings.cassandra, clock).connect(settings.cassandra.keyspace)
            pause_point("client.connected")  # a fault test freezes the node here: the stores' prepares time out
            try:
                return cls(settings, db, clock)
            except Exception:
                db.close()
                raise

        cq = await asyncio.to_thread(build)
        try:
            await cq.check_clock()
        except BaseException:
            await asyncio.to_thread(cq.db.close)  # a caller that retries keeps no session per attempt
            raise
        return cq

    async def check_clock(self) -> int:
        """Our clock against the coordinator's, in ms (warns past the tolerance: engine/stores.py)."""
        return await self.stores.check_clock()

    async def listen_for_hints(self, queues: list[str]) -> str:
        """Receive wake hints for ``queues`` (``["*"]``: every queue) from other processes' sends
        (engine/wake/hints.py) and register where; returns the advertised ``host:port`` ("" when this
        keyspace has no hint_listeners table yet: then it serves without hints)."""
        st = self.stores
        listener = await open_listener(
            st.hint_directory, st.secrets, self.clock, self.settings, queues, st.wakeups.notify
        )
        if listener is None:
            return ""
        self.hint_listener = listener
        self.stores.hints.own.add(listener.address)
        return listener.address

    async def close(self) -> None:
        if self.hint_listener is not None:
            await self.hint_listener.close()
        await self.stores.hints.close()
        await self.stores.due_feed.close()
        await self.stores.activity.flush()
        await asyncio.to_thread(self.db.close)

    async def __aenter__(self) -> Casque:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- queues -----------------------------------------------------------------------------
    async def create_queue(self, name: str, if_missing: bool = False, **options: Any) -> QueueSettings:
        qs = settings_from_defaults(name, self.settings.queue_defaults, **options)
        await self.stores.queues.create(qs, if_missing=if_missing)
        return await self.stores.queues.get(name, fresh=True)

    async def create_queues(
        self,
        names: Iterable[str],
        *,
        if_missing: bool = True,
        concurrency: int = CONCURRENCY,
        progress: Callable[[int, int], None] | None = None,
        chunk: int = CHUNK,
        on_existing: OnExisting | None = None,
        **settings: Any,
    ) -> int:
        """Create many queues with the same settings (``create_queue``'s options, e.g. ``shards=1,
        buckets=1`` for tiny per-user queues), ``chunk`` names a request, ``concurrency`` chunks at
        a time, without an LWT (engine/queues/bulk_create.py); ``names`` is read lazily. Returns
        how many were created: with ``if_missing`` existing ones are skipped and never written over
        (``on_existing(name, same_settings)`` is told each), without it the first existing one
        raises. A bad name raises after the names before it were created. ``progress(done,
        created)`` follows each chunk."""
        defaults = self.settings.queue_defaults
        counts = await self.stores.queues.create_many(
            (settings_from_defaults(n, defaults, **settings) for n in names),
            if_missing=if_missing,
            concurrency=concurrency,
            progress=progress,
            chunk=chunk,
            on_existing=on_existing,
        )
        return counts.created

    async def queue_settings(self, name: str, fresh: bool = False) -> QueueSettings:
        """A queue's settings: from this process's cache (at most 5 s old) unless ``fresh``.
        Raises ``QueueNotFound`` for a queue that doesn't exist."""
        return await self.stores.queues.get(name, fresh=fresh)

    # ---- producing --------------------------------------------------------------------------
    async def send(
        self,
        queue: str,
        task: str,
        payload: Any = None,
        *,
        delay: float | str | None = None,
        at: float | None = None,
        priority: int = 0,
        timeout: float | str | None = None,
        max_attempts: int | None = None,
        headers: dict[str, str] | None = None,
        key: str | None = None,
        on_conflict: OnConflict = "replace",
        every: float | str | None = None,
        cron: str | None = None,
        tz: str | None = None,
        times: int | None = None,
        until: float | None = None,
        misfire: str = "coalesce",
        grace: float | str | None = None,
        cron_format: str | None = None,
        group: str | None = None,
        dedup_id: str | None = None,
    ) -> Sent:
        """Send one message, or start a schedule (``every=`` or ``cron=``); returns the id (a
        ``str``), whose ``next_fires`` lists a schedule's first three fire times (UTC datetimes).

        ``delay``/``at`` (epoch seconds) set when it runs (for a schedule: the first fire time);
        ``every`` repeats at a fixed rate, ``cron`` follows a cron expression in time zone ``tz``
        (5 fields; 6 or 7 need ``cron_format`` "croniter" (seconds last) or "quartz" (seconds
        first) unless only one reading is possible); ``times`` caps the occurrences and ``until``
        (epoch seconds) ends the schedule; ``misfire`` is coalesce|all|skip for occurrences more
        than ``grace`` late.

        ``group`` names the message's group: on a FIFO queue (required) a group's messages are
        delivered one at a time in the order sent; on a standard queue it names a tenant whose
        backlog must not delay the others (fair queues). ``dedup_id``: a FIFO send with the id of
        another within 5 minutes is a duplicate: nothing is written, the first one's id is returned
        (``.duplicate``; ``.sequence`` is its sequence number)."""
        _check_policy(on_conflict)
        schedule = None
        if every is not None or cron is not None:
            until_ms = int(until * 1000) if until is not None else None
            schedule = make_trigger(
                every=every,
                cron=cron,
                tz=tz,
                times=times,
                until_ms=until_ms,
                misfire=misfire,
                grace=grace,
                cron_format=cron_format,
            )
        elif tz is not None or times is not None or until is not None or cron_format is not None:
            raise UsageError("tz, times, until and cron_format only apply to schedules: add every=... or cron=...")
        job = Job(
            task,
            payload,
            delay,
            at,
            priority,
            timeout,
            max_attempts,
            headers or {},
            key,
            on_conflict,
            schedule,
            group=group,
            dedup_id=dedup_id,
        )
        return await self.send_job(queue, job)

    async def send_job(self, queue: str, job: Job) -> Sent:
        """Send one prepared ``Job`` (what ``send`` builds from its arguments)."""
        now = self.clock.now_ms()
        [sent] = await self.send_many(queue, [job])
        fires = upcoming(job.schedule, first_due(job, now)) if job.schedule is not None else []
        sent.next_fires = [datetime.fromtimestamp(ms / 1000, tz=UTC) for ms in fires]
        return sent

    async def schedules(
        self, queue: str, limit: int | None = None, after: str = ""
    ) -> list[tuple[KeyEntry, Message | None]]:
        """Keyed messages of a queue in key order (all, or ``limit`` after the key ``after``), each
        with its current occurrence (next fire time = its due). Lookups run 32 at a time."""
        entries = await self.stores.keys.list(queue, limit=limit, after=after)
        sem = asyncio.Semaphore(32)

        async def current(entry: KeyEntry) -> Message | None:
            async with sem:
                return await self.stores.lookup.current(queue, entry)

        return list(zip(entries, await asyncio.gather(*(current(e) for e in entries))))

    async def send_many(self, queue: str, jobs: Iterable[Job]) -> list[Sent]:
        ids = await self.stores.producer.send_many(queue, jobs)
        self.stores.activity.touch(queue)
        self.send_counts.add(queue, len(ids))
        # a message caught by a parked poll is in flight, a duplicate's first send was announced: nothing to take
        due = [parse_id(s) for s in ids if not s.caught and not s.duplicate]
        if due:
            self.announcer.announce(queue, list({(id_due_ms(u), u.int & PLACEMENT_MASK) for u in due}))
        return ids

    def deliverable_now(self, m: Message) -> None:
        """Something in ``m``'s row became deliverable without a send (a daemon's outcome, service/outcomes.py): the
        next message of ``m``'s FIFO group (``m`` acked or poisoned), or ``m`` itself (put back for pull clients).
        Announced like a send, so consumers and long polls here and in other processes take it at once."""
        self.announcer.unblocked(m.queue, self.clock.now_ms(), m.id.int)

    # ---- reading and cancelling -------------------------------------------------------------
    async def get(self, queue: str, id: str | uuid.UUID | None = None, key: str | None = None) -> Message | None:
        if (id is None) == (key is None):
            raise UsageError("give exactly one of id or key")
        if key is not None:
            return (await self.stores.lookup.by_key(queue, key))[1]
        return await self.stores.lookup.by_id(queue, _uuid(id))

    async def get_key(self, queue: str, key: str) -> KeyEntry | None:
        return await self.stores.keys.get(queue, key)

    async def cancel(self, queue: str, id: str | uuid.UUID | None = None, key: str | None = None) -> Message | None:
        if (id is None) == (key is None):
            raise UsageError("give exactly one of id or key")
        if key is not None:
            return await self.stores.lookup.cancel_key(queue, key)
        return await self.stores.lookup.cancel_id(queue, _uuid(id))

    async def peek(self, queue: str, limit: int = 10) -> list[Message]:
        return await self.stores.lookup.peek(queue, limit)

    # ---- pulling (engine/delivery/receive.py) ------------------------------------------------------
    async def receive(
        self, queue: str, max: int = 10, wait: float = 20.0, visibility: float = 30.0, attempt_id: str | None = None
    ) -> list[Delivery]:
        """Up to ``max`` messages, each hidden for ``visibility`` seconds; waits up to ``wait``
        seconds for the first (a long poll that returns as soon as one is available). On a FIFO
        queue, ``attempt_id`` makes a retried receive return the same messages."""
        return await self.receiver.receive(queue, max, wait, visibility, attempt_id)

    async def delete(self, receipt: str, queue: str | None = None) -> bool:
        """Delete a received message. False (and no change) if the receipt is stale (or, given
        ``queue``, names another queue's message)."""
        return await self.settler.delete(receipt, queue)

    async def delete_many(self, receipts: Iterable[str]) -> list[bool | Exception]:
        return await self.settler.delete_many(receipts)

    async def change_visibility(self, receipt: str, seconds: float, queue: str | None = None) -> int:
        """Hide a received message for ``seconds`` more from now (0: visible again at once)."""
        return await self.settler.change_visibility(receipt, seconds, queue)

    async def change_visibility_many(self, changes: Iterable[tuple[str, float]]) -> list[int | Exception]:
        return await self.settler.change_visibility_many(changes)

    # ---- consuming (engine/operations/pulling.py) -------------------------------------------------
    def consumer(self, queue: str, hold_ms: int = 0, ahead_ms: int = 0) -> Consumer:
        """A consumer of one queue; share it between the coroutines of one process. ``hold_ms``,
        ``ahead_ms``: a daemon's margin past a timeout and its take-ahead (engine/take/step.py TakeOptions)."""
        return self.pulling.consumer(queue, hold_ms, ahead_ms)

    def served(self, queue: str) -> None:
        """A daemon polls ``queue``: it is in use, like a receive (idle expiry, engine/cluster/activity.py)."""
        self.pulling.served(queue)


def _uuid(value: str | uuid.UUID | None) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return parse_id(str(value))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _check_policy(policy: str) -> None:
    if policy not in ("replace", "keep", "error"):
        raise UsageError(f"invalid on_conflict {policy!r}: use replace, keep or error")
