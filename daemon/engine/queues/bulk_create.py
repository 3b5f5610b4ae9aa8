"""Creating queues without an LWT: claim, read, write, a chunk of names at a time.

One LWT per queue (``INSERT ... IF NOT EXISTS``) is four Paxos round trips and a serialised
commit, a rate that no concurrency raises. Here every creation, one queue or a
million, follows the lock protocol's shape instead (docs/design.md, "Many queues", "Bulk create"):

1. **Claim**: add a fresh claimant id to the ``claims`` set of every name of the chunk, with a TTL
   (``UPDATE queues USING TTL ... SET claims = claims + {id} WHERE name IN ?``: one request).
2. **Read** the chunk's rows, settings and claims together (``WHERE name IN ?``: one request; one
   partition's answer is one atomic view of it).
3. **Decide** per name: a row with settings exists (never written over); a row whose only claim
   is ours is **free**; any other claim means a racer: **contended**.
4. **Write** the free names' settings *and remove our claim in the same mutation* (one
   ``UPDATE ... WHERE name IN ?``) and their ``queue_expiry`` rows, then their ``queue_names``
   entries; remove our claim from the other names. Contended names are tried again with a new id after a random
   back-off, until the racer's row appears (exists) or its claim is gone (a crashed racer's expires).

Why two racers for one new name are never both told "created": each writes its claim (QUORUM)
before it reads (QUORUM). If A's read does not show B's claim, B's claim write completed after A's
read began, so B's read (after its write) began after A's claim write completed and shows A's
claim, or, if A removed it, A's settings (the removal is in the settings' own mutation) or A's
having backed off. So at most one of them sees only its own claim. A claim is trusted only while
young (step 4 is skipped if more than ``YOUNG_S`` passed since step 1 began, on a monotonic clock):
a claim that outlives its TTL can't be relied on by its writer. Clocks do not enter the argument
(each claimant's ids are its own cells); node clocks only set when a crashed claim expires.

Every write is a plain one, so nothing here may race an LWT on the same row: no creator uses one
any more (``QueueStore.create`` is a chunk of one).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from cassandra import InvalidRequest

from daemon.base.errors import UsageError
from daemon.base.logs import get_logger
from daemon.base.model import QueueSettings
from daemon.engine.queues.expiry_index import ExpiryIndex
from daemon.engine.queues.names import partition_of
from daemon.engine.queues.settings import check_settings
from daemon.engine.storage.db import Database

log = get_logger("casque.expiry")
#: A claim's TTL (s). Cassandra counts it from the coordinator's whole second, so a claim lives
#: at least CLAIM_TTL_S - 1 s; a crashed creator's claim delays others for at most that long.
CLAIM_TTL_S = 30
#: A claim is trusted for its own writes only this long after its write began (a third of its TTL).
YOUNG_S = 10.0
#: How long contended names are retried before the creator gives up and says which name.
GIVE_UP_S = 3 * CLAIM_TTL_S
#: Names per chunk, and chunks in flight: the rate rises with the chunks in flight up to about these, where the
#: node, not the client, is what limits it (the sweep of sizes: docs/design.md, "Bulk create").
CHUNK = 200
CONCURRENCY = 16
#: ``queue_names`` rows per batch: 100 names of at most 80 characters stay far below Cassandra's
#: batch_size_fail_threshold (50 KiB), whatever the chunk.
INDEX_BATCH = 100
SETTING_COLUMNS = (
    "shards",
    "buckets",
    "bucket_seconds",
    "lock_ttl_ms",
    "timeout_ms",
    "max_attempts",
    "retention_s",
    "max_payload_bytes",
    "priorities",
    "history",
    "expire_after_s",
    "fifo",
    "in_flight",
    "consumers",
)
CREATED, EXISTS, DIFFERS = "created", "exists", "differs"


@dataclass
class CreateCounts:
    """What a bulk create did: ``existing`` had the same settings, ``differing`` other ones."""

    done: int = 0
    created: int = 0
    existing: int = 0
    differing: int = 0
    #: Seconds each chunk took, claim to last write, retries included (the bench's p99 of a chunk).
    chunk_s: list[float] = field(default_factory=list)


#: Called for every name that already existed: (name, whether its settings are the ones asked for).
OnExisting = Callable[[str, bool], None]


class BulkCreate:
    """The claim protocol over chunks of names; statements are prepared on first use."""

    def __init__(
        self,
        db: Database,
        keyspace: str,
        values: Callable[[QueueSettings], list[Any]],
        settings_of: Callable[[Any], QueueSettings],
        forget: Callable[[str], object],
    ) -> None:
        self.db = db
        self.ks = keyspace
        self._values = values  # the settings columns of a queue, in SETTING_COLUMNS order after its name
        self._settings_of = settings_of  # a read row -> QueueSettings
        self._forget = forget  # drop a name from the settings cache
        #: Names this process found claimed by a racer (each round counted): what the race tests read.
        self.contended = 0

    # ---- many chunks -------------------------------------------------------------------------
    async def create(
        self,
        queues: Iterable[QueueSettings],
        *,
        if_missing: bool = True,
        concurrency: int = CONCURRENCY,
        chunk: int = CHUNK,
        progress: Callable[[int, int], None] | None = None,
        on_existing: OnExisting | None = None,
    ) -> CreateCounts:
        """Create ``queues`` (read lazily) ``chunk`` names at a time, ``concurrency`` chunks in
        flight. Names whose settings differ only by name share a chunk. If reading ``queues``
        raises (a bad name), every name read before it is still created and none after it; with
        ``if_missing`` False the first existing name raises once the chunks in flight finished."""
        if concurrency < 1 or chunk < 1:
            raise UsageError(f"concurrency and chunk must be at least 1, got {concurrency} and {chunk}")
        counts = CreateCounts()
        failures: list[BaseException] = []
        running: set[asyncio.Task[None]] = set()
        slots = asyncio.Semaphore(concurrency)

        async def one(group: list[QueueSettings]) -> None:
            began = time.monotonic()
            try:
                outcomes = await self.chunk(group)
                counts.chunk_s.append(time.monotonic() - began)
            except BaseException as exc:  # a storage failure: stop pulling names
                failures.append(exc)
                return
            finally:
                slots.release()
            _count(counts, group, outcomes, on_existing)
            if not if_missing and counts.existing + counts.differing and not failures:
                first = next(qs.name for qs in group if outcomes[qs.name] != CREATED)
                failures.append(_exists_error(first))
            if progress is not None:
                progress(counts.done, counts.created)

        async def submit(group: list[QueueSettings]) -> None:
            await slots.acquire()
            task = asyncio.create_task(one(group))
            running.add(task)
            task.add_done_callback(running.discard)

        try:
            for group in _groups(queues, chunk):
                if failures:
                    break
                await submit(group)
        except Exception as exc:
            failures.append(exc)  # a bad name: the names read before it were submitted by _groups
        if running:
            await asyncio.gather(*running)
        if failures:
            raise failures[0]
        return counts

    # ---- one chunk -----------------------------------------------------------------------------
    async def chunk(self, group: list[QueueSettings]) -> dict[str, str]:
        """Each name's outcome (CREATED, EXISTS, DIFFERS); contended names are retried here."""
        outcomes: dict[str, str] = {}
        todo = group
        started = time.monotonic()
        attempt = 0
        while todo:
            contended = await self._round(todo, outcomes)
            if not contended:
                break
            self.contended += len(contended)
            if time.monotonic() - started > GIVE_UP_S:
                raise UsageError(
                    f"queue {contended[0].name}: not created: for {GIVE_UP_S}s another creator's claim on it stayed, "
                    "or our own claim was not seen (a delete of it timestamped ahead of this host's clock?)"
                )
            attempt += 1
            await asyncio.sleep(random.uniform(0.01, min(1.0, 0.05 * 2**attempt)))  # apart from the racer
            todo = contended
        return outcomes

    async def _round(self, todo: list[QueueSettings], outcomes: dict[str, str]) -> list[QueueSettings]:
        """Steps 1-4 once for ``todo`` (same settings but the name); returns the contended names."""
        me = uuid.uuid4()
        names = [qs.name for qs in todo]
        began = time.monotonic()
        await self.db.run(self._claim_stmt(), [CLAIM_TTL_S, {me}, names])
        rows = {r.name: r for r in await self.db.run(self._read_stmt(), [names])}
        free: list[QueueSettings] = []
        release: list[str] = []
        contended: list[QueueSettings] = []
        for qs in todo:
            row = rows.get(qs.name)
            if row is not None and row.shards is not None:
                outcomes[qs.name] = EXISTS if self._same(row, qs) else DIFFERS
                release.append(qs.name)
            elif row is not None and set(row.claims or ()) == {me}:
                free.append(qs)
            else:  # a racer's claim (or ours not seen: a claim that did not last)
                contended.append(qs)
                release.append(qs.name)
        if free and time.monotonic() - began > YOUNG_S:  # our claim is too old to trust: try again
            contended, release = contended + free, release + [qs.name for qs in free]
            free = []
        existing = [n for n in release if n in outcomes]  # not the contended ones: they may never exist
        await asyncio.gather(self._write(free, me), self._index(existing), self._release(release, me))
        await self._index([qs.name for qs in free])  # after their rows: no entry lists a queue never written
        for qs in free:
            outcomes[qs.name] = CREATED
            self._forget(qs.name)
        return contended

    def _same(self, row: Any, qs: QueueSettings) -> bool:
        return replace(self._settings_of(row), name=qs.name, draining=()) == qs

    async def _write(self, free: list[QueueSettings], me: uuid.UUID) -> None:
        """Step 4 for the free names: settings + claim removal in one mutation per name."""
        if not free:
            return
        now = self.db.clock.now_ms()
        names = [qs.name for qs in free]
        template = free[0]
        writes = [self.db.run(self._settings_stmt(), [*self._values(template)[1:], now, now, {me}, names])]
        if template.expire_after_s:
            writes.append(self.db.run(self._expiry_stmt(), [template.expire_after_s, now, names]))
            writes.append(self._schedule_expiry(names, now + template.expire_after_s * 1000))
        await asyncio.gather(*writes)

    async def _schedule_expiry(self, names: list[str], due_at: int) -> None:
        """Each created expiring queue's first candidate (engine/queues/expiry_index.py). On a keyspace not
        migrated yet: logged, and backfilled by the reaper."""
        try:
            await ExpiryIndex(self.db, self.ks).schedule_many(names, due_at)
        except InvalidRequest as exc:
            log.warning(
                "expiry_index_missing", queue=names[0], queues=len(names), error=str(exc), fix="casque schema apply"
            )

    async def _index(self, names: list[str]) -> None:
        """``queue_names`` entries for created and existing names (an existing one's entry may be
        missing if its creator died between its writes: indexing it again heals that)."""
        if not names:
            return
        stmt = self.db.prepare(f"INSERT INTO {self.ks}.queue_names (prefix, name) VALUES (?, ?)")
        await self._batched(stmt, [(partition_of(name), name) for name in names])

    async def _batched(self, stmt: Any, rows: list[tuple[Any, ...]]) -> None:
        """``stmt`` for every row, in unlogged batches of at most INDEX_BATCH sent at once."""
        batches = []
        for i in range(0, len(rows), INDEX_BATCH):
            batch = self.db.batch()
            for row in rows[i : i + INDEX_BATCH]:
                batch.add(stmt, row)
            batches.append(self.db.run(batch))
        await asyncio.gather(*batches)

    async def _release(self, names: list[str], me: uuid.UUID) -> None:
        if names:
            await self.db.run(
                self.db.prepare(f"UPDATE {self.ks}.queues SET claims = claims - ? WHERE name IN ?"), [{me}, names]
            )

    def _claim_stmt(self) -> Any:
        return self.db.prepare(f"UPDATE {self.ks}.queues USING TTL ? SET claims = claims + ? WHERE name IN ?")

    def _read_stmt(self) -> Any:
        return self.db.prepare(
            f"SELECT name, {', '.join(SETTING_COLUMNS)}, claims FROM {self.ks}.queues WHERE name IN ?"
        )

    def _settings_stmt(self) -> Any:
        sets = ", ".join(f"{c} = ?" for c in SETTING_COLUMNS)
        return self.db.prepare(
            f"UPDATE {self.ks}.queues SET {sets}, created_at = ?, updated_at = ?, claims = claims - ? WHERE name IN ?"
        )

    def _expiry_stmt(self) -> Any:
        return self.db.prepare(f"UPDATE {self.ks}.queue_expiry SET expire_after_s = ?, active_at = ? WHERE name IN ?")


