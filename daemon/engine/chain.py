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
from typing import Any

from daemon.base.model import Message
from daemon.engine.keys import KeyEntry, KeyStore
from daemon.engine.triggers import Trigger, occurrence_id

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
