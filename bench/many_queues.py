"""The many-queues scenario: per-user queues, most of them idle, each pulled by its owner.

    python -m bench many-queues [--quick] [--write-docs]

1. **create** N tiny queues (1 shard, 1 bucket) from Python: ``Casque.create_queues`` when the engine has
   it, else ``create_queue``, 64 at a time; the rate, the p99 of one queue's write,
   the ``queues`` table's size on disk (``nodetool flush`` + ``tablestats`` before and after), and bytes
   per queue over every table a creation writes.
2. **fill** M messages spread Zipf-like over the queues (weight 1/rank, ranks shuffled), with
   ``send_many`` per queue.
3. **serve**: one ``casque serve`` process (bench/many_queues_serve.py charges its CQL to each SQS
   request); U users, each an asyncio task of this process long-polling its own queue over HTTP and
   deleting what it got, while producers send to random queues (half to online owners, half Zipf
   over all). Halfway through, the server is killed with SIGKILL and started again on its port.
   Why this shape: SQS clients reach one serving process per host, and long polls park in that
   process (woken by the sends it serves); on 2 cores one server plus one client process is what
   fits, where a process per user would measure the machine's scheduler, not casque.
4. **noisy neighbour** (bench/mq_noisy.py): user A drains a backlog of ``noisy_backlog`` from A's queue
   while user B, long-polling B's own queue on the same server, gets single messages; B's send→receive
   then is set beside the same figure with A's queue empty, measured just before.
5. **drain**: every queue the ledger still has messages in is drained; a sample of ``idle_sample`` of
   the queues already drained is checked empty, and as many idle queues are looked at (the cost of an
   idle receive, and the server's memory as the queues it has seen grow); once the visibility timeout
   of anything taken before has passed, what the ledger still owes is drained and a fresh sample checked,
   until the ledger has every message deleted. Not every queue one by one: at a million that sweep
   alone took hours (bench/mq_estimate.py adds the phases up).
6. **idle** (bench/mq_idle.py): ``idle_s`` seconds with the server up and no client, the node's reads in
   the keyspace counted from its own virtual tables, and the server's CQL reads.

The ledger lives in this process: a message's body is its ledger id and send time; sent = a send
the server acknowledged; deleted = a DeleteMessageBatch entry reported successful; lost = sent and
never deleted; duplicates = deliveries beyond the first. Results: bench/out/many-queues-<mode>.json,
the plot bench/out/bench-many-queues-rss.png, the section between the many-queues markers of
docs/benchmarks.md (with --write-docs) or bench/out/report-many-queues-<mode>.md.

This module holds the whole scenario (``scenario``) and what the CLI prints of it; its parts live beside it:
bench/mq_sizes.py (the sizes), mq_ledger.py (the ledger), mq_host.py (machine helpers), mq_fill.py
(phases 1-2), mq_serve.py (phases 3 and 5: the server, users, producers, drain), mq_noisy.py (4),
mq_idle.py (6), mq_figures.py (the figures), mq_estimate.py (the full size's duration here). The parts
``parked`` (mq_parked.py: 20,000 long polls parked at once on one server, from one process) and ``settle``
(mq_settle.py: the idle server's reads settling) measure what the scenario's sizes assume.
Their names are re-exported here, so ``from bench import many_queues as mq`` reaches them as before.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import asdict
from typing import Any

from .env import KEYSPACE, out_dir, progress
from .mq_estimate import full_estimate_min
from .mq_figures import cpu_share, latency_figures, reads_figures, rss_figures
from .mq_fill import create, fill
from .mq_host import (
    bounded,
    create_tables_bytes,
    free_port,
    pct,
    raise_fd_limit,
    rss_kb,
    settings_for,
    table_stats,
    zipf_cum,
)
from .mq_idle import idle, node_reads
from .mq_ledger import Ledger
from .mq_noisy import Noisy
from .mq_serve import Run, Sample, Server
from .mq_sizes import FULL, LIGHT, MEDIUM, QUICK, SIZES, TEST, TINY, Size

__all__ = [  # what bench/__main__.py, bench/moto_sqs.py and the tests import from here, as before the split
    "FULL",
    "LIGHT",
    "MEDIUM",
    "Noisy",
    "QUICK",
    "SIZES",
    "TEST",
    "TINY",
    "Ledger",
    "Run",
    "Sample",
    "Server",
    "Size",
    "bounded",
    "cleanup",
    "cpu_share",
    "create",
    "fill",
    "free_port",
    "full_estimate_min",
    "noisy_line",
    "per_queue_bytes",
    "headline",
    "idle",
    "node_reads",
    "latency_figures",
    "look_up_lost",
    "pct",
    "raise_fd_limit",
    "reads_figures",
    "rss_figures",
    "rss_kb",
    "scenario",
    "table_stats",
    "zipf_cum",
]


# --------------------------------------------------------------------------- the whole scenario


async def scenario(size: Size, keyspace: str = KEYSPACE, measure_table: bool = True) -> dict[str, Any]:
    from daemon.engine.client import Casque

    raise_fd_limit(size.users + size.drain_concurrency + 512)  # this process's clients; the server inherits it
    settings = settings_for(keyspace)
    settings.log.level = "warning"
    stamp = f"mq{int(time.time()) % 10_000_000}_{random.randrange(1000):03d}"
    names = [f"{stamp}_{i:07d}" for i in range(size.queues)]
    cum = zipf_cum(size.queues, size.zipf_s)
    rng = random.Random(7)
    rng.shuffle(names)  # Zipf rank is not the name order
    R: dict[str, Any] = {
        "size": asdict(size),
        "keyspace": keyspace,
        "prefix": stamp,
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    ledger = Ledger()
    extra: list[str] = []  # the noisy-neighbour phase's two queues
    cq = await Casque.connect(settings)
    workdir = out_dir("many-queues", stamp)
    server = Server(keyspace, workdir)
    progress(f"many-queues {size.name}: the full size would take about {full_estimate_min():.0f} min here")
    try:
        before = await asyncio.to_thread(table_stats, keyspace) if measure_table else {}
        before_all = await asyncio.to_thread(create_tables_bytes, keyspace) if measure_table else {}
        progress(f"many-queues {size.name}: creating {size.queues:,} tiny queues")
        R["create"] = await create(cq, names, size)
        progress(
            f"  {R['create']['rate']:,.0f} queues/s ({R['create']['api']}), p99 {R['create']['p99_ms']:.1f} ms per "
            f"{R['create']['per']}"
        )
        if measure_table:
            after = await asyncio.to_thread(table_stats, keyspace)
            # bytes ÷ partitions at one moment: compaction between two measurements (the keyspace is
            # shared with earlier runs, whose deleted rows it purges) makes a before/after difference meaningless
            per = after["bytes"] / after["partitions"] if after.get("bytes") and after.get("partitions") else None
            R["table"] = {"before": before, "after": after, "bytes_per_partition": per}
            R["table"]["per_queue"] = await asyncio.to_thread(per_queue_bytes, keyspace, before_all, size.queues)
        progress(f"  filling {size.messages:,} messages, Zipf s={size.zipf_s}")
        R["fill"] = await fill(cq, names, cum, size, ledger)
        progress(
            f"  {R['fill']['rate']:,.0f} msg/s into {R['fill']['queues_with_messages']:,} queues (largest "
            f"{R['fill']['largest_queue']:,})"
        )
        await server.start()
        run = Run(server, names, cum, size, ledger)
        sampler = asyncio.create_task(run.sampler())
        try:
            progress(
                f"  serving: {size.users:,} users long-polling, producers at {size.send_rate:g} msg/s for "
                f"{size.live_s:g}s"
            )
            R["live"] = await run.live()
            run.phase = "noisy"
            noisy = Noisy(run, cq, stamp)
            extra = [noisy.a, noisy.b]
            R["noisy"] = await noisy.measure()
            progress(noisy_line(R["noisy"]))
            progress(
                f"  draining the queues the ledger has messages in; samples of {size.idle_sample:,} drained and "
                f"{size.idle_sample:,} idle ones checked (of {size.queues:,})"
            )
            R["drain"] = await run.drain(deadline_s=3 * size.visibility_s + 60)
            run.phase = "idle"
            R["idle"] = await idle(cq.db, keyspace, server, size.idle_s, size.settle_s)
            progress(
                f"  idle: {R['idle']['node_reads_per_s']:.2f} node reads/s in {keyspace}, the server's "
                f"{R['idle']['server_cql_reads_per_s']} CQL reads/s"
            )
        finally:
            sampler.cancel()
            server.stop()
            await run.client.close()
        R["kill"] = {
            "done": run.kill_at is not None,
            "down_s": (run.back_at - run.kill_at) if run.kill_at and run.back_at else None,
            "client_retries": run.retries,
        }
        R["ledger"] = ledger.summary()
        R["latency"] = latency_figures(ledger, run.kill_at, run.back_at, size.wait_s)
        R["reads"] = reads_figures(server)
        R["rss"] = rss_figures(run.samples)
        R["empty_receives_in_drain"] = run.empty_drain_receives
        R["server_log"] = server.errors()
        if ledger.summary()["lost"]:
            R["lost_lookup"] = await look_up_lost(cq, ledger)  # the queues stay, for a closer look
        else:
            await cleanup(cq, names + extra)
    finally:
        server.stop()
        await cq.close()
    R["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return R


async def look_up_lost(cq: Any, ledger: Ledger, at_most: int = 50) -> list[dict[str, Any]]:
    """Where the lost messages are: still stored (in which state, attempt, due) or gone."""
    out = []
    for mid in [m for m in ledger.sent if m not in ledger.deleted][:at_most]:
        queue = ledger.sent[mid][0]
        m = await cq.get(queue, ledger.engine_id[mid])
        out.append(
            {
                "id": mid,
                "queue": queue,
                "engine_id": ledger.engine_id[mid],
                "deliveries": ledger.deliveries[mid],
                "stored": m is not None,
                **({"state": m.state, "attempt": m.attempt, "due_ms": m.due_ms} if m else {}),
            }
        )
    return out


async def cleanup(cq: Any, names: list[str]) -> None:
    """The queue rows go (their messages are drained and expire by TTL): runs don't pile up rows."""
    await bounded(names, 64, lambda n: cq.stores.queues.delete(n))


