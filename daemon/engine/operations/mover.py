"""Running message move tasks in the background, in every ``casque serve``, one runner per task.

Each server lists the active tasks (engine/cluster/move_tasks.py) every ``scan_s`` seconds while any
exists, every ``idle_scan_s`` (30 s) while none does (a task is started through a server, which
looks at once: the others only take over one whose holder died, so an idle server reads the
list once in 30 s, not every 2 s), and at once when a task is started through it, and bids for each
task's lease (engine/cluster/lease.py, ``move_task:<id>``, a TTL of ``lease_s``): the holder runs the
task, renewing the lease as it goes;
a holder that dies (SIGKILL, host lost) stops renewing, and within ``lease_s`` another server (or
the same one restarted) takes the lease and goes on from the stored progress.

A move is at-least-once, like any consumer: a batch is received from the dead-letter queue with a
visibility of ``HOLD_S``, sent to its destination, and only then deleted from the dead-letter
queue. A runner killed between the send and the delete leaves the messages in both: they become
visible in the dead-letter queue again after ``HOLD_S`` and are moved again (a duplicate, never a
loss). The task completes when a receive finds nothing and nothing is in flight in the source (or
what is in flight stayed so for ``HOLD_S``: held by someone else, it is not ours to move).
MaxNumberOfMessagesPerSecond is kept by pacing: the n-th message of a run is not sent before
n / rate seconds after the run began.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Protocol

from daemon.base.errors import CasqueError, QueueNotFound
from daemon.base.logs import get_logger
from daemon.base.model import DEDUP_HEADER, GROUP_HEADER
from daemon.engine.cluster.lease import Lease
from daemon.engine.cluster.move_tasks import CANCELLED, COMPLETED, ENDED, FAILED, MoveTask
from daemon.engine.delivery.deadletter import FROM_HEADER, ID_HEADER, RECEIVES_HEADER
from daemon.engine.delivery.receive import Delivery
from daemon.engine.send.producer import Job, Sent
from daemon.engine.stores import Stores

log = get_logger("casque.mover")
HOLD_S = 15
SAVE_EVERY_S = 1.0
RECOUNT_S = 5.0
NO_SOURCE = "CouldNotDetermineMessageSource"
_LOCAL: list[MoveRunner] = []  # the runners of this process, woken when a task starts here


def wake_local() -> None:
    """A task was just started through this process: look for it now, not at the next scan."""
    for runner in _LOCAL:
        runner.wake.set()


class Messaging(Protocol):
    """What a move does with messages: the facade's pull and send operations (engine/client.py),
    which also wake consumers and keep activity marks; named here so the mover needn't import it."""

    stores: Stores

    async def receive(
        self, queue: str, max: int = 10, wait: float = 20.0, visibility: float = 30.0, attempt_id: str | None = None
    ) -> list[Delivery]: ...

    async def change_visibility_many(self, changes: Iterable[tuple[str, float]]) -> list[int | Exception]: ...

    async def send_many(self, queue: str, jobs: Iterable[Job]) -> list[Sent]: ...

    async def delete_many(self, receipts: Iterable[str]) -> list[bool | Exception]: ...


