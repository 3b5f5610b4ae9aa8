"""FIFO queues: what a take may deliver from one row without breaking a group's order.

A FIFO queue keeps each message group in one shard row (its messages' ids carry the group's
placement bits, engine/storage/placement.py ``group_id``; the queue has one bucket), in the order the
group's messages were sent (their positions, engine/send/fifo_send.py). Unlike a standard queue's, a
FIFO message is never moved while it lives: a take marks it in flight *in place* (state, attempt,
``visible_at``), a delete removes it, a visibility change or a retry rewrites ``visible_at``. So the
row, read from its cursor, is the whole truth about every group in it, in order, and a take is
one pass over it and a sort of the groups it found:

* a group whose first live message is in flight and not yet visible again, or still within the
  queue's delay, is *blocked*: nothing after it in that group is delivered (``visible_at`` is
  when a message may be delivered: the end of the queue's delay for one never received; the
  position itself may be a few ms ahead of the clock, tail + 1, and is not a delay);
* a message in flight whose visibility has passed comes back first in its group (it is the
  group's first live message: everything before it was deleted);
* a waiting message of a group not blocked is delivered, and the group's next ones after it
  too (SQS returns several of one group in order), unless the caller asked for one per group
  (a daemon runs a group's messages one after another: ``one_per_group``);
* the groups are served one after another, whole (SQS "first attempts to return as many messages
  with the same message group ID as possible"), in the order their first deliverable message became
  visible: its ``visible_at`` (the end of a visibility timeout, a visibility changed to 0, the end
  of the queue's delay), else its position (sent, never received). So a group whose visibility ran
  out waits behind groups that were waiting before, and a group unblocked by a delete comes in the
  order of its next message's send: the orders AWS answered in LocalStack's aws-validated
  test_fifo_message_group_visibility_after_* and test_fifo_receive_message_with_zero_visibility_timeout.

All of it runs under the row's lock (engine/take/row_lock.py, or a kept one), so two takes never see the
row in between each other's writes, and the commit is one single-partition batch.

The cursor may pass only rows that are gone (deleted, or leaving in this batch): it stops at the
first message that stays, in flight or waiting, or at a send's *reservation* (a row without a task at the
position a send claimed, engine/send/fifo_send.py), which is no group's message: so a message written late at its
claimed position is still read, first in its group. What that costs: a take reads from the oldest live
message of the row, so it scans the tombstones of messages deleted after it (bounded by the rate x
the oldest live message's age, and purged by compaction after gc_grace, 3 h), and at most
``FIFO_SCAN`` rows: a row whose first ``FIFO_SCAN`` live messages all belong to blocked groups
delivers nothing until one of them finishes (docs/design.md, "FIFO queues").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from daemon.base.model import GROUP_HEADER
from daemon.engine.storage.table import STATE_IN_FLIGHT

#: Rows a FIFO take reads from its cursor: blocked groups' messages are read past, not taken.
FIFO_SCAN = 1000


@dataclass
class FifoChoice:
    kept: list[Any] = field(default_factory=list)  # rows to deliver, in row order
    first_live: int | None = None  # position of the first row that stays (None: none read)
    wake: int | None = None  # earliest time a row read here may become deliverable
    blocked: int = 0  # groups seen in flight


def group_of(row: Any) -> str:
    return (row.headers or {}).get(GROUP_HEADER, "")


def choose(
    rows: list[Any],
    now: int,
    due_by: int,
    fits: Callable[[Any], bool],
    one_per_group: bool,
    spent: Callable[[Any], bool] = lambda r: False,
    ours: Callable[[Any], bool] = lambda r: True,
) -> FifoChoice:
    """One pass over a row's messages in position order finds each group's deliverable run (see
    the module docstring); the runs are then kept group by group, oldest visible first. ``fits(row)``
    asks the take's budget for room (and counts the row if there is): keeping stops at the first
    row it can't hold, so no group's later message is taken before an earlier one. A row
    ``spent`` (out of receives: the commit moves it to the dead letters) is kept without counting
    against the budget, and its group goes on to its next message in the same take. A row not
    ``ours`` (a daemon sharing the queue with pull readers leaves them the tasks it has no handler
    for) blocks its group for this take: nothing after it in the group is taken before it."""
    out = FifoChoice()
    blocked: set[str] = set()
    runs: dict[str, _Run] = {}
    for r in rows:
        out.first_live = _min(out.first_live, r.due)
        if r.task is None:  # a send's reservation (engine/send/fifo_send.py): it holds the cursor, nothing else
            continue
        g = group_of(r)
        in_flight = r.state == STATE_IN_FLIGHT
        if g in blocked:
            continue
        visible = r.visible_at if r.visible_at is not None else r.due
        if visible > (now if in_flight else due_by):  # in flight, or still in the queue's delay: the group waits
            blocked.add(g)
            out.blocked += in_flight
            out.wake = _min(out.wake, visible)
            continue
        run = runs.setdefault(g, _Run())
        if in_flight and spent(r):
            run.rows.append((r, True))
            continue
        if not ours(r) or (one_per_group and run.since is not None):
            blocked.add(g)
            continue
        if run.since is None:
            run.since = (visible, r.due)
        run.rows.append((r, False))
    for run in sorted(runs.values(), key=_Run.order):
        for r, dead in run.rows:
            if not dead and not fits(r):
                return out
            out.kept.append(r)
    return out


@dataclass
class _Run:
    """A group's rows one take may keep, in order, each with whether it is spent; ``since``: when
    its first deliverable row became visible, and its position (the group's place in the take)."""

    rows: list[tuple[Any, bool]] = field(default_factory=list)
    since: tuple[int, int] | None = None

    def order(self) -> tuple[int, int]:
        # a run of spent rows only costs no budget: first, so the dead letters leave whatever the budget
        return self.since if self.since is not None else (-1, -1)


def cursor_target(choice: FifoChoice, rows: list[Any], read_limit: int, safe: int) -> int:
    """Where the lane's cursor may go if the take commits: to the first row that stays, never past
    a row not read (a full read may have more after its last row), never past now - tolerance."""
    if choice.first_live is not None:
        return min(choice.first_live, safe)
    if rows and len(rows) >= read_limit:
        return min(rows[-1].due, safe)
    return safe


def _min(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
