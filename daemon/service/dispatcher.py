"""The dispatcher: N consumer coroutines per queue feed handler tasks, under an in-flight limit.

    consumer coroutine:  wait for room -> fetch a batch of due messages -> start one task per message
    message task:        look the task name up -> run the handler (timeout) -> ack | retry | poison

Nothing that isn't due is ever fetched, and at most ``in_flight`` messages are held at once, so
memory stays bounded however deep the queue. Acks are buffered for a few milliseconds and written
as one batch per row; an ack lost in a crash only means a redelivery (at-least-once).

A FIFO queue (engine/fifo.py): a take gives the daemon at most one message per group, and the
group stays blocked while it is in flight, also through a retry's backoff (engine/acks.py retries
it in place). Once its ack (or poison) is written, the group's next message is announced like a
send (``Casque.finished_in_group``), so it is taken at once, not at the row's next rescan.
"""

from __future__ import annotations

import asyncio
import math
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from daemon.engine.client import Casque
from daemon.base.config import WorkerSettings
from daemon.engine.consumer import Consumer
from daemon.base.errors import CasqueError
from daemon.engine import chain, triggers
from daemon.base.crashpoints import crash_point
from daemon.service.handler import Context, Poison, Retry
from daemon.service.hooks import Hooks
from daemon.service.ownership import Ownership
from daemon.service.pull_peers import PullPeers
from daemon.base.logs import debug_enabled, get_logger
from daemon.base.model import Message, out_of_attempts
from daemon.service.registry import Registry, TaskSpec
from daemon.engine.samples import Counters
from daemon.service.visibility import Visibility

log = get_logger("casque.dispatcher")
EXTEND_SLACK_MS = 2000


class AckBuffer:
    """Coalesces acks for ``delay`` seconds and writes them in one batch per row, up to
    ``writers`` batches at once: under load a slow ack write must not hold back the acks
    behind it (their timeout columns would come due while they wait)."""

    def __init__(self, cq: Casque, delay: float = 0.004, max_items: int = 256, writers: int = 4,
                 written: Callable[[Message], None] | None = None) -> None:
        self.cq = cq
        self.written = written  # told of each message once its ack is written (a FIFO group moves on)
        self.delay = delay
        self.max_items = max_items
        self._items: list[Message] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._writers = asyncio.Semaphore(writers)
        self._writing: set[asyncio.Task[None]] = set()
        self.failed = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="casque-acks")

    def add(self, m: Message) -> None:
        self._items.append(m)
        self._wake.set()

    async def _run(self) -> None:
        while not self._closing:
            await self._wake.wait()
            if not self._closing and len(self._items) < self.max_items:
                await asyncio.sleep(self.delay)
            await self._writers.acquire()
            self._wake.clear()
            items, self._items = self._items, []
            task = asyncio.create_task(self._write(items))
            self._writing.add(task)
            task.add_done_callback(self._writing.discard)

    async def _write(self, items: list[Message]) -> None:
        try:
            if items:
                await self.cq.acker.ack(items)
                for m in items:
                    if self.written is not None:
                        self.written(m)
        except CasqueError as exc:  # they will come back after their timeout: at-least-once
            self.failed += len(items)
            log.error("ack_failed", count=len(items), error=str(exc))
        finally:
            self._writers.release()

    async def flush(self) -> None:
        """Write what is buffered now, and wait for the writes already under way. The write is a
        tracked task from the moment its items leave the buffer: a second flush at the same time
        (two consumers ending a burst round together) must wait for it too, not find the buffer
        empty and return while those acks are unwritten (a FIFO group's next message would not
        be free yet, and burst mode ended with it left in the queue)."""
        self._wake.clear()
        items, self._items = self._items, []
        if items:
            task = asyncio.create_task(self._write_when_free(items))
            self._writing.add(task)
            task.add_done_callback(self._writing.discard)
        if self._writing:
            await asyncio.gather(*list(self._writing), return_exceptions=True)

    async def _write_when_free(self, items: list[Message]) -> None:
        await self._writers.acquire()
        await self._write(items)

    async def close(self) -> None:
        """Write every buffered ack. The background task is asked to stop, never cancelled: a
        cancel while it awaits a write would drop acks it has already taken from the buffer (their
        messages would be delivered again after their timeout)."""
        if self._task:
            self._closing = True
            self._wake.set()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.flush()


