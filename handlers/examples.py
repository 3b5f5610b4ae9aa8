"""The handlers the demo runs: a quick one, a slow one, a flaky one and a doomed one."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from daemon import Backoff, Context, Handler, register


@register("demo.greet")
class Greet(Handler):
    async def handle(self, ctx: Context, payload: Any) -> None:
        ctx.log.info("hello", name=payload.get("name", "world"), attempt=ctx.attempt)


@register("demo.resize", concurrency=2)
class Resize(Handler):
    """Pretends to resize an image: slow, and at most two at a time per daemon."""

    async def handle(self, ctx: Context, payload: Any) -> None:
        await asyncio.sleep(float(payload.get("seconds", 0.5)))
        ctx.log.info("resized", image=payload.get("image"), size=payload.get("size", "256x256"))


@register("demo.flaky", max_attempts=4, backoff=Backoff(base=0.5, factor=2, cap=5, jitter=False))
class Flaky(Handler):
    """Fails its first attempts, then succeeds: shows retries with backoff."""

    async def handle(self, ctx: Context, payload: Any) -> None:
        if ctx.attempt < int(payload.get("succeed_on", 3)):
            raise ConnectionError(f"upstream unavailable (attempt {ctx.attempt})")
        ctx.log.info("flaky_succeeded", attempt=ctx.attempt)


@register("demo.doomed", max_attempts=2, backoff=Backoff(base=0.2, jitter=False))
class Doomed(Handler):
    """Always fails: ends in the poison queue with its traceback."""

    def handle(self, ctx: Context, payload: Any) -> None:
        raise ValueError(f"cannot process {payload!r}")


@register("demo.report")
class Report(Handler):
    """What the demo's cron schedule would run: a report of random size."""

    async def handle(self, ctx: Context, payload: Any) -> None:
        ctx.log.info("report_built", rows=random.randint(10, 1000), key=ctx.key)
