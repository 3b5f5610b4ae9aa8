"""Part 3: tombstone flatness. Does a poll get slower as a queue ages? casque vs the naive queue.

casque: ≥ 1M messages (full mode) go through ONE queue, served by one daemon, offered at a
constant rate (a fraction of the best end-to-end throughput), so that every measurement sees the
same load. The queue is made the worst case on purpose: one time bucket for the whole run
(bucket_seconds = 1 day), so every message of a shard lands in, and is deleted from, the same
partition; only the cursors keep polls from walking over that history. Each time the daemon has
acked another checkpoint's worth, the poll reads the daemon makes are replayed on every shard row,
from the cursor the daemon persisted (it moves with every take, so under load it is fresh):

* the peek (``[cursor, now] LIMIT 1``) and the lock-column read, with query tracing
  (tombstone cells the node scanned) and their untraced latency;
* the same peek from the start of the row (what a cursor-less queue would read): this shows the
  tombstones are really there, and it fails once they pass the node's failure threshold;
* the same peek on an empty control queue at the same moment, so the machine's noise at that
  instant can be told apart from the queue's age.

Under load a poll scans the tombstones of what was consumed within the last clock tolerance
(rate × 5 s ÷ shards, docs/design.md): bounded by the rate, not by the history. The first
checkpoint comes after the timeout (30 s) and the tolerance have passed, when that window is full.

The naive queue (bench/naive.py) then gets the same treatment in rounds, until a read is aborted
by the node or a round takes longer than the plan allows.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from daemon.engine.client import Casque

from .casque_run import casque_sender, make_queue
from .daemonproc import Daemon, DaemonSpec
from .env import KEYSPACE, progress
from .naive import NaiveQueue, new_name
from .plan import Plan
from .produce import send_paced
from .tracing import ReadCost, measure

DAY_S = 86_400


async def run(cq: Casque, plan: Plan, best: dict[str, Any]) -> dict[str, Any]:
    total = plan.tomb_checkpoints[-1]
    rate = max(
        plan.tomb_min_rate, min(plan.tomb_rate_fraction * float(best.get("throughput") or 0), plan.tomb_max_rate)
    )
    rate = max(rate, total / plan.tomb_max_seconds)
    progress(
        f"3. tombstones: {total:,} messages through one queue (one time bucket) at {rate:,.0f} msg/s, then the naive "
        f"queue"
    )
    queue = await make_queue(cq, "tomb", buckets=2, bucket_seconds=DAY_S)
    control = await make_queue(cq, "tombctl", buckets=2, bucket_seconds=DAY_S)
    qs = await cq.stores.queues.get(queue)
    daemon = await Daemon(DaemonSpec(queue, best["consumers"], best["batch_size"]), "tombstones").start()
    points: list[dict[str, Any]] = []
    t_start = time.time()
    try:
        # 15 s more than the last checkpoint, so that the last probe, like every other, runs under load
        load = asyncio.create_task(send_paced(casque_sender(cq, queue), total + int(rate * 15), rate))
        last_t, last_n = t_start, 0
        for cp in plan.tomb_checkpoints:
            while daemon.acked() < cp:
                if daemon.proc is not None and daemon.proc.poll() is not None:
                    raise RuntimeError(f"the daemon died during the tombstone run: see {daemon.log}")
                if load.done() and load.exception():
                    raise load.exception()  # type: ignore[misc]
                if time.time() - last_t > 600:
                    raise RuntimeError(f"the daemon acked only {daemon.acked():,} of {cp:,} messages in time")
                await asyncio.sleep(0.1)
            now_t, acked = time.time(), daemon.acked()
            p = await asyncio.to_thread(_probe_casque, cq, qs, queue, control)
            p.update(
                {
                    "messages": cp,
                    "interval_rate": (acked - last_n) / max(1e-6, now_t - last_t),
                    "elapsed_s": now_t - t_start,
                }
            )
            last_t, last_n = now_t, acked
            points.append(p)
            progress(
                f"  casque {cp:>9,}: {p['interval_rate']:6.0f} msg/s  poll scans ≤ {p['tombstones_max']:>6,} "
                f"tombstones "
                f"(median {p['tombstones_peek_median']:,.0f}), {p['sstables_median']:.0f} sstables, peek "
                f"{p['peek_ms']:.2f} ms "
                f"(control {p['control_ms']:.2f} ms); "
                f"from row start: {p['from_start']}"
            )
        await load
    finally:
        daemon.stop()
    res = daemon.read()
    naive_points: list[dict[str, Any]] = []
    naive = await asyncio.to_thread(NaiveQueue, cq.db, KEYSPACE, new_name())
    naive_end = ""
    done = 0
    for cp in plan.naive_checkpoints:
        naive_end = await _naive_interval(naive, cp, cp - done, plan, naive_points)
        done = cp
        if naive_end:
            break
    first, last = points[0], points[-1]
    return {
        "messages": total,
        "rate": rate,
        "queue": {"shards": qs.shards, "buckets": qs.buckets, "bucket_seconds": qs.bucket_seconds},
        "casque": points,
        "naive": naive_points,
        "naive_end": naive_end or f"kept up to {plan.naive_checkpoints[-1]:,} messages",
        "acked": res.get("acked"),
        "ratio_peek_latency": last["peek_ms"] / first["peek_ms"] if first["peek_ms"] else None,
        "ratio_peek_vs_control": (last["peek_ms"] / last["control_ms"]) / (first["peek_ms"] / first["control_ms"])
        if first["control_ms"] and last["control_ms"] and first["peek_ms"]
        else None,
        "ratio_tombstones": (last["tombstones_peek_median"] / first["tombstones_peek_median"])
        if first["tombstones_peek_median"]
        else None,
    }


def _probe_casque(cq: Casque, qs: Any, queue: str, control: str) -> dict[str, Any]:
    """Replay the daemon's poll reads on every shard row of the current bucket (blocking: run in a thread)."""
    session = cq.db.session
    assert session is not None
    now = cq.clock.now_ms()
    bucket = (now // qs.bucket_ms) % qs.buckets
    tol = cq.settings.worker.clock_tolerance_ms
    peeks: list[ReadCost] = []
    locks: list[ReadCost] = []
    starts: list[ReadCost] = []
    controls: list[ReadCost] = []
    for shard in range(qs.shards):
        rows = list(session.execute(cq.stores.table.read_cursors, [queue, bucket, shard]))
        cursor = int((rows[0].cursors or {}).get(0, 0)) if rows else 0
        now = cq.clock.now_ms()
        peeks.append(measure(session, cq.stores.table.peek, [queue, bucket, shard, 0, cursor, now], repeats=15))
        locks.append(
            measure(session, cq.stores.table.lock_read, [queue, bucket, shard, now - qs.lock_ttl_ms - tol], repeats=3)
        )
        starts.append(measure(session, cq.stores.table.peek, [queue, bucket, shard, 0, 0, now], repeats=1))
        controls.append(measure(session, cq.stores.table.peek, [control, bucket, shard, 0, now - tol, now], repeats=15))
    failed = [s for s in starts if s.failed]
    from_start = (
        f"{len(failed)}/{len(starts)} reads aborted by the node (tombstone_failure_threshold)"
        if failed
        else f"≤ {max(s.tombstones for s in starts):,} tombstones"
    )
    return {
        "tombstones_max": max(max(p.tombstones for p in peeks), max(lk.tombstones for lk in locks)),
        "tombstones_peek_median": statistics.median(p.tombstones for p in peeks),
        "sstables_median": statistics.median(p.sstables for p in peeks),
        "peek_ms": statistics.median(p.latency_ms for p in peeks),
        "lock_ms": statistics.median(lk.latency_ms for lk in locks),
        "control_ms": statistics.median(c.latency_ms for c in controls),
        "from_start_tombstones_max": max((s.tombstones for s in starts if not s.failed), default=None),
        "from_start_failed": len(failed),
        "from_start": from_start,
    }


async def _naive_interval(naive: NaiveQueue, cp: int, k: int, plan: Plan, points: list[dict[str, Any]]) -> str:
    """Push ``k`` more messages through the naive queue (send, then consume and delete them);
    '' while it keeps up, else why it stopped."""
    t0 = time.monotonic()
    await naive.send(k)
    try:
        done = await naive.consume(k, deadline=t0 + plan.naive_limit_seconds)
    except Exception as exc:
        done = points[-1]["messages"] if points else 0
        reason = f"stopped at {done:,} messages: the node aborted its read ({type(exc).__name__}: tombstones)"
        points.append({"messages": cp, "failed": reason})
        progress(f"  naive  {cp:>9,}: {reason}")
        return reason
    elapsed = time.monotonic() - t0
    assert naive.db.session is not None
    cost = await asyncio.to_thread(measure, naive.db.session, naive.probe, [naive.name], 7)
    if cost.failed:
        reason = f"stopped at {cp:,} messages: its poll read was {cost.failed}"
        points.append({"messages": cp, "failed": cost.failed, "interval_rate": done / elapsed})
        progress(f"  naive  {cp:>9,}: {reason}")
        return reason
    points.append(
        {"messages": cp, "tombstones": cost.tombstones, "peek_ms": cost.latency_ms, "interval_rate": done / elapsed}
    )
    progress(
        f"  naive  {cp:>9,}: {done / elapsed:6.0f} msg/s  poll scans {cost.tombstones:>6,} tombstones, peek "
        f"{cost.latency_ms:.2f} ms"
    )
    if done < k:
        return f"stopped at {cp - k + done:,} messages: an interval took longer than {plan.naive_limit_seconds:.0f}s"
    return ""