class Dispatcher:
    def __init__(self, cq: Casque, registry: Registry, settings: WorkerSettings, queues: list[str], hooks: Hooks | None = None) -> None:
        self.cq = cq
        self.registry = registry
        self.settings = settings
        self.queues = queues
        #: Middleware around each handler call, retry and poison (hooks.py); the worker's chain
        #: starts with its own metrics and history observers, then the registry's middleware.
        self.hooks = hooks or Hooks(registry.middleware)
        self.visibility = Visibility(cq.acker, cq.clock, settings.clock_tolerance)
        # The column falls due hold after the deadline; a message is taken take_ahead before it is due.
        ahead_ms = int(settings.take_ahead * 1000)
        self.consumers = {q: cq.consumer(q, hold_ms=self.visibility.hold_ms, ahead_ms=ahead_ms) for q in queues}
        self.counters = Counters()
        self.per_queue = {q: Counters() for q in queues}
        self.acks = AckBuffer(cq, written=self._finished)
        #: FIFO messages acked or poisoned so far: each may have unblocked its group's next message,
        #: so burst mode goes round once more after any (``_consume``).
        self.fifo_finished = 0
        self.stopping = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()
        self.busy_consumers = 0
        self._asked = 0  # messages the fetches under way may return: counted against in_flight
        self._room = asyncio.Event()
        self._idle: dict[tuple[str, int], bool] = {}
        self._scouts: dict[str, int] = {}
        self._delay: dict[str, float] = {}  # per queue: the scout's poll delay, poll_interval..max_poll_interval
        self._sweep_at: dict[str, float] = {}  # per queue: when the scout's next sweep of every row is due (loop time)
        #: Wake-ups seen within this window mean the producers announce their sends (two safety polls).
        self._flowing_ms = int(2000 * settings.max_poll_interval)
        self._waiting: dict[str, list[asyncio.Future[None]]] = {}  # per queue: consumers waiting for work, oldest first
        self._kick = {q: asyncio.Event() for q in queues}  # a send named something due: the scout looks now
        self._unsubscribe = [cq.wakeups.subscribe(q, self._hinted(q)) for q in queues]
        self.ownership = Ownership(cq, self.consumers, self.stopping, lambda: len(self.tasks) < settings.in_flight) if settings.hold_rows else None
        self.pull_peers = PullPeers(cq, self.consumers, lambda task: registry.get(task) is not None, self.stopping)
        self._limits: dict[str, asyncio.Semaphore] = {}
        self._pool = ThreadPoolExecutor(max_workers=settings.sync_threads, thread_name_prefix="casque-sync")
        self._threads = asyncio.Semaphore(settings.sync_threads)  # a sync handler starts only with a free thread

    # ---- the consumer loop --------------------------------------------------------------------
    async def warm(self, burst: bool = False) -> None:
        """Before serving: hold the rows this daemon owns (service/ownership.py ``warm``), so the
        first takes are already the two-round-trip kind, and load every row's cursors
        (Consumer.warm). Burst mode holds nothing (see run). First: which queues pull readers share (pull_peers.py),
        whose rows are not held."""
        await self.pull_peers.look()
        if self.ownership is not None and not burst:
            await self.ownership.warm()
        for consumer in self.consumers.values():
            await consumer.warm()

    async def run(self, burst: bool = False) -> None:
        """Serve until ``stopping`` is set (or, in burst mode, until nothing due is left)."""
        self.acks.start()
        loops = [
            asyncio.create_task(self._consume(q, c, slot, burst), name=f"casque-consumer-{q}-{slot}")
            for q, c in self.consumers.items() for slot in range(self.settings.consumers)
        ]
        # No holds in burst mode: it ends when a round finds nothing, and a hold being acquired
        # makes that round's take of the same row find it busy (a message left behind).
        holds = asyncio.create_task(self.ownership.run(), name="casque-holds") if self.ownership and not burst else None
        peers = asyncio.create_task(self.pull_peers.run(), name="casque-pull-peers")
        try:
            await asyncio.gather(*loops)
        finally:
            for t in loops:
                t.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            for unsubscribe in self._unsubscribe:
                unsubscribe()
            self.stopping.set()  # the holds loop releases every held row as it ends
            peers.cancel()
            await asyncio.gather(*[t for t in (holds, peers) if t is not None], return_exceptions=True)

    def _hinted(self, queue: str) -> Any:
        """A wake-up for ``queue`` (engine/wakeups.py: a send in this process, or a hint from
        another one): tell the consumer which row, and wake its scout so it looks now, or sleeps
        until just before the message is due."""
        consumer, kick = self.consumers[queue], self._kick[queue]

        def listener(due_ms: int, placement: int | None) -> None:
            consumer.hint(due_ms, placement)
            kick.set()
            if consumer.pending_hints() > 1:  # more named rows than the scout: call a helper in
                self._wake(queue, 1)
        return listener

    async def _consume(self, queue: str, consumer: Consumer, slot: int, burst: bool) -> None:
        while not self.stopping.is_set():
            room = await self._wait_for_room()
            if self.stopping.is_set():
                return
            self.busy_consumers += 1
            asked = min(self.settings.batch_size, room)
            self._asked += asked  # room promised to this fetch: others wait for what is left
            # A sweep of every row when the poll is due, by whichever consumer comes first (under
            # load there is no idle scout: measured at 2,000 msg/s, messages no wake-up named
            # waited for the end of the run, 37 s); in burst mode always (it ends on a sweep that
            # found nothing). Otherwise the scout, woken by a send, visits the rows named, and so
            # does every other consumer while wake-ups name them.
            sweeping = burst or self._loop_time() >= self._sweep_at.get(queue, 0.0)
            if sweeping:
                self._sweep_at[queue] = math.inf  # ours: no second sweep until this one is done
            scout = self._scouts.get(queue) == slot
            finished_before = self.fifo_finished
            full = sweeping or (not scout and not consumer.hints_flowing(self._flowing_ms))
            try:
                messages = await consumer.fetch(asked, slot, peek_all=scout or sweeping, full=full)
            except CasqueError as exc:
                log.error("fetch_failed", queue=queue, error=str(exc), retry_in=round(self._delay.get(queue, 0.0), 2))
                messages = []
            finally:
                self.busy_consumers -= 1
                self._release(asked)
            if sweeping:
                self._swept(queue, bool(messages), consumer.hints_flowing(self._flowing_ms))
            self._idle[(queue, slot)] = not messages
            if messages:
                for m in messages:
                    self._start(consumer, m)
                # More work known: with wake-ups flowing it is named by shard (a send, a take
                # that filled its batch, a peek that found more rows due): this consumer goes on
                # to one named shard and wakes one more per other one (measured at 2,000 msg/s:
                # one consumer going from row to row alone fell behind, p50 637 ms; at 94 msg/s
                # waking all 31 for a take of 8 sent each round 16 rows, ~500 reads in a burst).
                # Without wake-ups (old clients, the Spark loader), a big take calls every
                # consumer to go round the rows.
                named = consumer.pending_hints()
                flowing = consumer.hints_flowing(self._flowing_ms)
                if named or (not flowing and len(messages) >= max(4, asked // 50)):
                    if self._scouts.get(queue) == slot:
                        del self._scouts[queue]
                    self._wake(queue, named - 1 if flowing else None)
                    continue
                # A few messages: the scout waits for the next send or its poll instead of
                # calling every consumer to go round every shard for them (measured: that storm
                # made pickup at 50 msg/s 270 ms at p50, and fetches of up to 1.2 s).
                # Any other consumer looks once more: it may wait only after a fetch that found
                # nothing (its last fetch counts as idle, or burst mode would never end).
                if self._scouts.setdefault(queue, slot) == slot:
                    await self._sleep(self._until_sweep(queue, consumer), self._kick[queue])
                continue
            if burst and self._all_idle():
                await self._wait_in_flight()
                if self.fifo_finished != finished_before:  # a FIFO group moved on since this fetch read: not the end
                    continue
                # Not while another consumer's fetch is under way: this one may have found the row
                # busy with that take (a FIFO group's next messages, seen ending bursts early).
                if self._all_idle() and not self.tasks and not self.busy_consumers:
                    self.stopping.set()
                    return
            if self._scouts.setdefault(queue, slot) != slot:
                await self._wait_for_work(queue)  # another consumer of this queue keeps watch
                continue
            await self._sleep(self._until_sweep(queue, consumer), self._kick[queue])

    def _swept(self, queue: str, found: bool, flowing: bool) -> None:
        """After the scout's sweep of every row: when the next one is due. While wake-ups flow,
        the sweep is only the safety poll (``max_poll_interval``): sends announce themselves.
        Otherwise work found (an old client, the Spark loader, hints off) may be followed by
        more, so the poll drops to ``poll_interval``, and nothing found doubles it up to
        ``max_poll_interval``. (Measured at 94 msg/s: sweeping after every take made the scout
        peek 16 rows 15 times a second, half of the node's reads.)"""
        delay = self._delay.get(queue, self.settings.poll_interval)
        if flowing:
            delay = self.settings.max_poll_interval
        elif found:
            delay = self.settings.poll_interval
        else:
            delay = min(delay * 2, self.settings.max_poll_interval)
        self._delay[queue] = delay
        self._sweep_at[queue] = self._loop_time() + delay

    def _until_sweep(self, queue: str, consumer: Consumer) -> float:
        """Seconds the scout may sleep: until its next sweep, or a message known to be coming."""
        until = self._sweep_at.get(queue, 0.0) - self._loop_time()  # inf while another consumer sweeps
        return self._idle_sleep(consumer, min(self.settings.max_poll_interval, max(0.0, until)))

    @staticmethod
    def _loop_time() -> float:
        return asyncio.get_running_loop().time()

    def _finished(self, m: Message) -> None:
        """``m``'s ack or poison is written. A FIFO group waits for it: its next message is free only
        now, so announce it like a send (this process and the others), and count it for burst mode."""
        if m.visible_at is not None:
            self.fifo_finished += 1
            self.cq.finished_in_group(m)

    def _count(self, m: Message, name: str) -> None:
        setattr(self.counters, name, getattr(self.counters, name) + 1)
        per = self.per_queue.get(m.queue)
        if per is not None:
            setattr(per, name, getattr(per, name) + 1)

    async def _wait_for_work(self, queue: str) -> None:
        """While a queue is idle one consumer (the scout) polls it; the others wait here until
        there is work for them, so an idle daemon costs one round of peeks per poll, not N.
        No timeout: the scout is a coroutine of this process and never stops while we run (a
        timeout made 15 consumers go round every shard every 0.8 s, each fetch up to 1 s late)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(queue, []).append(waiter)
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait([waiter, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not waiter.done():
                waiter.cancel()
                self._waiting[queue].remove(waiter)

    def _wake(self, queue: str, n: int | None = None) -> None:
        """Wake ``n`` waiting consumers of ``queue`` (None: all). One per row with known work:
        waking every consumer for a take of 8 messages at 94 msg/s sent 31 of them round 16
        rows each (measured: ~500 reads in a burst, and the burst made the next take bigger)."""
        waiting = self._waiting.get(queue, [])
        count = len(waiting) if n is None else min(n, len(waiting))
        for waiter in waiting[:count]:
            waiter.set_result(None)
        del waiting[:count]

    def _idle_sleep(self, consumer: Consumer, delay: float) -> float:
        """Back off while idle, but wake exactly when a message known to be coming falls due."""
        upcoming = consumer.next_due()
        if upcoming is None:
            return delay
        return max(0.0, min(delay, (upcoming - self.cq.clock.now_ms()) / 1000))

    def _all_idle(self) -> bool:
        expected = len(self.consumers) * self.settings.consumers
        return len(self._idle) == expected and all(self._idle.values())

    async def _wait_for_room(self) -> int:
        """Room for a fetch: ``in_flight`` less the running messages and what the fetches under
        way may return. Without the second part, every consumer saw the same room at once and
        the daemon ran up to ``in_flight`` + consumers x batch_size messages (tests/test_liveness.py
        counted 28 running at ``in_flight`` 10)."""
        while self._free() <= 0 and not self.stopping.is_set():
            self._room.clear()
            await self._room.wait()
        return self._free()

    def _free(self) -> int:
        return self.settings.in_flight - len(self.tasks) - self._asked

    def _release(self, asked: int) -> None:
        """A fetch ended: what it asked for and did not get is room again."""
        self._asked -= asked
        self._room_freed()

    def _room_freed(self) -> None:
        if self._free() > 0:
            self._room.set()

    async def _sleep(self, seconds: float, kick: asyncio.Event | None = None) -> bool:
        """Sleep ``seconds``, or until stopping or ``kick`` is set; True if kicked."""
        if kick is not None and kick.is_set():
            kick.clear()
            return True
        waits = [asyncio.ensure_future(self.stopping.wait())]
        if kick is not None:
            waits.append(asyncio.ensure_future(kick.wait()))
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        if kick is not None and kick.is_set():
            kick.clear()
            return True
        return False

    def _start(self, consumer: Consumer, m: Message) -> None:
        self._count(m, "received")
        task = asyncio.create_task(self._process(consumer, m))
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self._room_freed()

    async def _wait_in_flight(self) -> None:
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)
        await self.acks.flush()

    # ---- one message --------------------------------------------------------------------------
    async def _process(self, consumer: Consumer, m: Message) -> None:
        try:
            await self._dispatch(consumer, m)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not kill the daemon: the message comes back after its timeout
            log.exception("dispatch_error", queue=m.queue, task=m.task, id=str(m.id), error=f"{type(exc).__name__}: {exc}")
        finally:
            self.hooks.forget(m)

    async def _dispatch(self, consumer: Consumer, m: Message) -> None:
        mlog = _MessageLog(m)
        spec = self.registry.get(m.task)
        if spec is None:
            await self._poison(consumer, m, mlog, f"unknown task {m.task!r}: no handler is registered under this name", "UnknownTask", "", 0.0)
            return
        if spec.max_attempts:
            m.max_attempts = spec.max_attempts
        if not await self._still_wanted(m, mlog):
            self.acks.add(m)
            return
        slots = self._slots(spec)
        await self._acquire(slots, m, mlog)
        try:
            await self._run(consumer, spec, m, mlog)
        finally:
            for slot in slots:
                slot.release()

    def _slots(self, spec: TaskSpec) -> list[asyncio.Semaphore]:
        """What a handler needs before its deadline starts: its task's concurrency slot, if it has a
        limit, and a thread, if it is sync (else it would time out queued in the pool)."""
        slots = []
        if spec.concurrency:
            sem = self._limits.get(spec.name)
            if sem is None:
                sem = self._limits[spec.name] = asyncio.Semaphore(spec.concurrency)
            slots.append(sem)
        if not spec.is_async:
            slots.append(self._threads)
        return slots

    async def _acquire(self, slots: list[asyncio.Semaphore], m: Message, mlog: Any) -> None:
        """Take the slots; while waiting for them, keep the message invisible (the wait must not use
        up its timeout or its attempts). No wait, no extra task and no extra write."""
        got: list[asyncio.Semaphore] = []
        try:
            if any(slot.locked() for slot in slots):
                async with self.visibility.kept(m, mlog):
                    for slot in slots:
                        await slot.acquire()
                        got.append(slot)
            else:
                for slot in slots:
                    await slot.acquire()
                    got.append(slot)
        except BaseException:
            for slot in got:
                slot.release()
            raise

    async def _still_wanted(self, m: Message, mlog: Any) -> bool:
        """A late occurrence under the 'skip' misfire policy is not run, nor is a keyed message whose
        key was cancelled or moved to another message after it was taken (so a cancelled schedule
        never fires again, even with an occurrence already in flight). Misfire judges an
        occurrence's first delivery only: a retry or a redelivery after a timeout is late because
        it failed, not because no daemon ran, so it always runs."""
        first_delivery = m.attempt <= 1
        if m.trigger and first_delivery and not triggers.should_run(triggers.Trigger.from_json(m.trigger), self.cq.clock.now_ms()):
            mlog.warning("misfire_skipped", fire_ms=m.trigger.get("fire_ms"), late_ms=self.cq.clock.now_ms() - int(m.trigger.get("fire_ms", 0)))
            return False
        if not m.key:
            return True
        try:
            entry = await self.cq.keys.get(m.queue, m.key)
        except CasqueError:
            return True  # can't tell: at-least-once says run it
        if entry is not None and (entry.id == m.id or chain.same_schedule(entry, m.trigger)):
            return True
        mlog.info("message_cancelled", key=m.key, reason="its key was cancelled or now names another message")
        return False

    async def _run(self, consumer: Consumer, spec: TaskSpec, m: Message, mlog: Any) -> None:
        run_timeout = await self._deadline(spec, m, mlog)
        if run_timeout is None:
            return
        await self._until_due(m)
        started = time.monotonic()
        m.started_ms = self.cq.clock.now_ms()
        if debug_enabled():
            mlog.debug("message_started")
        try:
            async with asyncio.timeout(run_timeout if spec.is_async else None) as deadline:
                ctx = self._context(m, mlog, deadline)
                await self.hooks.before(m, ctx)
                await self._call(spec, ctx, m, mlog, run_timeout)
        except TimeoutError:
            self._count(m, "timed_out")
            duration = time.monotonic() - started
            mlog.warning("message_timed_out", timeout_s=round(run_timeout, 3), duration=round(duration, 3), comes_back_at_ms=m.invisible_until)
            await self.hooks.outcome("timed_out", m, duration, handled=True, error=TimeoutError(f"timed out after {run_timeout:.3f}s"))
            if out_of_attempts(m.attempt, m.max_attempts):
                reason = f"timed out on its last attempt ({m.attempt} of {m.max_attempts})"
                await self._poison(consumer, m, mlog, reason, "TimeoutError", "", duration)
            else:
                consumer.expect(m.bucket, m.shard, m.invisible_until)
        except Retry as r:
            await self._retry_or_poison(consumer, spec, m, mlog, r.after, r, started)
        except Poison as p:
            await self._poison(consumer, m, mlog, str(p) or "handler raised Poison", "Poison", traceback.format_exc(), time.monotonic() - started,
                               handled=p)
        except asyncio.CancelledError:
            mlog.warning("message_cancelled", reason="shutdown", comes_back_at_ms=m.invisible_until)
            raise
        except Exception as exc:
            await self._retry_or_poison(consumer, spec, m, mlog, None, exc, started)
        else:
            duration = time.monotonic() - started
            if m.trigger:
                crash_point("schedule.ran")
            self.acks.add(m)
            self._count(m, "acked")
            await self.hooks.outcome("acked", m, duration, handled=True)
            if debug_enabled():
                mlog.debug("message_acked", duration=round(duration, 4))

    async def _until_due(self, m: Message) -> None:
        """A message taken ahead of its due time (``take_ahead``) starts when it is due: the take's
        round trips are spent before the due time instead of after it."""
        early_ms = min((m.scheduled_ms or 0) - self.cq.clock.now_ms(), int(self.settings.take_ahead * 1000))
        if early_ms > 0:
            await asyncio.sleep(early_ms / 1000)

    async def _deadline(self, spec: TaskSpec, m: Message, mlog: Any) -> float | None:
        """How long the handler may run: its timeout, but always ending ``hold`` (clock tolerance
        + time to write the outcome) before its timeout column falls due (visibility.py). When
        less than that is left (a class timeout longer than the message's, or time spent waiting
        for a slot) the column is moved first. None: too late, the next delivery owns it."""
        wanted_ms = int((spec.timeout or m.timeout_ms / 1000) * 1000)
        runway = self.visibility.runway_ms(m)
        if runway <= 0:
            mlog.warning("message_expired_before_start", late_ms=-runway)
            return None
        if wanted_ms > runway + min(EXTEND_SLACK_MS, wanted_ms // 10):
            try:
                await self.visibility.extend(m, wanted_ms / 1000)
            except CasqueError as exc:
                mlog.error("extend_failed", error=str(exc), comes_back_at_ms=m.invisible_until)
                return None
            runway = self.visibility.runway_ms(m)
        return min(wanted_ms, runway) / 1000

    async def _call(self, spec: TaskSpec, ctx: Context, m: Message, mlog: Any, run_timeout: float) -> None:
        handler = spec.cls()
        if spec.is_async:
            await handler.handle(ctx, m.payload)
            return
        # A thread can't be stopped: while it runs the message is kept invisible, past its timeout
        # too, so it is never delivered again while its handler still runs. Its outcome counts.
        async with self.visibility.kept(m, mlog):
            work = asyncio.get_running_loop().run_in_executor(self._pool, handler.handle, ctx, m.payload)
            done, _ = await asyncio.wait({work}, timeout=run_timeout)
            if not done:
                mlog.warning("sync_handler_overran", timeout_s=round(run_timeout, 3),
                             reason="a thread can't be stopped: its message stays invisible until it returns")
                await asyncio.wait({work})
        work.result()

    def _context(self, m: Message, mlog: Any, deadline: Any) -> Context:
        async def extend(seconds: float) -> None:
            await self.visibility.extend(m, seconds)
            deadline.reschedule(asyncio.get_running_loop().time() + seconds)

        return Context(id=str(m.id), queue=m.queue, task=m.task, attempt=m.attempt, max_attempts=m.max_attempts,
                       due_ms=m.scheduled_ms or m.due_ms, key=m.key, headers=m.headers, log=mlog, extend=extend, trigger=m.trigger)

    async def _retry_or_poison(self, consumer: Consumer, spec: TaskSpec, m: Message, mlog: Any, after: float | None,
                               exc: BaseException, started: float) -> None:
        duration = time.monotonic() - started
        error = f"{type(exc).__name__}: {exc}"
        if out_of_attempts(m.attempt, m.max_attempts):
            await self._poison(consumer, m, mlog, f"failed on its last attempt ({m.attempt} of {m.max_attempts})", type(exc).__name__,
                               "".join(traceback.format_exception(exc)), duration, error, handled=exc)
            return
        delay = spec.backoff.delay(m.attempt) if after is None else after
        if not self.visibility.held(m):  # another consumer may have taken it: a rewrite would be a second copy
            mlog.warning("retry_too_late", error=error, comes_back_at_ms=m.invisible_until)
            return
        try:
            await self.cq.acker.retry(m, delay, error)
        except CasqueError as store_exc:
            mlog.error("retry_write_failed", error=str(store_exc), comes_back_at_ms=m.invisible_until)
            return
        consumer.expect(m.bucket, m.shard, m.due_ms if m.visible_at is None else m.visible_at)
        self._count(m, "retried")
        await self.hooks.outcome("retried", m, duration, handled=True, error=exc, retry_in=delay)
        mlog.info("message_retried", error=error, retry_in=round(delay, 3), duration=round(duration, 4))

    async def _poison(self, consumer: Consumer, m: Message, mlog: Any, reason: str, error_type: str, tb: str, duration: float,
                      error: str = "", handled: BaseException | None = None) -> None:
        """Poison ``m``; ``handled`` is what its handler raised (then ``after`` hooks run too)."""
        try:
            await self.cq.acker.poison(m, reason, error_type, error or reason, tb)
        except CasqueError as exc:
            mlog.error("poison_write_failed", error=str(exc), comes_back_at_ms=m.invisible_until)
            return
        self._finished(m)
        self._count(m, "poisoned")
        await self.hooks.outcome("poisoned", m, duration, handled=handled is not None, error=handled, reason=reason)
        mlog.error("message_poisoned", reason=reason, error=error or None, duration=round(duration, 4))

    # ---- shutdown -----------------------------------------------------------------------------
    async def drain(self, timeout: float) -> bool:
        """Let in-flight handlers finish (up to ``timeout``), flush acks. True if all finished."""
        self.stopping.set()
        self._room.set()
        pending = set(self.tasks)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await self.acks.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        return not pending

    async def abort(self) -> None:
        """Stop at once: cancel every handler. Un-acked messages come back after their timeout."""
        self.stopping.set()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*list(self.tasks), return_exceptions=True)
        await self.acks.close()
        self._pool.shutdown(wait=False, cancel_futures=True)


class _MessageLog:
    """A logger bound to one message, bound only when something is logged: most messages log
    nothing above debug, and binding costs more than the handler of a no-op task."""

    __slots__ = ("_m", "_bound")

    def __init__(self, m: Message) -> None:
        self._m = m
        self._bound: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._bound is None:
            m = self._m
            self._bound = log.bind(queue=m.queue, task=m.task, id=str(m.id), attempt=m.attempt)
        return getattr(self._bound, name)
