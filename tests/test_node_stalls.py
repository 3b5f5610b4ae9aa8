"""A Cassandra node that stalls for seconds while a backlog is taken (issue 14, item 1).

The module starts a single node of its own (cluster ``faults_engine``, CQL port 9642) with the
project's launcher -- never the shared dev node -- and stops it at the end. The stalls are real:
SIGSTOP to the node's JVM. The first one is placed, not hoped for: the daemon freezes itself
(``CASQUE_PAUSE_AT=take.read``) right after a take read its messages, the node is frozen, the
daemon let go, so the take's commit goes to a node that answers nothing for 4.5 s -- past the
daemon's 2 s request timeout (``fetch_failed``: the take batch may or may not have been applied
when the node wakes; if it was, its messages come back after their message timeout, 15 s here).
Then the issue's stall, 4.5 s twice with 20 ms between, while the daemon works through a backlog
more than ``clock_tolerance`` overdue: requests in flight fail, those sent meanwhile are answered
late and the take finds its lock too old (``lock_expired_before_take``). Lost and duplicated are
counted from the handlers' own record.

And a node frozen while a process starts (issue 46): ``casque serve`` and ``casque run`` log each failed attempt
(``cassandra_unavailable``) and start again with backoff until the node answers, then serve; a prepare the node does
not answer fails within the request timeout as any request does, and a CLI command says so in one line.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path

import pytest
from cassandra import OperationTimedOut

from daemon.base.config import Settings
from daemon.base.errors import StorageUnavailable
from daemon.devnode import start, status
from daemon.engine.client import Casque
from daemon.engine.send.producer import Job
from daemon.engine.storage.db import Database, describe_failure
from daemon.engine.storage.schema import ensure_schema
from daemon.testing import sqsserver
from daemon.testing.daemonproc import ROOT, Daemon, freeze, records, start_daemon, stopped, until, write_config
from daemon.testing.sqs_clients import client
from tests.support.stall_node import STALL_NODE, let_go

pytestmark = [pytest.mark.reliability, pytest.mark.slow]
KEYSPACE = "casque_stall"
SPEC = STALL_NODE  # the fault tests' node of this worker (tests/support/stall_node.py)


def stall_settings() -> Settings:
    s = Settings()
    s.cassandra.port = SPEC.native_port
    s.cassandra.keyspace = KEYSPACE
    return s


@pytest.fixture(scope="module")
async def node() -> AsyncIterator[Casque]:
    await asyncio.to_thread(start, SPEC)
    s = stall_settings()
    ensure_schema(s)
    cq = await Casque.connect(s)
    try:
        yield cq
    finally:
        await cq.close()
        let_go(SPEC)


def _faults(log: str) -> tuple[int, int]:
    """(takes abandoned on an expired lock or hold, takes failed) as the daemon logged them."""
    return log.count("lock_expired_before_take") + log.count("hold_expired_before_take"), log.count('"fetch_failed"')


def _acks_failed(log: str) -> int:
    """Messages whose ack write failed (``ack_failed``): each comes back after its timeout and runs again."""
    events = (json.loads(line) for line in log.splitlines() if line.startswith("{"))
    return sum(e["count"] for e in events if e.get("event") == "ack_failed")


async def _until_done_or_stuck(sent: set[str], record: Path, daemon: Daemon, quiet_s: float = 30) -> None:
    """Wait until every message was processed, or until nothing new was processed for ``quiet_s``
    (twice the message timeout: anything a timed-out batch took has come back by then)."""
    done, last_progress = 0, time.monotonic()
    while time.monotonic() - last_progress < quiet_s:
        seen = {r[1] for r in records(record)}
        if sent <= seen:
            return
        if len(seen) > done:
            done, last_progress = len(seen), time.monotonic()
        assert daemon.proc.poll() is None, daemon.output()[-3000:]
        await asyncio.sleep(0.2)


def node_pid() -> int:
    pid = status(SPEC).nodes[0].pid
    assert pid is not None, "the test's own node is not running"
    return pid


async def stall(pid: int, seconds: float, times: int) -> None:
    """SIGSTOP the node for ``seconds``, SIGCONT for 20 ms, ``times`` times; always left running."""
    try:
        for _ in range(times):
            freeze(pid)
            await asyncio.sleep(seconds)
            os.kill(pid, signal.SIGCONT)
            await asyncio.sleep(0.02)
    finally:
        os.kill(pid, signal.SIGCONT)


async def freeze_node_at_the_pause(
    daemon: Daemon | sqsserver.SqsServer, what: str, seconds: float = 4.5, until_seen: Callable[[], bool] | None = None
) -> None:
    """Wait for the daemon to freeze itself at its ``CASQUE_PAUSE_AT`` step, freeze the node, let the
    daemon go: whatever it sends next goes to a node that answers nothing for ``seconds``, or, with
    ``until_seen``, until that holds (what the process did about it; its exit fails the test)."""
    await until(daemon.frozen, 60, what, daemon)
    pid = node_pid()
    freeze(pid)
    try:
        daemon.signal(signal.SIGCONT)
        if until_seen is None:
            await asyncio.sleep(seconds)  # the fault itself: the node answers nothing this long
        else:
            await until(until_seen, 60, "what the process does while the node is frozen", daemon)
    finally:
        os.kill(pid, signal.SIGCONT)


def stop_daemon(daemon: Daemon) -> None:
    daemon.signal(signal.SIGCONT)
    daemon.signal(signal.SIGTERM)
    daemon.wait(60)


def lost_and_duplicated(sent: Iterable[str], record: Path) -> tuple[Counter[str], int, int]:
    """What the handlers ran (id -> runs), how many sent messages never ran, how many runs were repeats."""
    delivered = Counter(r[1] for r in records(record))
    return delivered, len(set(sent) - set(delivered)), sum(n - 1 for n in delivered.values())


async def test_node_stalls_while_a_backlog_is_taken_lose_nothing(node: Casque, queue_name: str, tmp_path: Path) -> None:
    cq = node
    await cq.create_queue(queue_name, shards=4, timeout=15)  # four consumers take at once
    sent: list[str] = []
    for start_at in range(0, 6000, 100):  # distinct due times, as from a live producer
        sent += await cq.send_many(
            queue_name, [Job("test.record", i, delay=f"{i - start_at}ms") for i in range(start_at, start_at + 100)]
        )
    record = tmp_path / "record.txt"
    cfg = write_config(tmp_path / "stall.toml", KEYSPACE, [queue_name], consumers=4, batch_size=10, in_flight=100)
    cfg.write_text(
        cfg.read_text().replace("[cassandra]", f"[cassandra]\nport = {SPEC.native_port}\nrequest_timeout = 2.0")
    )
    # The daemon's clock runs 6 s ahead: the whole backlog is more than clock_tolerance overdue.
    env = {"CASQUE_CLOCK_OFFSET_MS": "6000", "CASQUE_PAUSE_AT": "take.read"}
    daemon = start_daemon(cfg, record, tmp_path / "log", env=env)
    started = time.monotonic()
    try:
        # The node stalls with that take's commit on its way to it.
        await freeze_node_at_the_pause(daemon, "the daemon frozen between a take's read and its commit")
        await until(lambda: len(records(record)) >= 500, 60, "the daemon taking the backlog at full speed", daemon)
        await stall(node_pid(), 4.5, 2)  # the stall, with takes going at full speed
        await _until_done_or_stuck(set(sent), record, daemon)
    finally:
        stop_daemon(daemon)
    delivered, lost, duplicated = lost_and_duplicated(sent, record)
    abandoned, failed = _faults(daemon.output())
    acks_failed = _acks_failed(daemon.output())
    stranded = daemon.output().count('"message_below_cursor"')  # what the sweep had to rescue
    print(
        f"sent={len(sent)} processed={len(set(delivered))} lost={lost} duplicated={duplicated} "
        f"takes_abandoned={abandoned} takes_failed={failed} acks_failed={acks_failed} swept={stranded} "
        f"seconds={time.monotonic() - started:.1f}"
    )
    assert failed >= 1, "the take frozen with the node did not fail: the fault did not happen"
    assert lost == 0
    assert stranded == 0  # nothing was left behind a cursor (the old take path stranded 45 here)
    # A take whose batch timed out is not delivered by it; if the batch was applied all the same,
    # its messages come back once, after their timeout. Only a batch applied *after* the messages
    # were taken again could deliver a second time (at most a batch of 10). An ack that timed out
    # (the node froze past the 2 s request timeout) leaves its message to come back and run again:
    # at-least-once, and counted.
    assert duplicated <= acks_failed + 10 * failed


async def test_node_frozen_between_the_in_flight_write_and_the_ack_loses_nothing(
    node: Casque, queue_name: str, tmp_path: Path
) -> None:
    """Issue 27's other in-flight fault: the daemon freezes itself just before its first ack write
    (``CASQUE_PAUSE_AT=ack.write``: those messages' handlers ran, their in-flight state is written), the node
    is frozen, the daemon let go: the ack goes to a node that answers nothing for 4.5 s, past the daemon's 2 s
    request timeout. Whatever the ack did or did not delete, every message runs and none is lost; a message
    runs twice only if its ack failed (it comes back after its timeout) or a take failed."""
    cq = node
    await cq.create_queue(queue_name, shards=2, timeout=3)
    sent = await cq.send_many(queue_name, [Job("test.record", i) for i in range(300)])
    record = tmp_path / "record.txt"
    cfg = write_config(tmp_path / "ack.toml", KEYSPACE, [queue_name], consumers=2, batch_size=20, in_flight=100)
    cfg.write_text(
        cfg.read_text().replace("[cassandra]", f"[cassandra]\nport = {SPEC.native_port}\nrequest_timeout = 2.0")
    )
    daemon = start_daemon(cfg, record, tmp_path / "log", env={"CASQUE_PAUSE_AT": "ack.write"})
    try:
        await until(daemon.frozen, 60, "the daemon frozen between the handlers' runs and their ack", daemon)
        ran_before = {r[1] for r in records(record)}
        # The node stalls with the ack on its way to it.
        await freeze_node_at_the_pause(daemon, "the daemon frozen between the handlers' runs and their ack")
        await _until_done_or_stuck(set(sent), record, daemon)
    finally:
        stop_daemon(daemon)
    _, lost, duplicated = lost_and_duplicated(sent, record)
    _, failed = _faults(daemon.output())
    acks_failed = _acks_failed(daemon.output())
    print(
        f"sent={len(sent)} ran_before_the_freeze={len(ran_before)} lost={lost} duplicated={duplicated} "
        f"acks_failed={acks_failed} takes_failed={failed}"
    )
    assert ran_before, "no handler ran before the first ack write: the window was not reached"
    assert acks_failed >= 1, "the ack frozen with the node did not fail: the fault did not happen"
    assert lost == 0
    assert duplicated <= acks_failed + 20 * failed


# ---- a node frozen while a process starts (issue 46) ----------------------------------------------------------------
#: The request timeout of the other tests here; a connect to the frozen node gives up after 1 s.
SERVE_ENV = {
    "CASQUE_CASSANDRA__PORT": str(SPEC.native_port),
    "CASQUE_CASSANDRA__REQUEST_TIMEOUT": "2",
    "CASQUE_CASSANDRA__CONNECT_TIMEOUT": "1",
}
#: What a request the node does not answer in time fails with, a prepare's as a read's or a write's.
TIMED_OUT = describe_failure(OperationTimedOut())


def failed_starts(log: str) -> list[str]:
    """The errors of the startup attempts a process logged as failed (``cassandra_unavailable``), in order."""
    events = (json.loads(line) for line in log.splitlines() if line.startswith("{"))
    return [e["error"] for e in events if e.get("event") == "cassandra_unavailable"]


def serves(srv: sqsserver.SqsServer, queue: str) -> list[str]:
    """A queue made, a message sent and received over SQS: the bodies received."""
    sqs = client(srv.url)
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="after the freeze")
    return [m["Body"] for m in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=10).get("Messages", [])]


async def test_serve_started_while_the_node_is_frozen_waits_for_it_then_serves(node: Casque, queue_name: str) -> None:
    """The node is frozen before the server starts: each attempt to connect fails and is logged, the server stays
    up (it exited at its first: the nemesis's symptom), and serves once the node is let go."""
    pid = node_pid()
    freeze(pid)
    try:
        srv = sqsserver.launch(KEYSPACE, env=SERVE_ENV)
        await until(lambda: len(failed_starts(srv.output())) >= 2, 60, "two failed starts logged", srv)
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        srv.listening(60)
        received = serves(srv, queue_name)
    finally:
        log = srv.stop()
    assert received == ["after the freeze"]
    assert failed_starts(log)[0].startswith(f"Cassandra is not reachable at 127.0.0.1:{SPEC.native_port}"), log


async def test_serve_whose_first_prepare_times_out_starts_again_then_serves(node: Casque, queue_name: str) -> None:
    """The issue's case: the node freezes after the server connected, so its first request (a prepare) times out.
    That is one logged failed start, not an ``OperationTimedOut`` traceback and an exit; then it serves."""
    srv = sqsserver.launch(KEYSPACE, env=SERVE_ENV | {"CASQUE_PAUSE_AT": "client.connected"})
    try:
        await freeze_node_at_the_pause(
            srv,
            "the server paused between connecting and preparing",
            until_seen=lambda: bool(failed_starts(srv.output())),
        )
        srv.listening(60)
        received = serves(srv, queue_name)
    finally:
        log = srv.stop()
    assert received == ["after the freeze"]
    assert failed_starts(log)[:1] == [TIMED_OUT], log[-3000:]


async def test_daemon_whose_first_prepare_times_out_starts_again_then_serves(
    node: Casque, queue_name: str, tmp_path: Path
) -> None:
    """``casque run`` starts the same way (service/startup.py): its timed-out prepare is a logged failed start."""
    await node.create_queue(queue_name)
    sent = await node.send(queue_name, "test.record", 1)
    record = tmp_path / "record.txt"
    cfg = write_config(tmp_path / "start.toml", KEYSPACE, [queue_name])
    cfg.write_text(
        cfg.read_text().replace("[cassandra]", f"[cassandra]\nport = {SPEC.native_port}\nrequest_timeout = 2.0")
    )
    daemon = start_daemon(cfg, record, tmp_path / "log", env={"CASQUE_PAUSE_AT": "client.connected"})
    try:
        await freeze_node_at_the_pause(
            daemon,
            "the daemon paused between connecting and preparing",
            until_seen=lambda: bool(failed_starts(daemon.output())),
        )
        await until(lambda: sent in {r[1] for r in records(record)}, 60, "the message handled", daemon)
    finally:
        stop_daemon(daemon)
    assert failed_starts(daemon.output())[:1] == [TIMED_OUT], daemon.output()[-3000:]


async def test_a_prepare_the_frozen_node_does_not_answer_fails_as_any_request_does(node: Casque) -> None:
    """``Database.prepare`` let the driver's ``OperationTimedOut`` through, after the driver's own 10 s: now the
    ``StorageUnavailable`` of any timed-out request, within the request timeout."""
    s = stall_settings()
    s.cassandra.request_timeout = 1.0
    db = await asyncio.to_thread(Database(s.cassandra).connect, KEYSPACE)
    pid = node_pid()
    freeze(pid)
    try:
        started = time.monotonic()
        with pytest.raises(StorageUnavailable) as failed:
            await asyncio.to_thread(db.prepare, f"SELECT name FROM {KEYSPACE}.queues WHERE name = ?")
        waited = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
        await asyncio.to_thread(db.close)
    assert str(failed.value) == TIMED_OUT
    assert waited < 5, f"the prepare waited {waited:.1f} s, past its 1 s request timeout"


async def test_a_command_whose_prepare_times_out_says_so_in_one_line(node: Casque, queue_name: str) -> None:
    """Seen in ``casque queue reshard`` under a frozen node: a traceback. Now one line and exit 5, as for any
    request that times out. The command pauses once connected; the node stays frozen until it has exited."""
    await node.create_queue(queue_name)
    env = dict(os.environ, CASQUE_CASSANDRA__KEYSPACE=KEYSPACE, CASQUE_PAUSE_AT="client.connected") | SERVE_ENV
    command = [sys.executable, "-m", "daemon.cli", "queue", "reshard", queue_name, "--shards", "8"]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = node_pid()
    try:
        await until(lambda: stopped(proc.pid) or proc.poll() is not None, 60, "the command paused once connected")
        freeze(pid)
        proc.send_signal(signal.SIGCONT)
        out, err = await asyncio.to_thread(proc.communicate, timeout=60)
    finally:
        os.kill(pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
    assert (proc.returncode, err.splitlines()) == (5, [f"casque: {TIMED_OUT}"]), out + err
