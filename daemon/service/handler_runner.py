"""Running one taken message's handler: slots, its deadline, its context, the call.

    look the task name up -> still wanted? -> take its slots -> deadline -> run the handler

The runner only reports what happened to the retry/poison policy (outcomes.py), as Dramatiq keeps
time limits and retries apart from the worker that calls actors. Its deadline always ends ``hold``
before the message's timeout column falls due (visibility.py), so no other consumer takes a
message while its handler still runs. Durations are ms ints here; asyncio takes seconds at the call.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from daemon.base.config import WorkerSettings
from daemon.base.crashpoints import crash_point
from daemon.base.errors import CasqueError
from daemon.base.logs import debug_enabled, get_logger
from daemon.base.model import Message
from daemon.engine.client import Casque
from daemon.engine.consume.consumer import Consumer
from daemon.engine.schedules import triggers
from daemon.engine.send import chain
from daemon.service.ack_buffer import AckBuffer
from daemon.service.handler import Context, Poison, Retry
from daemon.service.hooks import Hooks
from daemon.service.message_log import MessageLog
from daemon.service.outcomes import Outcomes
from daemon.service.registry import Registry, TaskSpec
from daemon.service.visibility import Visibility

log = get_logger("casque.dispatcher")
EXTEND_SLACK_MS = 2000


class HandlerRunner:
    """Runs handlers: a task's concurrency limit, sync handlers' threads, deadlines."""

    def __init__(
        self,
        cq: Casque,
        registry: Registry,
        settings: WorkerSettings,
        visibility: Visibility,
        hooks: Hooks,
        outcomes: Outcomes,
        acks: AckBuffer,
    ) -> None:
        self.cq = cq
        self.registry = registry
        self.visibility = visibility
        self.hooks = hooks
        self.outcomes = outcomes
        self.acks = acks
        self.ahead_ms = settings.take_ahead_ms
        self._limits: dict[str, asyncio.Semaphore] = {}
        self._pool = ThreadPoolExecutor(max_workers=settings.sync_threads, thread_name_prefix="casque-sync")
        self._threads = asyncio.Semaphore(settings.sync_threads)  # a sync handler starts only with a free thread

    def close(self) -> None:
        """No new sync handler starts; threads still running are left to end (they can't be stopped)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def process(self, consumer: Consumer, m: Message) -> None:
        """One message, start to outcome; never raises but a cancel."""
        try:
            await self._dispatch(consumer, m)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not kill the daemon: the message comes back after its timeout
            log.exception(
                "dispatch_error", queue=m.queue, task=m.task, id=str(m.id), error=f"{type(exc).__name__}: {exc}"
            )
        finally:
            self.hooks.forget(m)

    async def _dispatch(self, consumer: Consumer, m: Message) -> None:
        mlog = MessageLog(m)
        spec = self.registry.get(m.task)
        if spec is None:
            if await self.outcomes.left_for_pull_clients(consumer, m, mlog):
                return
            reason = f"unknown task {m.task!r}: no handler is registered under this name"
            await self.outcomes.poison(consumer, m, mlog, reason, "UnknownTask", "", 0.0)
            return
        if spec.max_attempts:
            m.max_attempts = spec.max_attempts
        if not await self.still_wanted(m, mlog):
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

    async def still_wanted(self, m: Message, mlog: Any) -> bool:
        """A late occurrence under the 'skip' misfire policy is not run, nor is a keyed message whose
        key was cancelled or moved to another message after it was taken (so a cancelled schedule
        never fires again, even with an occurrence already in flight). Misfire judges an
        occurrence's first delivery only: a retry or a redelivery after a timeout is late because
        it failed, not because no daemon ran, so it always runs."""
        first_delivery = m.attempt <= 1
        now_ms = self.cq.clock.now_ms()
        if m.trigger and first_delivery and not triggers.should_run(triggers.Trigger.from_json(m.trigger), now_ms):
            mlog.warning(
                "misfire_skipped",
                fire_ms=m.trigger.get("fire_ms"),
                late_ms=self.cq.clock.now_ms() - int(m.trigger.get("fire_ms", 0)),
            )
            return False
        if not m.key:
            return True
        try:
            entry = await self.cq.stores.keys.get(m.queue, m.key)
        except CasqueError:
            return True  # can't tell: at-least-once says run it
        if entry is not None and (entry.id == m.id or chain.same_schedule(entry, m.trigger)):
            return True
        mlog.info("message_cancelled", key=m.key, reason="its key was cancelled or now names another message")
        return False

    async def _run(self, consumer: Consumer, spec: TaskSpec, m: Message, mlog: Any) -> None:
        run_timeout_ms = await self._deadline_ms(spec, m, mlog)
        if run_timeout_ms is None:
            return
        await self._until_due(m)
        started = time.monotonic()
        m.started_ms = self.cq.clock.now_ms()
        if debug_enabled():
            mlog.debug("message_started")
        try:
            async with asyncio.timeout(run_timeout_ms / 1000 if spec.is_async else None) as deadline:
                ctx = self._context(m, mlog, deadline)
                if self.hooks.inline["before"]:
                    self.hooks.before_now(m, ctx)
                else:
                    await self.hooks.before(m, ctx)
                await self._call(spec, ctx, m, mlog, run_timeout_ms)
        except TimeoutError:
            await self.outcomes.timed_out(consumer, m, mlog, run_timeout_ms, time.monotonic() - started)
        except Retry as r:
            await self.outcomes.retry_or_poison(consumer, spec, m, mlog, r.after, r, started)
        except Poison as p:
            await self.outcomes.poison(
                consumer,
                m,
                mlog,
                str(p) or "handler raised Poison",
                "Poison",
                traceback.format_exc(),
                time.monotonic() - started,
                handled=p,
            )
        except asyncio.CancelledError:
            mlog.warning("message_cancelled", reason="shutdown", comes_back_at_ms=m.invisible_until)
            raise
        except Exception as exc:
            await self.outcomes.retry_or_poison(consumer, spec, m, mlog, None, exc, started)
        else:
            await self._acked(m, mlog, time.monotonic() - started)

    async def _acked(self, m: Message, mlog: Any, duration: float) -> None:
        """The handler returned: its ack joins the buffer (written within milliseconds)."""
        if m.trigger:
            crash_point("schedule.ran")
        self.acks.add(m)
        self.outcomes.count(m, "acked")
        if self.hooks.inline["after"]:
            self.hooks.acked_now(m, duration)
        else:
            await self.hooks.outcome("acked", m, duration, handled=True)
        if debug_enabled():
            mlog.debug("message_acked", duration=round(duration, 4))

    async def _until_due(self, m: Message) -> None:
        """A message taken ahead of its due time (``take_ahead``) starts when it is due: the take's
        round trips are spent before the due time instead of after it."""
        early_ms = min((m.scheduled_ms or 0) - self.cq.clock.now_ms(), self.ahead_ms)
        if early_ms > 0:
            await asyncio.sleep(early_ms / 1000)

    async def _deadline_ms(self, spec: TaskSpec, m: Message, mlog: Any) -> int | None:
        """How long the handler may run: its timeout, but always ending ``hold`` (clock tolerance
        + time to write the outcome) before its timeout column falls due (visibility.py). When
        less than that is left (a class timeout longer than the message's, or time spent waiting
        for a slot) the column is moved first. None: too late, the next delivery owns it."""
        wanted_ms = int(spec.timeout * 1000) if spec.timeout else m.timeout_ms
        runway = self.visibility.runway_ms(m)
        if runway <= 0:
            mlog.warning("message_expired_before_start", late_ms=-runway)
            return None
        if wanted_ms > runway + min(EXTEND_SLACK_MS, wanted_ms // 10):
            try:
                await self.visibility.extend_ms(m, wanted_ms)
            except CasqueError as exc:
                mlog.error("extend_failed", error=str(exc), comes_back_at_ms=m.invisible_until)
                return None
            runway = self.visibility.runway_ms(m)
        return min(wanted_ms, runway)

    async def _call(self, spec: TaskSpec, ctx: Context, m: Message, mlog: Any, run_timeout_ms: int) -> None:
        handler = spec.cls()
        if spec.is_async:
            await handler.handle(ctx, m.payload)
            return
        # A thread can't be stopped: while it runs the message is kept invisible, past its timeout
        # too, so it is never delivered again while its handler still runs. Its outcome counts.
        async with self.visibility.kept(m, mlog):
            work = asyncio.get_running_loop().run_in_executor(self._pool, handler.handle, ctx, m.payload)
            done, _ = await asyncio.wait({work}, timeout=run_timeout_ms / 1000)
            if not done:
                mlog.warning(
                    "sync_handler_overran",
                    timeout_s=round(run_timeout_ms / 1000, 3),
                    reason="a thread can't be stopped: its message stays invisible until it returns",
                )
                await asyncio.wait({work})
        work.result()

    def _context(self, m: Message, mlog: Any, deadline: Any) -> Context:
        async def extend(seconds: float) -> None:  # the handler-facing API speaks seconds
            await self.visibility.extend_ms(m, int(seconds * 1000))
            deadline.reschedule(asyncio.get_running_loop().time() + seconds)

        return Context(
            id=m.id,
            queue=m.queue,
            task=m.task,
            attempt=m.attempt,
            max_attempts=m.max_attempts,
            due_ms=m.scheduled_ms or m.due_ms,
            key=m.key,
            headers=m.headers,
            log=mlog,
            extend=extend,
            trigger=m.trigger,
        )
