"""Queue metadata: create, read (cached), update, list and delete the ``queues`` rows.

A queue costs nothing but this row: its messages are partitions keyed by its name, so a cluster can
hold millions of queues. Settings are read from Cassandra by every client (never from local
config), so a producer and a consumer on different hosts always agree on the placement.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import replace
from typing import Any

from daemon.base import metrics
from daemon.base.clock import Clock
from daemon.base.errors import CasqueError, QueueNotFound, UsageError
from daemon.base.logs import get_logger
from daemon.base.lru import ONLINE_S, Lru
from daemon.base.model import QueueSettings, check_priority
from daemon.engine.queues.bulk_create import CHUNK, CONCURRENCY, CREATED, BulkCreate, CreateCounts, OnExisting
from daemon.engine.queues.names import QueueNames
from daemon.engine.queues.settings import check_settings, defaults_of, settings_from_defaults
from daemon.engine.storage.db import Database

log = get_logger("casque.queues")
#: How long a process trusts a queue row it read: ``CACHE_SECONDS``, or ``COVERED_TRUST_MS`` while it has read the due
#: feed without a break since (engine/wake/due_feed.py), which tells it of every change to a row (``changed``). The
#: same window bounds how long a covered process trusts an empty look of a queue (engine/delivery/idle_look.py).
CACHE_SECONDS = 5.0
COVERED_TRUST_MS = 60_000
#: A covered process re-reads the rows in use whose trust ends within ``REFRESH_AHEAD_S``, this many to a request
#: (``QueueStore.refresh``).
REFRESH_BATCH = 100
REFRESH_AHEAD_S = 10.0
CACHE_LIMIT = 10_000  # idle queues whose settings one process keeps, besides those in use
FORGET_BATCH = 64  # evicted queues whose metric series are dropped together (one pass over the series)
MIN_TOKEN = -(1 << 63)  # Murmur3Partitioner: tokens are signed 64-bit
_COLUMNS = (
    "name, shards, buckets, bucket_seconds, lock_ttl_ms, timeout_ms, max_attempts, retention_s, "
    "max_payload_bytes, priorities, history, "
    "expire_after_s, fifo, in_flight, consumers"
)
#: What every queue row created since the copy layout was removed says in ``in_flight``: its messages in flight
#: stay where they were sent (engine/take/flights.py). A standard queue's row without it is a copy-layout queue's.
IN_PLACE = "in_place"
_READ = _COLUMNS + ", draining, lock_ttl_before_ms, lock_ttl_changed_at"
#: The whole row a request may need: settings and the SQS attributes (engine/queues/attributes.py), read once.
_ROW = _READ + ", attributes, tags, created_at, updated_at"


class CopyLayoutQueue(UsageError):
    """A standard queue created before the copy layout was removed (its row's ``in_flight`` is not "in_place"): its
    messages in flight are timeout columns this casque would never find, so it is not served (docs/design.md,
    "Messages in flight")."""


def copy_layout(r: Any) -> bool:
    """Whether a queue row is a copy-layout queue's: a standard queue (FIFO queues always were in place) whose
    ``in_flight`` is null (the old default) or "copy"."""
    return not getattr(r, "fifo", None) and getattr(r, "in_flight", None) != IN_PLACE


class QueueStore:
    """Reads and writes queue rows, caching reads (settings rarely change) in an LRU that keeps every queue used
    within ``ONLINE_S`` and ``cache_limit`` idle ones besides: a process's memory follows the queues it uses now.

    A row read is trusted ``CACHE_SECONDS``, or ``COVERED_TRUST_MS`` while the process reads the due feed without a
    break (``covered_since``): every write to a row is announced there (``changed``), and a reader forgets the row
    it is told of. So an owner long-polling its queue reads its row once a minute, not at every poll. A change whose
    announcement was lost (a failed write, logged; a writer's clock further behind than the tolerance) or made
    outside casque (CQL) reaches a covered process within that minute. While covered, the process re-reads the rows in
    use before their minute ends, a hundred to a request (``refresh``): owners online never wait on a read of their
    row, and their rows cost the node a request per hundred owners a minute, not one per owner."""

    def __init__(self, db: Database, keyspace: str, clock: Clock, cache_limit: int = CACHE_LIMIT) -> None:
        self.db = db
        self.ks = keyspace
        self.clock = clock
        self._cache: Lru[str, tuple[float, QueueSettings]] = Lru(cache_limit, self._evicted, keep_s=ONLINE_S)
        self._forget: set[str] = set()
        self.names = QueueNames(db, keyspace)
        self.bulk = BulkCreate(db, keyspace, _values, _from_row, self._cache.pop)
        #: Told of every row ``read_row`` read (None when there was none): the attributes' cache fills from it.
        self.row_seen: Callable[[str, Any], object] | None = None
        #: Since when (clock ms) this process has read the due feed without a break; None: not reading now.
        self.covered_since: Callable[[], int | None] = lambda: None
        #: Announces a write to a queue's row to the other processes (the due feed, engine/stores.py).
        self.announce: Callable[[str], Awaitable[None]] | None = None
        self._refresh_at = 0.0  # monotonic s: the next ``refresh`` that looks

    def _evicted(self, name: str, _: tuple[float, QueueSettings]) -> None:
        """A queue this process no longer keeps: drop its metric
        series too (in batches: one pass over the series per FORGET_BATCH queues)."""
        self._forget.add(name)
        if len(self._forget) >= FORGET_BATCH:
            metrics.forget_queues(self._forget)
            self._forget = set()

    async def create(self, qs: QueueSettings, if_missing: bool = False) -> bool:
        """Create the queue row by the claim protocol (engine/queues/bulk_create.py: plain writes,
        yet two creators never both create one name). False if it existed (UsageError unless
        ``if_missing``); an existing queue is never written over, whatever its settings."""
        check_settings(qs)
        outcome = (await self.bulk.chunk([qs]))[qs.name]
        self._cache.pop(qs.name)
        if outcome != CREATED and not if_missing:
            raise UsageError(f"queue '{qs.name}' already exists: use 'casque queue update {qs.name} ...' to change it")
        return outcome == CREATED

    async def create_many(
        self,
        queues: Iterable[QueueSettings],
        if_missing: bool = True,
        concurrency: int = CONCURRENCY,
        progress: Callable[[int, int], None] | None = None,
        chunk: int = CHUNK,
        on_existing: OnExisting | None = None,
    ) -> CreateCounts:
        """Create many queues, ``chunk`` names a request and ``concurrency`` chunks in flight,
        pulling from ``queues`` lazily (a million names are never all in memory). Existing ones
        are skipped with ``if_missing`` (``on_existing`` is told each), else the first one found
        raises once the chunks in flight finished. ``progress(done, created)`` follows each chunk."""
        return await self.bulk.create(
            queues,
            if_missing=if_missing,
            concurrency=concurrency,
            chunk=chunk,
            progress=progress,
            on_existing=on_existing,
        )

    async def get(self, name: str, fresh: bool = False, any_layout: bool = False) -> QueueSettings:
        """The queue's settings (cached: ``trusted``). A queue created with the copy in-flight layout is
        refused (``CopyLayoutQueue``) unless ``any_layout`` (its delete)."""
        hit = self._cache.get(name)
        if hit and not fresh and self.trusted(hit[0]):
            return hit[1]
        row = await self.read_row(name)
        if row is None or row.shards is None:  # no row, or only cells written after a delete
            raise QueueNotFound(f"queue '{name}' does not exist: create it with 'casque queue create {name}'")
        if not any_layout and copy_layout(row):
            raise CopyLayoutQueue(
                f"queue '{name}' keeps messages in flight in the copy layout, which this casque no longer serves: "
                f"with the release that created it, stop its senders, let its consumers run until 'casque stats "
                f"{name}' shows 0 in flight and stop them, then run UPDATE {self.ks}.queues SET in_flight = "
                f"'in_place' WHERE name = '{name}' (or delete the queue and create it again)"
            )
        return _from_row(row)

    async def read_row(self, name: str) -> Any | None:
        """The queue's row, settings and attributes in one read: cached here, and handed to ``row_seen``
        (the attributes' cache, engine/stores.py), so an SQS request that needs both reads the row once,
        not once per cache (two of the four reads of each long poll in the full many-queues run)."""
        rows = await self.db.run(self.db.prepare(f"SELECT {_ROW} FROM {self.ks}.queues WHERE name = ?"), [name])
        row = rows[0] if rows else None
        self._seen(name, row)
        return row

    async def refresh(self) -> int:
        """While covered, re-read the rows in use (asked for within ``ONLINE_S``) whose trust ends within
        ``REFRESH_AHEAD_S``, ``REFRESH_BATCH`` names to a request, as ``read_row`` reads one. Returns how many."""
        now = time.monotonic()
        if self.covered_since() is None or now < self._refresh_at:
            return 0
        self._refresh_at = now + REFRESH_AHEAD_S / 2  # each row re-read between 50 and 55 s old: before its minute
        old = now - (COVERED_TRUST_MS / 1000 - REFRESH_AHEAD_S)
        names = [n for n in self._cache if (hit := self._cache.peek(n)) and hit[0] < old and self._cache.in_use(n)]
        stmt = self.db.prepare(f"SELECT {_ROW} FROM {self.ks}.queues WHERE name IN ?")
        for i in range(0, len(names), REFRESH_BATCH):
            batch = names[i : i + REFRESH_BATCH]
            found = {r.name: r for r in await self.db.run(stmt, [batch])}
            for name in batch:
                self._seen(name, found.get(name), use=False)
        return len(names)

    def _seen(self, name: str, row: Any | None, use: bool = True) -> None:
        """A row just read (None: there was none) fills the settings' cache, and the attributes' (``row_seen``);
        ``use``: it was read for a use of the queue; else by ``refresh``, which leaves a row forgotten meanwhile to the
        next use (what it read may be older than the change that was announced)."""
        if not use and name not in self._cache:
            return
        if row is None or row.shards is None or copy_layout(row):  # a copy-layout queue: refused at every get
            self._cache.pop(name)
        elif use:
            self._cache.put(name, (time.monotonic(), _from_row(row)))
        else:
            self._cache.replace(name, (time.monotonic(), _from_row(row)))
        if self.row_seen is not None:
            self.row_seen(name, row)

    def trusted(self, read_at: float) -> bool:
        """Whether a row read at ``read_at`` (monotonic s) still answers without a read (the class's docstring)."""
        age_ms = (time.monotonic() - read_at) * 1000
        if age_ms < CACHE_SECONDS * 1000:
            return True
        since = self.covered_since() if age_ms < COVERED_TRUST_MS else None
        return since is not None and age_ms <= self.clock.now_ms() - since

    async def changed(self, name: str) -> None:
        """A write to ``name``'s row was acknowledged: forget our copy and tell the other processes."""
        self.forget(name)
        if self.announce is not None:
            await self.announce(name)

    def forget(self, name: str) -> None:
        """Read the settings again at the next use."""
        self._cache.pop(name)

    def cached(self, name: str) -> QueueSettings | None:
        """The last settings read for ``name``, however old, without a read (None if never read)."""
        hit = self._cache.get(name)
        return hit[1] if hit else None

    async def pages(self, size: int = 1000) -> AsyncIterator[list[QueueSettings]]:
        """Every queue, one bounded page (``size`` rows, one read) at a time, in token order: for
        the few callers that must visit all queues (stats of every queue), holding one page."""
        after: int | None = None
        while True:
            found, after = await self.page(after, size)
            if found:
                yield found
            if after is None:
                return

    async def page(
        self, after: int | None = None, limit: int = 25, contains: str = "", scan: int = 2000
    ) -> tuple[list[QueueSettings], int | None]:
        """One page of queues in token order, starting after token ``after``: never the whole table,
        so listing costs the same with a million queues. ``contains`` filters names while scanning at
        most ``scan`` rows; returns the page and the token to continue from (None at the end)."""
        stmt = self.db.prepare(
            f"SELECT {_COLUMNS}, token(name) AS t FROM {self.ks}.queues WHERE token(name) > ? LIMIT ?"
        )
        found: list[QueueSettings] = []
        cursor, scanned, needle = MIN_TOKEN if after is None else after, 0, contains.lower()
        if contains and after is None:  # a whole name is found by one point read, however many queues there are
            try:
                found.append(await self.get(contains, fresh=True))
            except (QueueNotFound, UsageError):
                pass
        while len(found) < limit and scanned < scan:
            chunk = min(max(limit * 4, 100) if needle else limit - len(found), scan - scanned)
            rows = await self.db.run(stmt, [cursor, chunk])
            for r in rows:
                cursor, scanned = r.t, scanned + 1
                if (
                    r.shards is not None and needle in r.name.lower() and r.name != contains
                ):  # no shards: cells written after a delete
                    found.append(_from_row(r))
                    if len(found) == limit:
                        break
            if len(rows) < chunk and len(found) < limit:
                return found, None
        return found, cursor

    async def update(self, name: str, **changes: Any) -> QueueSettings:
        """Change settings that are safe to change on a live queue (not shards/buckets: they move rows)."""
        moving = {"shards", "buckets", "bucket_seconds"} & {k for k, v in changes.items() if v is not None}
        if changes.get("fifo") is not None:
            raise UsageError(
                f"queue {name}: a queue is FIFO or not from its creation: create another queue to change it"
            )
        if moving:
            raise UsageError(
                f"queue {name}: {', '.join(sorted(moving))} change the queue's layout: use 'casque "
                f"queue reshard {name}' "
                "(new sends use the new layout while the old rows drain)"
            )
        current = await self.get(name, fresh=True)
        fifo_opts = {
            "fifo": current.fifo,
            "content_dedup": current.content_dedup,
            "dedup_scope": current.dedup_scope,
            "dedup_by": current.dedup_by,  # fixed at creation, whatever dedup_scope becomes
            "fifo_throughput": current.fifo_throughput,
        }
        merged = settings_from_defaults(
            name,
            defaults_of(current),
            **{
                **fifo_opts,
                "shards": current.shards,
                "consumers": current.consumers,
                **{k: v for k, v in changes.items() if v is not None and k != "history"},
            },
        )
        history = changes.get("history")
        now = self.clock.now_ms()
        merged = replace(
            merged,
            priorities=current.priorities,
            shards=current.shards,
            buckets=current.buckets,
            bucket_seconds=current.bucket_seconds,
            history=current.history if history is None else bool(history),
        )
        before_ms, changed_ms = _lock_ttl_change(current, merged.lock_ttl_ms, now)
        merged = replace(merged, lock_ttl_before_ms=before_ms, lock_ttl_changed_ms=changed_ms)
        await self.db.run(
            self.db.prepare(
                f"UPDATE {self.ks}.queues SET lock_ttl_ms=?, lock_ttl_before_ms=?, lock_ttl_changed_at=?, "
                "timeout_ms=?, max_attempts=?, retention_s=?, max_payload_bytes=?, history=?, "
                "fifo=?, consumers=?, updated_at=? WHERE name=? IF EXISTS"
            ),
            [
                merged.lock_ttl_ms,
                merged.lock_ttl_before_ms,
                merged.lock_ttl_changed_ms,
                merged.timeout_ms,
                merged.max_attempts,
                merged.retention_s,
                merged.max_payload_bytes,
                merged.history,
                _fifo_json(merged),
                merged.consumers,
                now,
                name,
            ],
        )
        await self.changed(name)
        return merged

    async def mark_pulled(self, qs: QueueSettings) -> QueueSettings:
        """A pull client uses ``qs`` (a receive, or a send over SQS): a queue never said to be push-only becomes
        "both" for good, so that a daemon serving it leaves the tasks it has no handler for to the pull clients
        instead of poisoning them. One write in the queue's life; an operator's choice is never overwritten."""
        if qs.consumers is not None:
            return qs
        try:
            rows = await self.db.run(
                self.db.prepare(f"UPDATE {self.ks}.queues SET consumers = ? WHERE name = ? IF consumers = null"),
                ["both", qs.name],
            )
        except CasqueError as exc:  # the receive or send goes on; the next one tries again
            log.warning("queue_not_marked_pulled", queue=qs.name, error=str(exc))
            return qs
        # Not applied: the answer carries what the row says (an operator's choice, or another mark).
        marked = replace(qs, consumers="both" if rows[0].applied else rows[0].consumers)
        if rows[0].applied:
            await self.changed(qs.name)
        self._cache.put(qs.name, (time.monotonic(), marked))
        return marked

    async def add_priority(self, qs: QueueSettings, priority: int) -> QueueSettings:
        """Record that a priority is in use, before the first message of that priority is written:
        consumers read only the priority lanes listed here."""
        check_priority(priority)
        if priority in qs.priorities:
            return qs
        await self.db.run(
            self.db.prepare(f"UPDATE {self.ks}.queues SET priorities = priorities + ? WHERE name = ?"),
            [{priority}, qs.name],
        )
        await self.changed(qs.name)
        updated = replace(qs, priorities=qs.priorities | {priority})
        self._cache.put(qs.name, (time.monotonic(), updated))
        return updated

    async def delete(self, name: str) -> None:
        await self.db.run(self.db.prepare(f"DELETE FROM {self.ks}.queues WHERE name = ?"), [name])
        await self.db.run(self.db.prepare(f"DELETE FROM {self.ks}.queue_expiry WHERE name = ?"), [name])
        await self.names.remove(name)
        await self.changed(name)

    def cache_size(self) -> int:
        return len(self._cache)


def _values(qs: QueueSettings) -> list[Any]:
    return [
        qs.name,
        qs.shards,
        qs.buckets,
        qs.bucket_seconds,
        qs.lock_ttl_ms,
        qs.timeout_ms,
        qs.max_attempts,
        qs.retention_s,
        qs.max_payload_bytes,
        set(qs.priorities),
        qs.history,
        qs.expire_after_s,
        _fifo_json(qs),
        IN_PLACE,
        qs.consumers,
    ]


def _lock_ttl_change(current: QueueSettings, ttl_ms: int, now_ms: int) -> tuple[int, int]:
    """What an update records of a lock TTL change: the TTL before it (the longest still in force, if an earlier
    change is still settling) and when. Unchanged: what the row said."""
    if ttl_ms == current.lock_ttl_ms:
        return current.lock_ttl_before_ms, current.lock_ttl_changed_ms
    settling = current.lock_ttl_before_ms if now_ms < lock_change_settled_ms(current) else 0
    return max(current.lock_ttl_ms, settling), now_ms


def lock_change_settled_ms(qs: QueueSettings) -> int:
    """When no holder can still keep a lock column written under the TTL before the last change: every process has
    re-read the settings (``COVERED_TRUST_MS`` at most), and a column written just before that has lived out the old
    TTL."""
    return qs.lock_ttl_changed_ms + COVERED_TRUST_MS + qs.lock_ttl_before_ms


def _fifo_json(qs: QueueSettings) -> str | None:
    if not qs.fifo:
        return None
    opts = {"content_dedup": qs.content_dedup, "dedup_scope": qs.dedup_scope, "fifo_throughput": qs.fifo_throughput}
    if qs.dedup_by != qs.dedup_scope:  # only then: a server older than dedup_by reads every other row as before
        opts["dedup_by"] = qs.dedup_by
    return json.dumps(opts)


def _fifo_of(r: Any) -> dict[str, Any]:
    raw = getattr(r, "fifo", None)
    if not raw:
        return {}
    opts = json.loads(raw)
    opts.setdefault("dedup_by", opts.get("dedup_scope", "queue"))  # written only where the scope changed since
    return {"fifo": True, **opts}


def _from_row(r: Any) -> QueueSettings:
    return QueueSettings(
        name=r.name,
        shards=r.shards,
        buckets=r.buckets,
        bucket_seconds=r.bucket_seconds,
        lock_ttl_ms=r.lock_ttl_ms,
        timeout_ms=r.timeout_ms,
        max_attempts=r.max_attempts,
        retention_s=r.retention_s,
        max_payload_bytes=r.max_payload_bytes,
        priorities=frozenset(r.priorities or {0}),
        history=bool(r.history),
        expire_after_s=int(getattr(r, "expire_after_s", None) or 0),
        draining=tuple(tuple(layout[:3]) for layout in json.loads(r.draining)) if getattr(r, "draining", None) else (),
        **_fifo_of(r),
        lock_ttl_before_ms=int(getattr(r, "lock_ttl_before_ms", None) or 0),
        lock_ttl_changed_ms=int(getattr(r, "lock_ttl_changed_at", None) or 0),
        consumers=getattr(r, "consumers", None),
    )
