"""Sending to a FIFO queue: the group's order and the 5-minute deduplication, across servers.

A send to group G of a FIFO queue:

1. reads G's *tail* (a kind 3 row in G's shard row: the highest position written for G), and
   places the message at ``max(now + queue delay, tail + 1)``: a send that starts after another
   send to G returned is placed after it, whichever server each went through and however their
   clocks differ (both read and write at the configured consistency: the read sees the write);
2. *reserves* that position: a row at the message's own key without a task (``_reserve``). A row's
   cursor never passes a live row, so the message, written there at any time while the reservation
   lives, is ahead of every cursor and comes in its group's order; a reservation that came back
   more than half the clock tolerance after its position (``late_ms``) is deleted and the message
   placed again;
3. claims its deduplication id with an LWT (``fifo_dedup``, ``IF NOT EXISTS``, TTL 300 s), storing
   the id, position and write timestamp the message will have. A claim that finds the id taken is
   a duplicate: the send deletes its own reservation, and the first send's id and position are
   returned and nothing is delivered twice;
4. writes the message and the new tail in one single-partition batch (the message replaces its
   reservation), then marks the claim written: a claim marked written names a message written at
   consistency, at a position no cursor passes while it lives.

A crash between the claim and the write leaves a claim not marked written: a retry of the send
(same dedup id) then writes the message at the claimed id, position and timestamp, once it has
waited ~1.5 s for the first sender (a claim not written may be a send still under way: two
sends of one dedup id at once; written together, their cells would tie and could mix bodies). The same
timestamp is what makes that safe: if the first write did land and the message was since deleted,
the delete's tombstone (at a later timestamp) still covers the retry's write; and the tombstone
can't have been purged meanwhile (gc_grace, 3 h, starts after the delete; the claim lives 300 s
from before the write). The same position is what keeps the order: the first sender's reservation
still holds it (it outlives the claim), so however late the retry, the message is read there, before
the group's later messages. No write is sent once the claim is older than the window.

What order means across senders: sends to one group that overlap in time have no order between
them (as in SQS); positions are in ms and a tie is broken by the id.

A purge ends the deduplication window of everything sent before it (SQS: a message re-sent after a
PurgeQueue with the same deduplication id is accepted), and so does a delete of the queue (a queue created again
under its name is a new queue). The ``fifo_dedup`` rows can't be listed per
queue (one partition each), so the purge writes a *purge mark* instead: the queue's row under the
empty scope and the empty id (no dedup id is empty), holding the purge's start (us, the same time
the purge deletes messages sent before), written with that timestamp so the latest purge wins, and
living 300 s like the claims (any claim older than a mark has expired by the time the mark does).
Only a send that finds its id claimed reads the mark (one read; a send whose claim succeeds reads
nothing more). A claim written before the mark is from before the purge: the send turns that row
into a *redirect* (an LWT on the claim's ``wt``, so two senders do it once; ``due`` -1, ``wt`` the
mark) and claims the id under the scope ``<scope>\x00<mark>``, where every later send of the id
follows the redirect while it lives (300 s from the redirect). The id's new claim is a row of its
own: the pre-purge sender, if it is still writing, only ever marks its own row written, never the
new claim. Clocks: the claim's ``wt`` and the mark are wall-clock times of two servers, as are the
message's ``enqueued_at`` and the purge's cut, so an id claimed within the clock skew of the purge's
start is judged as the purge judges its message.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from typing import Any

from daemon.base.clock import Clock
from daemon.base.crashpoints import crash_point, pause_point
from daemon.base.errors import StorageUnavailable
from daemon.base.model import Message, QueueSettings
from daemon.engine.storage.db import Database
from daemon.engine.storage.placement import PLACEMENT_MASK, group_id, group_placement, row_of, tail_id, unique_of
from daemon.engine.storage.table import MessageTable

DEDUP_WINDOW_S = 300
#: A reservation's life: the dedup window (a claim made after it ends before it), and a minute for the write that
#: completes the claim to land.
RESERVED_S = DEDUP_WINDOW_S + 60
#: Placements a send tries whose reservation came back late, before it fails.
PLACE_TRIES = 3
SETTLE_PAUSES_S = (0.05, 0.1, 0.2, 0.4, 0.8)
#: A redirect row's ``due`` (a claim's is a position, never negative): the id was claimed again after a purge.
REDIRECT = -1


def content_dedup_id(body: bytes) -> str:
    """SQS's content-based deduplication id: the SHA-256 of the body (hex)."""
    return hashlib.sha256(body).hexdigest()


