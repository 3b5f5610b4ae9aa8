"""The retry/poison policy: what each outcome of a handler writes, counts and tells the hooks.

Kept apart from running the handler, as Dramatiq keeps retries in a middleware: the runner only
says what happened (acked, timed out, raised ``Retry``/``Poison``/an error); this module decides
between a retry and the poison table, and writes it. Every write here is guarded: a message whose
timeout column another consumer may already see as due is never rewritten (that would leave a
second live copy), and a failed write is only logged, since the message comes back after its
timeout anyway (at-least-once).

A FIFO message's group stays blocked until its ack or poison is written; then the group's next
message is announced like a send (``Casque.deliverable_now``), so it is taken at once.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

from daemon.base.errors import CasqueError
from daemon.base.model import Message, out_of_attempts
from daemon.engine.client import Casque
from daemon.engine.consume.consumer import Consumer
from daemon.engine.observe.samples import Counters
from daemon.service.hooks import Hooks
from daemon.service.registry import TaskSpec
from daemon.service.visibility import Visibility


class Outcomes:
    """Writes and counts outcomes: the daemon's counters, per queue too, live here."""

    def __init__(self, cq: Casque, hooks: Hooks, visibility: Visibility, queues: list[str]) -> None:
        self.cq = cq
        self.hooks = hooks
        self.visibility = visibility
        self.counters = Counters()
        self.per_queue = {q: Counters() for q in queues}
        #: FIFO messages acked or poisoned so far: each may have unblocked its group's next message,
        #: so burst mode goes round once more after any (fetch_loop.py).
        self.fifo_finished = 0

    def finished(self, m: Message) -> None:
        """``m``'s ack or poison is written. On a FIFO queue its group waits for it: the group's next message is free
        only now, so announce it like a send (this process and the others), and count it for burst mode. (Not on a
        standard queue: an announcement there would send every consumer to look for what an ack freed, nothing.)"""
        qs = self.cq.stores.queues.cached(m.queue)  # read by the take that delivered m
        if qs is not None and qs.fifo:
            self.fifo_finished += 1
            self.cq.deliverable_now(m)

    def count(self, m: Message, name: str) -> None:
        setattr(self.counters, name, getattr(self.counters, name) + 1)
        per = self.per_queue.get(m.queue)
        if per is not None:
            setattr(per, name, getattr(per, name) + 1)

    async def timed_out(self, consumer: Consumer, m: Message, mlog: Any, run_timeout_ms: int, duration: float) -> None:
        """The handler ran out of time: poison on the last attempt, else the message comes back
        when its timeout column falls due (no write: the take already placed it)."""
        self.count(m, "timed_out")
        mlog.warning(
            "message_timed_out",
            timeout_s=round(run_timeout_ms / 1000, 3),
            duration=round(duration, 3),
            comes_back_at_ms=m.invisible_until,
        )
        error = TimeoutError(f"timed out after {run_timeout_ms / 1000:.3f}s")
        await self.hooks.outcome("timed_out", m, duration, handled=True, error=error)
        if out_of_attempts(m.attempt, m.max_attempts):
            reason = f"timed out on its last attempt ({m.attempt} of {m.max_attempts})"
            await self.poison(consumer, m, mlog, reason, "TimeoutError", "", duration)
        else:
            consumer.names.expect(m.bucket, m.shard, m.invisible_until)

    async def retry_or_poison(
        self,
        consumer: Consumer,
        spec: TaskSpec,
        m: Message,
        mlog: Any,
        after: float | None,
        exc: BaseException,
        started: float,
    ) -> None:
        """A handler started at ``started`` (monotonic) failed (``after``: the seconds its ``Retry``
        asked for, else the task's backoff): retry it in place, or poison it on its last attempt."""
        duration = time.monotonic() - started
        error = f"{type(exc).__name__}: {exc}"
        if out_of_attempts(m.attempt, m.max_attempts):
            reason = f"failed on its last attempt ({m.attempt} of {m.max_attempts})"
            await self.poison(
                consumer,
                m,
                mlog,
                reason,
                type(exc).__name__,
                "".join(traceback.format_exception(exc)),
                duration,
                error,
                handled=exc,
            )
            return
        delay = spec.backoff.delay(m.attempt) if after is None else after
        if not self.visibility.held(m):  # another consumer may have taken it: a rewrite would be a second copy
            mlog.warning("retry_too_late", error=error, comes_back_at_ms=m.invisible_until)
            return
        try:
            await self.cq.stores.acker.retry(m, int(delay * 1000), error)  # Retry/Backoff speak seconds
        except CasqueError as store_exc:
            mlog.error("retry_write_failed", error=str(store_exc), comes_back_at_ms=m.invisible_until)
            return
        consumer.names.expect(m.bucket, m.shard, m.due_ms if m.visible_at is None else m.visible_at)
        self.count(m, "retried")
        await self.hooks.outcome("retried", m, duration, handled=True, error=exc, retry_in=delay)
        mlog.info("message_retried", error=error, retry_in=round(delay, 3), duration=round(duration, 4))

    async def left_for_pull_clients(self, consumer: Consumer, m: Message, mlog: Any) -> bool:
        """``m``'s task has no handler here. On a queue pull clients consume, it is theirs: put back, visible now,
        never poisoned. The consumer leaves such tasks in their rows, but its settings may be a few seconds older
        than a first receive or SQS send, so the queue row is read fresh here (only for unknown tasks)."""
        try:
            if not (await consumer.settings(fresh=True)).shared:
                return False
            await self.cq.stores.acker.retry(m, 0, "no handler in this daemon: left for pull clients")
        except CasqueError as exc:  # not written: it comes back when its timeout column falls due
            mlog.warning("left_for_pull_clients_failed", error=str(exc), comes_back_at_ms=m.invisible_until)
            return True
        self.cq.deliverable_now(m)
        self.finished(m)
        mlog.info("message_left_for_pull_clients")
        return True

    async def poison(
        self,
        consumer: Consumer,
        m: Message,
        mlog: Any,
        reason: str,
        error_type: str,
        tb: str,
        duration: float,
        error: str = "",
        handled: BaseException | None = None,
    ) -> None:
        """Poison ``m``; ``handled`` is what its handler raised (then ``after`` hooks run too)."""
        try:
            await self.cq.stores.acker.poison(m, reason, error_type, error or reason, tb)
        except CasqueError as exc:
            mlog.error("poison_write_failed", error=str(exc), comes_back_at_ms=m.invisible_until)
            return
        self.finished(m)
        self.count(m, "poisoned")
        await self.hooks.outcome("poisoned", m, duration, handled=handled is not None, error=handled, reason=reason)
        mlog.error("message_poisoned", reason=reason, error=error or None, duration=round(duration, 4))
