"""Wake hints (engine/wake/hints.py) against the real node, over real UDP sockets: a signed hint wakes
what subscribed to its queue; forged, stale, cut or garbage datagrams are counted and dropped while
the listener keeps working; a send from another process wakes a parked long poll (counted as a hint
received); a lost hint costs only latency, the due feed (engine/wake/due_feed.py) finding the message within its
bound; and nothing is sent to a queue nobody listens to.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from daemon.base import metrics
from daemon.base.config import Settings
from daemon.base.errors import UsageError
from daemon.engine.client import Casque
from daemon.engine.operations.queue_actions import purge
from daemon.engine.send.producer import Job
from daemon.engine.storage.placement import PLACEMENT_MASK, id_due_ms, parse_id
from daemon.engine.wake.due_feed import READ_EVERY_S, SLOT_MS
from daemon.engine.wake.hint_directory import listen_addresses, parse_address
from daemon.engine.wake.hints import HINT_KEY, MAX_DATAGRAM, MAX_ENTRIES, HintListener, encode, pack
from daemon.testing import sqsserver
from daemon.testing.daemonproc import Daemon, records, start_daemon, until, write_config
from tests.support import count_file
from tests.support.longpoll import parked

ROOT = Path(__file__).resolve().parent.parent
WAIT_S = 30.0


@pytest.fixture
async def listener(settings: Settings) -> AsyncIterator[Casque]:
    """A second client in this process (its own wakeups)."""
    client = await Casque.connect(settings)
    yield client
    await client.close()


@pytest.fixture
async def producer(settings: Settings) -> AsyncIterator[Casque]:
    """A fresh client, so its view of the listeners is read at its first send."""
    client = await Casque.connect(settings)
    yield client
    await client.close()


def sent() -> float:
    return metrics.HINTS_SENT._value.get()


def received() -> float:
    return metrics.HINTS_RECEIVED._value.get()


def rejected(reason: str) -> float:
    return metrics.counter_value(metrics.HINTS_REJECTED, reason)


async def eventually(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def datagram_to(address: str, data: bytes) -> None:
    host, port = parse_address(address)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(data, (host, port))


async def test_a_signed_hint_wakes_a_subscriber_with_its_queue_due_and_placement(
    listener: Casque, queue_name: str
) -> None:
    got: list[tuple[int, int | None]] = []
    listener.stores.wakeups.subscribe(queue_name, lambda due, placement: got.append((due, placement)))
    address = await listener.listen_for_hints([queue_name])
    key = await listener.stores.secrets.get_or_create(HINT_KEY)
    before = received()
    now = listener.clock.now_ms()
    datagram_to(address, encode(key, now, queue_name, [(now + 250, 0xDEADBEEF), (now, 7)]))
    await eventually(lambda: len(got) == 2, "two notifies")
    assert got == [(now + 250, 0xDEADBEEF), (now, 7)]
    assert received() == before + 1


async def test_a_send_hints_the_listener_of_another_client_with_the_message_row(
    listener: Casque, producer: Casque, queue_name: str
) -> None:
    got: list[tuple[int, int | None]] = []
    listener.stores.wakeups.subscribe(queue_name, lambda due, placement: got.append((due, placement)))
    await listener.listen_for_hints([queue_name])
    await producer.create_queue(queue_name)
    before = received()
    mid = parse_id(await producer.send(queue_name, "t", "x", delay=60))
    await eventually(lambda: bool(got), "the hint of the send")
    assert got == [(id_due_ms(mid), mid.int & PLACEMENT_MASK)]
    assert received() == before + 1
    await purge(producer.stores, queue_name)


async def test_forged_stale_cut_and_garbage_datagrams_are_counted_and_the_listener_keeps_working(
    listener: Casque, queue_name: str
) -> None:
    got: list[tuple[int, int | None]] = []
    listener.stores.wakeups.subscribe(queue_name, lambda due, placement: got.append((due, placement)))
    address = await listener.listen_for_hints([queue_name])
    key = await listener.stores.secrets.get_or_create(HINT_KEY)
    now = listener.clock.now_ms()
    good = encode(key, now, queue_name, [(now, 1)])
    tampered = bytearray(good)
    tampered[-20] ^= 0x01  # the placement's last byte: the tag no longer matches
    bad = {
        "version": [b"", b"\x07" + os.urandom(60)],
        "truncated": [good[:20]],
        "signature": [
            encode(os.urandom(32), now, queue_name, [(now, 1)]),
            bytes(tampered),
            good[:-1] + bytes([good[-1] ^ 0xFF]),
            b"\x01" + os.urandom(80),
        ],
        "stale": [encode(key, now - 10_000, queue_name, [(now, 1)]), encode(key, now + 10_000, queue_name, [(now, 1)])],
    }
    before = {reason: rejected(reason) for reason in bad}
    before_received = received()
    for datagrams in bad.values():
        for data in datagrams:
            datagram_to(address, data)
    datagram_to(address, good)
    await eventually(lambda: bool(got), "the valid hint after the bad ones")
    await eventually(
        lambda: all(rejected(r) - before[r] == len(d) for r, d in bad.items()), "every bad datagram counted"
    )
    assert got == [(now, 1)], "no bad datagram may notify anything"
    assert received() == before_received + 1


async def test_a_send_from_another_process_is_hinted_to_a_parked_long_poll(
    listener: Casque, settings: Settings, queue_name: str
) -> None:
    await listener.create_queue(queue_name)
    await listener.listen_for_hints([queue_name])
    poll = asyncio.create_task(listener.receive(queue_name, wait=WAIT_S - 5, visibility=60))
    await parked(listener, queue_name)
    before = received()
    t0 = time.monotonic()
    env = dict(os.environ) | {
        "CASQUE_CASSANDRA__KEYSPACE": settings.cassandra.keyspace,
        "PYTHONPATH": str(ROOT),
        "CASQUE_CONFIG": str(ROOT / "tests/support/empty.toml"),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon.cli",
        "send",
        queue_name,
        "t",
        "--payload",
        '"x"',
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    done = time.monotonic()
    got = await asyncio.wait_for(poll, WAIT_S)
    woke = time.monotonic()
    assert [str(d.message.id) for d in got] == [out.decode().strip()]
    assert received() > before, "the message must have come with a hint"
    print(f"cli send ran {done - t0:.2f}s; poll returned {1000 * (woke - done):.0f} ms after the CLI exited")
    await purge(listener.stores, queue_name)


async def test_a_lost_hint_costs_only_latency_the_due_feed_finds_the_message(
    settings: Settings, producer: Casque, queue_name: str
) -> None:
    client = await Casque.connect(settings)
    try:
        await client.listen_for_hints([queue_name])
        assert client.hint_listener is not None and client.hint_listener._transport is not None
        client.hint_listener._transport.get_protocol().key = os.urandom(32)  # type: ignore[attr-defined]  # every hint is now lost
        await producer.create_queue(queue_name)
        poll = asyncio.create_task(client.receive(queue_name, wait=20))
        await parked(client, queue_name)
        lost, before = rejected("signature"), received()
        t0 = time.monotonic()
        mid = await producer.send(queue_name, "t", "x")
        got = await asyncio.wait_for(poll, 20)
        took = time.monotonic() - t0
        assert [str(d.message.id) for d in got] == [mid]
        assert rejected("signature") == lost + 1 and received() == before, "the hint was sent, and lost"
        bound = SLOT_MS / 1000 + READ_EVERY_S + 1.0  # the feed's, plus a look and a take
        assert took < bound, f"found {took:.1f}s after the send: the due feed must find it within {bound:.1f}s"
        await purge(producer.stores, queue_name)
    finally:
        await client.close()


async def test_a_second_send_within_the_second_the_feed_already_told_still_wakes_a_parked_poll(
    settings: Settings, queue_name: str
) -> None:
    """A writer enters a queue in the due feed once per second of due time. Two sends from another process whose hints
    are lost (hints.send off), both due within one second: the first wakes a poll through the feed, and a poll that
    parks after it must still be woken for the second, which wrote no entry of its own. The reader tells the entries of
    the last three seconds at every read (engine/wake/due_feed.py); it told each entry once before, and the second
    poll waited out its 20 s."""
    quiet = dataclasses.replace(settings, hints=dataclasses.replace(settings.hints, send=False, listen=False))
    sender, client = await Casque.connect(quiet), await Casque.connect(quiet)
    try:
        await sender.create_queue(queue_name, shards=1, buckets=1)
        second = (client.clock.now_ms() // 1000 + 3) * 1000  # both messages fall due within this second
        first = asyncio.create_task(client.receive(queue_name, wait=20))
        await parked(client, queue_name)
        await sender.send(queue_name, "t", "one", at=(second + 100) / 1000)
        [one] = await asyncio.wait_for(first, 20)
        then = asyncio.create_task(client.receive(queue_name, wait=20))
        await parked(client, queue_name)
        await sender.send(queue_name, "t", "two", at=(second + 900) / 1000)
        got = await asyncio.wait_for(then, 25)
        late_ms = client.clock.now_ms() - (second + 900)
        assert [d.message.payload for d in got] == ["two"], f"the second poll got {got} ({late_ms} ms after due)"
        assert late_ms < 2 * SLOT_MS + READ_EVERY_S * 1000 + 2_000, f"woken {late_ms} ms after due"
        await client.delete(one.receipt)
        await client.delete(got[0].receipt)
    finally:
        await sender.close()
        await client.close()


async def test_casque_serve_registers_for_every_queue_and_a_send_here_wakes_its_sqs_long_poll(
    producer: Casque, settings: Settings, queue_name: str
) -> None:
    await producer.create_queue(queue_name)
    server = sqsserver.start(settings.cassandra.keyspace)
    try:
        entries = await producer.stores.hint_directory.live()
        assert any(e.serves(queue_name) and "*" in e.queues for e in entries), (
            "casque serve must listen for every queue"
        )
        body = json.dumps({"QueueUrl": f"{server.url}/000000000000/{queue_name}", "WaitTimeSeconds": 20}).encode()
        headers = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.ReceiveMessage"}
        poll = asyncio.create_task(asyncio.to_thread(_post, server.url, body, headers))
        done, _ = await asyncio.wait([poll], timeout=2.0)
        assert not done, "the queue is empty: the long poll must still be waiting (parked in the server)"
        t0 = time.monotonic()
        mid = await producer.send(queue_name, "t", "hello")
        answer = json.loads(await asyncio.wait_for(poll, WAIT_S))
        woke = time.monotonic() - t0
        assert [m["MessageId"] for m in answer["Messages"]] == [mid]
        assert woke < 2.0, f"answered {woke:.1f}s after the send"
        print(f"SQS long poll answered {1000 * woke:.0f} ms after send() was called")
    finally:
        log = server.stop()
    assert server.proc.returncode == 0, log[-2000:]
    ours = [json.loads(line)["address"] for line in log.splitlines() if '"hints_listening"' in line]
    assert ours and not [e for e in await producer.stores.hint_directory.live() if e.address in ours], (
        "a stopped server removes its row"
    )
    await purge(producer.stores, queue_name)


async def test_a_closed_listener_leaves_the_directory(settings: Settings, producer: Casque, queue_name: str) -> None:
    client = await Casque.connect(settings)
    address = await client.listen_for_hints([queue_name])
    assert [e.queues for e in await producer.stores.hint_directory.live() if e.address == address] == [
        frozenset({queue_name})
    ]
    await client.close()
    assert not [e for e in await producer.stores.hint_directory.live() if e.address == address]


def _post(url: str, body: bytes, headers: dict[str, str]) -> bytes:
    with urllib.request.urlopen(
        urllib.request.Request(url, data=body, headers=headers, method="POST"), timeout=40
    ) as resp:
        return resp.read()


async def test_no_datagram_for_a_queue_nobody_listens_to(settings: Settings, queue_name: str) -> None:
    """A fresh queue has no listener but a ``casque serve`` (``*``): wait out any left by a serve
    that was killed (its row expires with its TTL), then a fresh producer sends nothing."""
    async with await Casque.connect(settings) as probe:
        await probe.create_queue(queue_name)
        end = time.monotonic() + HintListener.TTL_S + 5
        while [e for e in await probe.stores.hint_directory.live() if e.serves(queue_name)]:
            assert time.monotonic() < end, "a listener of every queue stays registered: is a casque serve running?"
            await asyncio.sleep(0.5)
    producer = await Casque.connect(settings)
    try:
        await _nothing_sent(producer, queue_name)
    finally:
        await producer.close()


async def _nothing_sent(producer: Casque, queue_name: str) -> None:
    await producer.send(queue_name, "warm", "x")  # reads the listener view once
    await eventually(lambda: not producer.stores.hints._pending, "the first view read")
    assert not [e for e in producer.stores.hints._view if e.serves(queue_name)]
    before, failed = sent(), metrics.HINTS_SEND_FAILED.labels("socket")._value.get()
    await producer.send_many(queue_name, [_job(i) for i in range(50)])
    await producer.send(queue_name, "t", "y")
    assert not producer.stores.hints._pending
    assert sent() == before and metrics.HINTS_SEND_FAILED.labels("socket")._value.get() == failed
    assert not producer.stores.hints._sockets, "no socket is even opened"
    await purge(producer.stores, queue_name)


async def test_send_many_of_500_is_one_datagram_per_listener(
    listener: Casque, producer: Casque, queue_name: str
) -> None:
    got: list[tuple[int, int | None]] = []
    listener.stores.wakeups.subscribe(queue_name, lambda due, placement: got.append((due, placement)))
    await listener.listen_for_hints([queue_name])
    await producer.create_queue(queue_name)
    await producer.send(queue_name, "warm", "x")
    await eventually(lambda: bool(got) and not producer.stores.hints._pending, "the first hint")
    targets = [e for e in producer.stores.hints._view if e.serves(queue_name)]
    before, got[:] = sent(), []
    ids = await producer.send_many(queue_name, [_job(i) for i in range(500)])
    await eventually(lambda: bool(got), "the hint of the batch")
    assert sent() - before == len(targets), "one datagram per listener of the queue"
    shards = (await producer.stores.queues.get(queue_name)).shards
    rows = {(id_due_ms(u), (u.int & PLACEMENT_MASK) % shards) for u in map(parse_id, ids)}
    await eventually(lambda: len(got) == len(rows), "one entry per (due, shard)")
    assert {(d, p % shards) for d, p in got if p is not None} == rows
    await purge(producer.stores, queue_name)


async def test_a_casque_run_daemon_that_polls_every_10s_takes_a_message_sent_here_at_once(
    tmp_path: Path, settings: Settings, queue_name: str
) -> None:
    """The daemon's dispatcher subscribes its consumers to ``Wakeups``; its listener turns our
    hint into that notify. Every consumer has finished its first fetch with nothing found (so the
    scout sleeps >= 10 s and the other waits for work) before we send: counting one empty round
    was not enough, the other consumer's first round could still be going from shard to shard
    and take the message without any hint (seen once in CI)."""
    record, log = tmp_path / "record", tmp_path / "log"
    consumers = 2
    cfg = write_config(
        tmp_path / "c.toml",
        settings.cassandra.keyspace,
        [queue_name],
        poll_interval="10s",
        max_poll_interval="30s",
        rescan_interval="30s",
        consumers=consumers,
    )
    d = start_daemon(cfg, record, log, env={"CASQUE_METRICS__ENABLED": "true", "CASQUE_METRICS__PORT": "0"})
    producer = await Casque.connect(settings)
    try:
        await until(
            lambda: '"metrics_listening"' in d.output() and '"hints_listening"' in d.output(),
            60,
            "the daemon's listeners",
            d,
        )
        url = next(json.loads(line)["url"] for line in d.output().splitlines() if '"metrics_listening"' in line)
        await until(
            lambda: _scrape(url, f'casque_empty_polls_total{{queue="{queue_name}"}}') >= consumers,
            60,
            "every consumer's first fetch to find nothing",
            d,
        )
        hinted = _scrape(url, "casque_hints_received_total")
        t0 = time.monotonic()
        mid = await producer.send(queue_name, "test.record", "x")
        await until(lambda: any(r[1] == mid for r in records(record)), WAIT_S, "the handler", d)
        took = time.monotonic() - t0
        assert took < 5.0, f"handled {took:.1f}s after the send: that was the daemon's poll (every 10-30 s)"
        assert _scrape(url, "casque_hints_received_total") > hinted
        print(f"casque run daemon (poll 10-30 s) ran the handler {1000 * took:.0f} ms after send() was called")
    finally:
        d.signal(signal.SIGTERM)
        d.wait(60)
        await purge(producer.stores, queue_name)
        await producer.close()


@asynccontextmanager
async def hinted_daemon(
    tmp_path: Path,
    settings: Settings,
    queue_name: str,
    create: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    **worker: Any,
) -> AsyncIterator[tuple[Daemon, Path, Casque]]:
    """A ``casque run`` daemon serving ``queue_name`` (its hint listener up; the queue made first with ``create``
    when given), the file its handlers record to, and a client whose sends hint it. At the end: the daemon stopped,
    the queue purged, the client closed."""
    producer = await Casque.connect(settings)
    if create is not None:
        await producer.create_queue(queue_name, **create)
    record = tmp_path / "record"
    cfg = write_config(tmp_path / "c.toml", settings.cassandra.keyspace, [queue_name], **worker)
    d = start_daemon(cfg, record, tmp_path / "log", env=env)
    try:
        await until(lambda: '"hints_listening"' in d.output(), 60, "the daemon's hint listener", d)
        yield d, record, producer
    finally:
        d.signal(signal.SIGTERM)
        d.wait(60)
        await purge(producer.stores, queue_name)
        await producer.close()


async def test_delayed_messages_announced_at_their_send_are_taken_without_every_consumer_reading_every_row(
    tmp_path: Path, settings: Settings, queue_name: str
) -> None:
    """A delayed message's hint arrives at its send, seconds or days before it falls due. Its due time keeps the
    wake-ups "flowing" (``ShardNames.flowing``), so a take of one wakes the consumer its shard names, not every
    consumer to read every row: with the due time not counted, this test measured 24.2 reads of whole messages per
    message taken, against 1.0 (and bench part 2's lateness p99 went from 44 to 2-6 ms). Counted, not timed: the
    daemon's reads of whole messages (tests/support/message_reads.py, outside the code under test) per message."""
    reads, n, consumers = tmp_path / "reads", 200, 16
    async with hinted_daemon(
        tmp_path,
        settings,
        queue_name,
        env={"CASQUE_TEST_READS": str(reads)},
        handler_module="tests.support.message_reads",
        consumers=consumers,
        batch_size=50,
        poll_interval="1s",
        max_poll_interval="1s",
        rescan_interval="10s",
    ) as (d, record, producer):
        before = count_file.read(reads, "message_reads", time.time())
        jobs = [Job("test.record", f"d{i}", delay=3.0 + 6.0 * i / n) for i in range(n)]  # due over 6 s from 3 s on
        ids = set(await producer.send_many(queue_name, jobs))
        await until(lambda: ids <= {r[1] for r in records(record)}, 60, "every delayed message handled", d)
        per_message = (count_file.read(reads, "message_reads", time.time()) - before) / n
        print(f"{n} delayed messages due over 6 s, {consumers} consumers: {per_message:.2f} message reads each")
        assert per_message <= 3, f"{per_message:.1f} reads per delayed message: its take woke every consumer"


async def test_a_message_no_wake_up_named_is_taken_when_a_read_saw_it_coming_not_at_the_next_poll(
    tmp_path: Path, settings: Settings, queue_name: str
) -> None:
    """Two messages in one row: the first sent with a hint, the second, due 0.5 s later, by a producer that sends
    none (hints off, an old client; a ``send_many`` of more due times than a hint carries leaves the rest
    unnamed too). The take of the first reads on to the lookahead and sees the second coming; its due time must
    make a fetch visit that row (``ShardNames.due`` counts the rows' wakes), not only wake the scout, whose fetch
    visits the shards due: before, the second waited for the daemon's poll of every row, here 20 s away (in the
    bench, delays over 60 s: lateness p99 914 ms with a 1 s poll)."""
    quiet = copy.deepcopy(settings)
    quiet.hints.send = False
    silent = await Casque.connect(quiet)
    try:
        async with hinted_daemon(
            tmp_path,
            settings,
            queue_name,
            create={"shards": 1, "bucket_seconds": 60},
            consumers=2,
            poll_interval="20s",
            max_poll_interval="20s",
            rescan_interval="60s",
        ) as (d, record, hinting):
            now = hinting.clock.now_ms()
            first_due = now + 3_000 if (now + 3_500) % 60_000 > 3_500 else now + 6_000  # both in one 60 s bucket
            second = await silent.send(queue_name, "test.record", "unnamed", delay=(first_due + 500 - now) / 1000)
            first = await hinting.send(queue_name, "test.record", "named", delay=(first_due - now) / 1000)
            await until(lambda: {first, second} <= {r[1] for r in records(record)}, 40, "both messages handled", d)
            late_s = (hinting.clock.now_ms() - (first_due + 500)) / 1000
            cpu_s = _cpu_seconds(d.proc.pid)
            print(
                f"the unnamed message was handled by {late_s:.2f} s after its due time (the poll: 20 s); "
                f"daemon CPU so far {cpu_s:.2f} s"
            )
            assert late_s < 5.0, f"handled {late_s:.1f} s late: found by the poll, not by the read that saw it coming"
            # Its start and the two takes cost well under 5 s of CPU; the scout woken by the passed wake and fetching
            # nothing, again at once, until the poll, cost 17.2 s (a core, busy) against 0.65 s with the fix.
            assert cpu_s < 5.0, f"the daemon used {cpu_s:.1f} s of CPU: its scout spun on a wake it does not visit"
    finally:
        await silent.close()


async def test_a_keyspace_without_the_listener_table_still_sends_and_serves_without_hints(
    settings: Settings, queue_name: str
) -> None:
    """A client upgraded before ``casque schema apply``: the directory's table is missing (the
    real server's error, on a table name that does not exist)."""
    client = await Casque.connect(settings)
    try:
        client.stores.hint_directory.table = f"{settings.cassandra.keyspace}.hint_listeners_missing"
        await client.create_queue(queue_name)
        failed = metrics.counter_value(metrics.HINTS_SEND_FAILED, "directory")
        first = await client.send(queue_name, "t", 1)
        await eventually(lambda: not client.stores.hints._pending, "the directory read")
        await client.send_many(queue_name, [_job(2), _job(3)])
        assert not client.stores.hints._pending, "the failed read is not retried before hints.refresh"
        assert metrics.counter_value(metrics.HINTS_SEND_FAILED, "directory") == failed + 1
        assert await client.listen_for_hints([queue_name]) == "" and client.hint_listener is None
        assert (await client.get(queue_name, id=first)) is not None
        await purge(client.stores, queue_name)
    finally:
        await client.close()


async def test_a_bad_or_busy_hint_address_is_one_line_naming_the_fix(
    settings: Settings, listener: Casque, queue_name: str
) -> None:
    taken = await listener.listen_for_hints([queue_name])
    for address, says in (
        (taken, "set hints.address to a free host[:port]"),
        ("127.0.0.1:99999", "expected host:port"),
    ):
        s = copy.deepcopy(settings)
        s.hints.address = address
        client = await Casque.connect(s)
        try:
            with pytest.raises(UsageError) as err:
                await client.listen_for_hints([queue_name])
            assert says in str(err.value) and "\n" not in str(err.value)
        finally:
            await client.close()
    env = dict(os.environ, CASQUE_CASSANDRA__KEYSPACE=settings.cassandra.keyspace, CASQUE_HINTS__ADDRESS=taken)
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "serve", "--port", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "hints.address" in done.stderr and len(done.stderr.strip().splitlines()) == 1, (
        done.stderr
    )


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _scrape(url: str, series: str) -> float:
    """One series from the daemon's /metrics (0 when absent)."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
    return 0.0


async def test_sends_completing_in_one_loop_turn_cost_two_datagrams_not_one_each(
    listener: Casque, producer: Casque, queue_name: str
) -> None:
    got: list[tuple[int, int | None]] = []
    listener.stores.wakeups.subscribe(queue_name, lambda due, placement: got.append((due, placement)))
    await listener.listen_for_hints([queue_name])
    await producer.create_queue(queue_name)
    await producer.send(queue_name, "warm", "x")
    await eventually(lambda: bool(got) and not producer.stores.hints._pending, "the first hint")
    targets = [e for e in producer.stores.hints._view if e.serves(queue_name)]
    before, got[:] = sent(), []
    now = producer.clock.now_ms()
    for i in range(50):  # what 50 concurrent sends whose writes were acknowledged in the same turn do
        producer.stores.hints.announce(queue_name, [(now + i, i)], (4,))
    assert sent() - before == len(targets), "the turn's first send hints at once"
    await eventually(lambda: len(got) == 50, "all 50 entries")
    assert sorted(got) == [(now + i, i) for i in range(50)]
    assert sent() - before == 2 * len(targets), "the other 49 share one datagram per listener"
    await purge(producer.stores, queue_name)


def test_listen_addresses_default_to_the_route_to_cassandra_and_honour_advertise() -> None:
    assert listen_addresses("", "", ["127.0.0.1"], 9042) == (("127.0.0.1", 0), ("127.0.0.1", 0))
    assert listen_addresses("0.0.0.0:7001", "", ["127.0.0.1"], 9042) == (("0.0.0.0", 7001), ("127.0.0.1", 0))
    assert listen_addresses("127.0.0.1", "192.0.2.7:9000", ["127.0.0.1"], 9042) == (
        ("127.0.0.1", 0),
        ("192.0.2.7", 9000),
    )
    assert listen_addresses("[::1]:0", "", ["127.0.0.1"], 9042) == (("::1", 0), ("::1", 0))
    with pytest.raises(ValueError, match="expected host:port"):
        listen_addresses("127.0.0.1:99999", "", ["127.0.0.1"], 9042)


def test_pack_compacts_by_row_and_caps_datagrams_below_the_mtu() -> None:
    queue = "q" * 80
    due_now = [(1_000, p) for p in range(500)]
    assert pack(due_now, (16,)) == [[(1_000, p) for p in range(16)]], "one entry per row: the first one seen"
    spread = [(1_000 + i, i) for i in range(1_000)]
    chunks = pack(spread, (16,))
    assert [len(c) for c in chunks] == [MAX_ENTRIES] * 4 and chunks[0][0] == (1_000, 0), "the earliest are kept"
    assert max(len(encode(b"k" * 32, 1, queue, c)) for c in chunks) <= MAX_DATAGRAM


def _job(i: int) -> Job:
    return Job("t", i)