class FifoSender:
    def __init__(self, db: Database, table: MessageTable, keyspace: str, clock: Clock, tolerance_ms: int) -> None:
        self.db = db
        self.table = table
        self.clock = clock
        #: A reservation back later than this after its position may lie behind a cursor: half the clock tolerance
        #: is the reservation's (the time to place and write it), the other half the hosts' clocks'.
        self.late_ms = tolerance_ms // 2
        t = f"{keyspace}.fifo_dedup"
        self._claim = db.prepare(
            f"INSERT INTO {t} (queue, scope, dedup_id, id, due, wt) VALUES (?,?,?,?,?,?) IF NOT EXISTS"
        )
        self._read_claim = db.prepare(
            f"SELECT id, due, wt, written FROM {t} WHERE queue = ? AND scope = ? AND dedup_id = ?"
        )
        self._written = db.prepare(
            f"UPDATE {t} USING TTL ? SET written = true WHERE queue = ? AND scope = ? AND dedup_id = ?"
        )
        self._redirect = db.prepare(
            f"UPDATE {t} SET id = null, due = {REDIRECT}, wt = ?, written = null"
            " WHERE queue = ? AND scope = ? AND dedup_id = ? IF wt = ?"
        )
        self._mark = db.prepare(
            f"UPDATE {t} USING TIMESTAMP ? SET wt = ? WHERE queue = ? AND scope = '' AND dedup_id = ''"
        )
        self._read_mark = db.prepare(f"SELECT wt FROM {t} WHERE queue = ? AND scope = '' AND dedup_id = ''")

    async def mark_purged(self, queue: str, at_us: int) -> None:
        """A purge of ``queue`` starting at ``at_us``: ids claimed before it may be sent again."""
        await self.db.run(self._mark, [at_us, at_us, queue])

    async def send(self, qs: QueueSettings, m: Message) -> tuple[Message, bool]:
        """Write ``m`` (built with its group and dedup id, due = now + queue delay) in order.
        Returns the message as stored (its id and position set) and whether it was a duplicate."""
        group, dedup = m.group or "", m.dedup_id or ""
        scope = group if qs.dedup_by == "messageGroup" else ""
        await self._reserve(qs, m, group)
        position, ts = m.due_ms, self.db.next_timestamp()
        scope, existing = await self._claim_id(qs.name, scope, dedup, [m.id, position, ts])
        crash_point("fifo.claimed")  # claimed, not written: tests/test_fifo_send_faults.py
        pause_point("fifo.claimed")
        duplicate = existing is not None
        if duplicate:
            await self.db.run(self.table.delete_message(m, position))  # our reservation: the first send holds its own
            first: Any = await self._settled(qs.name, scope, dedup, existing)
            m.id, m.due_ms, ts = first.id, first.due, first.wt
            if first.written or (first.id.int & PLACEMENT_MASK) != group_placement(group):
                # written (at consistency, before the claim was marked); or claimed for another group (scope
                # "queue"), whose row this send can't write in: its own sender's retry (same group) writes it
                return m, True
        await self._write(qs, m, group, ts)
        remaining = DEDUP_WINDOW_S - math.ceil((self.db.next_timestamp() - ts) / 1_000_000)
        if remaining > 0:
            await self.db.run(self._written, [remaining, qs.name, scope, dedup])
        return m, duplicate

    async def _reserve(self, qs: QueueSettings, m: Message, group: str) -> None:
        """Place ``m`` after its group's tail and reserve its position: a row at the message's own key, without a
        task, living ``RESERVED_S`` (a claim made after it, and the write that completes the claim, end before it).
        A row's cursor never passes a live row (engine/take/fifo.py), so wherever and however late the message is
        written at its claimed position, by this send or by a retry, it is ahead of every cursor. That holds only
        if the reservation was visible before any cursor could pass the position: as every write checks its own
        time (docs/design.md, "Cursors"), one that came back more than ``late_ms`` after its position is deleted
        and the message placed again, before anything is claimed."""
        deliverable = earliest = m.due_ms  # deliverable from now + the queue's delay, whatever the position
        m.visible_at, unique = deliverable, unique_of(m.id)
        _, shard = row_of(group_id(0, group), qs.bucket_ms, qs.buckets, qs.shards)
        for _ in range(PLACE_TRIES):
            tail = await self.db.run(self.table.read_tail, [qs.name, 0, shard, tail_id(group)])
            position = max(earliest, (tail[0].enqueued_at or 0) + 1 if tail else 0)
            m.id, m.due_ms, m.bucket, m.shard = group_id(position, group, unique), position, 0, shard
            pause_point("fifo.placed")  # placed, not reserved: tests/test_fifo_send_faults.py
            await self.db.run(self.table.reserve, [qs.name, 0, shard, position, m.id, RESERVED_S])
            if self.clock.now_ms() - position <= self.late_ms:
                return
            await self.db.run(self.table.delete_message(m, position))  # it may lie behind a cursor: never used
            earliest = max(deliverable, self.clock.now_ms())
        raise StorageUnavailable(f"a send to {qs.name} kept reaching Cassandra late (a node slow?): send it again")

    async def _claim_id(self, queue: str, scope: str, dedup: str, claim: list[Any]) -> tuple[str, Any | None]:
        """Claim ``dedup`` for the message ``claim`` names ([id, position, write timestamp]). Returns
        the scope the claim lives under (``scope``, or past a purge ``<scope>\x00<mark>``) and the
        claim found there, if the id was claimed already since the queue's last purge (else None)."""
        rows = await self.db.run(self._claim, [queue, scope, dedup, *claim])
        if not rows or rows[0].applied:
            return scope, None
        existing, mark = rows[0], None
        for _ in range(4):  # each turn is another sender's move on this row (a claim, a redirect): few
            if mark is None:
                marks = await self.db.run(self._read_mark, [queue])
                mark = (marks[0].wt or 0) if marks else 0
            if existing.wt >= mark and existing.due != REDIRECT:
                return scope, existing  # claimed since the last purge: a duplicate
            if existing.wt >= mark:  # the redirect of the last purge: the id's claim is past it
                after = f"{scope}\x00{existing.wt}"
                found = await self.db.run(self._claim, [queue, after, dedup, *claim])
                return after, (None if not found or found[0].applied else found[0])
            # claimed (or redirected) before the last purge: point the id past the purge, once
            await self.db.run(self._redirect, [mark, queue, scope, dedup, existing.wt])
            rows = await self.db.run(self._read_claim, [queue, scope, dedup])
            if not rows:  # expired meanwhile: claim it afresh
                rows = await self.db.run(self._claim, [queue, scope, dedup, *claim])
                if not rows or rows[0].applied:
                    return scope, None
            existing = rows[0]
        raise StorageUnavailable(f"the deduplication id {dedup!r} of {queue} kept changing under its claim; try again")

    async def _settled(self, queue: str, scope: str, dedup: str, claim: Any) -> Any:
        """A claim found not written yet: its sender may still be writing (two sends with one
        dedup id at once), so wait for it up to ~1.5 s before writing the message in its place.
        Written by both at once, the two bodies' cells would tie on the timestamp and could mix."""
        for pause in SETTLE_PAUSES_S:
            if claim.written:
                return claim
            await asyncio.sleep(pause)  # a back-off on another sender's write, bounded
            rows = await self.db.run(self._read_claim, [queue, scope, dedup])
            if rows:
                claim = rows[0]
        return claim

    async def _write(self, qs: QueueSettings, m: Message, group: str, ts: int) -> None:
        """The message and the group's tail, one single-partition batch at the claimed timestamp.
        The tail's own timestamp is its position (us), so the highest position wins whatever order
        the writes of concurrent senders arrive in."""
        if self.db.now_us() - ts > DEDUP_WINDOW_S * 1_000_000:  # its reservation may be gone: not ahead of cursors
            raise StorageUnavailable(f"a send to {qs.name} outlived its deduplication window: send it again")
        now = self.clock.now_ms()
        batch = self.db.batch()
        batch.add(self.table.insert_message(m, now, qs.retention_s))
        batch.add(
            self.table.write_tail.bind([qs.name, 0, m.shard, tail_id(group), m.due_ms, m.due_ms * 1000, qs.retention_s])
        )
        await self.db.run(batch, timestamp=ts)


__all__ = ["DEDUP_WINDOW_S", "FifoSender", "content_dedup_id"]
