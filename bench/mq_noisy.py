"""The noisy-neighbour phase of the many-queues scenario (bench/many_queues.py): one user's backlog must
not delay another user's single message ("as SQS fair queues promise for noisy tenants").

Two tiny queues of their own, served by the same ``casque serve`` as everything else: user A's queue
gets a backlog of ``noisy_backlog`` messages, which A drains over SQS (``noisy_consumers`` receivers,
each a ReceiveMessage of 10 and its DeleteMessageBatch); user B keeps one long poll parked on B's own
queue. B's send→receive is measured on single messages ("probes", one in flight at a time), first with
A's queue empty (the quiet figure), then spread over A's drain (the noisy figure), in the same run on
the same server. A probe counts as noisy only if A still had a backlog when it was sent.

Why per-user queues make this hold by construction, and what the figure checks: A's backlog lives in
A's queue's partition, B's receive reads B's queue only, and a send to B wakes B's parked poll directly;
what A can still take from B is shared capacity (the server's CPU, the driver's connections, the node).
If B's message waited behind A's backlog, its latency would be of the order of the time left in A's drain
(seconds), not of a send→receive (tens of ms): tests/test_bench_many_queues.py bounds the ratio.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import TYPE_CHECKING, Any

from .env import progress
from .mq_host import bounded, pct
from .mq_sizes import TINY

if TYPE_CHECKING:
    from .mq_serve import Run


def _figures(samples: list[float]) -> dict[str, Any]:
    return {
        "count": len(samples),
        "p50_ms": pct(samples, 50),
        "p99_ms": pct(samples, 99),
        "max_ms": max(samples) if samples else None,
    }


def _tally(run: Run) -> dict[str, list[int]]:
    """The server's requests and CQL by kind of SQS request so far (bench/many_queues_serve.py)."""
    return {k: list(v) for k, v in (run.server.stats().get("tally") or {}).items()}


def _served(before: dict[str, list[int]], after: dict[str, list[int]]) -> dict[str, dict[str, float | None]]:
    """Requests served between two tallies, with their CQL reads per request: who the server worked for."""
    out: dict[str, dict[str, float | None]] = {}
    for kind, v in after.items():
        d = [a - b for a, b in zip(v, before.get(kind, [0, 0, 0]))]
        out[kind] = {"requests": d[0], "reads_per_request": d[2] / d[0] if d[0] else None}
    return out


