"""The in-flight window, made to happen: a message taken (its in-flight write committed) whose ack never lands.

Issue 27 moves what a take writes (the payload written once, only narrow in-flight state after it); whatever the
layout, the window between the in-flight write and the ack is where a message could be lost. This test places a
kill -9 exactly there (``CASQUE_CRASH_AT=ack.write``: the daemon exits the first time it is about to write acks,
after the handlers of those messages ran), restarts the daemon, and counts from the handlers' own record: every
message ran, and each of those whose ack died with the process ran again with a later attempt (its in-flight state
came due). ``tests/test_node_stalls.py`` freezes the node in the same window.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from daemon.base.crashpoints import CRASH_EXIT_CODE
from daemon.engine.client import Casque
from daemon.engine.send.producer import Job
from daemon.testing.daemonproc import records, start_daemon, until, write_config

from .conftest import TEST_KEYSPACE

pytestmark = [pytest.mark.reliability, pytest.mark.slow]


def acks_failed(log: str) -> int:
    """Messages whose ack write failed (``ack_failed``): each comes back after its timeout and runs again."""
    events = (json.loads(line) for line in log.splitlines() if line.startswith("{"))
    return sum(e["count"] for e in events if e.get("event") == "ack_failed")


async def test_kill_9_between_the_in_flight_write_and_the_ack_loses_nothing(
    cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    # What the crash leaves in flight (the take's narrow write, take/flights.py) comes back in seconds.
    await cq.create_queue(queue_name, shards=2, timeout=2)
    sent = await cq.send_many(queue_name, [Job("test.record", i) for i in range(300)])
    record = tmp_path / "record.txt"
    cfg = write_config(tmp_path / "d.toml", TEST_KEYSPACE, [queue_name], consumers=2, batch_size=20, in_flight=100)
    first = start_daemon(cfg, record, tmp_path / "log1", env={"CASQUE_CRASH_AT": "ack.write"})
    assert first.wait(120) == CRASH_EXIT_CODE, first.output()[-3000:]
    ran_unacked = {r[1] for r in records(record)}  # their handlers ran; no ack was ever written
    assert ran_unacked, "no handler ran before the first ack write: the window was not reached"

    started = time.monotonic()
    second = start_daemon(cfg, record, tmp_path / "log2")
    try:

        def every_message_ran_and_the_unacked_again() -> bool:
            counts = Counter(r[1] for r in records(record))
            return set(sent) <= set(counts) and all(counts[i] >= 2 for i in ran_unacked)

        await until(every_message_ran_and_the_unacked_again, 120, "every message run, the unacked ones twice", second)
    finally:
        second.signal(15)
        second.wait(60)
    runs = records(record)
    delivered = Counter(r[1] for r in runs)
    lost = len(set(sent) - set(delivered))
    duplicated = sum(n - 1 for n in delivered.values())
    later = {r[1] for r in runs if r[1] in ran_unacked and int(r[2]) >= 2}
    print(
        f"sent={len(sent)} ran_before_the_crash={len(ran_unacked)} lost={lost} duplicated={duplicated} "
        f"acks_failed_after={acks_failed(second.output())} seconds_after_restart={time.monotonic() - started:.1f}"
    )
    assert lost == 0
    assert later == ran_unacked  # each came back through its in-flight state: a later attempt, not a lost ack
    # Only the messages whose ack died with the process ran twice (or one whose later ack failed and came back).
    assert duplicated <= len(ran_unacked) + acks_failed(second.output())