class MoveRunner:
    def __init__(
        self, cq: Messaging, holder: str, scan_s: float = 2.0, lease_s: float = 10.0, idle_scan_s: float = 30.0
    ) -> None:
        self.cq = cq
        self.holder = holder
        self.scan_s = scan_s
        self.idle_scan_s = idle_scan_s
        self.seen = True  # the last scan listed a task (or failed): scan again after scan_s
        self.lease_s = lease_s
        self.st = cq.stores
        self.store = cq.stores.move_tasks
        self.depth = cq.stores.depth_estimator()
        self.wake = asyncio.Event()
        self.running: dict[uuid.UUID, asyncio.Task[None]] = {}

    async def run(self) -> None:
        _LOCAL.append(self)
        try:
            while True:
                await self.scan()
                try:
                    await asyncio.wait_for(self.wake.wait(), self.scan_s if self.seen else self.idle_scan_s)
                except TimeoutError:
                    pass
                self.wake.clear()
        finally:
            _LOCAL.remove(self)
            for t in self.running.values():
                t.cancel()
            await asyncio.gather(*self.running.values(), return_exceptions=True)

    async def scan(self) -> None:
        """Bid for every active task not run here yet; start the ones whose lease we got."""
        try:
            active = await self.store.active()
        except CasqueError as exc:
            log.warning("move_scan_failed", error=str(exc))
            self.seen = True
            return
        self.seen = bool(active or self.running)
        for source, started_at, task_id in active:
            if task_id in self.running or await self._held_elsewhere(task_id):
                continue
            lease = self.st.lease(f"move_task:{task_id}", self.holder, self.lease_s)
            if await lease.hold():
                self.running[task_id] = asyncio.create_task(self._guarded(lease, source, started_at, task_id))

    async def _held_elsewhere(self, task_id: uuid.UUID) -> bool:
        """A plain read of the task's lease row: a task another server runs costs this read per
        scan, not a failed bid (two LWTs)."""
        read = self.st.db.prepare(f"SELECT holder FROM {self.st.keyspace}.leases WHERE name = ?")
        rows = await self.st.db.run(read, [f"move_task:{task_id}"])
        return bool(rows) and rows[0].holder != self.holder

    async def _guarded(self, lease: Lease, source: str, started_at: int, task_id: uuid.UUID) -> None:
        try:
            task = await self.store.get(source, started_at, task_id)
            if task is None:  # an active row whose task row never got written (a crash inside claim)
                if self.st.clock.now_ms() - started_at > 60_000:
                    await self.store.release(MoveTask(source, started_at, task_id))
                return
            if task.status in ENDED:  # ended, but its active row outlived it (a crash between the two writes)
                await self.store.release(task)
                return
            await TaskRun(self, lease, task).run()
        except CasqueError as exc:  # Cassandra trouble: drop the lease; a runner bids again at the next scan
            log.warning("move_task_interrupted", task=str(task_id), error=str(exc))
        finally:
            self.running.pop(task_id, None)
            await lease.release()


