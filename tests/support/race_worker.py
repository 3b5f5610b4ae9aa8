"""A consumer process for the race tests: N coroutines take, record and ack until the queue stays
empty. Each delivery is written as "id attempt taken_at_ms" to --out, so the test can count
deliveries across processes. --offset-ms skews this process's clock (and its write timestamps)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import uvloop  # noqa: E402

from daemon.base.clock import Clock  # noqa: E402
from daemon.base.config import Settings  # noqa: E402
from daemon.engine.client import Casque  # noqa: E402


async def consume(
    cq: Casque, queue: str, slot: int, batch: int, out: list[str], idle_exit: float, last_seen: list[float]
) -> None:
    consumer = CONSUMERS[queue]
    while True:
        msgs = await consumer.fetch(batch, slot)
        if msgs:
            now = cq.clock.now_ms()
            out.extend(f"{m.id} {m.attempt} {now}\n" for m in msgs)
            last_seen[0] = time.monotonic()
            await cq.stores.acker.ack(msgs)
        elif time.monotonic() - last_seen[0] > idle_exit:
            return
        else:
            await asyncio.sleep(0.01)


CONSUMERS: dict = {}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keyspace", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--consumers", type=int, default=3)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--offset-ms", type=int, default=0)
    ap.add_argument("--idle-exit", type=float, default=4.0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    settings = Settings()
    settings.cassandra.keyspace = a.keyspace
    cq = await Casque.connect(settings, clock=Clock(a.offset_ms))
    CONSUMERS[a.queue] = cq.consumer(a.queue)
    out: list[str] = []
    last_seen = [time.monotonic()]
    await asyncio.gather(*(consume(cq, a.queue, i, a.batch, out, a.idle_exit, last_seen) for i in range(a.consumers)))
    Path(a.out).write_text("".join(out))
    s = CONSUMERS[a.queue].stats
    print(f"takes={s.takes} taken={s.taken} contention={s.contention} peeks={s.peeks}", flush=True)
    await cq.close()


if __name__ == "__main__":
    uvloop.run(main())
