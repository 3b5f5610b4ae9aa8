"""A daemon consuming a FIFO queue: a group's messages run one after another, in order, other
groups meanwhile; a retry keeps its group waiting; a message that keeps failing is poisoned and its
group moves on. A real ``casque run`` subprocess; the handlers' own record is the ledger."""

from __future__ import annotations

import json
import signal
import time
from collections import defaultdict
from pathlib import Path

from daemon.base.model import GROUP_HEADER
from daemon.engine.client import Casque
from daemon.testing.daemonproc import records, start_daemon, until, write_config

from .conftest import TEST_KEYSPACE

GROUPS = ["a", "b", "c", "d"]
STEPS = 6
SLEEP = 0.15
BACKOFF = 0.3  # test.fifo_step's backoff (daemon/testing/handlers.py)


def runs(path: Path) -> dict[str, list[tuple[float, float, int, int, str]]]:
    """Per group, every handler run as (start, end, n, attempt, outcome), in start order."""
    out: dict[str, list[tuple[float, float, int, int, str]]] = defaultdict(list)
    for _id, attempt, _pid, start, end, g, n, outcome in records(path):
        out[g].append((float(start), float(end), int(n), int(attempt), outcome))
    return {g: sorted(rs) for g, rs in out.items()}


def failing(g: str, n: int) -> str | None:
    """b/2 fails once (retried after the backoff), d/3 always (poisoned after 2 attempts)."""
    return {("b", 2): "once", ("d", 3): "always"}.get((g, n))


