"""Phases 1 and 2 of the many-queues scenario (bench/many_queues.py): create the tiny queues, then fill
them Zipf-like, each timed per queue so that the p99 is one queue's write.
"""

from __future__ import annotations

import itertools
import random
import time
from collections import Counter
from typing import Any

from .env import progress
from .mq_host import bounded, pct
from .mq_ledger import Ledger
from .mq_sizes import TINY, Size

# --------------------------------------------------------------------------- 1. create


async def create(cq: Any, names: list[str], size: Size) -> dict[str, Any]:
    """Create the queues: one streaming ``create_queues`` call if the engine has it, else
    ``create_queue`` ``create_concurrency`` at a time. What is timed is the engine's unit of work,
    wrapped on this client: a chunk of names (``BulkCreate.chunk``, the claim protocol) where the engine
    has one, else one queue's write (``QueueStore.create``, an LWT)."""
    took: list[float] = []
    store = cq.stores.queues
    bulk_store = getattr(store, "bulk", None)
    owner, attr = (bulk_store, "chunk") if bulk_store is not None else (store, "create")
    write = getattr(owner, attr)

    async def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return await write(*args, **kwargs)
        finally:
            took.append((time.perf_counter() - t) * 1000)

    setattr(owner, attr, timed)
    bulk = getattr(cq, "create_queues", None)
    t0 = time.perf_counter()
    try:
        if bulk is not None:
            step = max(1, len(names) // 10)
            chunked = {} if bulk_store is not None else {"concurrency": size.create_concurrency}
            await bulk(
                iter(names),
                if_missing=True,
                **chunked,  # the claim protocol's own chunk size and chunks in flight, measured on this box
                **TINY,
                progress=lambda done, _: progress(f"  {done:,} queues created") if done % step == 0 else None,
            )
        else:
            await bounded(names, size.create_concurrency, lambda n: cq.create_queue(n, if_missing=True, **TINY))
    finally:
        delattr(owner, attr)  # back to the class's method
    seconds = time.perf_counter() - t0
    return {
        "queues": len(names),
        "seconds": seconds,
        "rate": len(names) / seconds,
        "api": "create_queues" if bulk else "create_queue",
        "per": "chunk of names (claim, read, write)" if bulk_store is not None else "queue (its LWT)",
        "p50_ms": pct(took, 50),
        "p99_ms": pct(took, 99),
        "max_ms": max(took) if took else None,
        "concurrency": "the engine's chunks" if bulk_store is not None else size.create_concurrency,
        "settings": TINY,
    }


# --------------------------------------------------------------------------- 2. fill


async def fill(cq: Any, names: list[str], cum: list[float], size: Size, ledger: Ledger) -> dict[str, Any]:
    from daemon.engine.send.producer import Job

    rng = random.Random(17)
    counts = Counter(rng.choices(range(len(names)), cum_weights=cum, k=size.messages))
    ids = itertools.count()
    t0 = time.perf_counter()

    async def one(item: tuple[int, int]) -> None:
        q, n = names[item[0]], item[1]
        for start in range(0, n, 500):
            now = time.time()
            mids = [f"f{next(ids)}" for _ in range(min(500, n - start))]
            eids = await cq.send_many(q, [Job("sqs", f"{m} {now:.6f}") for m in mids])
            for m, eid in zip(mids, eids):
                ledger.send(m, q, now, False, eid)

    await bounded(sorted(counts.items()), 64, one)
    seconds = time.perf_counter() - t0
    top = counts.most_common(1)[0][1] if counts else 0
    return {
        "messages": size.messages,
        "queues_with_messages": len(counts),
        "largest_queue": top,
        "seconds": seconds,
        "rate": size.messages / seconds,
        "zipf_s": size.zipf_s,
    }