def _groups(queues: Iterable[QueueSettings], size: int) -> Iterator[list[QueueSettings]]:
    """Chunks of up to ``size`` queues whose settings differ only by name, read lazily; a name
    repeated within a chunk is kept once. If reading raises (a bad name), the chunks holding the
    names read before it are yielded first, then the error is raised: nothing after it is read."""
    pending: dict[QueueSettings, dict[str, QueueSettings]] = {}
    source = iter(queues)
    error: Exception | None = None
    while True:
        try:
            qs = next(source)
            key = replace(check_settings(qs), name="")
        except StopIteration:
            break
        except Exception as exc:
            error = exc
            break
        bucket = pending.setdefault(key, {})
        bucket[qs.name] = qs
        if len(bucket) >= size:
            yield list(pending.pop(key).values())
    for bucket in pending.values():
        yield list(bucket.values())
    if error is not None:
        raise error


def _count(counts: CreateCounts, group: list[QueueSettings], outcomes: dict[str, str], on: OnExisting | None) -> None:
    for qs in group:
        outcome = outcomes[qs.name]
        counts.done += 1
        if outcome == CREATED:
            counts.created += 1
            continue
        if outcome == EXISTS:
            counts.existing += 1
        else:
            counts.differing += 1
        if on is not None:
            on(qs.name, outcome == EXISTS)


def _exists_error(name: str) -> UsageError:
    return UsageError(f"queue '{name}' already exists: use 'casque queue update {name} ...' to change it")
