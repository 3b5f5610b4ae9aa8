"""``ShardNames`` reads the rows' wakes from ``Rows.waking`` (the rows whose wake may be finite), not from every row a
consumer knows: ``due``, ``pending`` and ``next_due`` must say what a pass over every row says (the code before the
index, kept here as the reference), however the wakes, the backoffs, the names and the rows themselves change."""

from __future__ import annotations

import random

from daemon.base.clock import ManualClock
from daemon.base.model import QueueSettings
from daemon.engine.consume.shard_names import ShardNames
from daemon.engine.take.row_state import NEVER, Rows, RowState

T0 = 1_700_000_000_000
AHEAD_MS = 20
QS = QueueSettings("names", 4, 6, 1, 5000, 30000, 5, 86400, 4096)
KEYS = [(b, s) for b in range(QS.buckets) for s in range(QS.shards)]


def every_row_due(names: ShardNames, horizon: int) -> dict[int, int]:
    """``ShardNames.due`` as it was: every row's wake read."""
    out = {s: heap[0] for s, heap in names._heaps.items() if heap and heap[0] <= horizon}
    elapsed = names.clock.elapsed_ms()
    for (_, shard), st in names.rows.items():
        if st.wake <= horizon and st.wake < out.get(shard, RowState.wake) and st.backoff_until <= elapsed:
            out[shard] = st.wake
    return out


def every_row_next_due(names: ShardNames) -> int | None:
    """``ShardNames.next_due`` as it was."""
    elapsed = names.clock.elapsed_ms()
    wakes = [st.wake for st in names.rows.values() if st.wake < RowState.wake and st.backoff_until <= elapsed]
    wakes += [h[0] for h in names._heaps.values() if h]
    return min(wakes) - names.ahead_ms if wakes else None


def change(rng: random.Random, names: ShardNames, rows: Rows, clock: ManualClock) -> None:
    """One of the ways the daemon changes what a consumer knows (and two it does not: a row replaced or removed)."""
    key, now = rng.choice(KEYS), clock.now_ms()
    due = now + rng.randrange(-1000, 5000)
    op = rng.randrange(13)
    if op == 0:  # a read saw something coming (take/read.py, consume/row_peek.py)
        state = rows.setdefault(key, RowState())
        state.wake = min(state.wake, due)
    elif op == 1:  # a wake passed (take/step.py, consume/row_peek.py, delivery/idle_look.py)
        state = rows.setdefault(key, RowState())
        if state.wake <= now + AHEAD_MS:
            state.wake = RowState.wake
    elif op == 2:  # nothing coming, whatever the wake was
        rows.setdefault(key, RowState()).wake = RowState.wake
    elif op == 3:  # a row put in with a wake already set
        rows[key] = RowState(wake=due)
    elif op == 4:
        rows.setdefault(key, RowState(wake=due))
    elif op == 5:  # found busy: left out of due / next_due for a while
        rows.setdefault(key, RowState()).contended(clock.elapsed_ms(), rng.choice([100, 1000]))
    elif op == 6:
        rows.setdefault(key, RowState()).took()
    elif op == 7:  # our own write (expect), a send's wake-up (hint)
        names.expect(*key, due)
    elif op == 8:
        names.hint(QS, due, rng.choice([None, key[1]]))
    elif op == 9:  # a fetch visited a shard, or a take filled its batch there
        names.visited(key[1], now + rng.randrange(0, 2000))
        names.name_now(rng.randrange(QS.shards))
    elif op == 10:
        clock.advance(rng.randrange(0, 400))
    elif op == 11:  # a row dropped: its key stays in the index until the next read drops it
        rows.pop(key, None)
    else:  # a state not kept in the rows (``rows.get(row, RowState())``): changes nothing
        rows.get(key, RowState()).wake = due


def test_the_index_says_what_every_row_says() -> None:
    for seed in range(30):
        rng = random.Random(seed)
        clock = ManualClock(T0)
        rows = Rows()
        names = ShardNames(clock, rows, AHEAD_MS)
        for _ in range(300):
            change(rng, names, rows, clock)
            now = clock.now_ms()
            for horizon in (now - 500, now, now + AHEAD_MS, now + 1000, now + 10_000):
                assert names.due(horizon) == every_row_due(names, horizon), (seed, horizon)
            assert names.pending() == len(every_row_due(names, now + AHEAD_MS)), seed
            assert names.next_due() == every_row_next_due(names), seed
            # A read drops the keys whose wake passed: the index holds only the rows with something coming.
            assert rows.waking == {key for key, st in rows.items() if st.wake < NEVER}, seed


def test_wake_reads_as_before() -> None:
    """``RowState.wake`` on the class is still the "nothing coming" value, and a row's wake a plain field."""
    assert RowState.wake == NEVER == RowState().wake
    assert RowState(wake=5) == RowState(wake=5) != RowState(wake=6)
    assert "wake=5" in repr(RowState(wake=5)) and "_waking" not in repr(RowState())