async def test_daemon_runs_each_fifo_group_in_order_one_at_a_time_others_concurrently(
    cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    name = queue_name + ".fifo"
    await cq.create_queue(name, fifo=True, timeout=30)
    for n in range(STEPS):  # interleaved: every group has work at every moment
        for g in GROUPS:
            payload = {"g": g, "n": n, "sleep": SLEEP} | ({"fail": failing(g, n)} if failing(g, n) else {})
            await cq.send(name, "test.fifo_step", payload, group=g, dedup_id=f"{g}-{n}")
    record = tmp_path / "record.txt"
    cfg = write_config(tmp_path / "c.toml", TEST_KEYSPACE, [name], consumers=2, in_flight=16, batch_size=10)
    began = time.monotonic()
    d = start_daemon(cfg, record, tmp_path / "log")
    try:

        async def done() -> bool:
            finished = {(g, r[2]) for g, rs in runs(record).items() for r in rs if r[4] == "ok"}
            return len(finished) == len(GROUPS) * STEPS - 1 and await cq.stores.poison.count(name) == 1

        await until(done, 90, "every step run, d/3 poisoned", d)
    finally:
        d.signal(signal.SIGTERM)
        assert d.wait() == 0, d.output()[-3000:]
    elapsed = time.monotonic() - began
    by_group = runs(record)
    for g, rs in by_group.items():
        for before, nxt in zip(rs, rs[1:]):  # strictly one after another: no run starts before the previous one ended
            assert nxt[0] >= before[1], (g, before, nxt)
        assert [r[2] for r in rs] == sorted(r[2] for r in rs), (g, rs)  # in order, a retry before the next step
        assert [r[2] for r in rs if r[4] == "ok"] == [n for n in range(STEPS) if failing(g, n) != "always"], (g, rs)
    b_fail, b_retry = [r for r in by_group["b"] if r[2] == 2]
    assert (b_fail[3:], b_retry[3:]) == ((1, "fail"), (2, "ok"))
    assert b_retry[0] - b_fail[1] >= BACKOFF - 0.002  # the retry waited its backoff, and b/3 waited for it
    assert [r[3:] for r in by_group["d"] if r[2] == 3] == [(1, "fail"), (2, "fail")]
    [poisoned] = await cq.stores.poison.list(name)
    assert (
        poisoned.headers.get(GROUP_HEADER) == "d"
        and json.loads(poisoned.payload or b"")["n"] == 3
        and poisoned.attempt == 2
    )
    # Groups ran concurrently: some run of one group overlapped a run of another.
    spans = [(r[0], r[1], g) for g, rs in by_group.items() for r in rs]
    overlaps = sum(1 for s in spans for t in spans if s[2] < t[2] and s[0] < t[1] and t[0] < s[1])
    assert overlaps >= STEPS, overlaps
    assert await cq.peek(name, 10) == []
    gaps = [nxt[0] - before[1] for rs in by_group.values() for before, nxt in zip(rs, rs[1:])]
    # A group's next step is announced when the previous one is acked: without that it was found at the
    # row's next rescan (rescan_interval 1 s here; measured median gap 0.956 s before, 0.009 s after).
    assert sorted(gaps)[len(gaps) // 2] < 0.5, gaps
    print(f"max gap between a group's runs={max(gaps):.3f}s median={sorted(gaps)[len(gaps) // 2]:.3f}s")
    print(f"runs={len(spans)} overlapping pairs across groups={overlaps} elapsed={elapsed:.1f}s")


async def test_burst_mode_runs_every_fifo_group_to_the_end(cq: Casque, queue_name: str, tmp_path: Path) -> None:
    """``casque run --burst`` ends when nothing due is left. On a FIFO queue a group's next message is
    not deliverable while its previous one runs, so a round that finds nothing while handlers run is
    not the end: every step of every group must have run when it exits."""
    name = queue_name + ".fifo"
    await cq.create_queue(name, fifo=True)
    for n in range(4):
        for g in GROUPS[:3]:
            await cq.send(name, "test.fifo_step", {"g": g, "n": n, "sleep": 0.05}, group=g, dedup_id=f"{g}-{n}")
    record = tmp_path / "record.txt"
    d = start_daemon(
        write_config(tmp_path / "c.toml", TEST_KEYSPACE, [name], consumers=2), record, tmp_path / "log", "--burst"
    )
    assert d.wait(120) == 0, d.output()[-3000:]
    by_group = runs(record)
    assert {g: [r[2] for r in rs] for g, rs in by_group.items()} == {g: [0, 1, 2, 3] for g in GROUPS[:3]}
    assert await cq.peek(name, 10) == []


async def test_two_daemons_share_a_fifo_queue_and_never_overlap_a_group(
    cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    """Two daemon processes on one FIFO queue in high-throughput mode (16 shard rows), taking by the
    ordinary row lock (held rows off: a daemon holds every row until it sees its peer's heartbeat,
    up to 5 s, longer than this run), each with room for 8 of the 16 groups: a group's steps still
    run one after another and in order, wherever each one runs, and both daemons do work."""
    name = queue_name + ".fifo"
    await cq.create_queue(name, fifo=True, timeout=30, dedup_scope="messageGroup", fifo_throughput="perMessageGroupId")
    groups, steps = [f"g{i}" for i in range(16)], 4
    record = tmp_path / "record.txt"
    cfg = write_config(tmp_path / "c.toml", TEST_KEYSPACE, [name], consumers=2, in_flight=8)
    cfg.write_text(cfg.read_text().replace("[worker]\n", "[worker]\nhold_rows = false\n"))  # a TOML boolean
    daemons = [start_daemon(cfg, record, tmp_path / f"log{i}") for i in range(2)]
    try:
        for d in daemons:
            # mypy can't type a lambda whose default binds the loop's value (python/mypy#15459)
            await until(lambda d=d: '"worker_ready"' in d.output(), 60, "daemon ready", d)  # type: ignore[misc]
        for n in range(steps):
            for g in groups:
                await cq.send(name, "test.fifo_step", {"g": g, "n": n, "sleep": 0.1}, group=g, dedup_id=f"{n}")
        await until(lambda: len(records(record)) >= len(groups) * steps, 90, "every step run", daemons[0])
    finally:
        for d in daemons:
            d.signal(signal.SIGTERM)
        for d in daemons:
            assert d.wait() == 0, d.output()[-3000:]
    by_group = runs(record)
    for g in groups:
        rs = by_group[g]
        assert [r[2] for r in rs] == list(range(steps)), (g, rs)  # each step once, in order
        assert all(nxt[0] >= before[1] for before, nxt in zip(rs, rs[1:])), (g, rs)  # never two at once, across daemons
    pids = {line[2] for line in records(record)}
    assert len(pids) == 2, pids  # both daemons took part
    gaps = sorted(nxt[0] - before[1] for rs in by_group.values() for before, nxt in zip(rs, rs[1:]))
    mixed = sum(1 for g in groups if len({line[2] for line in records(record) if line[5] == g}) == 2)
    assert mixed >= 1  # some group's steps really were handed from one daemon to the other (seen: 12-15 of 16)
    print(
        f"pids={len(pids)} groups run by both daemons={mixed} median gap={gaps[len(gaps) // 2]:.3f}s "
        f"max={gaps[-1]:.3f}s"
    )


async def test_a_timed_out_fifo_message_comes_back_first_and_its_group_waits(
    cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    """A handler cancelled at its timeout is not acked: the message stays in flight in place until
    its visibility (timeout + the daemon's hold) passes, then runs again before its group's next."""
    name = queue_name + ".fifo"
    await cq.create_queue(name, fifo=True, timeout=1)
    await cq.send(name, "test.fifo_step", {"g": "t", "n": 0, "sleep": 0.05, "hang_once": 30}, group="t", dedup_id="t-0")
    await cq.send(name, "test.fifo_step", {"g": "t", "n": 1, "sleep": 0.05}, group="t", dedup_id="t-1")
    await cq.send(name, "test.fifo_step", {"g": "u", "n": 0, "sleep": 0.05}, group="u", dedup_id="u-0")
    record, log = tmp_path / "record.txt", tmp_path / "log"
    d = start_daemon(write_config(tmp_path / "c.toml", TEST_KEYSPACE, [name], clock_tolerance="200ms"), record, log)
    try:
        await until(lambda: len(records(record)) == 3, 60, "3 steps run", d)
    finally:
        d.signal(signal.SIGTERM)
        assert d.wait() == 0, d.output()[-3000:]
    timed_out = [json.loads(line) for line in d.output().splitlines() if '"message_timed_out"' in line]
    assert len(timed_out) == 1 and timed_out[0]["attempt"] == 1
    t = runs(record)["t"]
    assert [(r[2], r[3]) for r in t] == [(0, 2), (1, 1)]  # step 0's second attempt, then step 1
    assert t[1][0] >= t[0][1]
    assert [(r[2], r[3]) for r in runs(record)["u"]] == [(0, 1)]  # the other group did not wait
    assert runs(record)["u"][0][1] < t[0][0]  # u ran while t's first attempt hung