def headline(R: dict[str, Any]) -> str:
    led, lat, rd, rss = R["ledger"], R["latency"], R["reads"]["by_kind"], R["rss"]
    f = lambda x, d=1: "–" if x is None else f"{x:,.{d}f}"  # noqa: E731
    return (
        f"sent {led['sent']:,}, lost {led['lost']}, duplicate deliveries {led['duplicate_deliveries']}; "
        f"send→receive p50 {f(lat['p50_ms'])} / p99 {f(lat['p99_ms'])} ms; reads per receive "
        f"{f(rd['receive']['reads_per_request'], 2)}, "
        f"per empty long poll {f(rd['empty_long_poll']['reads_per_request'], 2)}, per idle short receive "
        f"{f(rd['empty_receive']['reads_per_request'], 2)}; "
        f"RSS {f(rss.get('rss_mb_at', {}).get('50%'))} → {f(rss.get('rss_mb_at', {}).get('100%'))} MB over the second "
        "half of "
        f"{rss.get('queues_touched', 0):,} queues; "
        f"noisy neighbour: B's p99 {f((R.get('noisy') or {}).get('noisy', {}).get('p99_ms'))} ms over A's drain vs "
        f"{f((R.get('noisy') or {}).get('quiet', {}).get('p99_ms'))} ms with A empty; idle: "
        f"{f((R.get('idle') or {}).get('node_reads_per_s'), 2)} node reads/s"
    )


