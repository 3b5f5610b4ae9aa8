"""A message marked in flight: the one shape a delivery is written in, whoever writes it.

A take writes it on the due message it read (engine/take/step.py); a send writes it straight away for a
parked poll that catches it (engine/wake/catch.py). Both must write the same thing, or a receipt, a delete, a
visibility change or a redelivery would tell them apart.
"""

from __future__ import annotations

from cassandra.query import BatchStatement

from daemon.base.model import Message
from daemon.engine.storage.db import Database
from daemon.engine.storage.received import stamp as stamp_received
from daemon.engine.storage.table import STATE_IN_FLIGHT, MessageTable


def into_flight(m: Message, now: int, invisible_until: int, pulled: bool) -> None:
    """Attempt + 1, IN_FLIGHT, invisible until ``invisible_until``: the message stays at its position with
    ``visible_at`` set.
    ``pulled``: a receive's, whose receive times ride in the column written anyway (engine/storage/received.py)."""
    # The time it was due at: a redelivery's is when its visibility ended (a retry's backoff, a timeout).
    m.scheduled_ms = (m.trigger or {}).get("fire_ms") or max(m.due_ms, m.visible_at or 0)
    m.attempt += 1
    m.state = STATE_IN_FLIGHT
    m.copy_due_ms, m.visible_at = m.due_ms, invisible_until
    if pulled:
        stamp_received(m.headers, now)


def in_place_change(
    db: Database, table: MessageTable, m: Message, now: int, retention_s: int, escape: bool
) -> BatchStatement:
    """The batch that writes a standard queue's message's new delivery state (a retry, an extension, a visibility
    change): narrow, never the payload; ``escape``: with an escape entry at its new ``visible_at`` in the same
    single-partition batch, for a time that may come before the check entry that covers it (engine/take/flights.py)."""
    batch = db.batch()
    batch.add(table.update_in_flight(m, now, retention_s))
    if escape:
        position = m.copy_due_ms if m.copy_due_ms is not None else m.due_ms
        visible = m.visible_at or position
        batch.add(table.insert_escape(m, m.rank, position, m.id, visible, now, retention_s))
    return batch
