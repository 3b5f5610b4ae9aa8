"""Liveness under load: no message waits behind the dispatcher's choices (docs/design.md, "Who
fetches when").

Two bugs of the dispatcher were found by the benchmark, never by a test: under load no consumer
was an idle scout, so the sweep of every row never ran and a message no wake-up named waited until
the load stopped (37 s); and named shards were visited in shard order rotated by slot, so with
more shards than consumers the last shards starved while the first ones always had work (45 s).

Here a real ``casque run`` daemon is overloaded on purpose (sends at 1.5x what its in-flight slots
can run), with shards 0-11 announced by wake-ups and shards 12-15 sent by a client whose wake-ups
are switched off (an old client, the Spark loader, a lost datagram). Every message is counted from
the ledger (sent once, ran exactly once), and its wait (send to handler start) is compared with how
long the daemon took to drain its backlog after the load stopped: served fairly, no message waits
much longer than that drain; a starved shard, or a shard only a sweep can find, waits for the whole
load. The handlers' start times also show how many ran at once: never more than ``in_flight``.
"""

from __future__ import annotations

import asyncio
import signal
import statistics
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from daemon.base.config import Settings
from daemon.engine.client import Casque
from daemon.engine.send.producer import Job
from daemon.engine.storage.placement import new_id, parse_id, shard_of
from daemon.testing.daemonproc import records, start_daemon, until, write_config

pytestmark = pytest.mark.slow

SHARDS = 16
ANNOUNCED = range(0, 12)  # shards whose sends wake the daemon
SILENT = range(12, 16)  # shards sent to by a client that sends no wake-ups
IN_FLIGHT, HOLD_S = 10, 0.1  # capacity: 100 messages a second
RATE, LOAD_S = 150, 12.0  # 1.5x the capacity, for long enough that a starved shard shows
SILENT_EVERY_S = 0.25
SAFETY_POLL_S = 1.0  # max_poll_interval: the README's bound for a message no wake-up named
SLACK_S = 3.0  # a take behind others on a shared 2-core machine


def seeds_for(shards: range, n: int, tag: str) -> list[bytes]:
    """``n`` seeds whose message ids land on ``shards`` (the placement bits come from the seed)."""
    out: list[bytes] = []
    i = 0
    while len(out) < n:
        seed = f"{tag}-{i}".encode()
        i += 1
        if shard_of(new_id(0, seed), SHARDS) in shards:
            out.append(seed)
    return out


def most_at_once(starts: list[float], hold_s: float) -> int:
    """How many handlers surely ran at the same moment: each ran at least ``hold_s`` from its
    start (its sleep), so this undercounts, never overcounts, what was in flight."""
    most, first = 0, 0
    for i, t in enumerate(starts):
        while starts[first] <= t - hold_s:
            first += 1
        most = max(most, i - first + 1)
    return most


async def send_paced(
    cq: Casque, queue: str, seeds: list[bytes], rate: float, batch: int, sent: dict[str, float]
) -> None:
    """Send ``seeds`` at ``rate`` messages a second, ``batch`` at a time, on a fixed timetable
    (a late batch does not make the next one wait): ``sent`` maps each id to when it was sent."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i in range(0, len(seeds), batch):
        await asyncio.sleep(max(0.0, start + i / rate - loop.time()))
        t = time.time()
        jobs = [Job("test.record_then_sleep", HOLD_S, seed=s) for s in seeds[i : i + batch]]
        for mid in await cq.send_many(queue, jobs):
            sent[mid] = t


async def test_an_overloaded_daemon_serves_every_shard_and_finds_what_no_wakeup_named(
    tmp_path: Path, settings: Settings, queue_name: str
) -> None:
    announced = await Casque.connect(settings)
    silent = await Casque.connect(replace(settings, hints=replace(settings.hints, send=False)))
    record = tmp_path / "record"
    cfg = write_config(
        tmp_path / "c.toml",
        settings.cassandra.keyspace,
        [queue_name],
        consumers=4,
        batch_size=20,
        in_flight=IN_FLIGHT,
        poll_interval="20ms",
        max_poll_interval=f"{SAFETY_POLL_S}s",
    )
    await announced.create_queue(queue_name, shards=SHARDS, buckets=4, bucket_seconds=60)
    d = start_daemon(cfg, record, tmp_path / "log")
    try:
        await until(lambda: '"worker_ready"' in d.output() and '"hints_listening"' in d.output(), 60, "the daemon", d)
        loud_sent: dict[str, float] = {}
        quiet_sent: dict[str, float] = {}
        loud = seeds_for(ANNOUNCED, int(RATE * LOAD_S), f"{queue_name}-loud")
        quiet = seeds_for(SILENT, int(LOAD_S / SILENT_EVERY_S), f"{queue_name}-quiet")
        load_start = time.time()
        await asyncio.gather(
            send_paced(announced, queue_name, loud, RATE, 10, loud_sent),
            send_paced(silent, queue_name, quiet, 1 / SILENT_EVERY_S, 1, quiet_sent),
        )
        load_end = time.time()
        sent = loud_sent | quiet_sent
        assert len(sent) == len(loud) + len(quiet)
        await until(
            lambda: len({r[1] for r in records(record)} & sent.keys()) == len(sent), 120, "every message to run", d
        )

        runs = [r for r in records(record) if r[0] == "test.record_then_sleep"]
        count = Counter(r[1] for r in runs)
        assert set(count) == set(sent), "a message ran that was never sent"
        assert [m for m, n in count.items() if n > 1] == [], "duplicated: ran more than once"
        started = {r[1]: float(r[4]) for r in runs}
        wait = {m: started[m] - sent[m] for m in sent}
        drain = max(started.values()) - load_end  # the backlog the overload built, run after it stopped
        bound = max(drain, 0.0) + SAFETY_POLL_S + SLACK_S
        per_shard = {s: max(w for m, w in wait.items() if shard_of(parse_id(m), SHARDS) == s) for s in range(SHARDS)}
        table = " ".join(f"{s}:{w:.1f}" for s, w in per_shard.items())
        print(
            f"\n{len(sent)} messages sent in {load_end - load_start:.1f} s, drain after the load {drain:.1f} s, "
            f"bound {bound:.1f} s; "
            f"median wait {statistics.median(wait.values()):.2f} s; worst wait per shard (s) {table}"
        )
        running = most_at_once(sorted(started.values()), HOLD_S)
        print(f"at most {running} handlers ran at once (in_flight {IN_FLIGHT})")
        assert running <= IN_FLIGHT, f"{running} handlers ran at once: in_flight is {IN_FLIGHT}"
        late = {s: w for s, w in per_shard.items() if w > bound}
        assert not late, (
            f"shards waited past the drain of the backlog ({drain:.1f} s) + the safety poll + {SLACK_S} s: {late} "
            f"(shards {SILENT.start}-{SILENT.stop - 1} are found only by the sweep)"
        )
    finally:
        d.signal(signal.SIGTERM)
        d.wait(60)
        await silent.close()
        await announced.close()