def noisy_line(N: dict[str, Any]) -> str:
    """The noisy-neighbour figure in one line: B's send→receive beside A's backlog, quiet and noisy."""
    q, n = N["quiet"], N["noisy"]
    f = lambda x: "–" if x is None else f"{x:,.1f}"  # noqa: E731
    return (
        f"  noisy neighbour: B's send→receive p50 {f(q['p50_ms'])} / p99 {f(q['p99_ms'])} ms with A's queue empty, "
        f"p50 {f(n['p50_ms'])} / p99 {f(n['p99_ms'])} ms ({n['count']} messages) while A drained "
        f"{N['backlog']:,} in {N['drain_s']:.0f} s ({N['drain_rate']:,.0f} msg/s)"
    )


def per_queue_bytes(keyspace: str, before: dict[str, int], queues: int) -> dict[str, Any]:
    """Bytes on disk per queue over every table its creation writes, as (after - before) / queues
    created: honest in a keyspace that held no queues before (``fresh``); in a reused one, compaction
    of earlier runs' rows between the two measurements can move it either way."""
    after = create_tables_bytes(keyspace)
    grown = sum(after.values()) - sum(before.values())
    return {
        "before": before,
        "after": after,
        "fresh": not any(before.values()),
        "bytes_per_queue": grown / queues if queues else None,
    }
