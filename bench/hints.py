"""Wake hints (engine/wake/hints.py): what a hint costs a send, and how soon it wakes a listener.

    python -m bench.hints [--sends 300]

Against the local node and the bench keyspace (schema applied first). Prints:

* the cost of ``HintSender.announce`` per call with a fresh listener view: for a queue nobody
  listens to, for a queue with one listener (one HMAC and one ``sendto``), and for the 500 ids of
  a ``send_many``;
* ``send`` latency with hints on and off (a hint must not delay the send);
* the time from ``send`` returning to the listener's ``notify``, through a real UDP socket, with
  the listener in another client (its own wakeups) on the same loop, then in another process.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import statistics
import sys
import time
import uuid

from daemon.engine.client import Casque
from daemon.engine.operations.queue_actions import purge
from daemon.engine.storage.placement import PLACEMENT_MASK, new_id

from .env import ROOT, bench_settings, schema_settings


def per_call_us(fn: object, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()  # type: ignore[operator]
    return (time.perf_counter() - t0) / n * 1e6


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


async def main(sends: int) -> None:
    settings = schema_settings()
    quiet = copy.deepcopy(settings)
    quiet.hints.send = False
    producer, listener, silent = (
        await Casque.connect(settings),
        await Casque.connect(settings),
        await Casque.connect(quiet),
    )
    try:
        q, lonely = f"hb_{uuid.uuid4().hex[:8]}", f"hb_{uuid.uuid4().hex[:8]}"
        for name in (q, lonely):
            await producer.create_queue(name, if_missing=True)
        woken: list[float] = []
        listener.stores.wakeups.subscribe(q, lambda due, placement: woken.append(time.perf_counter()))
        await listener.listen_for_hints([q])
        await producer.send(q, "warm", None)  # reads the listener view once
        while producer.stores.hints._pending or not woken:
            await asyncio.sleep(0.01)
        entry = [(int(time.time() * 1000), new_id(0).int & PLACEMENT_MASK)]
        batch = [(int(time.time() * 1000), new_id(0).int & PLACEMENT_MASK) for _ in range(500)]
        hints = producer.stores.hints
        none_us = per_call_us(lambda: (hints.announce(lonely, entry, (16,)), hints.flush()), 20_000)
        one_us, many_us, together = [], [], []
        for _ in range(20):  # in rounds, so the listener drains its socket between them
            one_us.append(per_call_us(lambda: (hints.announce(q, entry, (16,)), hints.flush()), 100))
            many_us.append(per_call_us(lambda: (hints.announce(q, batch, (16,)), hints.flush()), 10))
            together.append(
                per_call_us(lambda: hints.announce(q, entry, (16,)), 100)
            )  # 100 sends in one turn: two datagrams
            hints.flush()
            await asyncio.sleep(0.05)
        print(f"announce, no listener of the queue: {none_us:.2f} µs per send")
        print(f"announce, one listener: {statistics.median(one_us):.1f} µs per send (one datagram)")
        print(
            f"announce, send_many of 500 ids (16 shards): {statistics.median(many_us):.1f} µs per call (one datagram)"
        )
        print(
            f"announce, 100 sends completing in one loop turn: {statistics.median(together):.1f} µs per send (two "
            "datagrams for all)"
        )
        lat, with_hint, without = [], [], []
        for i in range(sends):
            woken.clear()
            t0 = time.perf_counter()
            await producer.send(q, "t", i)
            t1 = time.perf_counter()
            with_hint.append(t1 - t0)
            while not woken:
                await asyncio.sleep(0)
                if time.perf_counter() - t1 > 1.0:
                    break
            if woken:
                lat.append(woken[0] - t1)
            t2 = time.perf_counter()
            await silent.send(q, "t", i)
            without.append(time.perf_counter() - t2)
        ms = 1000
        print(
            f"send() p50/p99 with hints {pct(with_hint, 0.5) * ms:.2f}/{pct(with_hint, 0.99) * ms:.2f} ms, "
            f"without {pct(without, 0.5) * ms:.2f}/{pct(without, 0.99) * ms:.2f} ms ({sends} each)"
        )
        print(
            f"send returned -> listener notified: p50 {pct(lat, 0.5) * 1e6:.0f} µs, p99 {pct(lat, 0.99) * 1e6:.0f} µs, "
            f"max {max(lat) * 1e6:.0f} µs; {sends - len(lat)} of {sends} not woken within 1 s"
        )
        await across_processes(producer, q, sends)
        for name in (q, lonely):
            await purge(producer.stores, name)
    finally:
        for cq in (producer, listener, silent):
            await cq.close()


async def across_processes(producer: Casque, queue: str, sends: int) -> None:
    """The same, with the listener in a child process: it prints the wall time of each notify,
    the parent the wall time each send returned (one host, one clock)."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.hints", "--listen", queue, cwd=ROOT, stdout=asyncio.subprocess.PIPE
    )
    assert child.stdout is not None
    returned, woke = [], []
    try:
        while not (await asyncio.wait_for(child.stdout.readline(), 60)).startswith(b"listening"):
            pass  # its log lines
        await asyncio.sleep(
            producer.settings.hints.refresh + 0.5
        )  # the producer's view is refreshed on its next send after this
        await producer.send(queue, "warm", None)
        await _stamp(child.stdout)
        for i in range(sends):
            await producer.send(queue, "t", i)
            returned.append(time.time())
            woke.append(await _stamp(child.stdout))
    finally:
        child.terminate()
        await child.wait()
    lat = [w - r for r, w in zip(returned, woke)]
    print(
        f"send returned -> notify in another process: p50 {pct(lat, 0.5) * 1e6:.0f} µs, p99 {pct(lat, 0.99) * 1e6:.0f} "
        "µs, "
        f"max {max(lat) * 1e6:.0f} µs ({sends} sends)"
    )


async def _stamp(out: asyncio.StreamReader) -> float:
    """The next notify time the child printed (its log lines skipped)."""
    while True:
        line = (await asyncio.wait_for(out.readline(), 5)).strip()
        if line[:1].isdigit():
            return float(line)


async def listen(queue: str) -> None:
    settings = bench_settings()
    cq = await Casque.connect(settings)
    cq.stores.wakeups.subscribe(queue, lambda due, placement: print(f"{time.time():.6f}", flush=True))
    await cq.listen_for_hints([queue])
    print("listening", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="python -m bench.hints", description=__doc__.split("\n")[0])
    p.add_argument("--sends", type=int, default=300)
    p.add_argument("--listen", metavar="QUEUE", help=argparse.SUPPRESS)  # the child of across_processes
    args = p.parse_args()
    asyncio.run(listen(args.listen) if args.listen else main(args.sends))
