"""The shards a consumer was told to look at: per shard, the due times wake-ups and our own writes named.

A name is only a reason to look sooner (a fetch visits a named shard first once its due time has
come, and until then it is a timer); a lost one costs latency, never a message (engine/wake/hints.py).
The names also decide the order a fetch visits shards in (``order``) and when an idle consumer
fetches next (``next_due``), with the wake times of the rows it knows (``RowState.wake``).
"""

from __future__ import annotations

import heapq

from daemon.base.clock import Clock
from daemon.base.model import QueueSettings
from daemon.engine.storage.placement import bucket_of
from daemon.engine.take.row_state import NEVER, Rows, RowState

#: Wake-up due times remembered per shard (the earliest ones).
MAX_HINTS = 256
#: Seconds remembered in which wake-ups named due times (``flowing``): the nearest ones.
MAX_HINTED_SECONDS = 4096


class ShardNames:
    """Per shard, a heap of the due times named for it; when the last wake-up arrived; and each
    slot's place in the round of shards. Shares the consumer's ``rows``: a name also marks the
    row it falls in (looked at again by then) and wakes a FIFO row put to rest."""

    def __init__(self, clock: Clock, rows: Rows, ahead_ms: int) -> None:
        self.clock, self.rows, self.ahead_ms = clock, rows, ahead_ms
        self._heaps: dict[int, list[int]] = {}  # shard -> heap of the due times wake-ups named
        self.hinted_at: int | None = None  # when the last wake-up arrived (monotonic ms)
        self._hinted: set[int] = set()  # the seconds (wall ms // 1000) wake-ups named due times in
        self._next_shard: dict[int, int] = {}  # slot -> where its next round of shards starts
        self.named = 0  # names given so far: an empty look remembered before the last one is void

    def expect(self, bucket: int, shard: int, due_ms: int) -> None:
        """A hint from this process: something in this row becomes due at ``due_ms`` (a retry or
        timeout column we wrote), so look before the next rescan."""
        state = self.rows.setdefault((bucket, shard), RowState())
        state.wake = min(state.wake, due_ms)
        state.next_check = min(state.next_check, due_ms)
        state.start.behind(due_ms)
        self.name(shard, due_ms)  # a fetch at the due time visits the shard (named shards only while wake-ups flow)

    def hint(self, qs: QueueSettings, due_ms: int, placement: int | None) -> None:
        """A send (in this process, or another one's wake hint): a message falls due at ``due_ms``
        in the shard of ``placement`` (unknown: every shard). A fetch goes to that shard first once
        it is due; until then it is a timer (``next_due``)."""
        self.hinted_at = self.clock.elapsed_ms()
        self._hinted.add(due_ms // 1000)
        if len(self._hinted) > MAX_HINTED_SECONDS:  # the nearest half (past ones are of no more use)
            now_s = self.clock.now_ms() // 1000
            self._hinted = set(sorted(s for s in self._hinted if s >= now_s - 60)[: MAX_HINTED_SECONDS // 2])
        bucket = bucket_of(due_ms, qs.bucket_ms, qs.buckets)
        for shard in range(qs.shards) if placement is None else [placement % qs.shards]:
            self.name(shard, due_ms)
            state = self.rows.get((bucket, shard))
            if state is not None:  # the row it was written to is looked at again by then, rescan or not
                state.next_check = min(state.next_check, due_ms)
                state.named = True
                state.start.behind(due_ms)

    def flowing(self, window_ms: int) -> bool:
        """Has a wake-up arrived within ``window_ms``, or does one name a due time within ``window_ms`` of now? Then
        the producers of this queue announce their sends, and a consumer need not go looking in rows nobody named.
        A delayed message's wake-up arrives at its send but names its due time: counted from the send alone, delays
        spread over a minute would find wake-ups "not flowing" as they fall due, and each take of one would wake
        every consumer to read every row. Only wake-ups count, not our own names (``name_now``, ``expect``): a bulk
        load without them (the Spark loader) still calls every consumer round the rows."""
        if self.hinted_at is None:
            return False
        if self.clock.elapsed_ms() - self.hinted_at <= window_ms:
            return True
        now = self.clock.now_ms()
        return any(s in self._hinted for s in range((now - window_ms) // 1000, (now + window_ms) // 1000 + 1))

    def name(self, shard: int, due_ms: int) -> None:
        """At most ``MAX_HINTS`` per shard are kept, the earliest: a later one is found by the read
        that takes the earlier ones."""
        self.named += 1
        idle = self.rows.get((0, shard))
        if idle is not None:  # a FIFO row (one bucket) named again: something there may have changed
            idle.fifo.name()
        heap = self._heaps.setdefault(shard, [])
        heapq.heappush(heap, due_ms)
        if len(heap) > MAX_HINTS:
            self._heaps[shard] = heapq.nsmallest(MAX_HINTS // 2, heap)

    def name_now(self, shard: int) -> None:
        """Name ``shard`` as due now: a row of it is being taken from by another fetch of ours (whose
        read may predate the send that sent us here), or a take filled its batch there (the row may
        hold more), so whoever fetches next looks once more."""
        self.name(shard, self.clock.now_ms())

    def due(self, horizon: int) -> dict[int, int]:
        """The shards with something due by ``horizon``, each with the earliest such due time: named (a wake-up,
        our own write, a take that filled its batch), or seen coming by a read of one of its rows (``RowState.wake``:
        a read runs on to the lookahead). Without the rows' wakes, a message no wake-up named (a ``send_many`` of
        more due times than a hint carries) is seen coming, its due time wakes the scout, and the scout's fetch,
        which visits only the shards due, passes it by: it waits for the next poll of every row. A row found busy
        lately is left out: another process holds it."""
        out = {s: heap[0] for s, heap in self._heaps.items() if heap and heap[0] <= horizon}
        for shard, wake in self._wakes():
            if wake <= horizon and wake < out.get(shard, NEVER):
                out[shard] = wake
        return out

    def pending(self) -> int:
        """How many shards have something due (``due``) that no fetch has visited since."""
        return len(self.due(self.clock.now_ms() + self.ahead_ms))

    def visited(self, shard: int, horizon: int) -> None:
        """A fetch visits ``shard`` now: forget the names it covers."""
        heap = self._heaps.get(shard)
        while heap and heap[0] <= horizon:
            heapq.heappop(heap)
        if not heap:
            self._heaps.pop(shard, None)

    def next_due(self) -> int | None:
        """When to fetch next for what this process knows is coming (peeks, its own writes,
        hints): the earliest due time, less the take-ahead. The same rows' wakes as ``due`` counts: a wake a fetch
        would not visit (a row another process holds, found busy) must not wake the scout, or it wakes at once again
        (before ``due`` counted wakes, a row's wake passed made the scout fetch nothing and wake again at once
        until its next poll: a busy loop)."""
        wakes = [wake for _, wake in self._wakes()]
        wakes += [h[0] for h in self._heaps.values() if h]
        return min(wakes) - self.ahead_ms if wakes else None

    def _wakes(self) -> list[tuple[int, int]]:
        """(shard, wake) of each row with something coming (a finite ``RowState.wake``) that is not found busy
        lately. Reads only the rows in ``Rows.waking``, a few of hundreds, and drops those whose wake has passed."""
        elapsed, rows, out = self.clock.elapsed_ms(), self.rows, []
        for key in list(rows.waking):
            st = rows.get(key)
            wake = NEVER if st is None else st.wake
            if wake >= NEVER:
                rows.waking.discard(key)
            elif st is not None and st.backoff_until <= elapsed:
                out.append((key[1], wake))
        return out

    def order(self, qs: QueueSettings, slot: int, due: dict[int, int]) -> list[int]:
        """The shards a fetch visits: those due (``due``, as the fetch computed it for now + the take-ahead) first,
        then one round from this slot's position."""
        shards = qs.span()[0]  # after a reshard, also the shards of layouts still draining
        # The named shard waiting longest first (earliest due time named). Not by shard number, nor
        # rotated by slot: under load every named shard yields, so the shards past the first
        # `consumers` of a fixed order would never be reached, and their rows starve. Consumers
        # woken together meet at the same shard; all but one find it busy (no read) and go on to the next.
        first = sorted((s for s in due if s < shards), key=due.__getitem__)
        start = self._next_shard.get(slot, slot * 7919) % shards
        self._next_shard[slot] = start + 1
        return first + [s for s in ((start + i) % shards for i in range(shards)) if s not in first]
