"""Handlers for the daemon tests. Each appends "task id attempt pid" to $CASQUE_TEST_RECORD, so a
test asserts from the handlers' own record what ran, how often, and in which order."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from daemon import Backoff, Context, Handler, Retry, register


def record(ctx: Context, extra: str = "") -> None:
    line = f"{ctx.task} {ctx.id} {ctx.attempt} {os.getpid()} {time.time():.3f} {extra}\n"
    with open(os.environ["CASQUE_TEST_RECORD"], "a") as f:
        f.write(line)


@register("test.record")
class Record(Handler):
    async def handle(self, ctx: Context, payload: Any) -> None:
        record(ctx, str(payload))


@register("test.sleep")
class Sleep(Handler):
    async def handle(self, ctx: Context, payload: Any) -> None:
        await asyncio.sleep(float(payload))
        record(ctx)


@register("test.sync_sleep")
class SyncSleep(Handler):
    def handle(self, ctx: Context, payload: Any) -> None:
        time.sleep(float(payload))
        record(ctx)


@register("test.fail_until", max_attempts=4, backoff=Backoff(base=0.2, factor=2, cap=5, jitter=False))
class FailUntil(Handler):
    async def handle(self, ctx: Context, payload: Any) -> None:
        record(ctx, "fail" if ctx.attempt < int(payload) else "ok")
        if ctx.attempt < int(payload):
            raise RuntimeError(f"attempt {ctx.attempt} fails")


@register("test.always_fail", max_attempts=3, backoff=Backoff(base=0.1, jitter=False))
class AlwaysFail(Handler):
    def handle(self, ctx: Context, payload: Any) -> None:
        record(ctx)
        raise ValueError(f"bad input {payload!r}")


@register("test.retry_after", max_attempts=3)
class RetryAfter(Handler):
    async def handle(self, ctx: Context, payload: Any) -> None:
        record(ctx)
        if ctx.attempt == 1:
            raise Retry(after=float(payload))


@register("test.too_slow", timeout=0.5, max_attempts=2)
class TooSlow(Handler):
    async def handle(self, ctx: Context, payload: Any) -> None:
        record(ctx, "start")
        await asyncio.sleep(30)


@register("test.tick")
class Tick(Handler):
    """Records the occurrence number and fire time of a schedule's occurrence."""

    async def handle(self, ctx: Context, payload: Any) -> None:
        fire = ctx.fire_time.timestamp() if ctx.fire_time else 0
        record(ctx, f"{ctx.occurrence} {fire:.3f}")


@register("test.sync_one_at_a_time", timeout=3, concurrency=1)
class SyncOneAtATime(Handler):
    """A sync handler that may run once at a time per daemon: the others wait for its slot."""

    def handle(self, ctx: Context, payload: Any) -> None:
        time.sleep(float(payload))
        record(ctx)


@register("test.sync_overrun", timeout=1)
class SyncOverrun(Handler):
    """A sync handler that runs past its timeout: its thread can't be stopped, so it must not be
    counted as timed out (and redelivered) while the thread still runs it."""

    def handle(self, ctx: Context, payload: Any) -> None:
        record(ctx, "start")
        time.sleep(float(payload))
        record(ctx, "done")


@register("test.record_then_sleep")
class RecordThenSleep(Handler):
    """Records when it starts (the pickup), then keeps its in-flight slot for ``payload`` seconds:
    with ``in_flight`` slots the daemon's capacity is in_flight / payload messages a second."""

    async def handle(self, ctx: Context, payload: Any) -> None:
        record(ctx)
        await asyncio.sleep(float(payload))


@register("test.fifo_step", max_attempts=2, backoff=Backoff(base=0.3, factor=1, cap=5, jitter=False))
class FifoStep(Handler):
    """One step of a FIFO group: sleeps ``sleep`` s and records "id attempt pid start end group n
    outcome" when it ends, so a test sees whether a group's steps ever overlapped. ``fail``:
    "once" fails the first attempt, "always" every one (max_attempts 2: then it is poisoned)."""

    async def handle(self, ctx: Context, payload: Any) -> None:
        start = time.time()
        if payload.get("hang_once") and ctx.attempt == 1:  # past any timeout: cancelled, comes back after it
            await asyncio.sleep(float(payload["hang_once"]))
        await asyncio.sleep(float(payload["sleep"]))
        fails = payload.get("fail") == "always" or (payload.get("fail") == "once" and ctx.attempt == 1)
        outcome = "fail" if fails else "ok"
        times = f"{os.getpid()} {start:.4f} {time.time():.4f}"
        line = f"{ctx.id} {ctx.attempt} {times} {payload['g']} {payload['n']} {outcome}\n"
        with open(os.environ["CASQUE_TEST_RECORD"], "a") as f:
            f.write(line)
        if fails:
            raise RuntimeError(f"step {payload['g']}/{payload['n']} fails on attempt {ctx.attempt}")
