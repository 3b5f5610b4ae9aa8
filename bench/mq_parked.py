"""Part "parked": can one bench process and one ``casque serve`` hold the full many-queues size's 20,000 parked
long polls on this box? (``python -m bench --only parked``: 2,000 users quick, 20,000 full; WaitTimeSeconds 20;
keyspace casque_bench_parked.)

The many-queues scenario's users are asyncio tasks of one process, each with its own HTTP connection
(bench/sqs_json.py, aiohttp) long-polling its own queue on one ``casque serve`` (uvicorn). At 20,000 users
that is 20,000 sockets on each side of loopback, more than this box's default open-files limit (20,000).
This probe creates ``users`` tiny queues, starts the server, parks one ReceiveMessage (WaitTimeSeconds
``wait``) per queue at once, and reports: how many were parked together (answered empty after the wait,
not refused or timed out), how long it took to park them all, the open-files limits of both processes,
both processes' RSS with everything parked, and whether a send to one parked owner reaches that owner. Then the
owners stay online and idle for ``IDLE_S`` (each polls again as soon as its poll is answered empty, no sends):
the server's CQL reads and requests a second, its CPU (share of one core) and the statements it read, from the
wrapper's counts (bench/many_queues_serve.py): what parked owners cost while nothing happens. And, in this process
through the engine (``in_process``): ``users`` receives with a 60 s wait parked at once, then the CQL requests and the
CPU of the window after the last one parked (``PARKED_WINDOW_S``, longer than any per-queue re-read interval): what
a parked poll costs between its look and its answer.
The queues are deleted after; the keyspace is the caller's to drop.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import time
from typing import Any

from .env import cpu_seconds, out_dir, progress
from .mq_host import bounded, raise_fd_limit, rss_kb, settings_for
from .mq_serve import Server
from .mq_sizes import TINY
from .plan import Plan
from .sqs_json import ServerGone, SqsJson


async def park_all(client: SqsJson, names: list[str], wait_s: int) -> dict[str, Any]:
    """One long poll per queue, all at once: counts of each outcome and when the last one was sent."""
    outcome = {"empty": 0, "messages": 0, "gone": 0, "error": 0}
    answered: list[float] = []
    t0 = time.monotonic()

    async def poll(q: str) -> None:
        try:
            r = await client.call("ReceiveMessage", q, WaitTimeSeconds=wait_s, MaxNumberOfMessages=1)
            outcome["messages" if r.get("Messages") else "empty"] += 1
        except ServerGone:
            outcome["gone"] += 1
        except Exception:  # an SQS error: counted, the probe says how many
            outcome["error"] += 1
        answered.append(time.monotonic() - t0)

    await asyncio.gather(*(poll(q) for q in names))
    early = sum(1 for a in answered if a < wait_s - 1)  # answered before the wait was over: not parked
    return {**outcome, "answered_early": early, "last_answer_s": max(answered, default=0.0)}


async def probe(users: int, wait_s: int, keyspace: str) -> dict[str, Any]:
    from daemon.engine.client import Casque

    raise_fd_limit(users + 512)
    settings = settings_for(keyspace)
    stamp = f"pk{int(time.time()) % 10_000_000}"
    names = [f"{stamp}_{i:06d}" for i in range(users + 1)]  # the last one: the owner woken while the rest wait
    cq = await Casque.connect(settings)
    server = Server(keyspace, out_dir("many-queues", stamp))
    R: dict[str, Any] = {"users": users, "wait_s": wait_s, "fd_limit": resource.getrlimit(resource.RLIMIT_NOFILE)}
    try:
        t = time.perf_counter()
        await cq.create_queues(iter(names), if_missing=True, concurrency=64, **TINY)
        R["create_s"] = time.perf_counter() - t
        R["in_process"] = await engine_parked(cq, names[:users])
        await server.start()
        client = SqsJson(server.url, connections=users + 64, timeout_s=wait_s + 60)
        try:
            progress(f"parking {users:,} long polls (WaitTimeSeconds {wait_s}) on one casque serve")
            parked = asyncio.create_task(park_all(client, names[:users], wait_s))
            R["rss_mb"] = await peak_while(parked, server, wait_s)
            await asyncio.sleep(wait_s / 2)
            R["wake"] = await wake_one(client, names[users], wait_s)
            R["parked"] = await parked
            R["server"] = {k: v for k, v in server.stats().items() if k in ("tally", "cql_requests", "cql_reads")}
            R["idle"] = await online_idle(client, server, names[:users], wait_s)
        finally:
            await client.close()
    finally:
        server.stop()
        await bounded(names, 64, lambda n: cq.stores.queues.delete(n))
        await cq.close()
    return R


async def peak_while(parked: asyncio.Task[Any], server: Server, wait_s: int) -> dict[str, float | None]:
    """Both processes' RSS once the polls had time to park (half the wait), in MB."""
    await asyncio.sleep(wait_s / 2)
    mine, theirs = rss_kb(os.getpid()), rss_kb(server.proc.pid) if server.proc else None
    return {"bench": mine / 1024 if mine else None, "server": theirs / 1024 if theirs else None}


