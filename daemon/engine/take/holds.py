"""Kept row locks: which rows' locks this process keeps past a take, and for how long.

Two keep policies of the row lock (row_lock.py ``RowLock``), each a ``Hold``:
  - *held*: a row this process owns (service/ownership.py), acquired once and renewed until released;
  - *lingering*: a take's lock kept for the next take of the row (``adopt``), given up by the first take that does
    not keep it, by a take that finds nothing, or after ``LINGER_MS`` unused.

The row lock costs two to four round trips before a take can read (the re-check among them) and is given up by
every take. A daemon that serves a queue alone, or that owns some of its shards, pays that on every take although
nobody else wants the row. A *hold* is the same lock column, acquired once by the same protocol and then kept:

1. Acquire: row_lock.py's steps 1-5 (PENDING, read, ACQUIRED, re-check). Mutual exclusion comes
   from that protocol, unchanged: of two racers at least one sees the other's ACQUIRED column.
2. Keep: every ``renew_ms`` write a *new* ACQUIRED column (due = now, new id, the lock TTL) before
   the last one expires. A new column, not the old one rewritten: other consumers read only lock
   columns younger than lock TTL + clock tolerance, so an old ``due`` would fall out of their
   window. While any of our columns lives, another consumer's lock attempt sees a foreign ACQUIRED
   column and backs off (steps 3 and 5 of row_lock.py).
3. Take: read the due messages, then one batch (delete them, write their timeout columns, move
   the cursor), as an ordinary take, but the batch leaves the hold column in place. This process's
   sweep (engine/consume/sweep.py) re-reads and moves what lies behind the cursor under the hold too
   (nobody else can lock the row): one of them at a time (``turn``), since one column is theirs.
4. Validity is counted as for any lock, on the monotonic clock from *before* the newest column
   was sent: a take commits only while ``lock TTL - margin`` has not passed since then (the margin
   covers the batch's way to the replicas and their clocks). A renewal whose write failed or timed
   out does not count; the hold lapses when its last good column does.
5. A take batch that failed or timed out is *in doubt* (it may still be applied): the hold is
   dropped without deleting its column, so nobody (us included) takes from the row until that
   column expires; then the ordinary protocol re-reads the row from its committed cursor.
6. Release (shutdown, the row no longer current, the shard now another daemon's): delete our
   columns; a daemon that dies frees its rows when their columns expire (lock TTL).

Which rows a daemon holds is its choice (service/ownership.py): the current bucket's row of the
shards it owns. A hold is never needed for correctness; without one the ordinary protocol runs.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from daemon.base import metrics
from daemon.base.crashpoints import crash_point
from daemon.base.errors import CasqueError
from daemon.base.logs import get_logger
from daemon.base.model import QueueSettings
from daemon.engine.take.row_lock import HeldLock, RowLock

log = get_logger("casque.holds")
Row = tuple[int, int]  # (bucket, shard)


#: A lock kept after a take for the next one (``adopt``) is released if no take used it within this long.
LINGER_MS = 50


@dataclass
class Hold:
    lock: HeldLock  # the newest column: validity counts from its started_ms
    older: list[HeldLock] = field(default_factory=list)  # earlier columns, deleted on release
    #: A take's lock kept for the next take (``adopt``), not a row this process owns: never renewed, given up by
    #: the first take that does not keep it, by a take that finds nothing, or after ``LINGER_MS`` unused.
    lingering: bool = False


@dataclass
class _Turn:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # waiting or in: the entry goes with the last


class RowHolds:
    """The rows of one queue this process holds. Used by the consumer (takes) and by the
    ownership loop (acquire, renew, release); never shared across processes."""

    def __init__(self, row_lock: RowLock) -> None:
        self.row_lock = row_lock
        self._held: dict[Row, Hold] = {}
        self._busy: set[Row] = set()  # rows the consumer is taking from right now
        #: Rows whose hold is being acquired: set when the acquisition ends, however it ended.
        self._acquiring: dict[Row, asyncio.Event] = {}
        self._turns: dict[Row, _Turn] = {}  # rows a take or sweep commits under our hold of, and who waits

    def valid(self, qs: QueueSettings, row: Row) -> HeldLock | None:
        """The lock of a row we hold and may still commit under, else None."""
        hold = self._held.get(row)
        if hold is None or self.row_lock.expired(qs, hold.lock):
            return None
        return hold.lock

    def rows(self) -> list[Row]:
        return list(self._held)

    def lingering(self, row: Row) -> bool:
        hold = self._held.get(row)
        return hold is not None and hold.lingering

    def adopt(self, qs: QueueSettings, row: Row, lock: HeldLock) -> None:
        """Keep a take's lock, which its committed batch left in place, for the next take of the row (receives
        waiting in line, engine/delivery/joint_take.py): that take is a read and a batch, as from a hold. Safe as
        any hold is: the lock was acquired and re-checked by the protocol, and a take commits under it only while
        ``valid`` (its age on the monotonic clock from before its column was written)."""
        hold = self._held[row] = Hold(lock, lingering=True)
        metrics.LOCKS_KEPT.inc()
        crash_point("hold.adopted")  # the take committed, its lock kept: tests/test_sqs_loop_faults.py
        asyncio.get_running_loop().call_later(LINGER_MS / 1000, self._unused, qs, row, hold)

    def forget(self, row: Row) -> None:
        """A lingering hold whose column the take batch deleted."""
        self._held.pop(row, None)

    def _unused(self, qs: QueueSettings, row: Row, hold: Hold) -> None:
        if self._held.get(row) is hold and row not in self._busy:
            task = asyncio.ensure_future(self.release(qs, row))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    def drop(self, row: Row) -> None:
        """Forget a hold without deleting its columns (a take batch in doubt: nobody takes from the
        row until they expire)."""
        if self._held.pop(row, None) is not None:
            log.warning(
                "hold_dropped",
                bucket=row[0],
                shard=row[1],
                reason="take batch in doubt: the row rests until its lock expires",
            )

    async def settled(self, row: Row) -> None:
        """Wait until an acquisition of ``row`` under way (if any) has ended. A consumer that took
        the row by the ordinary lock meanwhile would collide with it: both would see the other's
        column and back off, and the row would rest up to a second for nothing."""
        pending = self._acquiring.get(row)
        if pending is not None:
            await pending.wait()

    @asynccontextmanager
    async def turn(self, row: Row) -> AsyncIterator[None]:
        """One user at a time of a row's hold: a take (step.py ``take_held``) or the sweep's re-read and move
        (engine/consume/sweep.py), which both commit under the same column, so nothing but this keeps them apart
        (two coroutines of one consumer are kept apart by ``RowState.busy``; the sweep has no RowState). In turn
        order; the row counts as busy meanwhile (``keep`` neither releases nor re-acquires it)."""
        turn = self._turns.setdefault(row, _Turn())
        turn.users += 1
        try:
            async with turn.lock:
                self.enter(row)
                try:
                    yield
                finally:
                    self.leave(row)
        finally:
            turn.users -= 1
            if not turn.users:
                del self._turns[row]

    def enter(self, row: Row) -> None:
        self._busy.add(row)

    def leave(self, row: Row) -> None:
        self._busy.discard(row)

    async def keep(self, qs: QueueSettings, wanted: set[Row], renew_ms: int) -> None:
        """Hold exactly ``wanted``: acquire what is missing, renew what is older than ``renew_ms`` (or a third of
        its column's life, ``RowLock.life_ms``, when a change of the lock timeout makes that shorter),
        release the rest. A row a take is running on is neither released nor acquired now (an
        acquisition would collide with that take's lock); the next call does it. Rows run
        concurrently."""
        jobs = [self.release(qs, row) for row in list(self._held) if row not in wanted and row not in self._busy]
        for row in wanted:
            hold = self._held.get(row)
            if hold is None or self.row_lock.expired(qs, hold.lock):
                self._held.pop(row, None)
                if row not in self._busy and row not in self._acquiring:
                    jobs.append(self._acquire(qs, row))
            elif self.row_lock.age_ms(hold.lock) >= min(renew_ms, self.row_lock.life_ms(qs, hold.lock) // 3):
                jobs.append(self._renew(qs, row, hold))
        await asyncio.gather(*jobs)

    async def release_all(self, qs: QueueSettings) -> None:
        await asyncio.gather(*(self.release(qs, row) for row in list(self._held)))

    async def _acquire(self, qs: QueueSettings, row: Row) -> None:
        done = self._acquiring[row] = asyncio.Event()
        try:
            lock = await self.row_lock.acquire(qs, *row, contended=True)  # the earliest of racing holders wins
            if lock is not None:
                self._held[row] = Hold(lock)
        except CasqueError as exc:
            log.info("hold_not_acquired", queue=qs.name, bucket=row[0], shard=row[1], error=str(exc))
        finally:
            del self._acquiring[row]
            done.set()

    async def _renew(self, qs: QueueSettings, row: Row, hold: Hold) -> None:
        try:
            fresh = await self.row_lock.renew(qs, hold.lock)
        except CasqueError as exc:  # in doubt: the old column still counts until it lapses
            log.info("hold_not_renewed", queue=qs.name, bucket=row[0], shard=row[1], error=str(exc))
            return
        if self._held.get(row) is hold:
            hold.older = [lk for lk in [hold.lock, *hold.older] if not self.row_lock.expired(qs, lk, margin_ms=-2000)]
            hold.lock = fresh

    async def release(self, qs: QueueSettings, row: Row) -> None:
        hold = self._held.pop(row, None)
        if hold is None:
            return
        await asyncio.gather(*(self.row_lock.release_quietly(lk) for lk in [hold.lock, *hold.older]))


def owned_shards(me: str, daemons: list[str], queue: str, shards: int) -> set[int]:
    """The shards of ``queue`` that ``me`` holds among ``daemons`` (rendezvous hashing): each shard
    goes to the daemon with the highest hash of (daemon, queue, shard), so a daemon joining or
    leaving moves only its own share, and every daemon computes the same split on its own."""
    everyone = sorted(set(daemons) | {me})
    mine = set()
    for shard in range(shards):
        best = max(everyone, key=lambda d: hashlib.blake2b(f"{d}\0{queue}\0{shard}".encode(), digest_size=8).digest())
        if best == me:
            mine.add(shard)
    return mine
