"""The daemon as people run it: a real ``casque run`` subprocess against the real node."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
from collections import Counter
from pathlib import Path

from daemon.engine.client import Casque
from daemon.engine.send.producer import Job
from daemon.testing.daemonproc import records, start_daemon, until, write_config

from .conftest import TEST_KEYSPACE


def events(log: str) -> list[dict]:
    out = []
    for line in log.splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


async def test_daemon_processes_delayed_priority_and_keyed_messages(
    cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    await cq.create_queue(queue_name, shards=1)
    await cq.send(queue_name, "test.record", "low", priority=-5)
    await cq.send(queue_name, "test.record", "normal")
    await cq.send(queue_name, "test.record", "high", priority=5)
    await cq.send(queue_name, "test.record", "keyed", key="k1")
    # Lowest priority, so its place is last however long the daemon takes to start; that it waited
    # for its due time is checked against the time its handler started.
    delayed_id = await cq.send(queue_name, "test.record", "delayed", delay="2s", priority=-10)
    delayed = await cq.get(queue_name, id=delayed_id)
    assert delayed is not None
    delayed_due = delayed.due_ms / 1000
    record = tmp_path / "record.txt"
    d = start_daemon(
        write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name], consumers=1, batch_size=1, in_flight=1),
        record,
        tmp_path / "log",
    )
    try:
        await until(lambda: len(records(record)) == 5, 60, "5 messages processed", d)
    finally:
        d.signal(signal.SIGTERM)
        assert d.wait() == 0, d.output()[-3000:]
    payloads = [r[5] for r in records(record)]
    assert payloads[:4] == ["high", "normal", "keyed", "low"]  # one row, one at a time: priority first, then due time
    assert payloads[4] == "delayed" and float(records(record)[4][4]) >= delayed_due
    assert await cq.get_key(queue_name, "k1") is None  # released once its message finished


async def test_sigterm_lets_running_handlers_finish_and_acks_them(cq: Casque, queue_name: str, tmp_path: Path) -> None:
    await cq.create_queue(queue_name, timeout=60)
    ids = await cq.send_many(queue_name, [Job("test.sleep", 2.0) for _ in range(4)] + [Job("test.sync_sleep", 2.0)])
    record, log = tmp_path / "record.txt", tmp_path / "log"
    d = start_daemon(write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name], consumers=2), record, log)
    await until(
        lambda: sum(1 for e in events(d.output()) if e.get("event") == "message_started") == 5,
        60,
        "5 handlers started",
        d,
    )
    d.signal(signal.SIGTERM)
    assert d.wait() == 0, d.output()[-3000:]
    assert sorted(r[1] for r in records(record)) == sorted(ids)  # every running handler finished
    stopped = [e for e in events(d.output()) if e.get("event") == "worker_stopped"]
    assert stopped and stopped[0]["drained"] is True and stopped[0]["acked"] == 5
    assert await cq.peek(queue_name, 10) == []  # acked: nothing left, not even timeout columns


async def test_second_signal_stops_at_once_and_nothing_is_lost(cq: Casque, queue_name: str, tmp_path: Path) -> None:
    await cq.create_queue(queue_name, timeout=2)
    [mid] = await cq.send_many(queue_name, [Job("test.sleep", 20.0)])
    record, log = tmp_path / "record.txt", tmp_path / "log"
    d = start_daemon(write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name]), record, log)
    await until(lambda: any(e.get("event") == "message_started" for e in events(d.output())), 60, "handler started", d)
    d.signal(signal.SIGTERM)
    await until(lambda: any(e.get("event") == "worker_draining" for e in events(d.output())), 30, "draining", d)
    d.signal(signal.SIGTERM)
    assert d.wait() == 1
    m = await cq.get(queue_name, id=mid)
    assert m is not None and m.state == 1  # still there, as its timeout column: it will come back


async def test_kill_9_mid_batch_loses_nothing(cq: Casque, queue_name: str, tmp_path: Path) -> None:
    await cq.create_queue(queue_name, shards=4, timeout=3)
    ids = await cq.send_many(queue_name, [Job("test.sleep", 0.02) for _ in range(1500)])
    record, log = tmp_path / "record.txt", tmp_path / "log"
    cfg = write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name], consumers=4, in_flight=200)
    d = start_daemon(cfg, record, log)
    await until(lambda: len(records(record)) >= 300, 60, "300 processed", d)
    d.kill9()
    processed_before = {r[1] for r in records(record)}
    assert len(processed_before) < len(ids)  # killed mid-run, for real
    d2 = start_daemon(cfg, record, log)
    try:
        await until(
            lambda: {r[1] for r in records(record)} >= set(ids), 120, "every message processed after restart", d2
        )
    finally:
        d2.signal(signal.SIGTERM)
        assert d2.wait() == 0
    done = Counter(r[1] for r in records(record))
    lost = set(ids) - set(done)
    duplicated = sum(n - 1 for n in done.values())
    print(f"sent={len(ids)} processed before kill={len(processed_before)} lost={len(lost)} redelivered={duplicated}")
    assert not lost


async def test_retries_in_order_then_poison_with_traceback(cq: Casque, queue_name: str, tmp_path: Path) -> None:
    await cq.create_queue(queue_name, shards=1)
    ok_id = await cq.send(queue_name, "test.fail_until", 3)
    bad_id = await cq.send(queue_name, "test.always_fail", {"order": 7})
    retry_id = await cq.send(queue_name, "test.retry_after", 0.5)
    slow_id = await cq.send(queue_name, "test.too_slow", None, timeout=1)
    record, log = tmp_path / "record.txt", tmp_path / "log"
    d = start_daemon(write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name]), record, log)
    try:

        async def done() -> bool:
            rec = records(record)
            return (
                await cq.stores.poison.count(queue_name) == 2
                and len([r for r in rec if r[1] == ok_id]) == 3
                and len([r for r in rec if r[1] == retry_id]) == 2
            )

        await until(done, 90, "retries and poison", d)
    finally:
        d.signal(signal.SIGTERM)
        d.wait()
    rec = records(record)
    assert [(r[2], r[5]) for r in rec if r[1] == ok_id] == [("1", "fail"), ("2", "fail"), ("3", "ok")]
    assert [r[2] for r in rec if r[1] == bad_id] == ["1", "2", "3"]
    assert [r[2] for r in rec if r[1] == retry_id] == ["1", "2"]
    times = [float(r[4]) for r in rec if r[1] == ok_id]
    # backoff 0.2 s then 0.4 s, in order. A retry starts from a timer at its due time, and uvloop's
    # timers have 1 ms resolution: seen 0.199 s (1795554726.868 -> 727.067). 2 ms is that, not slack.
    assert times[1] - times[0] >= 0.2 - 0.002 and times[2] - times[1] >= 0.4 - 0.002, times
    poison = {str(p.id): p for p in await cq.stores.poison.list(queue_name)}
    assert set(poison) == {bad_id, slow_id}
    assert poison[bad_id].error_type == "ValueError" and "bad input" in poison[bad_id].error
    assert "Traceback" in poison[bad_id].traceback and poison[bad_id].attempt == 3
    assert "timed out" in poison[slow_id].reason and poison[slow_id].attempt == 2
    timed_out = [(e["id"], e["attempt"]) for e in events(d.output()) if e.get("event") == "message_timed_out"]
    assert timed_out == [(slow_id, 1), (slow_id, 2)]  # cancelled at its 0.5 s timeout, twice, then poisoned


async def test_unknown_task_is_poisoned_and_nothing_is_imported(cq: Casque, queue_name: str, tmp_path: Path) -> None:
    await cq.create_queue(queue_name)
    canary = tmp_path / "canary"
    names = [
        "os:system",
        "builtins.eval",
        "tests.support.canary",
        "tests.support.canary:run",
        "tests.support.canary.run",
    ]
    ids = [await cq.send(queue_name, name, "echo pwned") for name in names]
    good = await cq.send(queue_name, "test.record", "still served")
    record, log = tmp_path / "record.txt", tmp_path / "log"
    d = start_daemon(
        write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name]),
        record,
        log,
        env={"CASQUE_TEST_CANARY": str(canary)},
    )
    try:

        async def done() -> bool:
            return await cq.stores.poison.count(queue_name) == len(names) and len(records(record)) == 1

        await until(done, 60, "unknown tasks poisoned", d)
    finally:
        d.signal(signal.SIGTERM)
        d.wait()
    poison = {str(p.id): p for p in await cq.stores.poison.list(queue_name)}
    assert set(poison) == set(ids)
    assert all(p.reason.startswith("unknown task") for p in poison.values())
    assert not canary.exists()  # nothing was imported or called
    assert [r[1] for r in records(record)] == [good]


async def test_sd_notify_ready_watchdog_status_stopping(cq: Casque, queue_name: str, tmp_path: Path) -> None:
    await cq.create_queue(queue_name)
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(30)
    d = start_daemon(
        write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name]),
        tmp_path / "r",
        tmp_path / "log",
        env={"NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "400000"},
    )
    got: list[str] = []

    def receive_until(word: str) -> None:
        while not any(word in m for m in got):
            got.append(sock.recv(4096).decode())

    try:
        await asyncio.to_thread(receive_until, "READY=1")
        await asyncio.to_thread(receive_until, "WATCHDOG=1")
        d.signal(signal.SIGTERM)
        await asyncio.to_thread(receive_until, "STOPPING=1")
    finally:
        d.proc.terminate()
        d.wait()
        sock.close()
    ready = next(m for m in got if "READY=1" in m)
    assert "STATUS=serving" in ready and queue_name in ready
    assert sum("WATCHDOG=1" in m for m in got) >= 1


async def test_check_mode_exit_codes(tmp_path: Path, settings: object) -> None:
    import subprocess
    import sys

    from daemon.testing.daemonproc import ROOT

    good = write_config(tmp_path / "good.toml", TEST_KEYSPACE, ["default"])
    ok = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "-c", str(good), "run", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and "ok: Cassandra" in ok.stdout
    down = tmp_path / "down.toml"
    down.write_text(good.read_text().replace("[cassandra]", "[cassandra]\nport = 1\nconnect_timeout = 1"))
    bad = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "-c", str(down), "run", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1
    assert "not reachable at 127.0.0.1:1" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
