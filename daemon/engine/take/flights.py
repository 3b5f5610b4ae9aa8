"""A standard queue's messages in flight: the check entries that find what timed out, and the scan they start.

A take marks a message in flight where it was sent (one narrow update: state, attempt, ``visible_at``), and the ack
deletes it. The payload is written once, at the send. Once taken, the message lies behind the cursor, which moved
past it in the take batch, so no read from the cursor finds it when its timeout passes. So every take batch
that delivers messages also writes a narrow **check entry**: a row of the same lane, due at the earliest
``visible_at`` it set, holding the range of positions it took from (``moved_to`` .. ``visible_at`` columns: lo, hi)
and no task. Reads of a standard queue's lane see only rows in state WAITING, and an entry is one, so the take that
reads the lane when the entry comes due finds it with its due messages, under the row lock, and scans its range here:

* a message in flight (or in backoff) whose visibility passed is delivered again in place by that take, and gets a
  check entry of its own at its new ``visible_at`` (an *escape*: the range is its own position);
* one still in flight (a long handler, a visibility extended) gets an escape at its ``visible_at``;
* a message that is gone (acked: a tombstone, never returned) costs the scan one tombstone, once;
* a row without a task and without a range is a *ghost*: the cells a newer delivery's narrow update left after an
  older delivery's delete (every delete of a delivery is timestamped at that delivery's write: the delete removes the
  send's payload and task, not what was written later). A ghost is a message already deleted: it is dropped.

The entry is deleted in the same batch. So this holds, and at-least-once rests on it: *every message in flight or
in backoff lies in the range of a live check entry due no later than its visibility ends*. A take's entry covers
what it took (due at the earliest end of their visibility); a scan moves each message it does not finish to an escape
of its own before it deletes the entry; an extension only pushes ``visible_at`` later (the entry still comes first);
a retry or a visibility change that brings it sooner writes an escape at the new time in the same batch (the entry's
id is derived from the message's, so escapes of one message at one time are one row). A check entry is read by the
same filtered reads and peeks as a waiting message, so a row with entries is never idle, never settled, and the cursor
stops at an entry until a take has processed it. A range read holds at most ``SCAN_LIMIT`` rows; a longer one leaves
a new entry for the rest, due at once, that resumes after the last row read (its due time and id: a ``send_many``
puts many messages at one due time), the id in the entry's ``key`` column.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cassandra.query import BatchStatement

from daemon.base.model import Message, QueueSettings
from daemon.engine.storage.db import Database
from daemon.engine.storage.table import STATE_WAITING, MessageTable, is_entry, is_ghost

#: Rows a check entry's range read returns at most (tombstones of acked messages are not rows: they are not counted
#: here, but by the node's tombstone thresholds: a take's range holds about one batch of messages).
SCAN_LIMIT = 1000
#: A take's check entry is shared by the takes of one consumer in one row whose messages' visibility ends in the same
#: slot of this many ms: at half load a row is taken from ~6 times a second, and one entry (and one scan) a second
#: replaces six. It comes due at the slot's start, at most this much before the visibility it covers ends.
SLOT_MS = 1000
#: A message visible again that this take has no room for (or no handler for): its escape comes due this much later.
REVISIT_MS = 1000


@dataclass
class Flights:
    """What a take's scan of its due check entries found, all written in the take's batch."""

    rescued: list[Any] = field(default_factory=list)  # visible again: delivered in place by this take (and escaped)
    escapes: list[tuple[Any, int]] = field(default_factory=list)  # (row, when): still in flight, an entry of its own
    drop: list[Any] = field(default_factory=list)  # entries processed and ghosts: deleted
    #: (rank, lo, after id, hi): a range a read did not finish, resumed after its last row
    follow: list[tuple[int, int, uuid.UUID, int]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.rescued or self.escapes or self.drop or self.follow)


async def scan(
    db: Database,
    table: MessageTable,
    qs: QueueSettings,
    row: tuple[int, int],
    entries: list[Any],
    now: int,
    take: Callable[[Any], bool],
) -> Flights:
    """Read the ranges of these due check entries (at once: one round trip) and sort what is in them (module
    docstring); ``now``: the take's horizon (now + its take-ahead). ``take(row)``: whether this take delivers a
    message visible again (its budget, its handlers)."""
    bucket, shard = row
    reads = await asyncio.gather(
        *(
            db.run(table.read_range, [qs.name, bucket, shard, e.rank, e.moved_to, e.visible_at, SCAN_LIMIT])
            if e.key is None
            else db.run(
                table.read_range_after,
                [qs.name, bucket, shard, e.rank, e.moved_to, uuid.UUID(e.key), e.visible_at, SCAN_LIMIT],
            )
            for e in entries
        )
    )
    out = Flights(drop=list(entries))
    seen: set[uuid.UUID] = {e.id for e in entries}
    for e, rows in zip(entries, reads):
        if len(rows) >= SCAN_LIMIT:
            out.follow.append((e.rank, rows[-1].due, rows[-1].id, e.visible_at))
        for r in rows:
            if r.id in seen or is_entry(r):
                continue  # an entry is processed when it comes due, not when a range passes over it
            seen.add(r.id)
            if is_ghost(r):
                out.drop.append(r)
            elif r.state != STATE_WAITING:
                visible = r.visible_at if r.visible_at is not None else r.due
                if visible <= now and take(r):
                    out.rescued.append(r)
                else:
                    out.escapes.append((r, visible if visible > now else now + REVISIT_MS))
    return out


def check_entries(
    table: MessageTable,
    batch: BatchStatement,
    qs: QueueSettings,
    row: Any,
    delivered: list[Message],
    flights: Flights,
    now: int,
    spans: dict[tuple[int, int], tuple[int, int]],
    token: uuid.UUID,
) -> list[int]:
    """Add a take's check entries to its batch (module docstring): for the messages it took from its due reads, the
    entry of each (lane, slot) their visibility ends in, its range merged with what this consumer's earlier takes of
    the row wrote there (``spans``, updated here, before the batch is sent: a batch in doubt may have been applied,
    and a later write must still cover it); an escape for each message its scan delivered again or left in flight; a
    follow-up for a range not finished; the deletes of the entries processed and the ghosts. ``row`` names the row
    (queue, bucket, shard); ``token`` this consumer (its entries' ids). Returns the write times of the rows deleted:
    the batch must come after them."""
    rescued = {r.id for r in flights.rescued}
    keep = qs.retention_s
    touched: set[tuple[int, int]] = set()
    for m in delivered:
        position, visible = m.copy_due_ms or m.due_ms, m.visible_at or m.due_ms
        if m.id in rescued:
            batch.add(table.insert_escape(row, m.rank, position, m.id, visible, now, keep))
            continue
        slot = (m.rank, visible - visible % SLOT_MS)
        lo, hi = spans.get(slot, (position, position))
        spans[slot] = (min(lo, position), max(hi, position))
        touched.add(slot)
    for rank, start in touched:
        lo, hi = spans[(rank, start)]
        batch.add(table.insert_entry(row, rank, start, slot_id(token, start), lo, hi, now, keep))
    for rank, lo, after_id, hi in flights.follow:
        batch.add(table.insert_entry(row, rank, now, uuid.uuid4(), lo, hi, now, keep, after_id))
    for r, when in flights.escapes:
        batch.add(table.insert_escape(row, r.rank, r.due, r.id, when, now, keep))
    for r in flights.drop:
        batch.add(table.delete_row(row.queue, row.bucket, row.shard, r))
    for slot in [s for s in spans if s[1] < now - SLOT_MS]:  # come due: a take processes them, not ours to merge
        del spans[slot]
    return [r.wt or 0 for r in flights.drop]


def slot_id(token: uuid.UUID, slot_ms: int) -> uuid.UUID:
    """The id of a consumer's check entry for one slot: its own (two consumers never write over each other's range)
    and the same for every take of that consumer whose messages' visibility ends in the slot."""
    return uuid.UUID(int=token.int ^ slot_ms)
