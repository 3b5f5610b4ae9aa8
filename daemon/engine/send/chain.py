"""A schedule's key follows its chain of occurrences, and may lag behind it without harm.

The take batch writes occurrence n+1 under the row lock and records n+1's number and fire time in
occurrence n's timeout column (``trigger["next"]``). The key is moved to n+1 afterwards, with an
LWT, which can't share that batch. A daemon that dies between the two (or an LWT that times out)
leaves the key on an *earlier occurrence of the same schedule*. So every step treats such a key as
"the schedule is live" and moves it forward:

* the take of occurrence n+1 moves the key from whatever earlier occurrence it names;
* the ack of occurrence n moves a key that still names n to n+1 instead of releasing it;
* the dispatcher runs any occurrence whose key names the same schedule.

Only a key that is gone (cancelled) or names another schedule or message (replaced) ends a chain.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from daemon.base.logs import get_logger
from daemon.base.model import Message, QueueSettings
from daemon.engine.schedules import triggers
from daemon.engine.schedules.triggers import Trigger, occurrence_id
from daemon.engine.send.keys import KeyEntry, KeyStore
from daemon.engine.storage.db import Database
from daemon.engine.storage.table import MessageTable, after

log = get_logger("casque.consumer")

MOVE_TRIES = 5


def record_successor(m: Message, nxt: Message) -> None:
    """Write into ``m``'s trigger (stored with its timeout column) which occurrence follows it."""
    assert m.trigger is not None and nxt.trigger is not None
    m.trigger = {**m.trigger, "next": {"n": nxt.trigger["n"], "fire_ms": nxt.trigger["fire_ms"]}}


def successor_entry(m: Message, now: int) -> KeyEntry | None:
    """The key entry that names the occurrence after ``m`` (None: ``m`` has no successor)."""
    nxt: dict[str, Any] | None = (m.trigger or {}).get("next")
    if not m.key or not m.trigger or not nxt:
        return None
    t = Trigger.from_json(m.trigger)
    trigger = {k: v for k, v in m.trigger.items() if k != "next"} | {"n": nxt["n"], "fire_ms": nxt["fire_ms"]}
    return KeyEntry(m.queue, m.key, occurrence_id(t, nxt["n"]), m.bucket, m.shard, m.task, trigger, now, last_run=now)


def same_schedule(entry: KeyEntry | None, trigger: dict[str, Any] | None) -> bool:
    return bool(entry and entry.trigger and trigger and entry.trigger.get("origin") == trigger.get("origin"))


async def advance(keys: KeyStore, entry: KeyEntry, current: uuid.UUID) -> bool:
    """Point the schedule's key at ``entry`` (occurrence n+1, just written by the take of
    ``current``). True while the schedule is live: moved now, or the key already names n+1 or
    later. False when the key is gone or names something else: cancelled or replaced."""
    expected = current
    n = (entry.trigger or {}).get("n", 0)
    for _ in range(MOVE_TRIES):
        if await keys.repoint(entry, expected):
            return True
        holder = await keys.get(entry.queue, entry.key)
        if not same_schedule(holder, entry.trigger):
            return False
        assert holder is not None and holder.trigger is not None
        if holder.trigger.get("n", 0) >= n:
            return True  # another step moved it this far already
        expected = holder.id  # lagging behind on an earlier occurrence: catch up
    return True  # contended: leave the occurrence in place; the next step moves the key on


def next_occurrence(m: Message, now: int) -> Message | None:
    """The schedule's next occurrence, if ``m`` is a schedule's occurrence taken for the first
    time (a redelivery or a retry already chained its successor). The take writes it in its own
    batch, so the schedule survives any crash."""
    if not m.trigger or m.attempt != 0:
        return None
    t = triggers.following(Trigger.from_json(m.trigger), now)
    if t is None:
        return None
    # A missed occurrence (misfire 'all') keeps its fire time in the trigger but is queued at
    # now: nothing may be written behind a cursor.
    return replace(
        m,
        id=occurrence_id(t, t.n),
        due_ms=max(t.fire_ms, now),
        attempt=0,
        state=0,
        trigger=t.to_json(),
        enqueued_at=now,
        last_error=None,
        copy_due_ms=None,
        write_ts=0,
    )


async def move_key(
    db: Database, table: MessageTable, keys: KeyStore, qs: QueueSettings, m: Message, nxt: Message, now: int
) -> None:
    """After the take committed: point the schedule's key at its next occurrence (also from an
    earlier occurrence, when a crash left the key behind). If the key is gone or names another
    schedule, it was cancelled or replaced meanwhile: withdraw the next occurrence."""
    if not m.key:
        return
    entry = KeyEntry(qs.name, m.key, nxt.id, nxt.bucket, nxt.shard, nxt.task, nxt.trigger, now, last_run=now)
    try:
        moved = await advance(keys, entry, m.id)
    except Exception as exc:  # the occurrence ran; lookups follow the chain (engine/send/lookup.py)
        log.error("schedule_key_not_moved", queue=qs.name, key=m.key, error=str(exc))
        return
    if not moved:
        await db.run(table.delete_message(nxt, nxt.due_ms), timestamp=after(nxt.write_ts, now_us=db.next_timestamp()))
        log.info(
            "schedule_ended", queue=qs.name, key=m.key, reason="cancelled or replaced while an occurrence was taken"
        )