async def wake_one(client: SqsJson, queue: str, wait_s: int) -> dict[str, Any]:
    """A long poll on one more queue while the others stay parked, then a send to it: is it answered?"""
    got = asyncio.create_task(client.call("ReceiveMessage", queue, WaitTimeSeconds=wait_s, MaxNumberOfMessages=1))
    await asyncio.sleep(1.0)
    t = time.perf_counter()
    try:
        await client.call("SendMessage", queue, MessageBody="wake")
        r = await got
    except ServerGone as exc:  # not answered within the client's timeout: said, not raised
        return {"received": False, "error": str(exc), "after_ms": (time.perf_counter() - t) * 1000}
    return {"received": bool(r.get("Messages")), "send_to_receive_ms": (time.perf_counter() - t) * 1000}


PARKED_WINDOW_S = 20.0


async def engine_parked(cq: Any, names: list[str]) -> dict[str, Any]:
    """A receive with a 60 s wait parked on each queue, then ``PARKED_WINDOW_S`` counted: CQL requests and reads a
    second, this process's CPU (share of a core), and the event loop's pending timers while they are parked."""
    progress(f"parking {len(names):,} receives in this process (engine), then {PARKED_WINDOW_S:.0f} s counted")
    polls = [asyncio.create_task(cq.receive(q, wait=60)) for q in names]
    loop = asyncio.get_running_loop()
    while len(cq.stores.wakeups._waiters) < len(names) or any(
        not w._parked for w in cq.stores.wakeups._waiters.values()
    ):
        await asyncio.sleep(0.1)
    cpu0, requests, reads, t0 = time.process_time(), cq.db.requests, cq.db.reads, time.monotonic()
    await asyncio.sleep(PARKED_WINDOW_S)
    span = time.monotonic() - t0
    R = {
        "seconds": span,
        "requests_per_s": (cq.db.requests - requests) / span,
        "reads_per_s": (cq.db.reads - reads) / span,
        "cpu_share": (time.process_time() - cpu0) / span,
        "timers": len([h for h in loop._scheduled if not h.cancelled()]),  # type: ignore[attr-defined]
    }
    for p in polls:
        p.cancel()
    await asyncio.gather(*polls, return_exceptions=True)
    progress(
        f"parked in process: {R['reads_per_s']:.1f} reads/s, {R['timers']} timers, CPU {100 * R['cpu_share']:.0f} %"
    )
    return R


IDLE_S = 90.0  # longer than every periodic task of a server's (sweeps 30 s, the sweep's index read 2 min excepted)


async def online_idle(client: SqsJson, server: Server, names: list[str], wait_s: int) -> dict[str, Any]:
    """Every owner long-polls its queue in a loop, nothing is sent: the server's reads, requests and CPU a second
    over ``IDLE_S``, from when the loops had ``wait_s`` to settle (each owner's first poll of the loop answered)."""
    stop = asyncio.Event()

    async def owner(q: str) -> None:
        while not stop.is_set():
            try:
                await client.call("ReceiveMessage", q, WaitTimeSeconds=wait_s, MaxNumberOfMessages=1)
            except Exception:  # counted by the server's log; the owner polls again, as an SDK client does
                await asyncio.sleep(1.0)

    loops = [asyncio.create_task(owner(q)) for q in names]
    progress(f"{len(names):,} owners online and idle: settling {wait_s} s, then {IDLE_S:.0f} s measured")
    await asyncio.sleep(wait_s + 2)
    assert server.proc is not None
    before, cpu0, t0 = server.stats(), cpu_seconds([server.proc.pid]), time.monotonic()
    await asyncio.sleep(IDLE_S)
    after, cpu1, t1 = server.stats(), cpu_seconds([server.proc.pid]), time.monotonic()
    stop.set()
    for t in loops:
        t.cancel()
    await asyncio.gather(*loops, return_exceptions=True)
    span = t1 - t0
    read_by = {
        k[:110]: round((n - before.get("by_statement", {}).get(k, 0)) / span, 2)
        for k, n in after.get("by_statement", {}).items()
        if n > before.get("by_statement", {}).get(k, 0)
    }
    polls = after["tally"]["empty_long_poll"][0] - before["tally"]["empty_long_poll"][0]
    R = {
        "seconds": span,
        "cql_reads_per_s": (after["cql_reads"] - before["cql_reads"]) / span,
        "cql_requests_per_s": (after["cql_requests"] - before["cql_requests"]) / span,
        "server_cpu_share": (cpu1 - cpu0) / span,
        "empty_polls_per_s": polls / span,
        "reads_per_s_by_statement": dict(sorted(read_by.items(), key=lambda kv: -kv[1])),
    }
    progress(
        f"idle: {R['cql_reads_per_s']:.1f} reads/s, {R['cql_requests_per_s']:.1f} requests/s, server CPU "
        f"{100 * R['server_cpu_share']:.0f} % of a core, {R['empty_polls_per_s']:.0f} empty polls/s"
    )
    return R


def part(plan: Plan) -> dict[str, Any]:
    """The probe at the plan's size; also written to bench/out/many-queues-parked-<users>.json, which the
    many-queues report shows."""
    R = asyncio.run(probe(plan.parked_users, 20, "casque_bench_parked"))
    (out_dir() / f"many-queues-parked-{plan.parked_users}.json").write_text(json.dumps(R))
    ok = R["parked"]["empty"] + R["parked"]["messages"] == plan.parked_users and not R["parked"]["answered_early"]
    R["ok"] = bool(ok and R["wake"]["received"])
    progress(f"parked: {R['parked']}; a send to one more parked owner received: {R['wake']['received']}")
    return R