class TaskRun:
    """One runner's turn at one task, from its stored progress until it ends or the lease is lost."""

    def __init__(self, runner: MoveRunner, lease: Lease, task: MoveTask) -> None:
        self.r = runner
        self.cq = runner.cq
        self.st = runner.st
        self.lease = lease
        self.task = task
        self.began = time.monotonic()
        self.sent_here = 0
        self.renewed = self.saved = time.monotonic()
        self.counted = 0.0
        self.idle_since: float | None = None

    async def run(self) -> None:
        log.info("move_task_running", task=str(self.task.task_id), source=self.task.source, moved=self.task.moved)
        while self.task.status not in ENDED:
            if not await self._keep_lease():
                log.info("move_task_lease_lost", task=str(self.task.task_id))
                return
            if await self._cancel_requested():
                await self._end(CANCELLED)
                return
            try:
                await self._step()
            except QueueNotFound as exc:
                await self._end(FAILED, "AWS.SimpleQueueService.NonExistentQueue")
                log.warning("move_task_failed", task=str(self.task.task_id), error=str(exc))
                return

    async def _keep_lease(self) -> bool:
        if time.monotonic() - self.renewed < self.r.lease_s / 3:
            return True
        self.renewed = time.monotonic()
        return await self.lease.hold()

    async def _cancel_requested(self) -> bool:
        if time.monotonic() - self.saved < SAVE_EVERY_S:
            return False
        fresh = await self.r.store.get(*self.task.key)
        if fresh is None:
            return True
        await self._recount()
        await self._save()
        return fresh.cancel_requested

    async def _recount(self) -> None:
        """ApproximateNumberOfMessagesToMove: at least what was moved plus what is left (the start's
        estimate may be a lower bound for a large queue: engine/observe/depth_estimate.py)."""
        if time.monotonic() - self.counted < RECOUNT_S:
            return
        self.counted = time.monotonic()
        est = await self.r.depth.estimate(await self.st.queues.get(self.task.source), self.st.clock.now_ms())
        self.task = replace(
            self.task, to_move=max(self.task.to_move, self.task.moved + round(est.waiting + est.in_flight))
        )

    async def _save(self) -> None:
        self.task = replace(self.task, updated_at=self.st.clock.now_ms())
        await self.r.store.save(self.task)
        self.saved = time.monotonic()

    async def _end(self, status: str, failure: str | None = None) -> None:
        # moved + what is left is at least moved, whatever the last recount (a lower bound) saw
        self.task = replace(self.task, to_move=max(self.task.to_move, self.task.moved))
        self.task = await self.r.store.finish(self.task, status, self.st.clock.now_ms(), failure)
        log.info("move_task_ended", task=str(self.task.task_id), status=status, moved=self.task.moved, failure=failure)

    async def _step(self) -> None:
        await self._pace()
        batch = min(10, self.task.rate or 10)
        deliveries = await self.cq.receive(self.task.source, max=batch, wait=0, visibility=HOLD_S)
        if not deliveries:
            await self._when_empty()
            return
        self.idle_since = None
        if any(not (self.task.destination or d.message.headers.get(FROM_HEADER)) for d in deliveries):
            await self.cq.change_visibility_many((d.receipt, 0) for d in deliveries)
            await self._end(FAILED, NO_SOURCE)
            return
        by_target: dict[str, list[Any]] = {}
        for d in deliveries:
            by_target.setdefault(self.task.destination or d.message.headers[FROM_HEADER], []).append(d)
        for target, group in by_target.items():
            fifo = (await self.st.queues.get(target)).fifo
            await self.cq.send_many(target, [_job(d.message, fifo) for d in group])  # first the copy ...
            await self.cq.delete_many(d.receipt for d in group)  # ... then the original: at-least-once
        self.sent_here += len(deliveries)
        self.task = replace(self.task, moved=self.task.moved + len(deliveries))

    async def _pace(self) -> None:
        if self.task.rate:
            ahead = self.sent_here / self.task.rate - (time.monotonic() - self.began)
            if ahead > 0:
                await asyncio.sleep(ahead)  # the rate limit itself, not a wait for a condition

    async def _when_empty(self) -> None:
        """Nothing visible: done, unless messages are in flight (a dead runner's batch comes back
        within HOLD_S); those are waited for at most HOLD_S (+ a second) before completing."""
        qs = await self.st.queues.get(self.task.source)
        est = await self.r.depth.estimate(qs, self.st.clock.now_ms())
        now = time.monotonic()
        self.idle_since = self.idle_since or now
        if round(est.in_flight + est.waiting) == 0 or now - self.idle_since > HOLD_S + 1:
            await self._end(COMPLETED)
            return
        await asyncio.sleep(0.5)  # messages in flight elsewhere: look again shortly (bounded by HOLD_S above)


def _job(m: Any, fifo: bool) -> Job:
    """The copy sent to the destination. Into a FIFO queue: in the message's group, deduplicated by
    the dead letter's own id (a runner killed between the send and the delete moves it again,
    which the destination then drops as a duplicate within 5 minutes)."""
    dropped = (FROM_HEADER, ID_HEADER, RECEIVES_HEADER, GROUP_HEADER, DEDUP_HEADER)
    headers = {k: v for k, v in m.headers.items() if k not in dropped}
    group = m.group or (m.queue if fifo else None)
    return Job(
        m.task,
        m.payload,
        priority=0 if fifo else m.priority,
        headers=headers,
        group=group,
        dedup_id=f"move-{m.id}" if fifo else None,
    )
