"""Inside the load job's Spark tasks: send input rows with the producer's own code, and say what
became of each one.

Parity with the Python producer is by construction: every row becomes a ``Job`` (``pipeline.mapping``),
is validated and placed by ``daemon.producer.build_message``, and is written by ``Producer.send_many``
(rows without a key: one batch per shard row, TTL by ``ttl_for``, no nulls, ``queues.priorities``
updated by ``QueueStore.add_priority`` before the first message of a new priority) or
``Producer.send`` (keyed rows: the LWT claim on ``keys`` and the row's conflict policy).

"Now" is read per chunk, just before the chunk is written, as ``send_many`` does: a due time is
never behind the writer's clock when it reaches Cassandra, whatever the size of the job (the
consumers' cursors rely on it, docs/design.md).

Every row gets one result: ``loaded``, ``replaced`` (its key named another message, which it
replaced), ``kept`` (its key named another message, kept under ``keep``: nothing written),
``rejected`` (invalid, or a key conflict under ``error``: nothing written) or ``failed`` (Cassandra
did not accept the write). An unkeyed chunk that Cassandra fails is sent once more with fresh ids;
as with a Python producer that retries, rows of its batches that did land before the failure are
then there twice (at-least-once: handlers are idempotent anyway). A ``seed`` column makes ids
deterministic, so re-loading a row with a fixed ``at`` overwrites instead.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import astuple, dataclass
from typing import Any

from daemon.base.config import Settings
from daemon.base.errors import CasqueError, KeyConflict, StorageUnavailable
from daemon.base.logs import get_logger
from daemon.engine.client import Casque
from daemon.engine.send.producer import Job, OnConflict, build_message
from daemon.engine.storage.placement import key_shard

from . import workers
from .mapping import to_job

log = get_logger("casque.pipeline.load")

#: An input row that raises one of these is rejected with the message; anything else is a bug.
BAD_ROW = (CasqueError, ValueError, TypeError, OverflowError)
RETRY_PAUSE_S = 1.0

RESULT_COLUMNS = (
    ("row", "long"),
    ("status", "string"),
    ("id", "string"),
    ("key", "string"),
    ("conflict", "boolean"),
    ("error", "string"),
    ("reason", "string"),
    ("input", "string"),
)


@dataclass
class Result:
    row: int
    status: str
    id: str | None = None
    key: str | None = None
    conflict: bool = False
    error: str | None = None
    reason: str | None = None
    input: str | None = None


Pending = tuple[dict[str, Any], Job]


def load_partition(
    settings: Settings, queue: str, policy: OnConflict, chunk_rows: int, done: Any = None
) -> Callable[[Iterable[Any]], Iterator[tuple[Any, ...]]]:
    """The function Spark runs on each partition: rows in, one result tuple per row out; ``done``
    (a Spark accumulator) counts rows finished, for the driver's progress lines."""

    def run(rows: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
        cq = workers.client(settings)
        counts: Counter[str] = Counter()
        for chunk in _chunks(rows, chunk_rows):
            for result in workers.run(load_chunk(cq, queue, [r.asDict() for r in chunk], policy)):
                counts[result.status] += 1
                yield astuple(result)
            if done is not None:
                done.add(len(chunk))
        log.info("load_partition_done", queue=queue, **counts)

    return run


async def load_chunk(cq: Casque, queue: str, rows: list[dict[str, Any]], policy: OnConflict) -> list[Result]:
    """Validate every row with ``build_message`` at this moment, then send the valid ones."""
    qs = await cq.queue_settings(queue)
    now = cq.clock.now_ms()
    plain: list[Pending] = []
    keyed: dict[str, list[Pending]] = defaultdict(list)
    out: list[Result] = []
    for r in rows:
        try:
            job = to_job(_fields(r), policy)
            build_message(qs, job, now)
        except BAD_ROW as exc:
            out.append(_problem(r, "rejected", exc))
            continue
        if job.key is None:
            plain.append((r, job))
        else:
            keyed[job.key].append((r, job))
    out += await _send_plain(cq, queue, plain)
    out += await _send_keyed(cq, queue, keyed)
    return out


async def _send_plain(cq: Casque, queue: str, plain: list[Pending], tries: int = 2) -> list[Result]:
    """One ``send_many`` for the chunk; retried once if Cassandra failed it."""
    if not plain:
        return []
    for attempt in range(tries):
        try:
            ids = await cq.stores.producer.send_many(queue, [job for _, job in plain])
            return [Result(r["_row"], "loaded", str(mid)) for (r, _), mid in zip(plain, ids)]
        except StorageUnavailable as exc:
            if attempt + 1 == tries:
                return [_problem(r, "failed", exc) for r, _ in plain]
            log.warning("load_chunk_retry", queue=queue, rows=len(plain), error=str(exc))
            await asyncio.sleep(RETRY_PAUSE_S)
        except BAD_ROW:  # a row turned invalid since it was checked (a schedule's end passed): one by one
            return [await _send_one(cq, queue, r, job) for r, job in plain]
    raise AssertionError("unreachable")


async def _send_one(cq: Casque, queue: str, r: dict[str, Any], job: Job) -> Result:
    try:
        return Result(r["_row"], "loaded", str(await cq.stores.producer.send(queue, job)))
    except StorageUnavailable as exc:
        return _problem(r, "failed", exc)
    except BAD_ROW as exc:
        return _problem(r, "rejected", exc)


async def _send_keyed(cq: Casque, queue: str, keyed: dict[str, list[Pending]]) -> list[Result]:
    """Rows of one key in input order (as one Python sender would). Keys that share a partition of
    ``keys`` (a key shard) go one after another too, so the job's LWTs never contend with each
    other for a Paxos round; key shards run concurrently."""
    shards: dict[int, list[Pending]] = defaultdict(list)
    for key, items in keyed.items():
        shards[key_shard(key)].extend(items)

    async def one_shard(items: list[Pending]) -> list[Result]:
        items.sort(key=lambda item: item[0]["_row"])
        return [await _send_keyed_row(cq, queue, r, job) for r, job in items]

    groups = await asyncio.gather(*(one_shard(items) for items in shards.values()))
    return [result for group in groups for result in group]


async def _send_keyed_row(cq: Casque, queue: str, r: dict[str, Any], job: Job) -> Result:
    """``Producer.send`` (the LWT claim and the conflict policy); the key is read first only to
    report whether it was taken, and what the policy did about it."""
    assert job.key is not None
    try:
        holder = await cq.get_key(queue, job.key)
        mid = str(await cq.stores.producer.send(queue, job))  # a plain str: Spark pickles rows, not str subclasses
    except KeyConflict as exc:
        return _problem(r, "rejected", exc, conflict=True)
    except StorageUnavailable as exc:
        return _problem(r, "failed", exc)
    except BAD_ROW as exc:
        return _problem(r, "rejected", exc)
    if holder is None:
        return Result(r["_row"], "loaded", mid, job.key)
    status = "kept" if mid == str(holder.id) else "replaced"
    return Result(r["_row"], status, mid, job.key, conflict=True)


def _problem(r: dict[str, Any], status: str, exc: BaseException, conflict: bool = False) -> Result:
    reason = " ".join(str(exc).split()) or type(exc).__name__
    return Result(r["_row"], status, None, r.get("f_key"), conflict, type(exc).__name__, reason[:1000], r.get("_input"))


def _fields(r: dict[str, Any]) -> dict[str, Any]:
    return {name[2:]: value for name, value in r.items() if name.startswith("f_")}


def _chunks(rows: Iterable[Any], size: int) -> Iterator[list[Any]]:
    it = iter(rows)
    while chunk := list(itertools.islice(it, size)):
        yield chunk