class Noisy:
    """A's backlog and drain, B's parked owner and probes (the ledger counts both queues' messages)."""

    def __init__(self, run: Run, cq: Any, prefix: str) -> None:
        self.run, self.cq, self.size = run, cq, run.size
        self.a, self.b = f"{prefix}_noisyA", f"{prefix}_quietB"
        self.ids = itertools.count()
        self.stop_b = asyncio.Event()
        self.node_ms: list[float] = []  # the node's read round trips, one before each probe

    async def probe(self, timeout_s: float) -> float | None:
        """One message to B, waited for: its send→receive in ms (send time taken before the SendMessage,
        as for the live figures), or None if B's owner did not get it within ``timeout_s``."""
        await self.node_read()
        mid = f"nB{next(self.ids)}"
        at = time.time()
        r = await self.run.retrying("SendMessage", self.b, MessageBody=f"{mid} {at:.6f}")
        self.run.ledger.send(mid, self.b, at, False, r["MessageId"])
        deadline = time.monotonic() + timeout_s
        while mid not in self.run.ledger.first_seen and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
        seen = self.run.ledger.first_seen.get(mid)
        return None if seen is None else (seen - at) * 1000

    async def node_read(self) -> None:
        """One read of B's settings row from this process, timed: the node's round trip beside each probe,
        so that B's slowdown over A's drain can be set against the node's (the shared part)."""
        db, ks = self.cq.db, self.cq.stores.queues.ks
        t = time.perf_counter()
        await db.run(db.prepare(f"SELECT name FROM {ks}.queues WHERE name = ?"), [self.b])
        self.node_ms.append((time.perf_counter() - t) * 1000)

    async def owner_b(self) -> None:
        while not self.stop_b.is_set():
            await self.run.take(self.b, self.size.wait_s)

    async def fill_a(self) -> float:
        """A's backlog, written straight through the engine (``send_many``, as the fill phase): msg/s."""
        from daemon.engine.send.producer import Job

        n, t0 = self.size.noisy_backlog, time.perf_counter()

        async def chunk(start: int) -> None:
            now = time.time()
            mids = [f"nA{i}" for i in range(start, min(n, start + 500))]
            eids = await self.cq.send_many(self.a, [Job("sqs", f"{m} {now:.6f}") for m in mids])
            for m, eid in zip(mids, eids):
                self.run.ledger.send(m, self.a, now, False, eid)

        await bounded(range(0, n, 500), 8, chunk)
        return n / (time.perf_counter() - t0)

    async def drain_a(self, deadline_s: float) -> None:
        """A's consumers, until the ledger has A's queue empty (or the deadline: the final drain finishes it)."""
        end = time.monotonic() + deadline_s

        async def consumer() -> None:
            while self.run.ledger.outstanding[self.a] > 0 and time.monotonic() < end:
                await self.run.take(self.a, 1)

        await asyncio.gather(*(consumer() for _ in range(self.size.noisy_consumers)))

    async def quiet(self, gap_s: float) -> list[float | None]:
        out = []
        for _ in range(self.size.noisy_probes):
            out.append(await self.probe(timeout_s=30))
            await asyncio.sleep(gap_s)
        return out

    async def noisy(self, drain: asyncio.Task[None]) -> tuple[list[float | None], list[int]]:
        """Probes spread over A's drain: the gap is re-estimated from A's drain rate so far, so that
        ``noisy_probes`` fit in about 80 % of what is left of it."""
        out: list[float | None] = []
        left: list[int] = []
        ledger, t0 = self.run.ledger, time.monotonic()
        start = ledger.outstanding[self.a]
        await asyncio.sleep(1.0)  # a first measure of A's rate
        while len(out) < self.size.noisy_probes and not drain.done():
            backlog = ledger.outstanding[self.a]
            if backlog <= 0:
                break
            left.append(backlog)
            out.append(await self.probe(timeout_s=60))
            done = start - ledger.outstanding[self.a]
            rate = done / (time.monotonic() - t0) if done > 0 else 1.0
            eta = ledger.outstanding[self.a] / rate
            await asyncio.sleep(max(0.02, 0.8 * eta / max(1, self.size.noisy_probes - len(out))))
        return out, left

    async def measure(self) -> dict[str, Any]:
        run = self.run
        for q in (self.a, self.b):
            await self.cq.create_queue(q, if_missing=True, **TINY)
        owner = asyncio.create_task(self.owner_b())
        try:
            await asyncio.sleep(0.5)  # B's first long poll parked
            progress(f"  noisy neighbour: {self.size.noisy_probes} single messages to B, A's queue empty")
            t_q = _tally(run)
            quiet = await self.quiet(gap_s=0.05)
            node_quiet, self.node_ms = self.node_ms, []
            t_fill = _tally(run)
            fill_rate = await self.fill_a()
            progress(f"  A's backlog: {self.size.noisy_backlog:,} messages ({fill_rate:,.0f} msg/s); A drains it")
            t_n, t0 = _tally(run), time.time()
            drain = asyncio.create_task(self.drain_a(deadline_s=max(120.0, self.size.noisy_backlog / 20)))
            noisy, left = await self.noisy(drain)
            await drain
            drain_s = time.time() - t0
            t_end = _tally(run)
        finally:
            self.stop_b.set()
            await owner
        got_q = [x for x in quiet if x is not None]
        got_n = [x for x in noisy if x is not None]
        drain_rate = (self.size.noisy_backlog - run.ledger.outstanding[self.a]) / drain_s
        R: dict[str, Any] = {
            "queues": [self.a, self.b],
            "backlog": self.size.noisy_backlog,
            "consumers": self.size.noisy_consumers,
            "fill_rate": fill_rate,
            "drain_s": drain_s,
            "drain_rate": drain_rate,
            "a_left_after_drain": run.ledger.outstanding[self.a],
            "quiet": _figures(got_q) | {"missed": len(quiet) - len(got_q)},
            "noisy": _figures(got_n)
            | {
                "missed": len(noisy) - len(got_n),
                "backlog_at_first": max(left, default=0),
                "at_last": min(left, default=0),
            },
            # what B would have waited had its message queued behind A's backlog: the backlog when each was
            # sent, at A's drain rate (the figure the test holds the measured one against)
            "behind": _figures([b / drain_rate * 1000 for b in left]),
            "node_read_quiet": _figures(node_quiet),
            "node_read_noisy": _figures(self.node_ms),
            "served_quiet": _served(t_q, t_fill),
            "served_noisy": _served(t_n, t_end),
        }
        q50, n50, q99, n99 = (R["quiet"]["p50_ms"], R["noisy"]["p50_ms"], R["quiet"]["p99_ms"], R["noisy"]["p99_ms"])
        R["ratio_p50"] = n50 / q50 if q50 and n50 is not None else None
        R["ratio_p99"] = n99 / q99 if q99 and n99 is not None else None
        return R
