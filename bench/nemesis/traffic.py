"""The traffic: the casque client's producer (plain, delayed, prioritised, keyed replace and keep, doomed and shared
messages, and per-second cron schedules by key), and the SQS clients of daemon/testing/sqs_clients.py on a standard
and a FIFO queue and on the queue shared with the daemons, paced to last the run, each writing its ledger."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar
from urllib.parse import urlparse

from daemon.base.errors import CasqueError, StorageUnavailable
from daemon.engine.client import Casque
from daemon.testing import fifo_ledger, standard_ledger
from daemon.testing.sqs_clients import Key, Producer, Receiver, Records, Seen, client

from .ledger import Send

RUN = time.strftime("%m%d%H%M%S")  # each run's queues are its own: the ring's keyspace outlives a run
WORK = f"nem_work_{RUN}"  # the daemons' own queue: what the settings faults change and reshard
SHARED = f"nem_shared_{RUN}"  # daemons and SQS receivers on one queue
DFIFO = f"nem_dfifo_{RUN}.fifo"  # a FIFO queue the daemons consume: a group's steps one at a time, in order
FIFO_GROUPS = 3
STD = f"nem-std-{RUN}"
FIFO = f"nem-fifo-{RUN}.fifo"
TICK_S = 0.5  # the casque producer's pace
SQS_EVERY_S = 2.0  # one batch of 10 standard and one of 4 FIFO messages this often
CRON_KEYS = ("cron-a", "cron-b")
VISIBILITY_S = 10
T = TypeVar("T")


class CasqueProducer:
    """Sends a mix each tick until ``stop``; every send, answered or failed, goes to ``sends``."""

    def __init__(self, cq: Casque) -> None:
        self.cq = cq
        self.sends: list[Send] = []
        self.stop = asyncio.Event()

    async def send(self, queue: str, kind: str, n: int, task: str = "nemesis.step", v: int = 0, **kw: Any) -> Send:
        s = Send(queue, kind, n, v, time.time(), key=kw.get("key") or "")
        self.sends.append(s)
        try:
            sid = await self.cq.send(queue, task, {"g": kind, "n": n, "v": v}, **kw)
            s.id, s.answered = str(sid), time.time()
            s.due = s.asked + float(kw.get("delay") or 0)  # the client builds the message (and its due) as it asks
        except CasqueError as exc:  # the send's outcome is unknown: written or not
            s.error, s.answered = f"{type(exc).__name__}: {exc}", time.time()
        return s

    async def send_fifo(self, n: int) -> None:
        """Step ``n // FIFO_GROUPS`` of group ``n % FIFO_GROUPS``; a failed send is sent again with its dedup id (the
        first attempt may have written it: the queue then answers the retry with its id), so a group's steps are
        sent in order, each once."""
        g, step = f"g{n % FIFO_GROUPS}", n // FIFO_GROUPS
        payload = {"g": g, "n": step, "sleep": 0.05}
        deadline = time.time() + 60
        while True:
            s = Send(DFIFO, "fifo", n, 0, time.time(), key=g)
            self.sends.append(s)
            try:
                sid = await self.cq.send(DFIFO, "test.fifo_step", payload, group=g, dedup_id=f"{g}-{step}")
                s.id, s.answered = str(sid), time.time()
                s.due = s.answered
                return
            except CasqueError as exc:
                s.error, s.answered = f"{type(exc).__name__}: {exc}", time.time()
                if time.time() > deadline:
                    return
                await asyncio.sleep(0.5)

    async def start_cron(self) -> None:
        for key in CRON_KEYS:
            await self.send(WORK, "cron", 0, task="nemesis.tick", key=key, cron="* * * * * *", cron_format="croniter")

    async def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            await self.send(WORK, "plain", n)
            await self.send(WORK, "delayed", n, delay=1 + n % 8)
            await self.send(WORK, "priority", n, priority=5)
            await self.send(SHARED, "shared", n)
            await self.send_fifo(n)
            if n % 5 == 0:  # a key sent twice while its first message waits: the second replaces it, or is dropped
                for policy in ("replace", "keep"):
                    for v in (1, 2):
                        await self.send(WORK, policy, n, v=v, key=f"{policy}-{n}", on_conflict=policy, delay=8)
            if n % 20 == 0:
                await self.send(WORK, "doomed", n, task="test.always_fail")
            n += 1
            try:
                await asyncio.wait_for(self.stop.wait(), TICK_S)
            except TimeoutError:
                pass

    async def stop_cron(self) -> None:
        """Cancel the schedules as an operator would: retried while the ring answers with timeouts."""
        for key in CRON_KEYS:
            await retried(partial(self.cq.cancel, WORK, key=key))


async def retried(call: Callable[[], Awaitable[T]], tries: int = 10) -> T:
    """The harness's own requests (queues made, schedules cancelled, the poison queue read) retried while the ring,
    just back from a fault, times them out, as an operator would: a harness that failed on its ring's faults would
    report nothing about casque."""
    for attempt in range(tries):
        try:
            return await call()
        except StorageUnavailable:
            if attempt == tries - 1:
                raise
            await asyncio.sleep(1)
    raise AssertionError("unreachable")


class Paced(Producer):
    """sqs_clients' producer, one batch every ``every_s`` until ``stop``: sends spread over the run, not all at once."""

    def __init__(self, *args: Any, every_s: float, stop: threading.Event, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.every_s, self.halt = every_s, stop

    def _send_batch(self, batch: list[Key]) -> None:
        if self.halt.is_set():
            return
        super()._send_batch(batch)
        self.halt.wait(self.every_s)


class SendTimes:
    """A producer's ledger, with the time (wall, s) each body's send was first answered: its latency's start."""

    def __init__(self, ledger: Records) -> None:
        self.ledger = ledger
        self.sent_at: dict[Key, float] = {}

    def record_sent(self, key: Key, message_id: str, sequence: str, retried_at_ms: int | None) -> None:
        self.ledger.record_sent(key, message_id, sequence, retried_at_ms)
        self.sent_at.setdefault(key, time.time())

    def record_seen(self, items: list[Seen]) -> None:
        self.ledger.record_seen(items)

    def record_processed(self, delivery: Seen, at: float) -> None:
        self.ledger.record_processed(delivery, at)

    def count(self, name: str, n: int = 1) -> None:
        self.ledger.count(name, n)


class SqsTraffic:
    """Producers and receivers of the standard and FIFO queues, receivers of the shared one, over both servers."""

    def __init__(self, urls: list[str], seconds: float) -> None:
        self.urls = urls
        self.stop_sending, self.stop_receiving = threading.Event(), threading.Event()
        self.std, self.fifo, self.shared = standard_ledger.Ledger(), fifo_ledger.Ledger(), standard_ledger.Ledger()
        self.std_times, self.fifo_times = SendTimes(self.std), SendTimes(self.fifo)
        sqs = client(urls[0])
        attrs = {"VisibilityTimeout": str(VISIBILITY_S)}
        self.paths = {
            name: urlparse(sqs.create_queue(QueueName=name, Attributes=a)["QueueUrl"]).path
            for name, a in ((STD, attrs), (FIFO, attrs | {"FifoQueue": "true"}), (SHARED, attrs))
        }
        batches = int(seconds / SQS_EVERY_S) + 1
        std_groups, fifo_groups = [f"s{i}" for i in range(10)], [f"f{i}" for i in range(4)]
        self.producers = [
            Paced(
                urls,
                self.paths[STD],
                std_groups,
                batches,
                self.std,
                0,
                fifo=False,
                every_s=SQS_EVERY_S,
                stop=self.stop_sending,
            ),
            Paced(
                urls,
                self.paths[FIFO],
                fifo_groups,
                batches,
                self.fifo,
                1,
                fifo=True,
                every_s=SQS_EVERY_S,
                stop=self.stop_sending,
            ),
        ]
        self.receivers = [
            Receiver(urls, self.paths[name], ledger, first, self.stop_receiving)
            for name, ledger in ((STD, self.std), (FIFO, self.fifo), (SHARED, self.shared))
            for first in range(len(urls))
        ]

    @property
    def threads(self) -> list[Producer | Receiver]:
        return [*self.producers, *self.receivers]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def server_back(self) -> None:
        """A restarted server is tried again (as a balancer's health check would put it back)."""
        for t in self.threads:
            t.ends.down.clear()

    def errors(self) -> list[str]:
        return [f"{type(t).__name__}: {t.error!r}" for t in self.threads if t.error is not None]

    def sqs_done(self) -> bool:
        """Every standard and FIFO message answered was deleted (its latest delivery)."""
        fifo_sent = set(self.fifo.sent)
        return self.std.all_processed() and fifo_sent <= self.fifo.processed_keys()

    def finish(self) -> None:
        self.stop_sending.set()
        self.stop_receiving.set()
        for t in self.threads:
            if t.ident is not None:
                t.join(timeout=60)
